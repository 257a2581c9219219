"""`turnback acp`'s options for agents that die or start slowly: an agent killed mid-turn before
any step checkpoint is continued (or the turn stopped), and a slow agent is given its time."""

from __future__ import annotations

import sys
from pathlib import Path

import acp
import pytest

import turnback
from tests.acp.harness import SCRIPTED, Editor, connect, prompt, proxy_command, run, start
from turnback.model import TurnStatus

#: The scripted agent, answering initialize 1.5 s after it is asked (however early it started).
SLOW = (
    sys.executable,
    "-c",
    "import asyncio\n"
    "from turnback.agents import scripted\n"
    "answer = scripted.ScriptedAgent.initialize\n"
    "async def slowly(self, *args, **kwargs):\n"
    "    await asyncio.sleep(1.5)\n"
    "    return await answer(self, *args, **kwargs)\n"
    "scripted.ScriptedAgent.initialize = slowly\n"
    "scripted.main()\n",
)


def notices(editor: Editor, session_id: str) -> list[str]:
    return [line for line in editor.text(session_id).splitlines() if "[turnback]" in line]


def test_a_crash_before_any_checkpoint_is_continued_and_the_prompt_answers_normally(
    home: Path, workspace: Path
) -> None:
    editor = Editor()

    async def scenario() -> tuple[str, str]:
        async with connect(editor, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            session_id = await start(conn, workspace)
            return session_id, await prompt(conn, session_id, "say hi\ncrash-once\nsay bye")

    session_id, stop = run(scenario())
    assert stop == "end_turn"
    assert notices(editor, session_id) == [
        "[turnback] The agent stopped unexpectedly; it is being restarted and this turn goes on "
        "where it had got to (attempt 1)."
    ]
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        assert session.get_turn(1).status is TurnStatus.COMPLETED
        codes = [a.code for a in session.activities()]
        assert codes.count("agent.crashed") == 1 and codes.count("turn.resumed") == 1


def test_on_agent_crash_stop_ends_the_turn_interrupted_with_one_notice(
    home: Path, workspace: Path
) -> None:
    editor = Editor()
    command = proxy_command(home, SCRIPTED, "--on-agent-crash", "stop")

    async def scenario() -> tuple[str, str, str]:
        async with connect(editor, command, workspace) as (conn, _):
            session_id = await start(conn, workspace)
            stopped = await prompt(conn, session_id, "say hi\ncrash-once\nsay bye")
            after = await prompt(conn, session_id, "say again")
            return session_id, stopped, after

    session_id, stopped, after = run(scenario())
    assert (stopped, after) == ("end_turn", "end_turn")
    assert notices(editor, session_id) == [
        "[turnback] The agent stopped unexpectedly before saving a point to go on from, so "
        "this turn has ended with what it did so far; send a prompt to go on."
    ]
    with turnback.open(home) as tb:
        turns = tb.session(session_id).turns()
        assert [t.status for t in turns] == [TurnStatus.INTERRUPTED, TurnStatus.COMPLETED]


def test_restart_attempts_bound_the_restarts_of_an_agent_that_keeps_dying(
    home: Path, workspace: Path
) -> None:
    editor = Editor()
    command = proxy_command(home, SCRIPTED, "--restart-attempts", "0")

    async def scenario() -> str:
        async with connect(editor, command, workspace) as (conn, _):
            session_id = await start(conn, workspace)
            with pytest.raises(acp.RequestError) as failed:
                await prompt(conn, session_id, "say hi\ncrash-once\nsay bye")
            assert "turn 1 failed" in str(failed.value)
            return session_id

    session_id = run(scenario())
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        assert session.get_turn(1).status is TurnStatus.FAILED
        assert [a.code for a in session.activities()].count("agent.crashed") == 1


def test_an_agent_slower_than_the_initialize_timeout_is_refused_and_a_longer_one_waits(
    home: Path, workspace: Path
) -> None:
    async def scenario(timeout: str) -> str:
        command = proxy_command(home, SLOW, "--initialize-timeout", timeout)
        async with connect(Editor(), command, workspace) as (conn, _):
            session_id = await start(conn, workspace)
            return await prompt(conn, session_id, "say hi")

    with pytest.raises(acp.RequestError) as refused:
        run(scenario("0.5"))
    assert "did not answer initialize within 0.5 s" in str(refused.value.data)
    assert (
        "edit the agent's command in your editor's settings: put `--initialize-timeout "
        "SECONDS` between `acp` and `--`" in refused.value.data["details"]
    )
    assert "`turnback" not in str(refused.value.data)  # no terminal command for the editor
    assert run(scenario("20")) == "end_turn"
