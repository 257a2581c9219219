"""Engine errors carry structured fields; the CLI and the proxy each word their own hint."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

import turnback
from tests.acp.harness import SCRIPTED, run
from tests.acp.test_session_methods import Talk
from tests.acp.test_wedges import _request
from tests.acp.test_wire_errors import finish, raw_proxy
from turnback.errors import WAIT, TurnInProgress


def test_a_running_turn_is_named_with_fields_and_each_surface_words_its_hint(
    home: Path, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("one\n")
    with turnback.open(home) as tb:
        session = tb.create_session(workspace=tmp_path)
        with session.turn("first"):
            pass
        with session.turn("second"):
            with pytest.raises(TurnInProgress) as busy:
                session.turn("third")
            assert (busy.value.turn, busy.value.state, busy.value.remedy) == (2, "running", WAIT)
            assert "`" not in str(busy.value)  # the library names no command
            cli = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "turnback",
                    "--home",
                    str(home),
                    "revert",
                    session.id,
                    "1",
                    "--yes",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
    assert cli.returncode == 3
    assert "turn 2 of this session is running" in cli.stderr
    assert "if the process running it died, `turnback recover` settles it" in cli.stderr


def test_the_proxy_words_a_refused_prompt_for_the_editor(home: Path, tmp_path: Path) -> None:
    async def scenario() -> dict[str, object]:
        talk = Talk(await raw_proxy(home, tmp_path, agent=SCRIPTED))
        await talk.ask("initialize", {})
        new = {"cwd": str(tmp_path), "mcpServers": []}
        session_id = (await talk.ask("session/new", new))["result"]["sessionId"]
        slow = [{"type": "text", "text": "say working\nsleep 30"}]
        await talk.editor.send(
            _request(900, "session/prompt", {"sessionId": session_id, "prompt": slow})
        )
        while not any("working" in json.dumps(n) for n in talk.notes):
            await talk.ask("session/list", {})
            await asyncio.sleep(0.05)
        again = [{"type": "text", "text": "say again"}]
        refused = await talk.ask("session/prompt", {"sessionId": session_id, "prompt": again})
        rewind = [{"type": "text", "text": "/rewind 0"}]
        answered = await talk.ask("session/prompt", {"sessionId": session_id, "prompt": rewind})
        undo = [{"type": "text", "text": "/undo-rewind"}]
        await talk.ask("session/prompt", {"sessionId": session_id, "prompt": undo})
        await asyncio.wait_for(finish(talk.editor), 15)
        return {"refused": refused, "rewind": answered, "notes": talk.notes}

    got = run(scenario())
    error = got["refused"]["error"]  # type: ignore[index]
    assert error["code"] == -32603
    assert error["data"]["turn"] == 1 and error["data"]["state"] == "running"
    assert error["data"]["remedy"] == "wait" and error["data"]["error"] == "TurnInProgress"
    assert "send it again once the turn has ended, or cancel the turn" in error["message"]
    assert "`turnback" not in error["message"]
    said = json.dumps(got["notes"])
    assert "could not do `/rewind`" in said and "turnback recover" not in said
    assert (
        "could not do `/undo-rewind`: turn 1 is running, so the conversation cannot be rolled "
        "forward now; send it again once the turn has ended, or cancel the turn"
    ) in said


def test_the_editor_hears_no_terminal_command(home: Path, tmp_path: Path) -> None:
    """Each way turnback speaks to the editor -- an error answered to a request, a slash
    command's answer, a notice, a replay -- words what settles it in the editor's terms."""

    async def scenario() -> tuple[dict[str, object], Talk]:
        talk = Talk(await raw_proxy(home, tmp_path, agent=SCRIPTED))
        await talk.ask("initialize", {})
        unknown = {"sessionId": "feedface" * 4, "cwd": str(tmp_path), "mcpServers": []}
        refused = await talk.ask("session/load", unknown)
        new = {"cwd": str(tmp_path), "mcpServers": []}
        session_id = (await talk.ask("session/new", new))["result"]["sessionId"]
        for text in ("say hi", "/diff 7", "/checkpoints"):
            prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
            assert "result" in await talk.ask("session/prompt", prompt)
        await talk.ask("session/load", {**unknown, "sessionId": session_id})
        await asyncio.wait_for(finish(talk.editor), 15)
        return refused, talk

    refused, talk = run(scenario())
    error = refused["error"]  # type: ignore[index]
    assert error["code"] == -32602 and error["data"]["remedy"] == "sessions"
    assert "the editor's list of sessions shows the ones turnback keeps" in error["message"]
    said = [
        n["params"]["update"]["content"]["text"]
        for n in talk.notes
        if n["method"] == "session/update" and "_meta" in n["params"]["update"]
    ]
    assert any(
        "has no turn 7 (it has 1); `/checkpoints` lists this session's turns" in s for s in said
    )
    assert sum("has no turn 7" in s for s in said) == 2  # said, then replayed by the load
    for text in [error["message"], *said]:
        assert "`turnback" not in text and "turnback recover" not in text, text


def test_a_revert_left_for_recovery_is_worded_by_each_surface() -> None:
    """revert.py names no command: a revert whose rollback could not write its files carries
    the RECOVER remedy, which the CLI words as a command and the proxy as an editor user can."""
    from turnback.acp.commands import worded
    from turnback.cli import _hint
    from turnback.errors import RECOVER, RestoreIncomplete, WorkspaceError

    for error in (
        RestoreIncomplete("rolling it back failed too", ("a.txt",), remedy=RECOVER),
        WorkspaceError("the workspace cannot be captured", remedy=RECOVER),
    ):
        assert error.remedy == RECOVER and "`" not in str(error)
        assert _hint(error) == "; run `turnback recover`"
        assert worded(error).startswith(str(error)) and "`turnback" not in worded(error)
    assert RestoreIncomplete("x", ("a.txt",)).paths == ("a.txt",)
    assert RestoreIncomplete("x").remedy is None


def test_a_delete_refused_for_a_set_aside_turn_says_where_it_is_settled(
    home: Path, tmp_path: Path
) -> None:
    from tests.conftest import insert_next_turn
    from turnback.model import TurnStatus

    with turnback.open(home) as tb:
        session = tb.create_session(workspace=tmp_path)
        with tb.store.atomic() as tx:
            insert_next_turn(
                tx, session.id, owner_id=None, status=TurnStatus.SET_ASIDE, prompt="aside"
            )

    async def scenario() -> dict[str, object]:
        talk = Talk(await raw_proxy(home, tmp_path, agent=SCRIPTED))
        await talk.ask("initialize", {})
        refused = await talk.ask("session/delete", {"sessionId": session.id})
        await asyncio.wait_for(finish(talk.editor), 15)
        return refused

    error = run(scenario())["error"]  # type: ignore[index]
    assert error["data"]["remedy"] == "decide" and error["data"]["state"] == "set_aside"
    assert error["data"]["turn"] == 1
    assert "applied or discarded on turnback's review page, not here" in error["message"]
    assert "`turnback" not in error["message"]
    with turnback.open(home) as tb:
        assert [t.status for t in tb.session(session.id).turns()] == [TurnStatus.SET_ASIDE]
