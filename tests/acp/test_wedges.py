"""Nothing an editor or an agent sends wedges the proxy: each value is recorded losslessly or
refused with a JSON-RPC error, and every turn ends."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import acp
import pytest

import turnback
from tests.acp.harness import Editor, connect, prompt, proxy_command, run, start
from tests.acp.test_wire_errors import finish, raw_proxy
from turnback.errors import InvalidEvent
from turnback.model import TurnStatus

ROUGH = (sys.executable, str(Path(__file__).with_name("rough_agent.py")))
LONE = "lone:\ud800:end"


def _initialize(rpc_id: int = 1) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": rpc_id, "method": "initialize", "params": {"protocolVersion": 1}}
    ).encode()


def _request(rpc_id: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}).encode()


def test_an_unpaired_surrogate_is_stored_escaped_and_replayed_as_sent(
    home: Path, workspace: Path
) -> None:
    editor = Editor()

    async def scenario() -> tuple[str, list[str]]:
        async with connect(editor, proxy_command(home, ROUGH), workspace) as (conn, _):
            session_id = await start(conn, workspace)
            stops = [
                await prompt(conn, session_id, f"say {LONE}"),
                await prompt(conn, session_id, "say next"),
            ]
        return session_id, stops

    session_id, stops = run(scenario())
    assert stops == ["end_turn", "end_turn"]
    assert editor.text(session_id) == f"{LONE}next"
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        assert [t.status for t in session.turns()] == [TurnStatus.COMPLETED] * 2
        assert session.get_turn(1).prompt_text == f"say {LONE}"
        assert LONE in [m.text for m in session.messages()]

    replayed = Editor()

    async def load() -> None:
        async with connect(replayed, proxy_command(home, ROUGH), workspace) as (conn, _):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            await conn.load_session(cwd=str(workspace), session_id=session_id, mcp_servers=[])

    run(load())
    assert LONE in replayed.text(session_id)


@pytest.mark.parametrize("levels", [1_000, 100_000])
def test_deep_nesting_is_refused_as_invalid_and_the_proxy_keeps_serving(
    home: Path, workspace: Path, levels: int
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], int]:
        editor = await raw_proxy(home, workspace)
        await editor.send(_initialize())
        answers = [await editor.answer()]
        params = "[" * levels + "]" * levels
        await editor.send(
            f'{{"jsonrpc":"2.0","id":2,"method":"session/list","params":{{"x":{params}}}}}'.encode()
        )
        answers.append(await editor.answer())
        await editor.send(_request(3, "session/list", {}))
        answers.append(await editor.answer())
        return answers, await finish(editor)

    (init, deep, listed), code = run(scenario())
    assert "result" in init
    assert deep["id"] == 2 and deep["error"]["code"] == -32600
    assert "deeper than 128 levels" in deep["error"]["message"]
    assert listed == {"jsonrpc": "2.0", "id": 3, "result": {"sessions": []}}
    assert code == 0


def test_an_agents_deep_or_malformed_lines_are_skipped_and_the_turn_goes_on(
    home: Path, workspace: Path
) -> None:
    editor = Editor()
    script = "\n".join(
        [
            "say before",
            "deep 100000",
            "deep 1000",
            "raw " + json.dumps('{"jsonrpc":"2.0","id":{"x":1},"result":{}}'),
            "raw " + json.dumps('{"jsonrpc":"2.0","id":77,"error":"not an object"}'),
            'raw "[1,2]"',
            "say after",
        ]
    )

    async def scenario() -> tuple[str, list[str]]:
        async with connect(editor, proxy_command(home, ROUGH), workspace) as (conn, _):
            session_id = await start(conn, workspace)
            return session_id, [
                await prompt(conn, session_id, script),
                await prompt(conn, session_id, "say again"),
            ]

    session_id, stops = run(scenario())
    assert stops == ["end_turn", "end_turn"]
    assert editor.text(session_id) == "beforeafteragain"
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        assert [t.status for t in session.turns()] == [TurnStatus.COMPLETED] * 2
        codes = [a.code for a in session.activities()]
        assert codes.count("agent.frame.malformed") == 5


def test_an_invalid_prompt_is_refused_naming_the_field_and_nothing_is_stored(
    home: Path, workspace: Path
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], int]:
        editor = await raw_proxy(home, workspace)
        await editor.send(_initialize())
        answers = [await editor.answer()]
        await editor.send(_request(2, "session/new", {"cwd": str(workspace), "mcpServers": []}))
        answers.append(await editor.answer())
        session_id = answers[-1]["result"]["sessionId"]
        bad = [
            [{"type": "text", "text": 123}],
            [{"type": "image", "data": "AA=="}],
            [{"type": "text", "text": "x"}, {"type": "resource", "resource": {"uri": "f"}}],
            [{"type": "video"}],
        ]
        for rpc_id, blocks in enumerate(bad, start=3):
            await editor.send(
                _request(rpc_id, "session/prompt", {"sessionId": session_id, "prompt": blocks})
            )
            answers.append(await editor.answer())
        await editor.send(_request(9, "session/list", {}))
        answers.append(await editor.answer())
        return answers, await finish(editor)

    answers, code = run(scenario())
    assert code == 0
    refused = answers[2:6]
    assert [a["error"]["code"] for a in refused] == [-32602] * 4
    assert [a["error"]["data"]["field"] for a in refused] == [
        "prompt[0].text",
        "prompt[0].mimeType",
        "prompt[1].resource",
        "prompt[0].type",
    ]
    assert "prompt[0].text must be a string, not a number" in refused[0]["error"]["message"]
    assert len(answers[-1]["result"]["sessions"]) == 1
    session_id = answers[1]["result"]["sessionId"]
    with turnback.open(home) as tb:
        assert tb.session(session_id).turns() == []
    log = subprocess.run(
        [sys.executable, "-m", "turnback", "--home", str(home), "log", session_id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert log.returncode == 0, log.stderr


def test_the_library_refuses_the_same_prompts(session: turnback.Session) -> None:
    with pytest.raises(InvalidEvent) as refused:
        session.turn([{"type": "text", "text": "ok"}, {"type": "text", "text": None}])
    assert refused.value.field == "prompt[1].text"
    assert "prompt[1].text must be a string, not null" in str(refused.value)
    with pytest.raises(InvalidEvent):
        session.turn([{"type": "resource_link", "name": "n", "uri": "u", "size": "big"}])
    assert session.turns() == []
    with session.turn([{"type": "resource_link", "name": "n", "uri": "file:///n"}]):
        pass
    assert [t.status for t in session.turns()] == [TurnStatus.COMPLETED]


@pytest.mark.parametrize("how", ["stdin", "sigterm"])
def test_a_hung_agent_cannot_keep_the_proxy_from_ending_its_turn_and_exiting(
    home: Path, workspace: Path, how: str
) -> None:
    editor = Editor()

    async def scenario() -> tuple[str, float, int]:
        async with connect(editor, proxy_command(home, ROUGH), workspace) as (conn, process):
            session_id = await start(conn, workspace)
            asyncio.ensure_future(prompt(conn, session_id, "say working\nhang")).add_done_callback(
                lambda f: f.exception()
            )
            deadline = time.monotonic() + 20
            while "working" not in editor.text(session_id) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            began = time.monotonic()
            if how == "stdin":
                assert process.stdin is not None
                process.stdin.close()
            else:
                os.kill(process.pid, signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), 15)
            return session_id, time.monotonic() - began, code

    session_id, took, code = run(scenario())
    assert code == 0
    assert took < 5.0
    with turnback.open(home) as tb:
        assert tb.session(session_id).get_turn(1).status is TurnStatus.CANCELLED


def test_a_surrogate_written_raw_in_utf8_reads_as_that_surrogate() -> None:
    # Python's json reads bytes this way, so an id an editor wrote so is answered as it was sent.
    from turnback import jsontext

    assert jsontext.loads(b'{"id":"\xed\xa0\x80"}') == {"id": "\ud800"}
    assert jsontext.loads(jsontext.dumps({"id": "\ud800"}).encode()) == {"id": "\ud800"}


@pytest.mark.parametrize("point", ["turn.begin.inside", "turn.record.before", "turn.end.before"])
def test_whatever_a_handler_raises_the_prompt_is_answered_and_the_next_one_works(
    home: Path, workspace: Path, point: str
) -> None:
    """An exception turnback does not expect (here a fault point armed to raise, once) is an
    error answer to the request in hand: the proxy goes on serving and the turn ends."""
    editor = Editor()
    env = {"TURNBACK_FAULT": f"{point}:raise"}

    async def scenario() -> tuple[str, list[str], int]:
        command = proxy_command(home, ROUGH)
        async with connect(editor, command, workspace, env=env) as (conn, process):
            session_id = await start(conn, workspace)
            try:
                first = await prompt(conn, session_id, "say one")
            except acp.RequestError as error:
                first = f"error {error.code}"
            stops = [first, await prompt(conn, session_id, "say two")]
            assert process.stdin is not None
            process.stdin.close()
            return session_id, stops, await asyncio.wait_for(process.wait(), 15)

    session_id, stops, code = run(scenario())
    assert code == 0
    assert stops[1] == "end_turn"
    with turnback.open(home) as tb:
        turns = tb.session(session_id).turns()
        codes = [a.code for a in tb.session(session_id).activities()]
    assert TurnStatus.RUNNING not in [t.status for t in turns]
    assert turns[-1].status is TurnStatus.COMPLETED and turns[-1].prompt_text == "say two"
    assert "agent.crashed" not in codes  # turnback's failure is not blamed on the agent
    if point == "turn.begin.inside":  # refused before anything was written
        assert stops[0] == "error -32603" and len(turns) == 1
    elif point == "turn.record.before":  # not journaled, but the editor still got it
        assert stops[0] == "end_turn" and "turn.record.failed" in codes
        assert editor.text(session_id) == "onetwo"
    else:  # the agent answered, turnback could not commit: the turn ends failed, saying why
        assert stops[0] == "error -32603" and "turn.end.failed" in codes
        assert turns[0].status is TurnStatus.FAILED and "turn.end.before" in (turns[0].detail or "")


@pytest.mark.parametrize("how", ["stdin", "sigterm"])
def test_the_editor_going_away_while_it_is_asked_for_a_permission_ends_the_turn(
    home: Path, workspace: Path, how: str
) -> None:
    """The runtime waits for the editor's answer to the agent's permission request; the editor
    goes away instead: the turn still ends cancelled and the proxy exits 0 within 5 s."""
    from tests.acp.test_session_methods import Talk, _permission

    script = f"raw {json.dumps(json.dumps(_permission('perm-1')))}\nhang"

    async def scenario() -> tuple[str, float, int]:
        talk = Talk(await raw_proxy(home, workspace, agent=ROUGH))
        await talk.ask("initialize", {})
        new = {"cwd": str(workspace), "mcpServers": []}
        session_id = (await talk.ask("session/new", new))["result"]["sessionId"]
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": script}]}
        await talk.editor.send(_request(900, "session/prompt", prompt))
        stdout = talk.editor.process.stdout
        assert stdout is not None
        while (
            "session/request_permission"
            not in (await asyncio.wait_for(stdout.readline(), 30)).decode()
        ):
            pass  # the editor is being asked; it never answers
        began = time.monotonic()
        if how == "stdin":
            assert talk.editor.process.stdin is not None
            talk.editor.process.stdin.close()
        else:
            talk.editor.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(talk.editor.process.wait(), 15)
        return session_id, time.monotonic() - began, code

    session_id, took, code = run(scenario())
    assert code == 0 and took < 5.0
    with turnback.open(home) as tb:
        assert tb.session(session_id).get_turn(1).status is TurnStatus.CANCELLED
