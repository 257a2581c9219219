"""session/list, load, resume and fork served from turnback's store; a proxy killed mid-turn;
the editor going away."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import acp
import pytest

import turnback
from tests.acp.harness import (
    SCRIPTED,
    Editor,
    connect,
    prompt,
    proxy_command,
    run,
    start,
    wait_for,
)
from turnback.acp.sessions import LIST_PAGE
from turnback.model import TurnStatus


def test_session_list_comes_in_pages_that_follow_on(home: Path, workspace: Path) -> None:
    with turnback.open(home) as tb:
        made = [tb.create_session(workspace, title=f"s{i}").id for i in range(LIST_PAGE + 3)]
        tb.create_session(workspace.parent, title="elsewhere")

    async def scenario() -> tuple[list[Any], list[Any], Any, str]:
        async with connect(Editor(), proxy_command(home, SCRIPTED), workspace) as (conn, _):
            await conn.initialize(protocol_version=1)
            first = await conn.list_sessions(cwd=str(workspace))
            assert first.next_cursor is not None
            second = await conn.list_sessions(cwd=str(workspace), cursor=first.next_cursor)
            with pytest.raises(acp.RequestError) as raised:
                await conn.list_sessions(cwd=str(workspace), cursor="page 2, please")
            return first.sessions, second.sessions, second.next_cursor, str(raised.value.data)

    first, second, end, refused = run(scenario())
    assert len(first) == LIST_PAGE and len(second) == 3 and end is None
    listed = [s.session_id for s in first + second]
    assert sorted(listed) == sorted(made)  # each once, none from elsewhere
    assert listed[0] == made[-1]  # newest first
    assert "not a cursor this proxy gave" in refused and "list again" in refused


AUTH_AGENT = (sys.executable, str(Path(__file__).with_name("auth_agent.py")))


def test_each_sessions_agent_is_authenticated_as_the_editor_asked(
    home: Path, workspace: Path
) -> None:
    """authenticate reaches the agent process that answered initialize; every session's own
    agent process gets it too before its session opens (else it would refuse session/new)."""
    editor = Editor()

    async def scenario() -> tuple[Any, str, str]:
        async with connect(editor, proxy_command(home, AUTH_AGENT), workspace) as (conn, _):
            init = await conn.initialize(protocol_version=1)
            with pytest.raises(acp.RequestError) as refused:
                await conn.new_session(cwd=str(workspace), mcp_servers=[])
            await conn.authenticate(method_id="token")
            session_id = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            assert await prompt(conn, session_id, "hello") == "end_turn"
            return init, f"{refused.value}", editor.text(session_id)

    init, refused, said = run(scenario())
    assert [m.id for m in init.auth_methods] == ["token"]
    assert "uthentication required" in refused
    assert said == "authenticated with token"


def test_list_load_resume_and_fork_come_from_turnbacks_store(home: Path, workspace: Path) -> None:
    first = Editor()

    async def earlier() -> str:
        async with connect(first, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            session_id = await start(conn, workspace)
            await prompt(conn, session_id, "write a.txt one\nsay hello there")
            await prompt(conn, session_id, "think hmm\nsay second")
            return session_id

    session_id = run(earlier())
    later = Editor()

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connect(later, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            await conn.initialize(protocol_version=1)
            listed = await conn.list_sessions(cwd=str(workspace))
            seen["listed"] = [(s.session_id, s.title, s.cwd) for s in listed.sessions]
            seen["elsewhere"] = (await conn.list_sessions(cwd=str(workspace.parent))).sessions
            await conn.load_session(cwd=str(workspace), session_id=session_id, mcp_servers=[])
            await wait_for(lambda: later.of(session_id, "available_commands_update"))
            seen["loaded"] = list(later.of(session_id))
            assert await prompt(conn, session_id, "say third") == "end_turn"
            later.clear()
            await conn.resume_session(cwd=str(workspace), session_id=session_id)
            await wait_for(lambda: later.of(session_id, "available_commands_update"))
            seen["resumed"] = list(later.of(session_id))
            fork = await conn.fork_session(session_id=session_id, cwd=str(workspace))
            seen["fork"] = fork.session_id
            assert await prompt(conn, fork.session_id, "say in the fork") == "end_turn"
            seen["after"] = [s.session_id for s in (await conn.list_sessions()).sessions]
            later.clear()
            await conn.load_session(cwd=str(workspace), session_id=fork.session_id, mcp_servers=[])
            seen["fork loaded"] = later.text(fork.session_id)
        return seen

    seen = run(scenario())
    assert seen["listed"] == [(session_id, "write a.txt one say hello there", str(workspace))]
    assert seen["elsewhere"] == []
    loaded = seen["loaded"]
    assert isinstance(loaded, list)
    kinds = [u["sessionUpdate"] for u in loaded]
    assert kinds[:3] == ["user_message_chunk", "tool_call", "agent_message_chunk"]
    assert loaded[0]["content"]["text"] == "write a.txt one\nsay hello there"
    assert loaded[1]["status"] == "completed"  # the tool call as it ended
    assert "".join(
        u["content"]["text"] for u in loaded if u["sessionUpdate"] == "agent_message_chunk"
    ) == ("hello there\nsecond\n")
    assert "agent_thought_chunk" in kinds
    assert kinds[-1] == "available_commands_update"  # after the load's answer
    assert {"sessionUpdate": "session_info_update", "title": seen["listed"][0][1]}.items() <= (
        next(u for u in loaded if u["sessionUpdate"] == "session_info_update").items()
    )
    # resume replays nothing but says the session's title and offers the commands again
    assert [u["sessionUpdate"] for u in seen["resumed"]] == [
        "session_info_update",
        "available_commands_update",
    ]
    fork_id = seen["fork"]
    assert isinstance(fork_id, str) and fork_id != session_id
    assert set(seen["after"]) == {session_id, fork_id}
    assert seen["fork loaded"] == "hello there\nsecond\nthird\nin the fork\n"
    with turnback.open(home) as tb:
        original, forked = tb.session(session_id), tb.session(fork_id)
        assert [t.prompt_text for t in original.turns()] == [
            "write a.txt one\nsay hello there",
            "think hmm\nsay second",
            "say third",
        ]
        assert [t.prompt_text for t in forked.turns()][:3] == [
            t.prompt_text for t in original.turns()
        ]
        assert len(forked.turns()) == 4 and len(original.turns()) == 3


def test_a_proxy_killed_mid_turn_is_recovered_and_the_load_shows_it(
    home: Path, workspace: Path
) -> None:
    editor = Editor()

    async def killed() -> str:
        async with connect(editor, proxy_command(home, SCRIPTED), workspace) as (conn, process):
            session_id = await start(conn, workspace)
            await prompt(conn, session_id, "write a.txt one")
            running = asyncio.ensure_future(
                prompt(conn, session_id, "write b.txt two\nsay half way\nsleep 30\nsay never")
            )
            await wait_for(lambda: "half way" in editor.text(session_id))
            await asyncio.sleep(0.1)  # the batched journal flushes within 10 ms
            process.kill()
            with pytest.raises(Exception):  # noqa: B017 - the connection is simply gone
                await running
            return session_id

    session_id = run(killed())
    restarted = Editor()

    async def reload() -> str:
        async with connect(restarted, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            await conn.initialize(protocol_version=1)
            await conn.load_session(cwd=str(workspace), session_id=session_id, mcp_servers=[])
            text = restarted.text(session_id)
            assert await prompt(conn, session_id, "say after") == "end_turn"
            return text

    text = run(reload())
    assert "half way" in text and "never" not in text
    assert "[turnback]" in text and "interrupted" in text.lower()
    with turnback.open(home) as tb:
        turns = tb.session(session_id).turns()
        assert [t.status for t in turns] == [
            TurnStatus.COMPLETED,
            TurnStatus.INTERRUPTED,
            TurnStatus.COMPLETED,
        ]
        assert [c.path for c in tb.session(session_id).diff(2).files] == ["b.txt"]


@pytest.mark.parametrize("how", ["stdin", "sigterm"])
def test_the_editor_going_away_cancels_the_running_turn_and_exits(
    home: Path, workspace: Path, how: str
) -> None:
    editor = Editor()

    async def scenario() -> tuple[str, int | None]:
        async with connect(editor, proxy_command(home, SCRIPTED), workspace) as (conn, process):
            session_id = await start(conn, workspace)
            asyncio.ensure_future(
                prompt(conn, session_id, "write a.txt one\nsay working\nsleep 30")
            ).add_done_callback(lambda f: f.exception())
            await wait_for(lambda: "working" in editor.text(session_id))
            if how == "stdin":
                assert process.stdin is not None
                process.stdin.close()
            else:
                os.kill(process.pid, signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), 15)
            return session_id, code

    session_id, code = run(scenario())
    assert code == 0
    with turnback.open(home) as tb:
        turn = tb.session(session_id).get_turn(1)
        assert turn.status is TurnStatus.CANCELLED
        assert turn.end_checkpoint is not None
        assert [c.path for c in tb.session(session_id).diff(1).files] == ["a.txt"]
