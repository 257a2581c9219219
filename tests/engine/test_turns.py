"""The turn lifecycle, durability modes, recovery, set-aside, ownership and sweep.

Durability is checked the only way that means anything: through a second, independent
connection to the same home. Dead owners are real processes killed with SIGKILL, or owner rows
that name a process that no longer exists as that owner (a reused pid)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import turnback
from tests.conftest import insert_next_turn
from turnback import MessageKind, TurnInProgress, TurnStatus
from turnback.engine.owners import current_owner, host_identity, process_state
from turnback.errors import AmbiguousId, NotSetAside, TurnNotFound, TurnNotRunning
from turnback.model import JournalEntry, Owner, StepCheckpoint, Turn

AbandonTurn = Callable[..., Turn]


def chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def tool_call(call_id: str, status: str = "pending") -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": call_id, "status": status}


def journal(tb: turnback.Turnback, token: str) -> list[JournalEntry]:
    with tb.store.read() as tx:
        return tx.journal(token)


def step_checkpoints(tb: turnback.Turnback, token: str) -> list[StepCheckpoint]:
    with tb.store.read() as tx:
        return tx.step_checkpoints(token)


@pytest.fixture
def other(home: Path, tb: turnback.Turnback) -> Iterator[turnback.Turnback]:
    """A second, independent connection to the same home (opened after ``tb``)."""
    handle = turnback.open(home=home)
    try:
        yield handle
    finally:
        handle.close()


# -- a child process that runs a turn --------------------------------------------------------

CHILD = r"""
import json, sys, time
import turnback
home, session_id, events = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
tb = turnback.open(home, durability="strict")
turn = tb.session(session_id).turn("the child's prompt")
for event in events:
    if event["sessionUpdate"] == "_turnback/step_checkpoint":
        turn.step(event["step"], checkpoint_id=event["checkpointId"], state=event.get("state"))
    else:
        turn.record(event)
print(turn.token, flush=True)
time.sleep(120)
"""


class Child:
    """A process that begins a turn, records ``events`` under ``strict`` and then sleeps: a live
    owner until it is killed."""

    def __init__(self, home: Path, session: turnback.Session, events: Sequence[dict[str, Any]]):
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(home), session.id, json.dumps(list(events))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        self.token = self.process.stdout.readline().strip()
        if not self.token:
            self.process.wait(10)
            raise AssertionError(f"the child failed: {self.process.stderr.read()}")

    def kill(self) -> None:
        """SIGKILL, then reap it: its pid is gone when this returns."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def close(self) -> None:
        self.kill()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


StartChild = Callable[..., Child]


@pytest.fixture
def child(home: Path, tb: turnback.Turnback) -> Iterator[StartChild]:
    started: list[Child] = []

    def start(session: turnback.Session, events: Sequence[dict[str, Any]] = ()) -> Child:
        started.append(Child(home, session, events))
        return started[-1]

    yield start
    for each in started:
        each.close()


def move_head(tb: turnback.Turnback, session: turnback.Session) -> Turn:
    """Another writer commits a turn on the session: its head moves on."""
    with tb.store.atomic() as tx:
        turn = insert_next_turn(
            tx,
            session.id,
            owner_id=None,
            status=TurnStatus.COMPLETED,
            prompt="done elsewhere",
            ended_at=time.time(),
        )
        tx.set_head(session.id, turn.token, time.time())
    return turn


# -- begin -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["strict", "batched", "turn"])
def test_begin_is_durable_before_it_returns(home: Path, tmp_path: Path, mode: str) -> None:
    with turnback.open(home, durability=mode) as tb:
        session = tb.create_session(tmp_path)
        prompt = [{"type": "text", "text": "fix "}, {"type": "text", "text": "the test"}]
        running = session.turn(prompt)
        with turnback.open(home) as other:
            seen = other.session(session.id).running()
            assert seen is not None
            assert seen.token == running.token
            assert seen.status is TurnStatus.RUNNING
            assert seen.prompt == prompt
            assert seen.prompt_text == "fix the test"
            assert (seen.number, seen.parent) == (1, None)
            assert seen.owner_id == current_owner().id
            with other.store.read() as tx:
                owner = tx.get_owner(current_owner().id)
            assert owner is not None and owner.pid == os.getpid()
        running.complete()


def test_complete_folds_clears_the_journal_and_moves_head(
    tb: turnback.Turnback, other: turnback.Turnback, session: turnback.Session
) -> None:
    events = [chunk("Hello"), chunk(" there"), tool_call("t1"), tool_call("t1", "completed")]
    with session.turn("hi") as turn:
        for event in events:
            turn.record(event)
        tb.journal.flush()
        assert len(journal(other, turn.token)) == 4
        assert session.record.head is None
        assert session.messages() == []  # nothing is part of the session while it runs
    assert journal(other, turn.token) == []
    done = other.session(session.id).get_turn(1)
    assert done.token == turn.token
    assert done.status is TurnStatus.COMPLETED
    assert done.event_count == 4
    assert done.ended_at is not None and done.ended_at >= done.started_at
    assert other.session(session.id).record.head == turn.token
    assert [e.event for e in other.session(session.id).run_events(1)] == events
    assert [m.kind for m in other.session(session.id).messages()] == [
        MessageKind.USER,
        MessageKind.AGENT,
        MessageKind.TOOL_CALL,
    ]
    assert session.running() is None


def test_an_exception_fails_the_turn_and_propagates(session: turnback.Session) -> None:
    with pytest.raises(ValueError, match="agent exploded"), session.turn("go") as turn:
        turn.record(chunk("partial"))
        raise ValueError("agent exploded")
    [failed] = session.turns()
    assert failed.status is TurnStatus.FAILED
    assert failed.detail == "ValueError: agent exploded"
    assert session.record.head == failed.token
    messages = session.turn_messages(failed.token)
    assert [m.kind for m in messages] == [MessageKind.USER, MessageKind.AGENT, MessageKind.ERROR]
    assert "agent exploded" in messages[-1].text
    assert session.running() is None


def test_keyboard_interrupt_cancels_the_turn(session: turnback.Session) -> None:
    with pytest.raises(KeyboardInterrupt), session.turn("go") as turn:
        turn.record(chunk("partial"))
        raise KeyboardInterrupt
    [cancelled] = session.turns()
    assert cancelled.status is TurnStatus.CANCELLED
    assert "KeyboardInterrupt" in (cancelled.detail or "")
    assert [m.text for m in session.turn_messages(cancelled.token)] == ["go", "partial"]


def test_a_second_begin_names_the_running_turn(
    other: turnback.Turnback, session: turnback.Session
) -> None:
    with session.turn("first") as turn:
        for attempt in (session, other.session(session.id)):
            with pytest.raises(TurnInProgress) as raised:
                attempt.turn("second")
            assert raised.value.running_token == turn.token
            assert turn.token in str(raised.value)
            assert raised.value.exit_code == 3
    assert [t.prompt for t in session.turns()] == ["first"]


def test_an_ended_turn_takes_no_more_events(session: turnback.Session) -> None:
    with session.turn("go") as turn:
        pass
    with pytest.raises(TurnNotRunning):
        turn.record(chunk("late"))
    with pytest.raises(TurnNotRunning):
        turn.complete()
    assert session.turns()[0].event_count == 0


def test_numbers_and_parents_chain(session: turnback.Session) -> None:
    with session.turn("one"):
        pass
    with pytest.raises(RuntimeError), session.turn("two"):
        raise RuntimeError("no")
    with session.turn("three") as third:
        assert third.number == 3
    turns = session.turns()
    assert [t.number for t in turns] == [1, 2, 3]
    assert [t.parent for t in turns] == [None, turns[0].token, turns[1].token]
    assert session.record.head == turns[2].token
    assert session.get_turn(2).status is TurnStatus.FAILED
    assert session.get_turn(turns[2].token[:8]) == turns[2]


def test_a_token_prefix_of_digits_finds_its_turn(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    """`turnback log` shows 12-character token prefixes; about 1 in 300 are all digits, and
    `show SESSION PREFIX` must still find the turn (there is no turn 123456789012)."""
    token = "123456789012" + uuid.uuid4().hex[12:]
    with tb.store.atomic() as tx:
        now = time.time()
        tx.insert_turn(Turn(token, session.id, 1, None, None, TurnStatus.COMPLETED, "x", now, now))
        tx.set_head(session.id, token, now)
    assert session.get_turn(1).token == token
    assert session.get_turn(token[:13]).token == token
    assert session.get_turn(token[:12]).token == token


# -- durability modes ------------------------------------------------------------------------


@pytest.fixture
def other_home_reader(home: Path) -> Iterator[Callable[[str], int]]:
    """Counts a turn's journal rows through a raw SQLite connection of its own."""
    conns: list[sqlite3.Connection] = []

    def count(token: str) -> int:
        if not conns:
            conns.append(sqlite3.connect(home / "turnback.db"))
        row = (
            conns[0]
            .execute(
                "SELECT count(*) FROM events "
                "WHERE id / 4294967296 = (SELECT id FROM turns WHERE token = ?)",
                (token,),
            )
            .fetchone()
        )
        return int(row[0])

    yield count
    for conn in conns:
        conn.close()


def wait_for(condition: Callable[[], bool], timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_strict_every_record_is_visible_at_once(
    home: Path, tmp_path: Path, other_home_reader: Callable[[str], int]
) -> None:
    with turnback.open(home, durability="strict") as tb:
        session = tb.create_session(tmp_path)
        with session.turn("go") as turn:
            for n in range(1, 6):
                seq = turn.record(chunk(f"c{n}"))
                assert seq == n
                assert other_home_reader(turn.token) == n


def test_batched_boundaries_at_once_chunks_within_the_window(
    home: Path, tmp_path: Path, other_home_reader: Callable[[str], int]
) -> None:
    with turnback.open(home, durability="batched", batch_window=0.3) as tb:
        session = tb.create_session(tmp_path)
        with session.turn("go") as turn:
            turn.record(chunk("a"))
            assert other_home_reader(turn.token) == 0  # buffered
            assert wait_for(lambda: other_home_reader(turn.token) == 1)  # flushed in the window

            turn.record(chunk("b"))
            turn.record(tool_call("t1"))  # a boundary: durable with everything before it
            assert other_home_reader(turn.token) == 3

            turn.record({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "x"})
            assert other_home_reader(turn.token) == 3
            turn.record(tool_call("t1", "completed") | {"sessionUpdate": "tool_call_update"})
            assert other_home_reader(turn.token) == 5

            turn.step(1, checkpoint_id="c1")
            assert other_home_reader(turn.token) == 6
            turn.record({"sessionUpdate": "_turnback/error", "text": "bad"})
            assert other_home_reader(turn.token) == 7
        assert [e.seq for e in session.run_events(1)] == [1, 2, 3, 4, 5, 6, 7]


def test_turn_mode_writes_nothing_until_the_end(
    home: Path, tmp_path: Path, other_home_reader: Callable[[str], int]
) -> None:
    with turnback.open(home, durability="turn") as tb:
        session = tb.create_session(tmp_path)
        with session.turn("go") as turn:
            turn.record(chunk("a"))
            turn.record(tool_call("t1"))
            turn.step(1, checkpoint_id="c1")
            time.sleep(0.05)
            assert other_home_reader(turn.token) == 0
            with turnback.open(home) as reader:
                assert step_checkpoints(reader, turn.token) == []
                assert reader.session(session.id).running() is not None
        assert session.turns()[0].event_count == 3
        assert [m.kind for m in session.messages()] == [
            MessageKind.USER,
            MessageKind.AGENT,
            MessageKind.TOOL_CALL,
        ]


# -- pending requests and step checkpoints ---------------------------------------------------


def test_pending_requests_follow_the_turn(
    other: turnback.Turnback, session: turnback.Session
) -> None:
    def pending() -> list[tuple[str, str]]:
        record = other.session(session.id).record
        return [(r["requestId"], r["kind"]) for r in record.pending_requests]

    with session.turn("go") as turn:
        turn.record(
            {
                "sessionUpdate": "_turnback/permission_requested",
                "requestId": "p1",
                "toolCall": {"toolCallId": "t1"},
                "options": [{"optionId": "allow", "kind": "allow_once", "name": "Allow"}],
            }
        )
        assert pending() == [("p1", "permission")]
        [request] = other.session(session.id).record.pending_requests
        assert request["turn"] == turn.token
        assert request["options"][0]["optionId"] == "allow"

        turn.record({"sessionUpdate": "_turnback/input_requested", "requestId": "i1"})
        assert pending() == [("p1", "permission"), ("i1", "input")]
        turn.record({"sessionUpdate": "_turnback/permission_answered", "requestId": "p1"})
        assert pending() == [("i1", "input")]
    assert pending() == []


def test_pending_requests_go_when_a_turn_fails(session: turnback.Session) -> None:
    with pytest.raises(RuntimeError), session.turn("go") as turn:
        turn.record({"sessionUpdate": "_turnback/input_requested", "requestId": "i1"})
        assert len(session.record.pending_requests) == 1
        raise RuntimeError("stop")
    assert session.record.pending_requests == ()


def test_step_checkpoints_mark_their_journal_position(
    tb: turnback.Turnback, other: turnback.Turnback, session: turnback.Session
) -> None:
    with session.turn("go") as turn:
        turn.record(chunk("a"))
        first = turn.step(1, checkpoint_id="c1", state={"k": "v"})
        turn.record(chunk("b"))
        second = turn.step(2, checkpoint_id="c2", store_path="/agent/db")
        saved = step_checkpoints(other, turn.token)
        assert [(c.step, c.checkpoint_id, c.journal_seq) for c in saved] == [
            (1, "c1", first),
            (2, "c2", second),
        ]
        assert (first, second) == (2, 4)
        assert saved[0].state == {"k": "v"}
        assert saved[1].store_path == "/agent/db"
        assert journal(other, turn.token)[first - 1].kind == "_turnback/step_checkpoint"
    assert step_checkpoints(other, turn.token) == []


def test_step_checkpoints_are_kept_for_an_interrupted_turn(
    tb: turnback.Turnback, session: turnback.Session, child: StartChild
) -> None:
    step = {"sessionUpdate": "_turnback/step_checkpoint", "step": 3, "checkpointId": "c3"}
    running = child(session, [chunk("a"), step, chunk("b")])
    running.kill()
    [recovered] = tb.recover().recovered
    assert recovered.token == running.token
    assert recovered.status is TurnStatus.INTERRUPTED
    [kept] = step_checkpoints(tb, running.token)
    assert (kept.step, kept.checkpoint_id, kept.journal_seq) == (3, "c3", 2)
    assert tb.sweep().step_checkpoints == 0
    assert len(step_checkpoints(tb, running.token)) == 1


# -- recovery --------------------------------------------------------------------------------


def test_recovery_applies_a_dead_owners_turn_once(
    tb: turnback.Turnback, session: turnback.Session, child: StartChild
) -> None:
    with session.turn("first"):
        pass
    running = child(session, [chunk("half "), chunk("done"), tool_call("t1", "in_progress")])
    running.kill()

    report = tb.recover()
    [recovered] = report.recovered
    assert (recovered.token, recovered.number, recovered.event_count) == (running.token, 2, 3)
    assert recovered.parent == session.turns()[0].token
    assert (report.set_aside, report.live) == ((), ())
    assert session.record.head == running.token
    assert journal(tb, running.token) == []
    messages = session.turn_messages(2)
    assert [(m.kind, m.text) for m in messages[:2]] == [
        (MessageKind.USER, "the child's prompt"),
        (MessageKind.AGENT, "half done"),
    ]
    assert messages[2].data["status"] == "failed"
    assert messages[-1].kind is MessageKind.NOTICE
    assert "3 events" in messages[-1].text
    [activity] = session.activities()
    assert (activity.code, activity.turn) == ("turn.recovered", running.token)

    before = session.messages()
    again = tb.recover()
    assert again.recovered == () and again.set_aside == ()
    assert session.messages() == before
    assert len(session.activities()) == 1

    with session.turn("third") as third:
        assert (third.number, third.turn.parent) == (3, running.token)


def test_a_new_turn_recovers_a_dead_owners_turn_first(
    session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    dead = abandoned_turn(session, [chunk("x")])
    with session.turn("next") as turn:
        assert turn.turn.parent == dead.token
        assert turn.number == 2
    assert [t.status for t in session.turns()] == [TurnStatus.INTERRUPTED, TurnStatus.COMPLETED]


def test_recovery_never_touches_a_live_owners_turn(
    tb: turnback.Turnback, session: turnback.Session, child: StartChild
) -> None:
    running = child(session, [chunk("working"), tool_call("t1")])
    report = tb.recover()
    assert [t.token for t in report.live] == [running.token]
    assert report.recovered == ()
    assert session.running() is not None
    assert len(journal(tb, running.token)) == 2
    with pytest.raises(TurnInProgress) as raised:
        session.turn("mine")
    assert raised.value.running_token == running.token
    assert tb.sweep().total == 0
    assert len(journal(tb, running.token)) == 2

    running.kill()
    report = tb.recover()
    assert [t.token for t in report.recovered] == [running.token]
    assert report.live == ()


def _owner_turn(tb: turnback.Turnback, session: turnback.Session, owner: Owner) -> Turn:
    turn = Turn(
        token=uuid.uuid4().hex,
        session_id=session.id,
        number=1,
        parent=None,
        owner_id=owner.id,
        status=TurnStatus.RUNNING,
        prompt="go",
        started_at=time.time(),
    )
    with tb.store.atomic() as tx:
        tx.upsert_owner(owner)
        tx.insert_turn(turn)
    return turn


def test_a_reused_pid_counts_as_dead(tb: turnback.Turnback, session: turnback.Session) -> None:
    """An owner row with this very process's pid but another start time is someone else."""
    host, boot_id = host_identity()
    state = process_state(os.getpid())
    assert state is not None
    impostor = Owner("reused-pid", host, boot_id, os.getpid(), state[1] + 1, time.time())
    turn = _owner_turn(tb, session, impostor)
    report = tb.recover()
    assert [t.token for t in report.recovered] == [turn.token]
    assert report.live == ()


def test_this_process_is_a_live_owner(tb: turnback.Turnback, session: turnback.Session) -> None:
    turn = _owner_turn(tb, session, current_owner())
    report = tb.recover()
    assert [t.token for t in report.live] == [turn.token]
    assert report.recovered == ()


@pytest.mark.parametrize(
    ("host", "boot", "lease", "alive"),
    [
        ("another-host", "b", None, True),  # cannot be checked: never touched
        ("another-host", "b", time.time() + 3600, True),
        ("another-host", "b", time.time() - 1, False),  # its lease expired
        (None, "another-boot", None, False),  # this host, before a reboot
    ],
)
def test_owners_elsewhere(
    tb: turnback.Turnback,
    session: turnback.Session,
    host: str | None,
    boot: str,
    lease: float | None,
    alive: bool,
) -> None:
    this_host, _ = host_identity()
    owner = Owner("elsewhere", host or this_host, boot, os.getpid(), 1, time.time(), lease)
    turn = _owner_turn(tb, session, owner)
    report = tb.recover()
    assert [t.token for t in (report.live if alive else report.recovered)] == [turn.token]


# -- set-aside -------------------------------------------------------------------------------


def test_a_turn_whose_session_moved_on_is_set_aside(
    tb: turnback.Turnback, session: turnback.Session, child: StartChild
) -> None:
    with session.turn("first"):
        pass
    step = {"sessionUpdate": "_turnback/step_checkpoint", "step": 1, "checkpointId": "c1"}
    running = child(session, [chunk("kept "), chunk("safe"), step])
    running.kill()
    moved = move_head(tb, session)

    report = tb.recover()
    assert report.recovered == ()
    [aside] = report.set_aside
    assert aside.turn.token == running.token
    assert aside.turn.status is TurnStatus.SET_ASIDE
    assert "head" in aside.reason
    assert session.unrecovered() == [aside]
    assert tb.unrecovered() == [aside]
    assert len(journal(tb, running.token)) == 3  # kept, untouched
    assert len(step_checkpoints(tb, running.token)) == 1
    assert session.record.head == moved.token
    assert "kept safe" not in [m.text for m in session.messages()]
    assert [a.code for a in session.activities()] == ["turn.set_aside"]
    assert session.activities()[0].level == "warning"

    # every recovery reports it again, and changes nothing
    assert tb.recover().set_aside == (aside,)
    assert tb.sweep().step_checkpoints == 0  # a set-aside turn keeps its steps
    assert len(journal(tb, running.token)) == 3
    # the session goes on without it
    with session.turn("third") as third:
        assert third.turn.parent == moved.token

    applied = session.apply(running.token[:10])
    assert applied.status is TurnStatus.INTERRUPTED
    assert applied.number == 4
    assert applied.parent == third.token
    assert session.record.head == running.token
    assert session.unrecovered() == []
    assert journal(tb, running.token) == []
    texts = [m.text for m in session.turn_messages(running.token)]
    assert texts[:2] == ["the child's prompt", "kept safe"]
    assert "applied by hand with 3 events" in texts[-1]
    assert session.activities()[-1].code == "turn.applied"
    assert tb.recover().set_aside == ()


def test_set_aside_clears_the_turns_pending_requests(
    tb: turnback.Turnback, session: turnback.Session, child: StartChild
) -> None:
    """Nobody can answer a request of a turn whose process died: it must not stay pending."""
    with session.turn("first"):
        pass
    request = {"sessionUpdate": "_turnback/permission_requested", "requestId": "p1"}
    running = child(session, [request])
    assert [r["requestId"] for r in session.record.pending_requests] == ["p1"]
    running.kill()
    move_head(tb, session)
    assert len(tb.recover().set_aside) == 1
    assert session.record.pending_requests == ()


def test_recovery_clears_an_interrupted_turns_pending_requests(
    tb: turnback.Turnback, session: turnback.Session, child: StartChild
) -> None:
    running = child(session, [{"sessionUpdate": "_turnback/input_requested", "requestId": "i1"}])
    assert len(session.record.pending_requests) == 1
    running.kill()
    assert len(tb.recover().recovered) == 1
    assert session.record.pending_requests == ()


def corrupt(home: Path, token: str, seq: int) -> None:
    conn = sqlite3.connect(home / "turnback.db")
    with conn:
        conn.execute(
            "UPDATE events SET payload = ? "
            "WHERE id / 4294967296 = (SELECT id FROM turns WHERE token = ?) "
            "AND id - id / 4294967296 * 4294967296 = ?",
            ('{"sessionUpdate": "agent_mess', token, seq),
        )
    conn.close()


def test_an_unreadable_journal_sets_the_turn_aside(
    tb: turnback.Turnback, home: Path, session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    turn = abandoned_turn(session, [chunk("one "), chunk("two "), chunk("three")])
    corrupt(home, turn.token, 2)
    report = tb.recover()
    assert report.recovered == ()
    [aside] = report.set_aside
    assert "journal entry 2" in aside.reason
    assert len(journal(tb, turn.token)) == 3
    assert session.record.head is None

    applied = session.apply(turn.token)
    assert applied.status is TurnStatus.INTERRUPTED
    timeline = session.run_events(turn.token)
    assert [e.seq for e in timeline] == [1, 2, 3, 4]
    unreadable = timeline[1].event
    assert unreadable["sessionUpdate"] == "_turnback/unreadable"
    assert unreadable["raw"] == '{"sessionUpdate": "agent_mess'
    texts = [m.text for m in session.turn_messages(turn.token)]
    assert "one " in texts and "three" in texts


def test_an_unreadable_journal_entry_is_an_unreadable_message(
    tb: turnback.Turnback, home: Path, session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    turn = abandoned_turn(session, [chunk("one "), chunk("two "), chunk("three")])
    corrupt(home, turn.token, 2)
    tb.recover()
    set_aside = session.turn_messages(turn.token)
    session.apply(turn.token)
    applied = session.turn_messages(turn.token)
    for messages in (set_aside, applied):
        assert [(m.kind, m.text) for m in messages][1:4] == [
            (MessageKind.AGENT, "one "),
            (MessageKind.UNREADABLE, "[unreadable message]"),
            (MessageKind.AGENT, "three"),
        ]
        assert messages[2].data["raw"] == '{"sessionUpdate": "agent_mess'
    rows = {c.name: c for c in tb.doctor()}["stored rows"]
    assert not rows.ok and f"session {session.id[:12]} turn 1: message 2" in rows.detail


def test_the_events_of_a_running_or_set_aside_turn_are_its_journal_so_far(
    tb: turnback.Turnback, home: Path, session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    with session.turn("live") as live:
        live.record(tool_call("t1"))  # a boundary event: durable once recorded
        [event] = session.run_events(live.turn.token)
        assert (event.seq, event.kind, event.event) == (1, "tool_call", tool_call("t1"))
    turn = abandoned_turn(session, [chunk("one "), chunk("two ")])
    assert [e.event for e in session.run_events(turn.token)] == [chunk("one "), chunk("two ")]
    corrupt(home, turn.token, 2)
    tb.recover()
    assert session.get_turn(turn.token).status is TurnStatus.SET_ASIDE
    timeline = session.run_events(turn.token)
    assert [(e.seq, e.kind) for e in timeline] == [
        (1, "agent_message_chunk"),
        (2, "agent_message_chunk"),
    ]
    assert timeline[0].event == chunk("one ")
    assert timeline[1].event["_turnback/unreadable"] == '{"sessionUpdate": "agent_mess'
    rows = {c.name: c for c in tb.doctor()}["stored rows"]
    assert not rows.ok
    assert f"session {session.id[:12]} turn 2 (set_aside): event 2" in rows.detail


def test_a_set_aside_turn_is_reached_by_its_number(
    tb: turnback.Turnback, home: Path, session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    def set_aside() -> Turn:
        turn = abandoned_turn(session, [chunk("a")])  # begun on turn 1: turn 2
        corrupt(home, turn.token, 1)
        tb.recover()
        return session.get_turn(turn.token)

    with session.turn("first"):
        pass
    first = set_aside()
    assert session.get_turn(2) == session.get_turn("2") == first
    with pytest.raises(TurnNotFound, match=r"has no turn 3 \(it has 2\)"):
        session.get_turn(3)
    again = set_aside()
    with pytest.raises(AmbiguousId, match="'2' matches 2 turns"):
        session.get_turn("2")
    session.discard(again.token)
    with session.turn("second") as second:  # a running turn 2 comes before a set-aside one
        assert session.get_turn(2).token == second.turn.token
    assert session.get_turn(2).token == second.turn.token  # and the conversation's turn 2
    assert session.get_turn(first.token[:8]) == first


def test_discard_removes_a_set_aside_turn(
    tb: turnback.Turnback, home: Path, session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    turn = abandoned_turn(session, [chunk("a"), chunk("b")])
    corrupt(home, turn.token, 1)
    tb.recover()
    assert session.discard(turn.token[:8]) == 2
    assert session.unrecovered() == []
    assert session.turns() == []
    conn = sqlite3.connect(home / "turnback.db")
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    conn.close()
    activity = session.activities()[-1]
    assert activity.code == "turn.discarded"
    assert activity.data["token"] == turn.token
    with pytest.raises(TurnNotFound):
        session.discard(turn.token)


def test_only_set_aside_turns_can_be_applied_or_discarded(session: turnback.Session) -> None:
    with session.turn("go") as turn:
        pass
    for action in (session.apply, session.discard):
        with pytest.raises(NotSetAside, match="completed"):
            action(turn.token)
    assert session.turns()[0].status is TurnStatus.COMPLETED


def test_apply_waits_for_the_running_turn(
    tb: turnback.Turnback, home: Path, session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    aside = abandoned_turn(session, [chunk("a")])
    corrupt(home, aside.token, 1)
    tb.recover()
    with session.turn("now") as running:
        with pytest.raises(TurnInProgress) as raised:
            session.apply(aside.token)
        assert raised.value.running_token == running.token
    assert [u.turn.token for u in session.unrecovered()] == [aside.token]


# -- sweep -----------------------------------------------------------------------------------


def test_sweep_counts_what_it_removes(
    tb: turnback.Turnback, session: turnback.Session, child: StartChild
) -> None:
    with session.turn("mine") as done:
        pass
    crashed = child(session, [chunk("x")])
    crashed.kill()
    assert len(tb.recover().recovered) == 1
    live = child(tb.create_session(session.workspace), [chunk("y")])
    with tb.store.atomic() as tx:  # a leftover no turn can use: a step of an ended turn
        tx.insert_step_checkpoint(StepCheckpoint(done.token, 1, "c", 1, None, None, 1.0))

    report = tb.sweep()
    assert (report.step_checkpoints, report.owners) == (1, 1)
    assert report.total == 2
    assert tb.sweep().total == 0
    with tb.store.read() as tx:
        assert tx.get_owner(current_owner().id) is not None  # this process: alive
        live_turn = tx.get_turn(live.token)
        assert live_turn is not None and live_turn.owner_id is not None
        assert tx.get_owner(live_turn.owner_id) is not None
        assert len(tx.journal(live.token)) == 1


# -- concurrency -----------------------------------------------------------------------------

RACER = r"""
import json, os, sys, time
import turnback
home, session_id, go = sys.argv[1], sys.argv[2], sys.argv[3]
tb = turnback.open(home)
session = tb.session(session_id)
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.0005)
try:
    turn = session.turn("racer %d" % os.getpid())
except turnback.TurnInProgress as busy:
    print(json.dumps({"lost": busy.running_token, "message": str(busy)}), flush=True)
    sys.exit(0)
print(json.dumps({"won": turn.token}), flush=True)
sys.stdin.read()  # hold the turn until the parent has both answers
turn.complete()
"""


@pytest.mark.parametrize("round_", range(3))
def test_two_processes_begin_at_once_and_one_wins(
    tb: turnback.Turnback, session: turnback.Session, tmp_path: Path, round_: int
) -> None:
    go = tmp_path / f"go-{round_}"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(tb.home), session.id, str(go)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready"
        go.touch()
        answers = [json.loads(racer.stdout.readline()) for racer in racers]  # type: ignore[union-attr]
        winners = [a["won"] for a in answers if "won" in a]
        losers = [a for a in answers if "lost" in a]
        assert len(winners) == 1, answers
        assert len(losers) == 1, answers
        assert losers[0]["lost"] == winners[0]
        assert winners[0] in losers[0]["message"]
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.close()
            assert racer.wait(10) == 0
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait()
            if racer.stdout:
                racer.stdout.close()
    [turn] = session.turns()
    assert turn.token == winners[0]
    assert turn.status is TurnStatus.COMPLETED


OPENER = r"""
import os, sys, time
import turnback
home, go = sys.argv[1], sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.0005)
with turnback.open(home) as tb:
    tb.create_session(home)
print("ok", flush=True)
"""


def test_processes_opening_a_new_home_at_once_all_succeed(tmp_path: Path) -> None:
    """The first open creates and migrates the database; racing openers must not trip on it."""
    home, go = tmp_path / "home", tmp_path / "go"
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(home), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    time.sleep(0.3)  # let them all reach the starting line
    go.touch()
    results = [opener.communicate(timeout=30) for opener in openers]
    assert [out for out, _ in results] == ["ok\n"] * 4, results
    with turnback.open(home) as tb:
        assert len(tb.sessions()) == 4
    conn = sqlite3.connect(home / "turnback.db")
    try:
        assert (
            conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'turns'").fetchone()[0]
            == 1
        )
    finally:
        conn.close()


# -- rewinding a turn to a step checkpoint (resume after an agent crash) -----------------------


def test_rewind_supersedes_what_came_after_the_checkpoint(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    with session.turn("two steps") as turn:
        turn.record(chunk("step one done. "))
        turn.step(1, checkpoint_id="c1")
        turn.record(chunk("step two "))
        turn.record(tool_call("t2", "in_progress"))
        turn.record({"sessionUpdate": "_turnback/permission_requested", "requestId": "p1"})
        turn.step(2, checkpoint_id="c2")
        assert session.record.pending_requests
        checkpoint = session.step_checkpoints(turn.token)[0]
        assert checkpoint.checkpoint_id == "c1"
        turn.rewind(checkpoint)
        assert session.record.pending_requests == (), "pending requests survived the rewind"
        assert [c.checkpoint_id for c in session.step_checkpoints(turn.token)] == ["c1"]
        assert turn.last_checkpoint() == checkpoint
        turn.record(chunk("step two "))
        turn.record(tool_call("t2", "in_progress"))
        turn.record(
            {"sessionUpdate": "tool_call_update", "toolCallId": "t2", "status": "completed"}
        )
    messages = session.turn_messages(turn.token)
    agent = [m.text for m in messages if m.kind is MessageKind.AGENT]
    assert agent == ["step one done. ", "step two "], "an update was shown twice"
    tools = [m.data for m in messages if m.kind is MessageKind.TOOL_CALL]
    assert [t["status"] for t in tools] == ["completed"]
    kinds = [e.kind for e in session.run_events(turn.token)]
    assert kinds.count("agent_message_chunk") == 3, "the timeline must keep superseded events"
    assert "_turnback/rewind" in kinds


def test_rewind_to_the_beginning_when_there_is_no_checkpoint(session: turnback.Session) -> None:
    with session.turn("no checkpoints") as turn:
        turn.record(chunk("first try"))
        assert turn.last_checkpoint() is None
        turn.rewind(None)
        turn.record(chunk("second try"))
    agent = [m.text for m in session.turn_messages(turn.token) if m.kind is MessageKind.AGENT]
    assert agent == ["second try"]


def test_record_without_sync_waits_for_sync(home: Path, tmp_path: Path) -> None:
    """A strict record with sync=False is buffered, in order, until sync() commits it."""
    with turnback.open(home, durability="strict") as tb, turnback.open(home) as other:
        session = tb.create_session(tmp_path)
        with session.turn("streamed from an event loop") as turn:
            turn.record(tool_call("t1", "in_progress"), sync=False)
            turn.record(chunk("a"), sync=False)
            assert journal(other, turn.token) == []
            turn.sync()
            assert [e.seq for e in journal(other, turn.token)] == [1, 2]


def test_folding_while_recording_matches_folding_the_journal(session: turnback.Session) -> None:
    """Completing a turn uses the fold it kept while recording; it must equal a fold of what
    the journal holds, even when the caller reuses (mutates) its event dicts."""
    from turnback.engine.fold import fold

    reused = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""}}
    with session.turn([{"type": "text", "text": "mixed"}]) as turn:
        for word in ["one ", "two ", "three"]:
            reused["content"]["text"] = word  # the same dict, changed after each record
            turn.record(reused)
        turn.record({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text"}})
        turn.record(tool_call("t1", "in_progress"))
        turn.record({"sessionUpdate": "plan", "entries": [{"content": "a"}]})
        image = {"type": "image", "data": "AA==", "mimeType": "image/png"}
        turn.record({"sessionUpdate": "agent_message_chunk", "content": image})
        turn.record(chunk("after the image"))
        turn.record(
            {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}
        )
        turn.record({"sessionUpdate": "plan", "entries": [{"content": "b"}]})
        turn.record({"sessionUpdate": "something_new", "x": [1, 2]})
        turn.step(1, checkpoint_id="c1")
    kept = [(m.kind, m.data) for m in session.turn_messages(turn.token)]
    refolded = fold(turn.turn.prompt, [e.event for e in session.run_events(turn.token)])
    assert kept == refolded
    assert kept[1] == (MessageKind.AGENT, {"content": [{"type": "text", "text": "one two three"}]})
