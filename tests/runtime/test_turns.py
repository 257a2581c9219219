"""Prompts as turns: updates recorded in wire order, stop reasons, permissions, stores."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

import turnback
from tests.runtime.harness import SCRIPTED, run, text_of, tool_titles
from turnback import faults
from turnback.model import EventKind, MessageKind, TurnStatus
from turnback.runtime import AgentRuntime, PermissionRequest


def test_a_prompt_is_a_turn_with_every_update_in_order(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    asked: list[PermissionRequest] = []

    def allow(request: PermissionRequest) -> str:
        asked.append(request)
        # The request is durable, and pending on the session, before anyone is asked.
        pending = session.record.pending_requests
        assert [p["requestId"] for p in pending] == [request.request_id]
        return "allow"

    script = "say hello brave world\nwrite a.txt one\nthink hmm\nask deploy\nstream 50\nsay bye"

    async def scenario() -> turnback.Turn:
        async with await AgentRuntime.start(tb, session, SCRIPTED, on_permission=allow) as rt:
            assert rt.features.checkpoints and rt.features.rollback and rt.features.load_session
            return await rt.prompt(script)

    turn = run(scenario())
    assert turn.status is TurnStatus.COMPLETED
    messages = session.turn_messages(turn.number)
    assert [m.kind for m in messages] == [
        MessageKind.USER,
        MessageKind.AGENT,
        MessageKind.TOOL_CALL,
        MessageKind.THOUGHT,
        MessageKind.AGENT,
    ]
    chunks = "".join(f"chunk {i}\n" for i in range(1, 51))
    assert messages[-1].text == f"permission deploy: allowed\n{chunks}bye\n"
    assert tool_titles(messages) == ["write a.txt"]
    assert (workspace / "a.txt").read_text() == "one\n"
    kinds = [e.kind for e in session.run_events(turn.number)]
    assert EventKind.PERMISSION_REQUESTED in kinds and EventKind.PERMISSION_ANSWERED in kinds
    # The answer is journaled before the text the agent streams after it (how many events that
    # text makes depends on how its chunks were read together off the pipe).
    answered = kinds.index(EventKind.PERMISSION_ANSWERED)
    assert "agent_message_chunk" in kinds[answered + 1 :]
    assert [r.tool_call["title"] for r in asked] == ["deploy"]
    assert session.record.pending_requests == ()
    # The agent's checkpoint store is removed once the turn has ended.
    assert not list((workspace / ".scripted-agent" / "turns").iterdir())


def test_stop_reasons_end_the_turn_and_the_next_prompt_loads_the_same_agent_session(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    async def scenario() -> list[turnback.Turn]:
        async with await AgentRuntime.start(tb, session, SCRIPTED) as rt:
            failed = await rt.prompt("say one\nfail boom")
            running = asyncio.create_task(rt.prompt("say going\nsleep 30\nsay never"))
            while not session.running() or not rt._recorder.live:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            await rt.cancel()
            cancelled = await asyncio.wait_for(running, 5)
            denied = await rt.prompt("ask deploy\nsay never")  # no callback: cancelled
            limited = await rt.prompt("say so far\nstop max_tokens\nsay never")
        async with await AgentRuntime.start(tb, session, SCRIPTED) as rt:
            done = await rt.prompt("say again")
        return [failed, cancelled, denied, limited, done]

    failed, cancelled, denied, limited, done = run(scenario())
    assert failed.status is TurnStatus.FAILED and "boom" in (failed.detail or "")
    assert cancelled.status is TurnStatus.CANCELLED
    assert cancelled.detail == "cancelled by the caller"  # who asked, not the agent answering
    assert text_of(session.turn_messages(cancelled.number)) == "going\n"
    assert denied.status is TurnStatus.CANCELLED
    assert denied.detail == "cancelled by the agent"  # it stopped of its own accord
    assert limited.status is TurnStatus.COMPLETED  # the agent answered, up to its limit
    assert limited.detail == "the agent stopped early (max_tokens); what it did is kept"
    assert text_of(session.turn_messages(limited.number)) == "so far\n"
    assert done.status is TurnStatus.COMPLETED and done.detail is None
    sessions = [a.data for a in session.activities() if a.code == "agent.session"]
    assert [s["opened"] for s in sessions] == ["new", "loaded"]
    assert sessions[0]["agentSessionId"] == sessions[1]["agentSessionId"]


def test_a_session_update_outside_a_turn_is_not_recorded(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    # session/load replays the agent's history as updates: none of it may enter a turn.
    async def scenario() -> None:
        async with await AgentRuntime.start(tb, session, SCRIPTED) as rt:
            await rt.prompt("say first")
        async with await AgentRuntime.start(tb, session, SCRIPTED) as rt:
            await rt.prompt("say second")

    run(scenario())
    assert text_of(session.messages()) == "first\nsecond\n"


def test_the_event_loop_is_not_blocked_while_a_turn_records_and_commits(
    tb: turnback.Turnback, session: turnback.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many boundary events (tool calls, checkpoints) each wait for a commit: none on the loop.
    script = "\n".join(f"write f{i}.txt {i}\nstream 40" for i in range(40))
    gaps: list[float] = []
    # Every durable write passes a fault point; note the thread each one is reached on.
    reached: list[tuple[str, int]] = []
    point = faults.point

    def noted(name: str) -> None:
        reached.append((name, threading.get_ident()))
        point(name)

    monkeypatch.setattr(faults, "point", noted)

    async def ticker(stop: asyncio.Event) -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    loop_thread: list[int] = []

    async def scenario() -> turnback.Turn:
        loop_thread.append(threading.get_ident())
        async with await AgentRuntime.start(tb, session, SCRIPTED) as rt:
            stop = asyncio.Event()
            tick = asyncio.create_task(ticker(stop))
            turn = await rt.prompt(script)
            stop.set()
            await tick
            return turn

    turn = run(scenario())
    assert turn.status is TurnStatus.COMPLETED
    assert len(session.turn_messages(turn.number)) > 40
    # The proof: no commit or flush of the turn ran on the loop's thread (recording an event
    # only queues it for the journal's flusher, so it may).
    writes = {name for name, _ in reached}
    assert {"journal.flush.after", "turn.end.inside"} <= writes, sorted(writes)
    on_loop = sorted(
        {
            name
            for name, thread in reached
            if thread == loop_thread[0] and not name.startswith("turn.record.")
        }
    )
    assert not on_loop, f"durable writes on the event loop's thread: {on_loop}"
    # And what it feels like: the loop parses every frame, so scheduling noise on a busy shared
    # machine reaches a few tens of milliseconds, but not a blocked loop's hundreds.
    gaps.sort()
    assert gaps[len(gaps) * 99 // 100] < 0.05, f"p99 loop lag {gaps[len(gaps) * 99 // 100]:.4f}s"
    assert gaps[-1] < 0.25, f"worst loop lag {gaps[-1]:.3f}s"


def test_a_running_session_watches_its_workspace_and_its_diffs_stay_exact(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    assert tb.checkpoints is not None
    snapshots = tb.checkpoints.snapshots

    async def scenario() -> list[turnback.Turn]:
        async with await AgentRuntime.start(tb, session, SCRIPTED) as rt:
            first = await rt.prompt("write a.txt one\nwrite b/c.txt two")
            # set up after the session opened, on the engine thread: before the first capture
            assert snapshots.watching(workspace)
            (workspace / "by-hand.txt").write_text("made between turns\n")
            second = await rt.prompt("rename a.txt d.txt\ndelete b/c.txt")
            return [first, second]

    first, second = run(scenario())
    assert not snapshots.watching(workspace)
    assert {(f.path, f.kind) for f in session.diff(first.number).files} == {
        ("a.txt", turnback.ChangeKind.ADDED),
        ("b/c.txt", turnback.ChangeKind.ADDED),
    }
    diff = session.diff(second.number)
    assert {(f.path, f.kind) for f in diff.files} == {
        ("d.txt", turnback.ChangeKind.RENAMED),
        ("b/c.txt", turnback.ChangeKind.DELETED),
    }
    assert [f.path for f in diff.outside] == ["by-hand.txt"]
    assert not [a for a in session.activities() if a.code == "checkpoint.watch.fallback"]
