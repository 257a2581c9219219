"""The store conformance suite, written against the ``Store``/``Tx`` protocol.

Every backend must pass the tests that take the ``store`` fixture; a PostgreSQL backend is added by
extending ``BACKENDS``. The tests at the end are about the SQLite file itself (pragmas, schema
version), so they open it directly.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
import uuid
from pathlib import Path

import pytest

from turnback.errors import SchemaTooNew, StoreError
from turnback.model import (
    ActivityLevel,
    ChangeKind,
    FileChange,
    JournalEntry,
    Message,
    MessageKind,
    Owner,
    RunEvent,
    SessionRecord,
    StepCheckpoint,
    Turn,
    TurnStatus,
)
from turnback.store import Store, open_store
from turnback.store import sqlite as sqlite_backend
from turnback.store.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION

# -- records -----------------------------------------------------------------------------------


def new_session(workspace: str = "/w", title: str | None = "t") -> SessionRecord:
    now = time.time()
    return SessionRecord(
        id=uuid.uuid4().hex,
        workspace=workspace,
        title=title,
        agent="agent",
        head=None,
        status="open",
        pending_requests=(),
        created_at=now,
        updated_at=now,
    )


def new_turn(
    session_id: str,
    number: int = 1,
    parent: str | None = None,
    status: TurnStatus = TurnStatus.RUNNING,
    owner_id: str | None = None,
    prompt: object = "hello",
) -> Turn:
    return Turn(
        token=uuid.uuid4().hex,
        session_id=session_id,
        number=number,
        parent=parent,
        owner_id=owner_id,
        status=status,
        prompt=prompt,
        started_at=time.time(),
    )


def new_owner(pid: int = 4242) -> Owner:
    return Owner(
        id=uuid.uuid4().hex[:24],
        host="host",
        boot_id="boot",
        pid=pid,
        start_time=123,
        created_at=time.time(),
    )


def entry(token: str, seq: int, text: str = "x") -> JournalEntry:
    payload = (
        '{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"' + text + '"}}'
    )
    return JournalEntry(token, seq, "agent_message_chunk", payload, time.time())


def add_session(store: Store, **fields: str | None) -> SessionRecord:
    record = new_session(**fields)  # type: ignore[arg-type]
    with store.atomic() as tx:
        tx.insert_session(record)
    return record


def add_turn(store: Store, session_id: str, **fields: object) -> Turn:
    turn = new_turn(session_id, **fields)  # type: ignore[arg-type]
    with store.atomic() as tx:
        tx.insert_turn(turn)
    return turn


# -- transactions ------------------------------------------------------------------------------


def test_a_failed_transaction_writes_nothing(store: Store) -> None:
    record = new_session()
    with pytest.raises(RuntimeError), store.atomic() as tx:
        tx.insert_session(record)
        raise RuntimeError("changed my mind")
    with store.read() as tx:
        assert tx.get_session(record.id) is None
        assert tx.list_sessions() == []


def test_a_committed_transaction_is_seen_by_another_store(store: Store, store_url: str) -> None:
    record = add_session(store)
    other = open_store(store_url)
    try:
        with other.read() as tx:
            assert tx.get_session(record.id) == record
    finally:
        other.close()


def test_a_store_error_inside_a_transaction_rolls_it_back(store: Store) -> None:
    first = new_session()
    with pytest.raises(StoreError), store.atomic() as tx:
        tx.insert_session(first)
        tx.insert_session(first)  # same primary key
    with store.read() as tx:
        assert tx.get_session(first.id) is None


# -- sessions ----------------------------------------------------------------------------------


def test_sessions_round_trip(store: Store) -> None:
    record = new_session(workspace="/some/where", title=None)
    with store.atomic() as tx:
        tx.insert_session(record)
    with store.read() as tx:
        assert tx.get_session(record.id) == record
        assert tx.get_session(uuid.uuid4().hex) is None


def test_find_sessions_by_prefix(store: Store) -> None:
    records = [add_session(store) for _ in range(3)]
    with store.read() as tx:
        for record in records:
            assert tx.find_sessions(record.id[:10]) == [record]
            assert tx.find_sessions(record.id) == [record]
        assert len(tx.find_sessions("")) == 3
        assert len(tx.find_sessions("", limit=2)) == 2
        assert tx.find_sessions("z") == []


def test_find_sessions_treats_the_prefix_literally(store: Store) -> None:
    add_session(store)
    with store.read() as tx:
        assert tx.find_sessions("%") == []
        assert tx.find_sessions("_") == []


def test_list_sessions_most_recently_updated_first(store: Store) -> None:
    a, b = add_session(store), add_session(store)
    with store.atomic() as tx:
        tx.set_head(a.id, None, time.time() + 10)
    with store.read() as tx:
        assert [s.id for s in tx.list_sessions()] == [a.id, b.id]


def test_set_head(store: Store) -> None:
    record = add_session(store)
    turn = add_turn(store, record.id, status=TurnStatus.COMPLETED)
    later = record.updated_at + 5
    with store.atomic() as tx:
        tx.set_head(record.id, turn.token, later)
    with store.read() as tx:
        current = tx.get_session(record.id)
    assert current is not None
    assert current.head == turn.token
    assert current.updated_at == later
    assert current.created_at == record.created_at


# -- turns -------------------------------------------------------------------------------------


def test_turns_round_trip(store: Store) -> None:
    record = add_session(store)
    blocks = [{"type": "text", "text": "a"}, {"type": "image", "data": "…"}]
    turn = add_turn(store, record.id, prompt=blocks)
    with store.read() as tx:
        assert tx.get_turn(turn.token) == turn
        assert tx.get_turn(uuid.uuid4().hex) is None
        assert tx.running_turn(record.id) == turn
        assert tx.session_turns(record.id) == [turn]
        assert tx.turns_with_status(TurnStatus.RUNNING) == [turn]
        assert tx.turns_with_status(TurnStatus.COMPLETED) == []


def test_session_turns_in_order(store: Store) -> None:
    record = add_session(store)
    first = add_turn(store, record.id, status=TurnStatus.COMPLETED)
    second = add_turn(store, record.id, number=2, parent=first.token)
    with store.read() as tx:
        assert [t.token for t in tx.session_turns(record.id)] == [first.token, second.token]


def test_end_turn_only_from_the_expected_status(store: Store) -> None:
    record = add_session(store)
    turn = add_turn(store, record.id)
    ended_at = time.time()
    with store.atomic() as tx:
        assert not tx.end_turn(
            turn.token, TurnStatus.FAILED, ended_at, "no", 0, expected=TurnStatus.SET_ASIDE
        )
        assert tx.end_turn(
            turn.token, TurnStatus.COMPLETED, ended_at, "ok", 7, expected=TurnStatus.RUNNING
        )
        assert not tx.end_turn(
            turn.token, TurnStatus.FAILED, ended_at, "again", 0, expected=TurnStatus.RUNNING
        )
    with store.read() as tx:
        ended = tx.get_turn(turn.token)
        assert tx.running_turn(record.id) is None
    assert ended is not None
    assert (ended.status, ended.ended_at, ended.detail, ended.event_count) == (
        TurnStatus.COMPLETED,
        ended_at,
        "ok",
        7,
    )


def test_reposition_turn(store: Store) -> None:
    record = add_session(store)
    first = add_turn(store, record.id, status=TurnStatus.COMPLETED)
    moved = add_turn(store, record.id, status=TurnStatus.SET_ASIDE)
    with store.atomic() as tx:
        tx.reposition_turn(moved.token, 2, first.token)
    with store.read() as tx:
        turn = tx.get_turn(moved.token)
    assert turn is not None
    assert (turn.number, turn.parent) == (2, first.token)


def test_one_running_turn_per_session(store: Store) -> None:
    """Invariant 8 held by the store itself (a partial unique index), not only by the engine."""
    record = add_session(store)
    running = add_turn(store, record.id)
    with pytest.raises(StoreError):
        add_turn(store, record.id, number=2)
    with store.read() as tx:
        assert tx.session_turns(record.id) == [running]
    # Ended turns do not count, nor do running turns of other sessions.
    add_turn(store, record.id, status=TurnStatus.COMPLETED)
    add_turn(store, record.id, status=TurnStatus.SET_ASIDE)
    add_turn(store, add_session(store).id)
    with store.atomic() as tx:
        tx.end_turn(
            running.token, TurnStatus.FAILED, time.time(), None, 0, expected=TurnStatus.RUNNING
        )
    add_turn(store, record.id, number=2)


def test_a_turn_needs_its_session(store: Store) -> None:
    with pytest.raises(StoreError):
        add_turn(store, uuid.uuid4().hex)


def test_deleting_a_turn_takes_its_rows_with_it(store: Store) -> None:
    record = add_session(store)
    turn = add_turn(store, record.id, status=TurnStatus.SET_ASIDE)
    with store.atomic() as tx:
        tx.append_journal([entry(turn.token, 1), entry(turn.token, 2)])
        tx.insert_step_checkpoint(StepCheckpoint(turn.token, 1, "c1", 1, None, None, time.time()))
        tx.insert_messages([Message(record.id, turn.token, 0, MessageKind.USER, {"a": 1})])
        tx.insert_run_events([RunEvent(record.id, turn.token, 1, "k", {"b": 2}, time.time())])
    with store.atomic() as tx:
        tx.delete_turn(turn.token)
    with store.read() as tx:
        assert tx.get_turn(turn.token) is None
        assert tx.journal(turn.token) == []
        assert tx.step_checkpoints(turn.token) == []
        assert tx.turn_messages(turn.token) == []
        assert tx.run_events(turn.token) == []


# -- the journal -------------------------------------------------------------------------------


def test_journal_round_trip_in_seq_order(store: Store) -> None:
    record = add_session(store)
    turn = add_turn(store, record.id)
    entries = [entry(turn.token, seq, f"t{seq}") for seq in (3, 1, 2)]
    with store.atomic() as tx:
        assert tx.journal_size(turn.token) == (0, 0)
        tx.append_journal(entries)
    with store.read() as tx:
        assert tx.journal(turn.token) == sorted(entries, key=lambda e: e.seq)
        assert tx.journal_size(turn.token) == (3, 3)


def test_journal_seq_is_unique_per_turn(store: Store) -> None:
    record = add_session(store)
    turn = add_turn(store, record.id)
    with store.atomic() as tx:
        tx.append_journal([entry(turn.token, 1, "first")])
    with pytest.raises(StoreError), store.atomic() as tx:
        tx.append_journal([entry(turn.token, 2), entry(turn.token, 1, "again")])
    with store.read() as tx:
        assert [e.payload for e in tx.journal(turn.token)] == [
            entry(turn.token, 1, "first").payload
        ]


def test_only_a_running_turns_journal_grows(store: Store) -> None:
    """Entries of a turn that ended elsewhere (or never existed) are dropped, not written into
    what is now its run timeline; the running turn's entries in the same batch are kept."""
    record = add_session(store)
    running = add_turn(store, record.id)
    others = [add_turn(store, record.id, status=s) for s in TurnStatus if s is not s.RUNNING]
    with store.atomic() as tx:
        batch = [entry(t.token, 1) for t in [running, *others]] + [entry(uuid.uuid4().hex, 1)]
        assert tx.append_journal(batch) == len(others) + 1
        assert tx.append_journal([]) == 0
    with store.read() as tx:
        assert tx.journal(running.token) == [batch[0]]
        assert all(tx.journal(t.token) == [] for t in others)


@pytest.mark.parametrize("size", [1, 40])  # a few entries, and many: two ways on PostgreSQL
def test_a_fenced_flush_writes_only_the_turns_running_under_their_fence(
    store: Store, size: int
) -> None:
    record, other = add_session(store), add_session(store)
    ours = dataclasses.replace(new_turn(record.id), fence="ours")
    taken = dataclasses.replace(new_turn(other.id), fence="theirs")  # a takeover drew anew
    with store.atomic() as tx:
        tx.insert_turn(ours)
        tx.insert_turn(taken)
    batch = [
        entry(t.token, seq, "it's 100% \\u0000 \u00e9")
        for seq in range(1, size + 1)
        for t in (ours, taken)
    ]
    states = store.append_fenced(batch, {ours.token: "ours", taken.token: "ours"})
    assert states == {
        ours.token: (TurnStatus.RUNNING, "ours"),
        taken.token: (TurnStatus.RUNNING, "theirs"),
    }
    with store.read() as tx:
        assert tx.journal(ours.token) == [e for e in batch if e.turn == ours.token]
        assert tx.journal(taken.token) == []
    with store.atomic() as tx:
        tx.end_turn(
            ours.token, TurnStatus.INTERRUPTED, 1.0, None, size, expected=TurnStatus.RUNNING
        )
    later = [entry(ours.token, size + 1)]
    assert store.append_fenced(later, {})[ours.token] == (TurnStatus.INTERRUPTED, "ours")
    with store.read() as tx:
        assert len(tx.run_events(ours.token)) == size, "an ended turn's events do not grow"


def test_a_fenced_flush_of_one_entry_checks_its_fence_as_it_writes(store: Store) -> None:
    """One entry at a time, as strict appends come: written only under its turn's fence, and
    the state found is returned whether it was written or not."""
    record, other = add_session(store), add_session(store)
    ours = dataclasses.replace(new_turn(record.id), fence="ours")
    taken = dataclasses.replace(new_turn(other.id), fence="theirs")
    with store.atomic() as tx:
        tx.insert_turn(ours)
        tx.insert_turn(taken)
    first, refused = entry(ours.token, 1, "kept"), entry(taken.token, 1, "refused")
    assert store.append_fenced([first], {ours.token: "ours"}) == {
        ours.token: (TurnStatus.RUNNING, "ours")
    }
    assert store.append_fenced([refused], {taken.token: "ours"}) == {
        taken.token: (TurnStatus.RUNNING, "theirs")
    }
    unheld = entry(taken.token, 2, "no fence asked")  # a turn not held: written while it runs
    assert store.append_fenced([unheld], {}) == {taken.token: (TurnStatus.RUNNING, "theirs")}
    with store.atomic() as tx:
        tx.end_turn(ours.token, TurnStatus.INTERRUPTED, 1.0, None, 1, expected=TurnStatus.RUNNING)
    late = entry(ours.token, 2, "after its end")
    assert store.append_fenced([late], {ours.token: "ours"}) == {
        ours.token: (TurnStatus.INTERRUPTED, "ours")
    }
    with store.read() as tx:
        assert tx.journal(taken.token) == [unheld]
        assert tx.run_events(ours.token)[0].seq == 1
        assert len(tx.run_events(ours.token)) == 1


def test_an_ended_turns_journal_is_its_timeline_verbatim(store: Store) -> None:
    record = add_session(store)
    turn = add_turn(store, record.id)
    with store.atomic() as tx:
        tx.append_journal([entry(turn.token, 1), entry(turn.token, 2)])
        kept = tx.journal(turn.token)
    with store.atomic() as tx:
        assert tx.end_turn(
            turn.token, TurnStatus.COMPLETED, 2.0, None, 2, expected=TurnStatus.RUNNING
        )
    with store.read() as tx:
        timeline = tx.run_events(turn.token)
    assert [(e.session_id, e.seq, e.kind, e.at) for e in timeline] == [
        (record.id, k.seq, k.kind, k.at) for k in kept
    ]
    assert [json.dumps(e.event, separators=(",", ":")) for e in timeline] == [
        k.payload for k in kept
    ]


# -- the committed conversation ----------------------------------------------------------------


def test_messages_of_ended_turns_in_turn_order(store: Store) -> None:
    record = add_session(store)
    second = add_turn(store, record.id, number=2, status=TurnStatus.COMPLETED)
    first = add_turn(store, record.id, number=1, status=TurnStatus.INTERRUPTED)
    aside = add_turn(store, record.id, number=3, status=TurnStatus.SET_ASIDE)
    with store.atomic() as tx:
        for turn in (second, first, aside):
            tx.insert_messages(
                [
                    Message(record.id, turn.token, 1, MessageKind.AGENT, {"text": "answer"}),
                    Message(record.id, turn.token, 0, MessageKind.USER, {"text": turn.token}),
                ]
            )
    with store.read() as tx:
        messages = tx.messages(record.id)
        assert [(m.turn, m.index) for m in messages] == [
            (first.token, 0),
            (first.token, 1),
            (second.token, 0),
            (second.token, 1),
        ]
        assert messages[1] == Message(
            record.id, first.token, 1, MessageKind.AGENT, {"text": "answer"}
        )
        assert [m.index for m in tx.turn_messages(aside.token)] == [0, 1]


def test_conversation_overview_counts_turns_and_names_the_first_prompt(store: Store) -> None:
    record, empty = add_session(store), add_session(store)
    add_turn(store, record.id, number=2, status=TurnStatus.COMPLETED, prompt="second")
    add_turn(store, record.id, number=1, status=TurnStatus.INTERRUPTED, prompt=[{"a": 1}])
    add_turn(store, record.id, number=3, status=TurnStatus.SET_ASIDE, prompt="aside")
    add_turn(store, empty.id, number=1, prompt="still running")
    with store.read() as tx:
        assert tx.conversation_overview() == {record.id: (2, [{"a": 1}])}


def test_session_file_changes_by_turn_and_scope(store: Store) -> None:
    record, bare = add_session(store), add_session(store)
    first = add_turn(store, record.id, status=TurnStatus.COMPLETED)
    second = add_turn(store, record.id, number=2, status=TurnStatus.COMPLETED)
    added = FileChange("b.txt", ChangeKind.ADDED, 2, 0, False, None)
    binary = FileChange("a.bin", ChangeKind.RENAMED, 0, 0, True, "old.bin")
    with store.atomic() as tx:
        tx.insert_file_changes(first.token, "turn", [added, binary])
        tx.insert_file_changes(second.token, "before", [added])
    with store.read() as tx:
        assert tx.session_file_changes(record.id) == {
            (first.token, "turn"): [binary, added],
            (second.token, "before"): [added],
        }
        assert tx.session_file_changes(bare.id) == {}


def test_compact_frees_no_more_than_it_held(store: Store) -> None:
    record = add_session(store)
    add_turn(store, record.id)
    assert store.compact() >= 0
    with store.read() as tx:
        assert tx.get_session(record.id) == record


def test_run_events_round_trip(store: Store) -> None:
    record = add_session(store)
    turn = add_turn(store, record.id, status=TurnStatus.COMPLETED)
    events = [
        RunEvent(record.id, turn.token, 2, "plan", {"entries": [{"content": "é", "n": 2}]}, 2.0),
        RunEvent(record.id, turn.token, 1, "x_unknown", {"sessionUpdate": "x_unknown"}, 1.0),
    ]
    with store.atomic() as tx:
        tx.insert_run_events(events)
    with store.read() as tx:
        assert tx.run_events(turn.token) == [events[1], events[0]]


# -- step checkpoints --------------------------------------------------------------------------


def test_step_checkpoints_round_trip(store: Store) -> None:
    record = add_session(store)
    turn = add_turn(store, record.id)
    checkpoints = [
        StepCheckpoint(turn.token, 2, "c2", 9, {"k": ["v", 1]}, "/agent/store", 2.0),
        StepCheckpoint(turn.token, 1, "c1", 4, None, None, 1.0),
    ]
    with store.atomic() as tx:
        for checkpoint in checkpoints:
            tx.insert_step_checkpoint(checkpoint)
    with store.read() as tx:
        assert tx.step_checkpoints(turn.token) == [checkpoints[1], checkpoints[0]]
    with store.atomic() as tx:
        assert tx.delete_step_checkpoints(turn.token) == 2
    with store.read() as tx:
        assert tx.step_checkpoints(turn.token) == []


def test_delete_orphan_step_checkpoints_keeps_resumable_turns(store: Store) -> None:
    record = add_session(store)
    kept = [
        add_turn(store, record.id),
        add_turn(store, record.id, status=TurnStatus.SET_ASIDE),
        add_turn(store, record.id, status=TurnStatus.INTERRUPTED),
    ]
    gone = [
        add_turn(store, record.id, status=s)
        for s in (TurnStatus.COMPLETED, TurnStatus.FAILED, TurnStatus.CANCELLED)
    ]
    with store.atomic() as tx:
        for turn in kept + gone:
            tx.insert_step_checkpoint(StepCheckpoint(turn.token, 1, "c", 1, None, None, 1.0))
    with store.atomic() as tx:
        assert tx.delete_orphan_step_checkpoints() == len(gone)
    with store.read() as tx:
        for turn in kept:
            assert len(tx.step_checkpoints(turn.token)) == 1


# -- activities --------------------------------------------------------------------------------


def test_activities(store: Store) -> None:
    a, b = add_session(store), add_session(store)
    with store.atomic() as tx:
        first = tx.insert_activity(
            a.id, "t1", ActivityLevel.WARNING, "turn.set_aside", "set aside", {"n": 1}, 1.0
        )
        second = tx.insert_activity(b.id, None, ActivityLevel.INFO, "x", "other", {}, 2.0)
        third = tx.insert_activity(a.id, None, ActivityLevel.ERROR, "y", "late", {}, 3.0)
        fourth = tx.insert_activity(None, None, ActivityLevel.INFO, "z", "global", {}, 4.0)
    assert first < second < third < fourth
    with store.read() as tx:
        of_a = tx.activities(a.id)
        assert [(x.id, x.code) for x in of_a] == [(first, "turn.set_aside"), (third, "y")]
        assert of_a[0].session_id == a.id
        assert of_a[0].turn == "t1"
        assert of_a[0].level is ActivityLevel.WARNING
        assert (of_a[0].message, of_a[0].data, of_a[0].at) == ("set aside", {"n": 1}, 1.0)
        assert [x.id for x in tx.activities(None)] == [first, second, third, fourth]
        # the limit keeps the latest, still oldest first
        assert [x.id for x in tx.activities(None, limit=2)] == [third, fourth]


# -- owners ------------------------------------------------------------------------------------


def test_owners(store: Store) -> None:
    record = add_session(store)
    busy, idle = new_owner(), new_owner()
    with store.atomic() as tx:
        tx.upsert_owner(busy)
        tx.upsert_owner(idle)
    add_turn(store, record.id, owner_id=busy.id)
    add_turn(store, record.id, status=TurnStatus.COMPLETED, owner_id=idle.id)
    with store.read() as tx:
        assert tx.get_owner(busy.id) == busy
        assert tx.get_owner("nobody") is None
        assert tx.unreferenced_owners() == [idle]
    with store.atomic() as tx:
        tx.delete_owner(idle.id)
    with store.read() as tx:
        assert tx.get_owner(idle.id) is None
        assert tx.unreferenced_owners() == []
        # the completed turn that named it survives, without an owner
        completed = [t for t in tx.session_turns(record.id) if t.status is TurnStatus.COMPLETED]
        assert completed[0].owner_id is None


def test_upsert_owner_renews_the_lease_only(store: Store) -> None:
    owner = new_owner()
    with store.atomic() as tx:
        tx.upsert_owner(owner)
        tx.upsert_owner(
            Owner(owner.id, "other", "b", 1, 2, owner.created_at + 1, lease_expires=99.0)
        )
    with store.read() as tx:
        stored = tx.get_owner(owner.id)
    assert stored == Owner(
        owner.id, owner.host, owner.boot_id, owner.pid, owner.start_time, owner.created_at, 99.0
    )


def test_upsert_owner_without_a_lease_keeps_the_one_it_holds(store: Store) -> None:
    owner = new_owner()
    with store.atomic() as tx:
        tx.upsert_owner(Owner(*dataclasses.astuple(owner)[:6], lease_expires=50.0))
        tx.upsert_owner(owner)  # as a revert records its owner
    with store.read() as tx:
        stored = tx.get_owner(owner.id)
    assert stored is not None and stored.lease_expires == 50.0


def test_a_turn_must_name_a_known_owner(store: Store) -> None:
    with pytest.raises(StoreError):
        add_turn(store, add_session(store).id, owner_id="no-such-owner")


def test_a_healthy_store_has_no_integrity_problems(store: Store) -> None:
    record = add_session(store)
    add_turn(store, record.id)
    assert store.integrity_problems() == []


# -- the SQLite file ---------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "home" / "turnback.db"


def sqlite_store(db: Path, busy_timeout: float = 2.0) -> sqlite_backend.SQLiteStore:
    store = open_store(f"sqlite:///{db}", busy_timeout=busy_timeout)
    assert isinstance(store, sqlite_backend.SQLiteStore)
    return store


def pragma(db: Path, name: str) -> object:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def test_open_store_rejects_an_unknown_url(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="sqlite:///"):
        open_store("mysql://localhost/turnback")


def test_wal_synchronous_full_and_foreign_keys_in_force(db: Path) -> None:
    store = sqlite_store(db)
    try:
        conn = store._conn  # the pragmas below are per connection: ask the store's own
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 2000
    finally:
        store.close()
    # WAL is a property of the file: any other connection sees it
    assert pragma(db, "journal_mode") == "wal"


def test_a_new_database_carries_the_schema_version_and_application_id(db: Path) -> None:
    sqlite_store(db).close()
    assert pragma(db, "user_version") == SCHEMA_VERSION == len(MIGRATIONS)
    assert pragma(db, "application_id") == APPLICATION_ID


def schema(db: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    finally:
        conn.close()


def test_reopening_is_a_no_op(db: Path) -> None:
    store = sqlite_store(db)
    record = add_session(store)
    store.close()
    before = schema(db)
    assert {"sessions", "turns", "events", "messages"} <= {n for n, _ in before}
    assert "turns_one_running" in {n for n, _ in before}

    store = sqlite_store(db)
    try:
        with store.read() as tx:
            assert tx.list_sessions() == [record]
    finally:
        store.close()
    assert schema(db) == before
    assert pragma(db, "user_version") == SCHEMA_VERSION


def test_a_newer_schema_is_refused_untouched(db: Path) -> None:
    sqlite_store(db).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    before = db.read_bytes()
    with pytest.raises(SchemaTooNew) as raised:
        sqlite_store(db)
    message = str(raised.value)
    assert str(db) in message
    assert str(SCHEMA_VERSION + 1) in message
    assert "upgrade turnback" in message
    assert db.read_bytes() == before
    assert pragma(db, "user_version") == SCHEMA_VERSION + 1


def test_migrations_run_forward_from_the_version_on_disk(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later release appends a migration: an existing database runs only the new one."""
    store = sqlite_store(db)
    record = add_session(store)
    store.close()
    extra = "CREATE TABLE later (x INTEGER); INSERT INTO later VALUES (1)"
    monkeypatch.setattr(sqlite_backend, "MIGRATIONS", (*MIGRATIONS, extra))
    monkeypatch.setattr(sqlite_backend, "SCHEMA_VERSION", SCHEMA_VERSION + 1)

    store = sqlite_store(db)
    store.close()
    assert pragma(db, "user_version") == SCHEMA_VERSION + 1
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT x FROM later").fetchall() == [(1,)]  # ran once
        assert conn.execute("SELECT id FROM sessions").fetchall() == [(record.id,)]
    finally:
        conn.close()
    sqlite_store(db).close()  # reopening does not run it again
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM later").fetchone()[0] == 1
    finally:
        conn.close()


def test_a_failed_migration_leaves_the_database_as_it_was(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite_store(db).close()
    before = schema(db)
    broken = "CREATE TABLE half (x INTEGER); THIS IS NOT SQL"
    monkeypatch.setattr(sqlite_backend, "MIGRATIONS", (*MIGRATIONS, broken))
    monkeypatch.setattr(sqlite_backend, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError):
        sqlite_store(db)
    assert schema(db) == before
    assert pragma(db, "user_version") == SCHEMA_VERSION


def test_an_empty_file_becomes_a_turnback_database(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"")
    sqlite_store(db).close()
    assert pragma(db, "application_id") == APPLICATION_ID
    assert pragma(db, "user_version") == SCHEMA_VERSION


def test_a_second_connection_sees_commits_at_once(db: Path) -> None:
    """WAL readers see every committed transaction; nothing waits in the store's memory."""
    store = sqlite_store(db)
    try:
        record = add_session(store)
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("SELECT id FROM sessions").fetchall() == [(record.id,)]
        finally:
            conn.close()
    finally:
        store.close()


def test_a_database_of_the_first_release_is_upgraded_with_its_data(tmp_path: Path) -> None:
    """A home written by a turnback with only migration 1 opens with every row intact."""
    from turnback.store.schema import APPLICATION_ID, MIGRATIONS

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for statement in MIGRATIONS[0].split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
    conn.execute("PRAGMA user_version=1")
    conn.execute(
        "INSERT INTO sessions (id, workspace, created_at, updated_at) VALUES ('ab', '/w', 1, 2)"
    )
    conn.execute(
        "INSERT INTO turns (token, session_id, number, status, prompt, started_at) "
        "VALUES ('cd', 'ab', 1, 'completed', '\"hi\"', 1)"
    )
    conn.commit()
    conn.close()
    store = open_store(f"sqlite:///{path}")
    try:
        with store.read() as tx:
            session = tx.get_session("ab")
            turn = tx.get_turn("cd")
        assert session is not None and session.agent_state == {}
        assert turn is not None and turn.prompt == "hi" and turn.begin_checkpoint is None
        with store.atomic() as tx:
            tx.set_agent_state("ab", {"agentSessionId": "x"}, 3.0)
        with store.read() as tx:
            assert tx.get_session("ab").agent_state == {"agentSessionId": "x"}  # type: ignore[union-attr]
    finally:
        store.close()


def test_an_upgrade_keeps_every_turns_events_in_place(tmp_path: Path) -> None:
    """Schema 4 keeps a turn's events in one table: the journal rows of running and set-aside
    turns and the timelines of ended ones come across; journal rows of ended turns (garbage a
    sweep would have removed) do not."""
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    for migration in MIGRATIONS[:3]:
        conn.executescript(migration)
    conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
    conn.execute("PRAGMA user_version=3")
    conn.execute(
        "INSERT INTO sessions (id, workspace, created_at, updated_at) VALUES ('s', '/w', 1, 2)"
    )
    for number, (token, status) in enumerate(
        [("done", "completed"), ("aside", "set_aside"), ("live", "running")], start=1
    ):
        conn.execute(
            "INSERT INTO turns (token, session_id, number, status, prompt, started_at) "
            "VALUES (?, 's', ?, ?, '\"hi\"', 1)",
            (token, number, status),
        )
    conn.executemany(
        "INSERT INTO journal (turn, seq, kind, payload, at) VALUES (?, ?, 'k', ?, 1)",
        [
            ("aside", 1, '{"a":1}'),
            ("live", 1, '{"l":1}'),
            ("live", 2, '{"l":2}'),
            ("done", 9, "{}"),
        ],
    )
    conn.execute(
        "INSERT INTO run_events (session_id, turn, seq, kind, payload, at) "
        "VALUES ('s', 'done', 1, 'k', '{\"d\":1}', 1)"
    )
    conn.commit()
    conn.close()

    store = open_store(f"sqlite:///{path}")
    try:
        with store.read() as tx:
            assert [e.payload for e in tx.journal("live")] == ['{"l":1}', '{"l":2}']
            assert [e.payload for e in tx.journal("aside")] == ['{"a":1}']
            assert [(e.session_id, e.seq, e.event) for e in tx.run_events("done")] == [
                ("s", 1, {"d": 1})
            ]
    finally:
        store.close()
    assert pragma(path, "user_version") == SCHEMA_VERSION
    assert {"journal", "run_events"}.isdisjoint(name for name, _ in schema(path))
