"""The crash suite: a real process is killed with SIGKILL at every fault point of turnback's write
orders, and at random moments while streaming; a fresh process recovers and the durable state is
compared with what was acknowledged (docs/design.md, invariants 1-3 and 5-8)."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback import faults
from turnback.store import open_store, sqlite_url

from ..store.test_events_stored_once import check_schema_5_content, fill_schema_5, schema_5_version
from .harness import (
    CHILD,
    Acks,
    check_stream,
    dump,
    kill_stream_after,
    query,
    run_child,
    settle_and_check,
)

SRC = Path(turnback.__file__).parent
EVENTS = 24

# (fault point, occurrence, durability mode, how the turn ends, with step checkpoints)
STREAM_CASES: list[tuple[str, int, str, str, bool]] = [
    ("turn.begin.before", 1, "strict", "complete", False),
    ("turn.begin.inside", 1, "strict", "complete", False),
    ("turn.begin.after", 1, "batched", "complete", False),
    *[
        (point, nth, mode, "complete", False)
        for mode in ("strict", "batched", "turn")
        for point, nth in (
            ("turn.record.before", 9),
            ("turn.record.after", 10),
        )
    ],
    *[
        (point, nth, mode, "complete", False)
        for mode, nth in (("strict", 11), ("batched", 2))
        for point in ("journal.flush.before", "journal.flush.after")
    ],
    ("journal.flush.before", 1, "turn", "complete", False),
    ("journal.flush.after", 1, "turn", "complete", False),
    *[
        (point, nth, mode, "complete", True)
        for mode in ("strict", "batched")
        for point, nth in (("turn.step.before", 2), ("turn.step.after", 2))
    ],
    *[
        (point, 1, mode, end, True)
        for end in ("complete", "fail", "cancel")
        for point, mode in (
            ("turn.end.before", "batched"),
            ("turn.end.inside", "strict"),
            ("turn.end.after", "turn"),
        )
    ],
]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def session_id(home: Path, tmp_path: Path) -> str:
    with turnback.open(home) as tb:
        return tb.create_session(tmp_path).id


def _stream_args(tmp_path: Path, session_id: str, **extra: Any) -> dict[str, Any]:
    return {"session": session_id, "ack": str(tmp_path / "ack.jsonl"), "events": EVENTS, **extra}


@pytest.mark.parametrize(("point", "nth", "mode", "end", "steps"), STREAM_CASES)
def test_killed_while_running_a_turn(
    home: Path,
    session_id: str,
    tmp_path: Path,
    point: str,
    nth: int,
    mode: str,
    end: str,
    steps: bool,
) -> None:
    args = _stream_args(tmp_path, session_id, mode=mode, end=end, steps=steps)
    run_child(home, "stream", args, fault=f"{point}@{nth}")
    acks = Acks.read(tmp_path / "ack.jsonl")
    settle_and_check(home, session_id)
    check_stream(home, session_id, acks, mode=mode, events=EVENTS, steps=steps)


def _dead_turn(home: Path, session_id: str, tmp_path: Path, *, corrupt: bool = False) -> Acks:
    """A running turn whose owner was killed after 10 acknowledged strict events."""
    args = _stream_args(tmp_path, session_id, mode="strict")
    run_child(home, "stream", args, fault="turn.record.after@10")
    acks = Acks.read(tmp_path / "ack.jsonl")
    assert acks.begun and len(acks.events) == 9
    if corrupt:
        query(
            home,
            "UPDATE events SET payload = '{not json' "
            "WHERE id = (SELECT id FROM turns WHERE token = ?) * 4294967296 + 4",
            (acks.begun,),
            write=True,
        )
    return acks


@pytest.mark.parametrize(
    "point", ["recover.turn.before", "recover.apply.inside", "recover.turn.after"]
)
def test_killed_while_recovering(home: Path, session_id: str, tmp_path: Path, point: str) -> None:
    acks = _dead_turn(home, session_id, tmp_path)
    run_child(home, "recover", {}, fault=point)
    report = settle_and_check(home, session_id)
    assert not report.set_aside
    check_stream(home, session_id, acks, mode="strict", events=EVENTS, steps=False)


@pytest.mark.parametrize("point", ["turn.reopen.before", "turn.reopen.inside", "turn.reopen.after"])
def test_killed_while_reopening_an_interrupted_turn(
    home: Path, session_id: str, tmp_path: Path, point: str
) -> None:
    """Killed before its commit, a reopen changed nothing. Killed after it, the turn runs with a
    dead owner and recovery interrupts it again: the conversation keeps what came before its
    last step checkpoint, the events after it stay in the timeline, nothing shows twice."""
    args = _stream_args(tmp_path, session_id, mode="strict", steps=True)
    run_child(home, "stream", args, fault="turn.record.after@9")  # e1-e6, step 7, e8, e9
    acks = Acks.read(tmp_path / "ack.jsonl")
    with turnback.open(home) as tb:
        [interrupted] = tb.recover().recovered
    before = dump(home)

    run_child(home, "reopen", {"session": session_id, "turn": acks.begun}, fault=point)
    if point != "turn.reopen.after":
        assert dump(home) == before, "a reopen killed before its commit changed the state"
    settle_and_check(home, session_id)
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        turn = session.get_turn(interrupted.token)
        assert turn.status is turnback.TurnStatus.INTERRUPTED
        assert turn.number == interrupted.number
        texts = [m.text for m in session.turn_messages(turn.token)]
        events = session.run_events(turn.token)
    said = "".join(texts)
    assert "chunk 6 " in said
    assert ("chunk 8 " in said) is (point != "turn.reopen.after"), said
    assert len(texts) == len(set(texts)), f"a message shows twice: {texts}"
    timeline = [e.event.get("_meta", {}).get("crash") for e in events]
    assert [t for t in timeline if t] == ["e1", "e2", "e3", "e4", "e5", "e6", "e8", "e9"]


# A commit whose reply was lost (the fault ``name:lost`` raises the store's error right after
# it committed), read back at once; or the read-back failed as well (``lost`` at a reconcile
# point) and the next write of the turn reads it back first. The child is killed while reading
# back, or at the write after, or not at all; as a caller would, it tries a begin or an end that
# raised once more, and goes on recording after an event whose record raised.
# (faults armed, durability mode, how the turn ends, killed)
LOST_REPLY_CASES: list[tuple[str, str, str, bool]] = [
    ("turn.begin.after:lost,turn.begin.reconcile", "strict", "complete", True),
    ("journal.flush.after@5:lost,journal.reconcile", "strict", "complete", True),
    ("journal.flush.after@2:lost,journal.reconcile", "batched", "complete", True),
    ("turn.end.after:lost,turn.end.reconcile", "batched", "fail", True),
    ("turn.begin.after:lost,turn.begin.reconcile:lost,turn.end.inside", "strict", "cancel", True),
    (
        "journal.flush.after@5:lost,journal.reconcile:lost,journal.reconcile@2",
        "strict",
        "fail",
        True,
    ),
    ("turn.end.after:lost,turn.end.reconcile:lost,turn.end.before@2", "batched", "cancel", True),
    ("turn.begin.after:lost,turn.begin.reconcile:lost", "batched", "complete", False),
    ("journal.flush.after@3:lost,journal.reconcile:lost", "strict", "complete", False),
    ("turn.end.after:lost,turn.end.reconcile:lost", "strict", "fail", False),
]


@pytest.mark.parametrize(("faults_armed", "mode", "end", "killed"), LOST_REPLY_CASES)
def test_a_lost_commit_reply_is_read_back_and_the_turn_ends_once(
    home: Path,
    session_id: str,
    tmp_path: Path,
    faults_armed: str,
    mode: str,
    end: str,
    killed: bool,
) -> None:
    args = _stream_args(tmp_path, session_id, mode=mode, end=end, steps=True, retry=True)
    run_child(home, "stream", args, fault=faults_armed, expect_kill=killed)
    acks = Acks.read(tmp_path / "ack.jsonl")
    assert killed or acks.done
    settle_and_check(home, session_id)
    with turnback.open(home) as tb:
        turns = [t for t in tb.session(session_id).turns() if t.prompt == "do the work"]
    unconfirmed = [t for t in turns if t.token != acks.begun]
    if acks.begin_failed:
        # The begin that raised had landed: ended by the retry (failed, as its caller was told),
        # or, killed first, recovered. Never run, never twice.
        [first] = unconfirmed
        assert first.status in (turnback.TurnStatus.FAILED, turnback.TurnStatus.INTERRUPTED)
        assert first.event_count == 0, "a turn whose begin its caller saw fail ran"
    else:
        assert len(unconfirmed) <= (0 if acks.begun else 1)
    check_stream(
        home,
        session_id,
        acks,
        mode=mode,
        events=EVENTS,
        steps=True,
        unconfirmed=[t.token for t in unconfirmed] if acks.begin_failed else (),
    )
    if "turn.end.after:lost" in faults_armed:  # the end that landed is the turn's one end
        [turn] = [t for t in turns if t.token == acks.begun]
        assert turn.status.value == {"fail": "failed", "cancel": "cancelled"}[end]
        with turnback.open(home) as tb:
            kinds = [e.kind for e in tb.session(session_id).run_events(turn.token)]
        assert kinds.count("_turnback/error") == (1 if end == "fail" else 0)


def _journal_rows(home: Path, token: str) -> list[tuple[Any, ...]]:
    return query(
        home,
        "SELECT id - id / 4294967296 * 4294967296, kind, payload, text FROM events "
        "WHERE id / 4294967296 = (SELECT id FROM turns WHERE token = ?) ORDER BY id",
        (token,),
    )


def test_killed_while_setting_aside(home: Path, session_id: str, tmp_path: Path) -> None:
    acks = _dead_turn(home, session_id, tmp_path, corrupt=True)
    assert acks.begun
    journal = _journal_rows(home, acks.begun)
    run_child(home, "recover", {}, fault="recover.set_aside.inside")
    report = settle_and_check(home, session_id)
    assert [u.turn.token for u in report.set_aside] == [acks.begun]
    assert "unreadable" in report.set_aside[0].reason
    assert _journal_rows(home, acks.begun) == journal, "a set-aside turn's journal changed"


def _set_aside_turn(home: Path, session_id: str, tmp_path: Path) -> tuple[str, list[Any]]:
    acks = _dead_turn(home, session_id, tmp_path, corrupt=True)
    assert acks.begun
    with turnback.open(home) as tb:
        report = tb.recover()
    assert [u.turn.token for u in report.set_aside] == [acks.begun]
    return acks.begun, _journal_rows(home, acks.begun)


@pytest.mark.parametrize("action", ["apply", "discard"])
@pytest.mark.parametrize("step", ["before", "inside", "after"])
def test_killed_while_applying_or_discarding(
    home: Path, session_id: str, tmp_path: Path, action: str, step: str
) -> None:
    token, journal = _set_aside_turn(home, session_id, tmp_path)
    point = f"{action}.{step}"
    run_child(home, action, {"session": session_id, "turn": token}, fault=point)
    report = settle_and_check(home, session_id)
    with turnback.open(home) as tb:
        turn = next((t for t in tb.session(session_id).turns() if t.token == token), None)
        codes = [a.code for a in tb.session(session_id).activities()]
    if step == "after":  # the transaction committed before the kill
        if action == "apply":
            assert turn is not None and turn.status is turnback.TurnStatus.INTERRUPTED
            with turnback.open(home) as tb:
                timeline = tb.session(session_id).run_events(token)
            assert [e.seq for e in timeline][: len(journal)] == [row[0] for row in journal]
            assert timeline[3].kind == "_turnback/unreadable"
        else:
            assert turn is None and "turn.discarded" in codes
        assert token not in [u.turn.token for u in report.set_aside]
    else:  # killed before it committed: the set-aside turn is intact
        assert turn is not None and turn.status is turnback.TurnStatus.SET_ASIDE
        assert _journal_rows(home, token) == journal
        assert token in [u.turn.token for u in report.set_aside]


@pytest.mark.parametrize("seed", range(5))
def test_killed_at_a_random_moment_while_streaming(
    home: Path, session_id: str, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    mode = ("batched", "strict", "batched", "turn", "batched")[seed]
    events = 4000
    args = _stream_args(tmp_path, session_id, mode=mode, events=events, pause_every=50)
    acks = kill_stream_after(home, args, rng.uniform(0.0, 0.3))
    settle_and_check(home, session_id)
    check_stream(home, session_id, acks, mode=mode, events=events, steps=False)


def test_two_recoverers_at_once_apply_the_turn_once(
    home: Path, session_id: str, tmp_path: Path
) -> None:
    acks = _dead_turn(home, session_id, tmp_path)
    procs = [
        subprocess.Popen([sys.executable, str(CHILD), "recover", str(home), "{}"]) for _ in range(3)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    settle_and_check(home, session_id)
    check_stream(home, session_id, acks, mode="strict", events=EVENTS, steps=False)
    recovered = [r for r in dump(home)["activities"] if r[4] == "turn.recovered"]
    assert len(recovered) == 1


# -- the suite covers every fault point --------------------------------------------------------


def _named_in_source() -> set[str]:
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"\bpoint\(\s*\"([^\"]+)\"", text))
        dynamic = re.findall(r"\bpoint\(\s*f\"", text)
        assert not dynamic, f"{path}: fault point names must be literal strings"
    return names


def test_killed_while_upgrading_a_schema_5_store(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 6 rewrites every event: a process killed inside the upgrade leaves the store at
    schema 5 with its data, and the next open upgrades it with nothing lost."""
    url = os.environ.get("TURNBACK_DATABASE_URL") or sqlite_url(home)
    fill_schema_5(url)
    opening = "import sys; from turnback.store import open_store; open_store(sys.argv[1])"
    env = {**os.environ, "TURNBACK_FAULT": "store.migrate.inside"}
    died = subprocess.run([sys.executable, "-c", opening, url], env=env, timeout=60, check=False)
    assert died.returncode == -signal.SIGKILL
    with schema_5_version(url) as version:
        assert version == 5
    store = open_store(url)
    try:
        check_schema_5_content(store)
    finally:
        store.close()


def test_every_fault_point_in_the_source_is_declared() -> None:
    assert _named_in_source() <= faults.POINTS


def test_every_declared_fault_point_is_killed_at() -> None:
    """Each planned point has a test above (or in test_crash_workspace.py) whose child must die
    there with SIGKILL, so planning every point means reaching every point."""
    from .test_crash_workspace import PLANNED as WORKSPACE_PLANNED

    planned = (
        {case[0] for case in STREAM_CASES}
        | {"recover.turn.before", "recover.apply.inside", "recover.turn.after"}
        | {"turn.reopen.before", "turn.reopen.inside", "turn.reopen.after"}
        | {"recover.set_aside.inside"}
        | {f"{a}.{s}" for a in ("apply", "discard") for s in ("before", "inside", "after")}
        | {"store.migrate.inside"}
        | {"turn.begin.reconcile", "turn.end.reconcile", "journal.reconcile"}
        | {"rescue.recorded", "rescue.done"}  # tests/hooks/test_killed.py
        | {"handoff.accepted", "handoff.inside", "handoff.after"}  # tests/fleet/test_handoff.py
        | {"answered.row"}  # tests/acp/test_launch.py
        | WORKSPACE_PLANNED
    )
    assert planned == set(faults.POINTS), f"points without a crash test: {faults.POINTS - planned}"
