"""Session settings the user chose (mode, config options) survive the agent process: a restarted
agent, or the next run of turnback, is given them again."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import turnback
from tests.runtime.harness import run, text_of
from turnback.runtime import AgentRuntime

MODE_AGENT = (sys.executable, str(Path(__file__).with_name("mode_agent.py")))


def test_a_mode_chosen_once_is_given_to_every_later_agent_process(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    async def scenario() -> list[turnback.Turn]:
        turns = []
        async with await AgentRuntime.start(tb, session, MODE_AGENT) as rt:
            turns.append(await rt.prompt("which mode?"))
            agent_session = rt.agent_session_id
            await rt.request("session/set_mode", {"sessionId": agent_session, "modeId": "code"})
            turns.append(await rt.prompt("which mode?"))
            pid = rt.agent_pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            while rt.agent_pid == pid:
                await asyncio.sleep(0.01)
            turns.append(await rt.prompt("which mode?"))  # a new process, a new agent session
        async with await AgentRuntime.start(tb, session, MODE_AGENT) as rt:  # turnback again
            turns.append(await rt.prompt("which mode?"))
        return turns

    turns = run(scenario())
    said = [text_of(session.turn_messages(t.token)) for t in turns]
    assert said == ["mode ask", "mode code", "mode code", "mode code"]
    codes = [a.code for a in session.activities()]
    assert "agent.exited" in codes and "agent.setting.lost" not in codes


def test_a_setting_the_restarted_agent_refuses_is_reported(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    with tb.store.atomic() as tx:  # what an earlier run left: a mode this agent does not have
        tx.set_agent_state(
            session.id,
            {
                "command": list(MODE_AGENT),
                "settings": {"session/set_mode": {"modeId": "architect"}},
            },
            1.0,
        )

    async def scenario() -> turnback.Turn:
        async with await AgentRuntime.start(tb, session, MODE_AGENT) as rt:
            return await rt.prompt("which mode?")

    turn = run(scenario())
    assert text_of(session.turn_messages(turn.token)) == "mode ask"
    [lost] = [a for a in session.activities() if a.code == "agent.setting.lost"]
    assert lost.level == "warning" and "architect" in lost.message
    assert "choose that setting again" in lost.message
