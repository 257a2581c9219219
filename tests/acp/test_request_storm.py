"""A storm of permission requests through ``turnback acp``: an agent asks thousands at once in
one turn. Each request and its answer is one small durable write (the session's pending
requests are rows of their own), so the storm takes linear time, the editor's own requests are
answered promptly meanwhile, and the turn ends as it should -- without a lease falsely lost."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import acp
from acp.core import ClientSideConnection

import turnback
from tests.acp.harness import Editor, connect, proxy_command, run, start, wait_for

STORM_AGENT = (
    sys.executable,
    str(Path(__file__).resolve().parents[2] / "bench" / "storm_agent.py"),
)


class AllowingEditor(Editor):
    """Allows every permission it is asked."""

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        self.answers.append("allow")
        return await super().request_permission(*args, **kwargs)


async def storm(
    conn: ClientSideConnection, editor: Editor, session_id: str, size: int, workspace: Path
) -> tuple[float, float]:
    """The seconds a storm of ``size`` requests took, and how long the editor waited for a
    ``session/list`` of its own, asked once the storm was well under way."""
    editor.clear()
    asked = len(editor.permissions)
    started = time.perf_counter()
    prompt = conn.prompt(session_id=session_id, prompt=[acp.text_block(f"storm {size}")])
    running = asyncio.ensure_future(prompt)
    await wait_for(lambda: len(editor.permissions) - asked >= size // 5, timeout=60)
    before = time.perf_counter()
    await conn.list_sessions(cwd=str(workspace))
    listed = time.perf_counter() - before
    assert not running.done(), "the storm ended before the editor asked"
    response = await asyncio.wait_for(running, 120)
    took = time.perf_counter() - started
    assert response.stop_reason == "end_turn"
    assert editor.text(session_id) == f"allowed {size} of {size}"
    return took, listed


def test_five_thousand_requests_are_answered_in_linear_time(home: Path, workspace: Path) -> None:
    async def scenario() -> tuple[dict[int, tuple[float, float]], int]:
        editor = AllowingEditor()
        async with connect(editor, proxy_command(home, STORM_AGENT), workspace) as (conn, _):
            session_id = await start(conn, workspace)
            took = {
                size: await storm(conn, editor, session_id, size, workspace)
                for size in (500, 5_000)
            }
            return took, len(editor.permissions)

    took, asked = run(scenario(), timeout=300)
    assert asked == 5_500
    per_request = {size: seconds / size for size, (seconds, _) in took.items()}
    # Linear: the same time per request at 5,000 as at 500, within the noise of a shared
    # machine (when each request rewrote the session's whole list, it grew tenfold, and a
    # storm of 5,000 never ended).
    assert per_request[5_000] < 3 * per_request[500], per_request
    listed = took[5_000][1]
    # Promptly: one flush's wait at most, even on a loaded machine (before, it waited behind
    # every rewrite of the list, and the storm never ended).
    assert listed < 5.0, f"session/list took {listed:.2f}s in the storm"
    with turnback.open(home) as tb:
        [record] = tb.sessions()
        session = tb.session(record.id)
        statuses = [t.status.value for t in session.turns()]
        codes = [a.code for a in tb.activities()]
    assert "turn.ownership.lost" not in codes
    assert statuses == ["completed", "completed"]
    assert record.pending_requests == ()
