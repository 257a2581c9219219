"""The service layer: one service per handle, its work in one order on one engine thread for
async callers, inline for sync ones, and a revert's agent-side rollback between its engine steps
without any thread waiting on another."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

import turnback
from turnback.errors import RollbackUnavailable
from turnback.model import ActivityLevel, Message, RevertRequest, RevertState, TurnStatus
from turnback.service import (
    AddActivity,
    BeginTurn,
    EndTurn,
    PlanRevert,
    RevertSession,
    Service,
    UndoRevert,
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def session(tb: turnback.Turnback, workspace: Path) -> turnback.Session:
    return tb.create_session(workspace)


def two_turns(session: turnback.Session, workspace: Path) -> None:
    for number, text in ((1, "one\n"), (2, "two\n")):
        with session.turn(f"write {number}"):
            (workspace / "a.txt").write_text(text)


def test_one_service_per_handle_closed_with_it(home: Path) -> None:
    tb = turnback.open(home)
    service = Service.of(tb)
    assert Service.of(tb) is service
    with turnback.open(home) as other:
        assert Service.of(other) is not service
    tb.close()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(service.acall(lambda: None))


def test_async_work_runs_on_one_engine_thread_in_the_order_it_was_asked(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    service = Service.of(tb)
    seen: list[tuple[int, int]] = []

    def work(i: int) -> int:
        time.sleep(0.001 * (i % 3))  # uneven work must not reorder anything
        seen.append((i, threading.get_ident()))
        return i

    async def scenario() -> list[int]:
        loop_thread = threading.get_ident()
        answers = await asyncio.gather(*(service.acall(work, i) for i in range(40)))
        assert all(thread != loop_thread for _, thread in seen)
        return answers

    assert asyncio.run(scenario()) == list(range(40))
    assert [i for i, _ in seen] == list(range(40))
    assert len({thread for _, thread in seen}) == 1


def test_sync_and_async_work_never_run_at_once(tb: turnback.Turnback) -> None:
    """A sync caller on its own thread waits while the engine thread works, and the other way
    round: the engine is used by one piece of work at a time, whoever asked."""
    service = Service.of(tb)
    inside = threading.Event()
    leave = threading.Event()
    order: list[str] = []

    def slow() -> None:
        inside.set()
        leave.wait(5)
        order.append("async")

    def sync_caller() -> None:
        inside.wait(5)
        service.call(order.append, "sync")

    async def scenario() -> None:
        work = asyncio.ensure_future(service.acall(slow))
        caller = threading.Thread(target=sync_caller)
        caller.start()
        await asyncio.sleep(0.2)  # the sync caller is waiting now, not running
        assert order == []
        leave.set()
        await work
        caller.join(5)

    asyncio.run(scenario())
    assert order == ["async", "sync"]


def test_work_that_calls_the_service_again_runs_at_once(tb: turnback.Turnback) -> None:
    """Inside the order -- on the engine thread or a sync caller's -- asking the service again
    runs the work there and then instead of waiting on itself."""
    service = Service.of(tb)

    def outer() -> str:
        return service.call(lambda: "inner")

    assert service.call(outer) == "inner"
    assert asyncio.run(service.acall(outer)) == "inner"


def test_a_sync_call_on_a_running_loop_is_refused(tb: turnback.Turnback) -> None:
    service = Service.of(tb)

    async def scenario() -> None:
        with pytest.raises(RuntimeError, match="await Service"):
            service.call(lambda: None)

    asyncio.run(scenario())


def test_commands_drive_a_turn_through_the_engine(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    service = Service.of(tb)

    async def scenario() -> turnback.Turn:
        turn = await service.arun(BeginTurn(session.id, "write it"))
        (workspace / "it.txt").write_text("it\n")
        turn.record(
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "ok"}}
        )
        await service.arun(
            AddActivity(session.id, ActivityLevel.INFO, "test.note", "a note", {"k": 1})
        )
        return await service.arun(EndTurn(turn, TurnStatus.COMPLETED))

    ended = asyncio.run(scenario())
    assert ended.status is TurnStatus.COMPLETED
    assert [f.path for f in session.diff(ended.number).files] == ["it.txt"]
    assert [m.text for m in session.turn_messages(1)][-1] == "ok"
    assert any(a.code == "test.note" and a.data == {"k": 1} for a in session.activities())


class AsyncRollback:
    """An agent's side of a revert, as the runtime's: it uses the service while it rolls back,
    which it can only do if the service let go of the engine between the revert's steps."""

    def __init__(self, service: Service, session: turnback.Session, fail: bool = False) -> None:
        self.service = service
        self.session = session
        self.fail = fail
        self.rolled: list[tuple[int, int]] = []
        self.loop_thread: int | None = None

    def check(self, turns: int) -> None:
        pass

    def apply(self, turns: int, transcript: list[Message]) -> None:
        raise AssertionError("an async caller's revert awaits roll_back")

    async def roll_back(self, turns: int, transcript: list[Message]) -> None:
        self.loop_thread = threading.get_ident()
        messages = await self.service.acall(self.session.messages)  # no deadlock
        self.rolled.append((turns, len(messages)))
        if self.fail:
            raise RollbackUnavailable("the agent refused")


def test_an_async_revert_rolls_the_agent_back_between_its_steps(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    two_turns(session, workspace)
    service = Service.of(tb)
    rollback = AsyncRollback(service, session)

    async def scenario() -> turnback.Revert:
        return await asyncio.wait_for(
            service.arun(RevertSession(session.id, RevertRequest(1), rollback)), 30
        )

    reverted = asyncio.run(scenario())
    assert reverted.state is RevertState.COMMITTED
    assert rollback.rolled == [(1, 2)]  # one turn back; the transcript read meanwhile
    assert (workspace / "a.txt").read_text() == "one\n"
    assert [t.number for t in session.turns() if t.in_conversation] == [1]


def test_an_agent_that_cannot_roll_back_gets_the_files_put_back(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    two_turns(session, workspace)
    service = Service.of(tb)
    rollback = AsyncRollback(service, session, fail=True)

    async def scenario() -> None:
        with pytest.raises(RollbackUnavailable):
            await service.arun(RevertSession(session.id, RevertRequest(1), rollback))

    asyncio.run(scenario())
    assert (workspace / "a.txt").read_text() == "two\n"
    [revert] = session.reverts()
    assert revert.state is RevertState.ROLLED_BACK
    assert [t.number for t in session.turns() if t.in_conversation] == [1, 2]


def test_a_caller_that_stops_waiting_mid_rollback_gets_the_files_put_back(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    two_turns(session, workspace)
    service = Service.of(tb)

    class Stalling(AsyncRollback):
        async def roll_back(self, turns: int, transcript: list[Message]) -> None:
            self.rolled.append((turns, 0))
            await asyncio.sleep(30)

    rollback = Stalling(service, session)

    async def scenario() -> None:
        reverting = asyncio.ensure_future(
            service.arun(RevertSession(session.id, RevertRequest(1), rollback))
        )
        while not rollback.rolled:
            await asyncio.sleep(0.01)
        reverting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reverting
        await service.acall(lambda: None)  # the shielded abandon has run

    asyncio.run(scenario())
    [revert] = session.reverts()
    assert revert.state is RevertState.ROLLED_BACK
    assert (workspace / "a.txt").read_text() == "two\n"


def test_a_sync_revert_plan_and_undo_through_commands(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    two_turns(session, workspace)
    service = Service.of(tb)
    plan = service.run(PlanRevert(session.id, RevertRequest(1)))
    assert [c.path for c in plan.restore] == ["a.txt"]
    assert (workspace / "a.txt").read_text() == "two\n"  # a plan writes nothing
    reverted = service.run(RevertSession(session.id, RevertRequest(1, conversation=False)))
    assert reverted.state is RevertState.COMMITTED
    assert (workspace / "a.txt").read_text() == "one\n"
    assert [t.number for t in session.turns() if t.in_conversation] == [1, 2]
    undone = service.run(UndoRevert(session.id))
    assert undone.state is RevertState.UNDONE
    assert (workspace / "a.txt").read_text() == "two\n"
