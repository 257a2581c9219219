"""Resume after the agent dies mid-turn: real SIGKILLs at every step, bounded restarts."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

import turnback
from tests.runtime.harness import SCRIPTED, run, text_of, tool_titles
from turnback.model import EventKind, MessageKind, TurnStatus
from turnback.runtime import AgentRuntime, OnCrash, PermissionRequest, ResumePolicy

FAST = ResumePolicy(backoff=0.01)

# Eight steps; the first saves a checkpoint, so a crash anywhere after it can resume.
STEPS = [
    "checkpoint",
    "write a.txt one",
    "say alpha beta",
    "append a.txt two",
    "rename a.txt b.txt",
    "think pondering",
    "write c.txt three",
    "say omega",
]


def crashing_at(position: int) -> str:
    return "\n".join([*STEPS[:position], "crash-once", *STEPS[position:]])


def assert_every_step_once(session: turnback.Session, turn: turnback.Turn, workspace: Path) -> None:
    assert turn.status is TurnStatus.COMPLETED, turn.detail
    assert not (workspace / "a.txt").exists()
    assert (workspace / "b.txt").read_text() == "one\ntwo\n"
    assert (workspace / "c.txt").read_text() == "three\n"
    messages = session.turn_messages(turn.number)
    assert text_of(messages) == "alpha beta\nomega\n"
    assert text_of(messages, MessageKind.THOUGHT) == "pondering\n"
    assert tool_titles(messages) == [
        "write a.txt",
        "append a.txt",
        "rename a.txt b.txt",
        "write c.txt",
    ]
    assert all(m.data.get("status") == "completed" for m in messages if m.kind == "tool_call")
    assert session.record.pending_requests == ()


@pytest.mark.parametrize("position", range(1, len(STEPS) + 1))
def test_sigkill_at_each_step_resumes_with_every_effect_and_update_once(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path, position: int
) -> None:
    async def scenario() -> turnback.Turn:
        async with await AgentRuntime.start(tb, session, SCRIPTED, policy=FAST) as rt:
            return await rt.prompt(crashing_at(position))

    turn = run(scenario())
    assert_every_step_once(session, turn, workspace)
    codes = [a.code for a in session.activities()]
    assert codes.count("agent.crashed") == 1
    assert codes.count("turn.resuming") == 1 and codes.count("turn.resumed") == 1
    crashed = next(a for a in session.activities() if a.code == "agent.crashed")
    assert "was killed by SIGKILL" in crashed.message, crashed.message  # not "(status None)"
    assert crashed.data["returncode"] == -signal.SIGKILL
    sessions = [a.data["opened"] for a in session.activities() if a.code == "agent.session"]
    assert sessions == ["new", "loaded"]
    kinds = [e.kind for e in session.run_events(turn.number)]
    assert kinds.count(EventKind.REWIND) == 1


@pytest.mark.parametrize("step", [2, 4, 5])
def test_sigkill_between_an_effect_and_its_checkpoint_applies_it_once(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path, step: int
) -> None:
    env = {"TURNBACK_SCRIPTED_FAULT": f"effect.applied@{step}"}

    async def scenario() -> turnback.Turn:
        async with await AgentRuntime.start(tb, session, SCRIPTED, env=env, policy=FAST) as rt:
            return await rt.prompt("\n".join(STEPS))

    assert_every_step_once(session, run(scenario()), workspace)


def test_a_pending_permission_is_cleared_and_asked_again_after_resume(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    seen: list[tuple[str, list[str]]] = []
    holder: dict[str, AgentRuntime] = {}

    async def answer(request: PermissionRequest) -> str:
        pending = [p["requestId"] for p in session.record.pending_requests]
        seen.append((request.request_id, pending))
        if len(seen) == 1:  # the agent dies while the user is being asked
            pid = holder["rt"].agent_pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await asyncio.sleep(30)
        return "allow"

    async def scenario() -> turnback.Turn:
        rt = await AgentRuntime.start(tb, session, SCRIPTED, on_permission=answer, policy=FAST)
        holder["rt"] = rt
        async with rt:
            return await rt.prompt("say start\ncheckpoint\nask deploy\nsay done")

    turn = run(scenario())
    assert turn.status is TurnStatus.COMPLETED
    (first, pending_first), (second, pending_second) = seen
    assert pending_first == [first]
    assert pending_second == [second], "the first request was not cleared by the resume"
    assert first != second
    assert session.record.pending_requests == ()
    assert (
        text_of(session.turn_messages(turn.number)) == "start\npermission deploy: allowed\ndone\n"
    )
    events = session.run_events(turn.number)
    requested = [e.event["requestId"] for e in events if e.kind == EventKind.PERMISSION_REQUESTED]
    answered = [e.event for e in events if e.kind == EventKind.PERMISSION_ANSWERED]
    assert requested == [first, second]
    assert [(a["requestId"], a["optionId"]) for a in answered] == [(second, "allow")]


def test_an_agent_that_dies_before_any_checkpoint_continues_the_turn(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    async def scenario() -> turnback.Turn:
        async with await AgentRuntime.start(tb, session, SCRIPTED, policy=FAST) as rt:
            return await rt.prompt("say hi\ncrash-once\nsay bye")

    turn = run(scenario())
    assert turn.status is TurnStatus.COMPLETED
    # the first attempt's "hi" is kept (the agent was told it had said it); the scripted agent
    # runs its script again from the start
    assert text_of(session.turn_messages(turn.number)) == "hi\nhi\nbye\n"
    resuming = [a for a in session.activities() if a.code == "turn.resuming"]
    assert len(resuming) == 1 and "continue turn 1 where it had got to" in resuming[0].message
    assert resuming[0].data["step"] is None


def test_on_crash_stop_without_a_checkpoint_ends_the_turn_interrupted(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    policy = ResumePolicy(backoff=0.01, on_crash=OnCrash.STOP)

    async def scenario() -> turnback.Turn:
        async with await AgentRuntime.start(tb, session, SCRIPTED, policy=policy) as rt:
            return await rt.prompt("say hi\ncrash-once\nsay bye")

    turn = run(scenario())
    assert turn.status is TurnStatus.INTERRUPTED
    assert session.record.head == turn.token
    assert text_of(session.turn_messages(turn.number)) == "hi\n"
    codes = [a.code for a in session.activities()]
    assert codes.count("turn.interrupted") == 1 and "turn.resuming" not in codes


def test_an_agent_that_keeps_crashing_stops_after_the_bounded_attempts(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    async def scenario() -> turnback.Turn:
        async with await AgentRuntime.start(tb, session, SCRIPTED, policy=FAST) as rt:
            return await rt.prompt("say hi\ncheckpoint\ncrash")

    turn = run(scenario())
    assert turn.status is TurnStatus.FAILED
    codes = [a.code for a in session.activities()]
    assert codes.count("agent.crashed") == 3  # the first run and two restarts
    assert codes.count("turn.resuming") == 2
    assert codes.count("turn.resume.failed") == 1
    assert "turn.resumed" not in codes
    assert text_of(session.turn_messages(turn.number)) == "hi\n"


def test_step_checkpoints_are_durable_as_they_arrive(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    steps: list[Any] = []

    async def scenario() -> None:
        async with await AgentRuntime.start(tb, session, SCRIPTED) as rt:
            running = asyncio.create_task(rt.prompt("write a.txt 1\ncheckpoint\nsleep 30"))
            for _ in range(500):
                current = session.running()
                if current and len(session.step_checkpoints(current.token)) == 2:
                    steps.extend(c.step for c in session.step_checkpoints(current.token))
                    break
                await asyncio.sleep(0.01)
            await rt.cancel()
            await running

    run(scenario())
    assert steps == [1, 2]
