"""One agent process serves every session of a proxy: per-process state is shared as it is when
the agent is used directly, and when the process is killed mid-turn every session goes on."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import acp

import turnback
from tests.acp.harness import (
    SCRIPTED,
    Editor,
    connect,
    open_sessions,
    prompt,
    proxy_command,
    run,
    wait_for,
)
from turnback.model import TurnStatus

PLAIN = (sys.executable, str(Path(__file__).with_name("plain_agent.py")))


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_every_session_and_sessionless_extension_reaches_the_one_agent_process(
    home: Path, tmp_path: Path
) -> None:
    (one := tmp_path / "one").mkdir()
    (two := tmp_path / "two").mkdir()
    editor = Editor(answers=["yes", "yes", "yes"])

    async def scenario() -> tuple[list[int], list[int], dict[str, object]]:
        async with connect(editor, proxy_command(home, PLAIN), tmp_path) as (conn, proxy):
            first, second = await open_sessions(conn, one, two)
            tokens = []
            for sid in (first, second, first):
                response = await conn.prompt(session_id=sid, prompt=[acp.text_block("go")])
                assert response.field_meta is not None
                tokens.append(response.field_meta["plain"]["tokens"])
            hello = await conn.ext_method("plain/hello", {"x": 1})
            return tokens, children(proxy.pid), hello

    tokens, agents, hello = run(scenario())
    # the agent counts prompts per process: one process saw all three
    assert tokens == [1, 2, 3]
    assert len(agents) == 1
    assert hello == {"hi": {"x": 1}}
    assert sorted(Path(p).name for p in editor.files) == [
        "notes-1.txt",
        "notes-2.txt",
        "notes-3.txt",
    ]


def test_an_agent_killed_mid_turn_with_two_sessions_open_recovers_both(
    home: Path, tmp_path: Path
) -> None:
    (one := tmp_path / "one").mkdir()
    (two := tmp_path / "two").mkdir()
    editor = Editor()
    # one with a step checkpoint before the kill (after its first write), one without
    with_checkpoint = "write a.txt one\nsleep 2\nwrite b.txt two\nsay done one"
    without = "say start\nsleep 2\nwrite c.txt three\nsay done two"

    async def scenario() -> tuple[str, str, tuple[str, str], str, str]:
        async with connect(editor, proxy_command(home, SCRIPTED), tmp_path) as (conn, proxy):
            first, second, idle = await open_sessions(conn, one, two, tmp_path)
            running = asyncio.gather(
                prompt(conn, first, with_checkpoint), prompt(conn, second, without)
            )
            await wait_for(
                lambda: (one / "a.txt").exists() and "start" in editor.text(second), timeout=20
            )
            [agent] = children(proxy.pid)
            os.kill(agent, signal.SIGKILL)
            stops = await running
            [restarted] = children(proxy.pid)
            assert restarted != agent
            # the idle session was reopened in the new process without being asked to
            with turnback.open(home) as tb:
                reopened = tb.session(idle)
                await wait_for(
                    lambda: [
                        a.data["opened"] for a in reopened.activities() if a.code == "agent.session"
                    ]
                    == ["new", "loaded"]
                )
            after = (
                await prompt(conn, first, "say again"),
                await prompt(conn, second, "say again"),
            )
            return first, second, (stops[0], stops[1]), after[0], after[1]

    first, second, stops, after_first, after_second = run(scenario(), timeout=60)
    assert stops == ("end_turn", "end_turn")
    assert (after_first, after_second) == ("end_turn", "end_turn")
    for sid in (first, second):  # one notice each, for the whole recovery
        assert editor.text(sid).count("[turnback]") == 1
    assert "done one" in editor.text(first) and "done two" in editor.text(second)
    assert (one / "b.txt").read_text() == "two\n" and (two / "c.txt").read_text() == "three\n"
    with turnback.open(home) as tb:
        for sid, files in ((first, ["a.txt", "b.txt"]), (second, ["c.txt"])):
            session = tb.session(sid)
            turns = session.turns()
            assert [t.status for t in turns] == [TurnStatus.COMPLETED] * 2
            diff = session.diff(1)
            assert sorted(f.path for f in diff.files if not f.path.startswith(".")) == files
            codes = [a.code for a in session.activities()]
            assert codes.count("agent.crashed") == 1 and codes.count("turn.resuming") == 1


def test_the_agents_commands_come_with_turnbacks_after_new_load_and_fork(
    home: Path, tmp_path: Path
) -> None:
    editor = Editor(answers=["yes"])

    def names(sid: str) -> set[str]:
        offered = editor.of(sid, "available_commands_update")
        return {c["name"] for c in offered[-1]["availableCommands"]} if offered else set()

    both = {"checkpoints", "diff", "rewind", "undo-rewind", "plain-help"}

    async def scenario() -> None:
        async with connect(editor, proxy_command(home, PLAIN), tmp_path) as (conn, _):
            [sid] = await open_sessions(conn, tmp_path)
            await wait_for(lambda: names(sid) == both)
            await prompt(conn, sid, "go")
            fork = await conn.fork_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
            await wait_for(lambda: names(fork.session_id) == both)
        editor.clear()
        async with connect(editor, proxy_command(home, PLAIN), tmp_path) as (conn, _):
            await open_sessions(conn)
            await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
            await wait_for(lambda: names(sid) == both)

    run(scenario())
