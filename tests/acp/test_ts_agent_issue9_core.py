"""What issue 9 asks of the proxy with an agent that keeps no step checkpoints (the agent on the
TypeScript SDK): one agent process serving every session, the agent's own commands after
``session/load``/``resume``/``fork``, a turn continued after the agent is killed mid-turn, the
``--on-agent-crash`` and ``--initialize-timeout`` options.

The cases run directly against the agent show the behaviour expected of the proxy is the agent's
own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import acp
import pytest

import turnback
from tests.acp.harness import DiskEditor, Editor, connect, prompt, proxy_command, run, ts_agent
from tests.acp.harness import wait_for as wait_until
from turnback.model import TurnStatus

TS_COMMANDS = {"ts-help", "ts-count"}
STOP_REASONS = {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}


def command(through: str, home: Path, *options: str) -> list[str]:
    agent = list(ts_agent())
    return agent if through == "direct" else proxy_command(home, agent, *options)


def offered(editor: Editor, session_id: str) -> set[str]:
    updates = editor.of(session_id, "available_commands_update")
    return {c["name"] for c in updates[-1]["availableCommands"]} if updates else set()


async def open_session(conn: Any, cwd: Path) -> str:
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
    return str((await conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id)


@pytest.mark.parametrize("through", ["direct", "proxy"])
def test_extensions_without_a_session_reach_the_process_hosting_the_sessions(
    home: Path, workspace: Path, through: str
) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect(Editor(), command(through, home), workspace) as (conn, _):
            session_id = await open_session(conn, workspace)
            assert await prompt(conn, session_id, "say hi") == "end_turn"
            await conn.ext_notification("ts/note", {})
            assert await prompt(conn, session_id, "say again") == "end_turn"
            agent_wide = await conn.ext_method("ts/state", {})
            return agent_wide, await conn.ext_method("ts/state", {"sessionId": session_id})

    agent_wide, of_session = run(scenario())
    assert agent_wide["pid"] == of_session["pid"]
    assert (agent_wide["opened"], agent_wide["notes"]) == (1, 1)
    assert of_session["session"]["turns"] == 2


@pytest.mark.parametrize("through", ["direct", "proxy"])
def test_the_agents_own_commands_are_offered_after_load(
    home: Path, workspace: Path, through: str
) -> None:
    async def earlier() -> str:
        async with connect(Editor(), command(through, home), workspace) as (conn, _):
            session_id = await open_session(conn, workspace)
            assert await prompt(conn, session_id, "say first") == "end_turn"
            return session_id

    session_id = run(earlier())
    editor = Editor()

    async def later() -> list[set[str]]:
        seen = []
        async with connect(editor, command(through, home), workspace) as (conn, _):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            await conn.load_session(cwd=str(workspace), session_id=session_id, mcp_servers=[])
            await wait_until(lambda: offered(editor, session_id) >= TS_COMMANDS, timeout=3)
            seen.append(offered(editor, session_id))
            if through == "proxy":
                editor.clear()
                await conn.resume_session(cwd=str(workspace), session_id=session_id)
                await wait_until(lambda: offered(editor, session_id) >= TS_COMMANDS, timeout=3)
                seen.append(offered(editor, session_id))
                fork = await conn.fork_session(session_id=session_id, cwd=str(workspace))
                await wait_until(lambda: offered(editor, fork.session_id) >= TS_COMMANDS, 5)
                seen.append(offered(editor, fork.session_id))
            assert await prompt(conn, session_id, "say after") == "end_turn"
        return seen

    for commands in run(later()):
        assert commands >= TS_COMMANDS
        if through == "proxy":
            assert {"checkpoints", "diff", "rewind", "undo-rewind"} <= commands


def notices(editor: Editor, session_id: str) -> int:
    return editor.text(session_id).count("[turnback]")


def test_an_agent_killed_mid_turn_continues_the_turn_with_both_sessions_open(
    home: Path, workspace: Path
) -> None:
    """SIGKILL mid-turn of an agent that keeps no step checkpoints, with two sessions open in
    it: the prompt answers with the continued turn's stop reason and one notice; the agent,
    told it was interrupted, does the turn's work again; both sessions go on."""
    editor = DiskEditor()
    killed = "write b.txt B\nsay half way\ncrash-once\nwrite c.txt C\nsay done"

    async def scenario() -> dict[str, Any]:
        async with connect(editor, command("proxy", home), workspace) as (conn, _):
            first = await open_session(conn, workspace)
            second = str((await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id)
            assert await prompt(conn, first, "write a.txt A") == "end_turn"
            assert await prompt(conn, second, "say other") == "end_turn"
            before = await conn.ext_method("ts/state", {"sessionId": first})
            reason = await prompt(conn, first, killed)
            after = await conn.ext_method("ts/state", {"sessionId": first})
            seen = {
                "reason": reason,
                "pids": (before["pid"], after["pid"]),
                "meta": after["session"]["promptMeta"],
                "notices": notices(editor, first),
                "text": editor.text(first),
                "again": await prompt(conn, first, "say again"),
                "other": await prompt(conn, second, "say still here"),
                "agent-wide": (await conn.ext_method("ts/state", {}))["pid"],
                "second": (await conn.ext_method("ts/state", {"sessionId": second}))["pid"],
            }
            return {**seen, "sessions": (first, second), "other text": editor.text(second)}

    seen = run(scenario(), timeout=60)
    assert seen["reason"] == "end_turn"
    assert seen["notices"] == 1
    assert seen["pids"][0] != seen["pids"][1]  # a new agent process continued the turn
    assert seen["meta"]["turnback"]["resume"]["step"] is None
    assert "continuing" in seen["text"] and seen["text"].endswith("done\n")
    assert (seen["again"], seen["other"]) == ("end_turn", "end_turn")
    assert seen["agent-wide"] == seen["second"] == seen["pids"][1]  # one process hosts both
    assert seen["other text"] == "other\nstill here\n"
    first, _second = seen["sessions"]
    with turnback.open(home) as tb:
        stored = tb.session(first)
        turn = stored.get_turn(2)
        assert turn.status is TurnStatus.COMPLETED
        assert sorted(c.path for c in stored.diff(2).files) == ["b.txt", "c.txt"]
        assert [t.status for t in stored.turns()] == [TurnStatus.COMPLETED] * 3


def test_on_agent_crash_stop_ends_the_turn_as_interrupted(home: Path, workspace: Path) -> None:
    editor = DiskEditor()

    async def scenario() -> tuple[str, str]:
        proxy = command("proxy", home, "--on-agent-crash", "stop")
        async with connect(editor, proxy, workspace) as (conn, _):
            session_id = await open_session(conn, workspace)
            reason = await prompt(conn, session_id, "write b.txt B\ncrash-once\nwrite c.txt C")
            assert await prompt(conn, session_id, "say next") == "end_turn"
            return session_id, reason

    session_id, reason = run(scenario(), timeout=60)
    assert reason in STOP_REASONS
    assert notices(editor, session_id) == 1
    assert "continuing" not in editor.text(session_id)
    assert not (workspace / "c.txt").exists()
    with turnback.open(home) as tb:
        stored = tb.session(session_id)
        assert [t.status for t in stored.turns()] == [
            TurnStatus.INTERRUPTED,
            TurnStatus.COMPLETED,
        ]
        assert [c.path for c in stored.diff(1).files] == ["b.txt"]


def test_initialize_waits_as_long_as_initialize_timeout_says(home: Path, workspace: Path) -> None:
    slow = {"TS_AGENT_INITIALIZE_DELAY_MS": "1500"}

    async def initialize(*options: str) -> Any:
        proxy = command("proxy", home, *options)
        async with connect(Editor(), proxy, workspace, env=slow) as (conn, _):
            try:
                return await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            except acp.RequestError as error:
                return error

    answered = run(initialize("--initialize-timeout", "5"))
    assert isinstance(answered, acp.schema.InitializeResponse), answered
    assert answered.agent_info is not None and answered.agent_info.name == "ts-scripted-agent"
    refused = run(initialize("--initialize-timeout", "0.5"))
    assert isinstance(refused, acp.RequestError), refused
    assert "--initialize-timeout" in str(refused.data)  # says what to raise


def test_the_default_initialize_timeout_lets_a_slow_agent_start(
    home: Path, workspace: Path
) -> None:
    """An agent that takes 11 s to answer initialize (the proxy of today gives it 10)."""
    slow = {"TS_AGENT_INITIALIZE_DELAY_MS": "11000"}

    async def scenario() -> str:
        async with connect(Editor(), command("proxy", home), workspace, env=slow) as (conn, _):
            session_id = await open_session(conn, workspace)
            return await prompt(conn, session_id, "say awake")

    assert run(scenario(), timeout=60) == "end_turn"
