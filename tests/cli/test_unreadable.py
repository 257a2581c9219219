"""A stored row that cannot be read back never breaks log, show, session/list or session/load:
it is shown as unreadable, and doctor says where it is."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import turnback
from tests.acp.harness import SCRIPTED
from tests.acp.harness import run as run_async
from tests.acp.test_session_methods import Talk
from tests.acp.test_wire_errors import finish, raw_proxy
from tests.cli.test_cli import chunk, ok, ok_json, run


def test_unreadable_rows_are_shown_as_such_and_reported_by_doctor(
    home: Path, tmp_path: Path
) -> None:
    with turnback.open(home) as tb:
        session = tb.create_session(workspace=tmp_path)
        for prompt in ("first", "second"):
            with session.turn(prompt) as turn:
                turn.record(chunk(f"answer to {prompt}"))
        first = session.get_turn(1)
    with sqlite3.connect(home / "turnback.db") as db:
        db.execute("UPDATE turns SET prompt = '{broken' WHERE token = ?", (first.token,))
        db.execute(
            "UPDATE messages SET data = 'nope' WHERE turn = ? AND kind = 'agent'", (first.token,)
        )
        db.execute(
            "UPDATE events SET payload = '[' "
            "WHERE id / 4294967296 = (SELECT id FROM turns WHERE token = ?)",
            (first.token,),
        )

    log = ok(home, "log", session.id)
    assert "[unreadable prompt]" in log and "second" in log
    assert ok_json(home, "log", session.id)["turns"][0]["prompt"]["_turnback/unreadable"]
    assert "[unreadable message]" in ok(home, "show", session.id, "1", "--events")
    doctor = run(home, "doctor")
    assert doctor.returncode == 1
    assert "3 stored value(s) cannot be read back" in doctor.stdout

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], Talk]:
        talk = Talk(await raw_proxy(home, tmp_path, agent=SCRIPTED))
        await talk.ask("initialize", {})
        listed = await talk.ask("session/list", {})
        load = {"sessionId": session.id, "cwd": str(tmp_path), "mcpServers": []}
        loaded = await talk.ask("session/load", load)
        await asyncio.wait_for(finish(talk.editor), 15)
        return listed, loaded, talk

    listed, loaded, talk = run_async(scenario())
    assert listed["result"]["sessions"][0]["sessionId"] == session.id
    assert "result" in loaded
    replayed = "".join(u["content"]["text"] for u in talk.updates("agent_message_chunk"))
    assert "cannot be read back" in replayed and "answer to second" in replayed
