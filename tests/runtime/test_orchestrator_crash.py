"""The orchestrating process itself is killed mid-turn: recover() then resume() finishes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import turnback
from tests.runtime.harness import SCRIPTED, run, text_of
from turnback.model import MessageKind, TurnStatus
from turnback.runtime import AgentRuntime, ResumePolicy

SCRIPT = "write a.txt one\nsay before\ncheckpoint\nask go\nappend a.txt two\nsay after"

CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    import turnback
    from turnback.runtime import AgentRuntime

    home, session_id, script = sys.argv[1], sys.argv[2], sys.argv[3]

    async def main() -> None:
        tb = turnback.open(home=home)
        session = tb.session(session_id)
        command = [sys.executable, "-m", "turnback.agents.scripted"]
        async def never(request: object) -> None:
            await asyncio.sleep(3600)  # killed while the user is being asked

        runtime = await AgentRuntime.start(tb, session, command, on_permission=never)
        print(runtime.agent_pid, flush=True)
        await runtime.prompt(script)

    asyncio.run(main())
    """
)


def test_orchestrator_killed_mid_turn_then_recover_and_resume_finish_it(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path, home: Path
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), session.id, SCRIPT],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    agent_pid = int(child.stdout.readline())
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        running = session.running()
        if running and session.record.pending_requests:
            assert [c.step for c in session.step_checkpoints(running.token)] == [1, 3]
            break
        time.sleep(0.02)
    else:
        child.kill()
        raise AssertionError("the child never asked for permission")
    child.send_signal(signal.SIGKILL)
    child.wait()
    _wait_gone(agent_pid)  # the orphaned agent leaves when its stdin closes

    report = tb.recover()
    assert [t.status for t in report.recovered] == [TurnStatus.INTERRUPTED]
    interrupted = report.recovered[0]

    async def scenario() -> turnback.Turn:
        policy = ResumePolicy(backoff=0.01)
        async with await AgentRuntime.start(
            tb, session, SCRIPTED, policy=policy, on_permission=lambda _: "allow"
        ) as rt:
            return await rt.resume()

    turn = run(scenario())
    assert turn.status is TurnStatus.COMPLETED
    assert (turn.token, turn.number) == (interrupted.token, interrupted.number)  # the same turn
    assert [t.token for t in session.turns()] == [turn.token]
    assert session.record.head == turn.token
    assert (workspace / "a.txt").read_text() == "one\ntwo\n"
    messages = session.turn_messages(turn.token)
    notices = [m.text for m in messages if m.kind is MessageKind.NOTICE]
    assert notices == ["Continued from step 3 after the process running it stopped."]
    # what came before the checkpoint once, what the agent did again after it once
    assert text_of(messages) == "before\npermission go: allowed\nafter\n"
    assert [m.data.get("title") for m in messages if m.kind is MessageKind.TOOL_CALL] == [
        "write a.txt",
        "append a.txt",
    ]
    assert session.record.pending_requests == ()
    codes = [a.code for a in session.activities()]
    assert "turn.recovered" in codes and "turn.continued" in codes
    sessions = [a.data["opened"] for a in session.activities() if a.code == "agent.session"]
    assert sessions == ["new", "loaded"]
    assert not list((workspace / ".scripted-agent" / "turns").iterdir())


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"agent {pid} outlived its orchestrator by 10 s")
