"""An editor that stops reading slows the agent down instead of filling the proxy's memory: the
proxy reads no more from the agent while the editor has a backlog, and nothing is lost."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

from tests.acp.test_wire_errors import finish, raw_proxy
from turnback.acp.wire import BACKLOG

CHUNKS = 100_000


def recorded(home: Path) -> tuple[str, int]:
    """The prompt's turn's status and how many events it has journaled, read through a
    connection of its own."""
    conn = sqlite3.connect(f"file:{home / 'turnback.db'}?mode=ro", uri=True)
    try:
        [(token, status)] = conn.execute("SELECT token, status FROM turns").fetchall()
        [(count,)] = conn.execute(
            "SELECT count(*) FROM events "
            "WHERE id / 4294967296 = (SELECT id FROM turns WHERE token = ?)",
            (token,),
        )
        return str(status), int(count)
    finally:
        conn.close()


def test_an_editor_that_stops_reading_holds_the_agent_back(home: Path, tmp_path: Path) -> None:
    async def scenario() -> tuple[tuple[str, int], int, dict[str, object]]:
        editor = await raw_proxy(home, tmp_path)

        async def call(rpc_id: int, method: str, params: dict[str, object]) -> None:
            message = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
            await editor.send(json.dumps(message).encode())

        await call(1, "initialize", {"protocolVersion": 1})
        await editor.answer()
        await call(2, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session_id = (await editor.answer())["result"]["sessionId"]
        text = {"type": "text", "text": f"stream {CHUNKS}"}
        await call(3, "session/prompt", {"sessionId": session_id, "prompt": [text]})
        # Not reading: the event loop is blocked, so nothing drains the proxy's stdout. The
        # agent alone streams them all in about 2.5 s.
        time.sleep(3)
        held = recorded(home)
        chunks, answer = 0, None
        assert editor.process.stdout is not None
        while answer is None:
            message = json.loads(await asyncio.wait_for(editor.process.stdout.readline(), 30))
            if message.get("method") == "session/update":
                chunks += message["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            elif message.get("id") == 3:
                answer = message
        await finish(editor)
        return held, chunks, answer

    held, chunks, answer = run_bounded(scenario())
    # What the proxy took from the agent while nobody read: about BACKLOG bytes of ~110-byte
    # frames, plus what the pipes hold -- far from all of them.
    status, taken = held
    assert status == "running" and taken < 4 * BACKLOG // 100 < CHUNKS, held
    assert chunks == CHUNKS  # then every one arrived, once
    assert answer["result"]["stopReason"] == "end_turn"


def run_bounded(scenario: object) -> tuple[tuple[str, int], int, dict[str, object]]:
    return asyncio.run(asyncio.wait_for(scenario, 90))  # type: ignore[arg-type]
