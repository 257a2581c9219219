"""Bad input and a hostile environment: each gives a clear error that names the thing and what to
do, and leaves the durable state as it was."""

from __future__ import annotations

import math
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback import (
    AmbiguousId,
    InvalidEvent,
    InvalidId,
    SessionNotFound,
    StoreCorrupt,
    StoreLocked,
    StoreUnavailable,
    TurnStatus,
)
from turnback.errors import SESSIONS
from turnback.model import RevertRequest
from turnback.service import RevertSession, Service


def chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def deeply_nested(depth: int) -> list[Any]:
    outer: list[Any] = []
    inner = outer
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


def journal_count(home: Path) -> int:
    conn = sqlite3.connect(home / "turnback.db")
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        conn.close()


def dump(home: Path) -> list[str]:
    """The whole durable state, as SQL text."""
    conn = sqlite3.connect(home / "turnback.db")
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


@pytest.fixture
def strict(home: Path) -> Iterator[turnback.Turnback]:
    handle = turnback.open(home, durability="strict")
    try:
        yield handle
    finally:
        handle.close()


# -- ids ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["", "   ", "not-hex", "zz", "12%", "a_b", "'; DROP TABLE turns"])
def test_an_invalid_session_id(tb: turnback.Turnback, session: turnback.Session, ref: str) -> None:
    with pytest.raises(InvalidId) as raised:
        tb.session(ref)
    message = str(raised.value)
    assert repr(ref) in message
    assert "hexadecimal" in message
    assert raised.value.exit_code == 1
    assert [s.id for s in tb.sessions()] == [session.id]


@pytest.mark.parametrize("ref", ["abc123", "0" * 32])
def test_an_unknown_session_id(tb: turnback.Turnback, session: turnback.Session, ref: str) -> None:
    if session.id.startswith(ref):
        ref = "f" * 32 if not session.id.startswith("f") else "e" * 32
    with pytest.raises(SessionNotFound) as raised:
        tb.session(ref)
    assert repr(ref) in str(raised.value)
    assert str(tb.home) in str(raised.value)  # where it looked
    assert raised.value.remedy == SESSIONS  # listing the sessions helps, in each surface's words


def test_ids_are_case_and_space_insensitive(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    assert tb.session(f"  {session.id[:8].upper()} ") == session


def test_an_ambiguous_prefix(tb: turnback.Turnback, tmp_path: Path) -> None:
    by_first: dict[str, list[str]] = {}
    while not any(len(ids) > 1 for ids in by_first.values()):
        created = tb.create_session(tmp_path)
        by_first.setdefault(created.id[0], []).append(created.id)
    prefix, ids = next((p, i) for p, i in by_first.items() if len(i) > 1)
    with pytest.raises(AmbiguousId) as raised:
        tb.session(prefix)
    message = str(raised.value)
    assert repr(prefix) in message
    for session_id in ids:
        assert session_id[:12] in message
    assert "more characters" in message
    # a longer prefix resolves it
    assert tb.session(ids[0][:32]).id == ids[0]


def test_a_turn_of_an_unknown_session(tb: turnback.Turnback, session: turnback.Session) -> None:
    gone = turnback.Session(tb, "f" * 32 if not session.id.startswith("f") else "e" * 32)
    with pytest.raises(SessionNotFound):
        gone.turn("go")
    with tb.store.read() as tx:
        assert tx.turns_with_status(TurnStatus.RUNNING) == []


# -- events ------------------------------------------------------------------------------------


class Opaque:
    pass


ITSELF: dict[str, Any] = {"sessionUpdate": "plan"}
ITSELF["entries"] = [ITSELF]

BAD_EVENTS = {
    "a dict that contains itself": ITSELF,
    "nested too deeply to encode": {"sessionUpdate": "plan", "entries": deeply_nested(100_000)},
    "not JSON-serialisable": {"sessionUpdate": "agent_message_chunk", "content": Opaque()},
    "a set": {"sessionUpdate": "plan", "entries": {1, 2}},
    "bytes": {"sessionUpdate": "agent_message_chunk", "content": b"raw"},
    "NaN": {"sessionUpdate": "x_metrics", "value": math.nan},
    "infinity": {"sessionUpdate": "x_metrics", "value": math.inf},
    "not a dict": ["sessionUpdate", "agent_message_chunk"],
    "a JSON string": '{"sessionUpdate": "agent_message_chunk"}',
    "no sessionUpdate": {"content": {"type": "text", "text": "hi"}},
    "an empty sessionUpdate": {"sessionUpdate": ""},
    "a sessionUpdate that is not a string": {"sessionUpdate": 7},
}


@pytest.mark.parametrize("what", sorted(BAD_EVENTS))
def test_a_bad_event_is_refused_and_nothing_is_written(
    strict: turnback.Turnback, home: Path, tmp_path: Path, what: str
) -> None:
    session = strict.create_session(tmp_path)
    with session.turn("go") as turn:
        assert turn.record(chunk("before")) == 1
        with pytest.raises(InvalidEvent) as raised:
            turn.record(BAD_EVENTS[what])
        assert "sessionUpdate" in str(raised.value) or "nothing was written" in str(raised.value)
        assert journal_count(home) == 1
        assert turn.record(chunk(" after")) == 2  # the refused event took no seq
    [done] = session.turns()
    assert done.status is TurnStatus.COMPLETED
    assert done.event_count == 2
    assert [m.text for m in session.messages()] == ["go", "before after"]


def test_a_10_mb_event_is_refused_and_the_turn_goes_on(
    strict: turnback.Turnback, home: Path, tmp_path: Path
) -> None:
    session = strict.create_session(tmp_path)
    with session.turn("go") as turn:
        turn.record(chunk("small"))
        with pytest.raises(InvalidEvent) as raised:
            turn.record(chunk("x" * (10 * 2**20)))
        message = str(raised.value)
        assert "MiB" in message
        assert "nothing was written" in message
        assert "file" in message  # what to do instead
        assert journal_count(home) == 1
        turn.record(chunk(" more"))
    assert session.turns()[0].event_count == 2
    assert session.turns()[0].status is TurnStatus.COMPLETED


def test_a_10_mb_prompt_is_refused_before_the_turn_begins(
    strict: turnback.Turnback, tmp_path: Path
) -> None:
    session = strict.create_session(tmp_path)
    with pytest.raises(InvalidEvent, match="nothing was written"):
        session.turn("y" * (10 * 2**20))
    assert session.turns() == []
    with session.turn("a normal prompt"):
        pass


@pytest.mark.parametrize("prompt", ["", "   ", [], [1, 2], None, {"type": "text"}])
def test_a_bad_prompt_begins_no_turn(session: turnback.Session, prompt: Any) -> None:
    with pytest.raises(InvalidEvent):
        session.turn(prompt)
    assert session.turns() == []
    assert session.running() is None


def test_a_bad_step_checkpoint_state_is_refused(
    strict: turnback.Turnback, home: Path, tmp_path: Path
) -> None:
    session = strict.create_session(tmp_path)
    with session.turn("go") as turn:
        with pytest.raises(InvalidEvent):
            turn.step(1, checkpoint_id="c1", state={"handle": Opaque()})
        with strict.store.read() as tx:
            assert tx.step_checkpoints(turn.token) == []
        assert journal_count(home) == 0


@pytest.mark.parametrize("step", ["one", None, {"n": 1}])
def test_a_bad_step_number_is_refused(
    strict: turnback.Turnback, home: Path, tmp_path: Path, step: Any
) -> None:
    session = strict.create_session(tmp_path)
    with session.turn("go") as turn:
        with pytest.raises(InvalidEvent):
            turn.step(step, checkpoint_id="c1")
        with pytest.raises(InvalidEvent):
            turn.record(
                {"sessionUpdate": "_turnback/step_checkpoint", "step": step, "checkpointId": "c"}
            )
        assert journal_count(home) == 0
        assert turn.record(chunk("next")) == 1  # the refused events took no seq
    assert session.turns()[0].status is TurnStatus.COMPLETED


# -- the database file -------------------------------------------------------------------------


def test_a_corrupt_database_file(home: Path) -> None:
    home.mkdir()
    db = home / "turnback.db"
    db.write_bytes(os.urandom(64 * 1024))
    before = db.read_bytes()
    with pytest.raises(StoreCorrupt) as raised:
        turnback.open(home)
    message = str(raised.value)
    assert str(db) in message
    assert "untouched" in message
    assert "Move it away" in message or "move the file away" in message
    assert db.read_bytes() == before
    assert sorted(p.name for p in home.iterdir()) == ["turnback.db"]


def test_an_emptied_database_beside_checkpoints_is_refused_and_left_as_it_is(
    home: Path, tmp_path: Path
) -> None:
    """A 0-byte turnback.db in a home that holds checkpoints was emptied, not half created:
    opening it would start a new database beside them and hide the loss."""
    workspace = tmp_path / "work"
    workspace.mkdir()
    with turnback.open(home) as tb, tb.create_session(workspace).turn("make a file"):
        (workspace / "a.txt").write_text("one\n")
    db = home / "turnback.db"
    db.write_bytes(b"")  # what a full disk or a bad copy leaves
    shadow = sorted(p.relative_to(home) for p in (home / "shadow").rglob("*"))
    with pytest.raises(StoreCorrupt) as raised:
        turnback.open(home)
    message = str(raised.value)
    assert str(db) in message and "0 bytes" in message and "from a backup" in message
    assert db.read_bytes() == b"" and not (home / "turnback.db-wal").exists()
    assert sorted(p.relative_to(home) for p in (home / "shadow").rglob("*")) == shadow
    cli = [sys.executable, "-m", "turnback", "--home", str(home)]
    sessions = subprocess.run([*cli, "sessions"], capture_output=True, text=True, timeout=60)
    assert sessions.returncode == 1 and "0 bytes" in sessions.stderr
    doctor = subprocess.run([*cli, "doctor"], capture_output=True, text=True, timeout=60)
    assert doctor.returncode == 1 and "FAIL  database:" in doctor.stdout
    assert "0 bytes" in doctor.stdout and db.read_bytes() == b""
    # moved away, as the message says, a new database starts afresh
    db.rename(home / "emptied.db")
    with turnback.open(home) as tb:
        assert tb.sessions() == []


def test_a_foreign_sqlite_database(home: Path) -> None:
    home.mkdir()
    db = home / "turnback.db"
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.close()
    before = db.read_bytes()
    with pytest.raises(StoreCorrupt) as raised:
        turnback.open(home)
    message = str(raised.value)
    assert str(db) in message
    assert "did not create" in message
    assert "--home" in message or "TURNBACK_HOME" in message
    assert db.read_bytes() == before
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT name FROM users").fetchall() == [("ada",)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()


def test_a_database_locked_beyond_the_timeout(home: Path, tmp_path: Path) -> None:
    with turnback.open(home) as tb:
        session = tb.create_session(tmp_path)
        with session.turn("first"):
            pass
    before = dump(home)

    holder = sqlite3.connect(home / "turnback.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with turnback.open(home, busy_timeout=0.2) as tb:
            started = time.monotonic()
            with pytest.raises(StoreLocked) as raised:
                tb.session(session.id).turn("second")
            waited = time.monotonic() - started
            message = str(raised.value)
            assert str(home / "turnback.db") in message
            assert "locked" in message
            assert "0.2s" in message
            assert "retry" in message
            assert 0.15 <= waited < 3
            with pytest.raises(StoreLocked):
                tb.create_session(tmp_path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    assert dump(home) == before
    with turnback.open(home) as tb:
        again = tb.session(session.id)
        assert again.running() is None
        with again.turn("second") as turn:
            assert turn.number == 2


def test_a_lock_released_within_the_timeout_is_waited_for(home: Path, tmp_path: Path) -> None:
    with turnback.open(home) as tb:
        session = tb.create_session(tmp_path)
    holder = sqlite3.connect(home / "turnback.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    timer = threading.Timer(0.2, lambda: holder.execute("ROLLBACK"))
    timer.start()
    try:
        with turnback.open(home, busy_timeout=5) as tb, tb.session(session.id).turn("go"):
            pass
    finally:
        timer.join()
        holder.close()


# -- a home that cannot be written -------------------------------------------------------------


def test_a_home_under_a_regular_file(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("mine")
    home = blocker / "home"
    with pytest.raises(StoreUnavailable) as raised:
        turnback.open(home)
    message = str(raised.value)
    assert str(home) in message
    assert "--home" in message and "TURNBACK_HOME" in message
    assert blocker.read_text() == "mine"


def test_a_home_that_is_a_regular_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("mine")
    with pytest.raises(StoreUnavailable) as raised:
        turnback.open(home)
    assert str(home) in str(raised.value)
    assert home.read_text() == "mine"


READ_ONLY_CHECK = textwrap.dedent(
    """
    import sys
    import turnback
    try:
        tb = turnback.open(sys.argv[1])
        session = tb.create_session(sys.argv[1])
        with session.turn("go"):
            pass
    except turnback.TurnbackError as error:
        print(type(error).__name__)
        print(error)
    else:
        print("WROTE")
    """
)


def run_without_write_permission(home: Path) -> subprocess.CompletedProcess[str]:
    """Run READ_ONLY_CHECK in a process that permission bits stop.

    Tests usually run as root, whom chmod does not stop; so drop the capabilities that let root
    ignore permission bits (capsh). Without a way to do that, skip."""
    command = [sys.executable, "-c", READ_ONLY_CHECK, str(home)]
    if os.geteuid() != 0:
        return subprocess.run(command, capture_output=True, text=True, timeout=30)
    capsh = shutil.which("capsh")
    if capsh is None:
        pytest.skip("running as root without capsh: cannot make a directory read-only for root")
    shell = shlex.join(command)
    result = subprocess.run(
        [capsh, "--drop=cap_dac_override,cap_dac_read_search,cap_fowner", "--", "-c", shell],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if "Operation not permitted" in result.stderr and not result.stdout:
        pytest.skip(f"capsh cannot drop capabilities here: {result.stderr.strip()}")
    return result


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[list[Path]]:
    """Directories made read-only for the test, writable again afterwards."""
    paths: list[Path] = []
    yield paths
    for path in paths:
        path.chmod(0o755)
        for child in path.iterdir():
            child.chmod(0o644)


def test_a_read_only_home_with_a_database(
    home: Path, tmp_path: Path, read_only: list[Path]
) -> None:
    with turnback.open(home) as tb:
        session = tb.create_session(tmp_path)
        with session.turn("first"):
            pass
    db = home / "turnback.db"
    before = db.read_bytes()
    state = dump(home)
    names = sorted(p.name for p in home.iterdir())
    (db).chmod(0o444)
    home.chmod(0o555)
    read_only.append(home)

    result = run_without_write_permission(home)
    assert result.stdout.splitlines()[:1] == ["StoreUnavailable"], result
    message = result.stdout
    assert str(db) in message
    assert "writable" in message and ("--home" in message or "TURNBACK_HOME" in message)
    assert db.read_bytes() == before
    assert sorted(p.name for p in home.iterdir()) == names
    assert dump(home) == state


def test_a_read_only_empty_home(home: Path, read_only: list[Path]) -> None:
    home.mkdir()
    home.chmod(0o555)
    read_only.append(home)
    result = run_without_write_permission(home)
    assert result.stdout.splitlines()[:1] == ["StoreUnavailable"], result
    assert str(home / "turnback.db") in result.stdout
    assert list(home.iterdir()) == []


def test_a_home_that_cannot_be_created(tmp_path: Path, read_only: list[Path]) -> None:
    parent = tmp_path / "locked"
    parent.mkdir()
    parent.chmod(0o555)
    read_only.append(parent)
    home = parent / "home"
    result = run_without_write_permission(home)
    assert result.stdout.splitlines()[:1] == ["StoreUnavailable"], result
    assert str(home) in result.stdout
    assert "--home" in result.stdout
    assert not home.exists()


# -- the error contract: a bad setting or argument is a TurnbackError that says what is accepted


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf", "1e999"])
def test_a_bad_lease_setting_is_refused_before_anything_opens(
    home: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TURNBACK_LEASE_SECONDS", value)
    with pytest.raises(turnback.InvalidOption) as refused:
        turnback.open(home)
    assert str(refused.value) == (
        f"TURNBACK_LEASE_SECONDS must be a positive number of seconds, such as 30, not "
        f"{value!r}; set it so, or unset it for the default"
    )
    assert isinstance(refused.value, turnback.TurnbackError)
    assert not home.exists()  # nothing was opened, so nothing was made


@pytest.mark.parametrize("seconds", [0, -1.0, math.nan, math.inf])
def test_a_bad_lease_argument_is_refused(home: Path, seconds: float) -> None:
    with pytest.raises(turnback.InvalidOption, match="lease_seconds must be a positive number"):
        turnback.open(home, lease_seconds=seconds)
    assert not home.exists()


def test_a_bad_durability_is_refused(home: Path) -> None:
    with pytest.raises(turnback.InvalidOption) as refused:
        turnback.open(home, durability="sometimes")
    assert str(refused.value) == "durability must be one of strict, batched, turn, not 'sometimes'"
    assert isinstance(refused.value, turnback.TurnbackError)
    assert not home.exists()


def test_a_revert_of_neither_files_nor_conversation_is_refused(
    strict: turnback.Turnback, tmp_path: Path, home: Path
) -> None:
    session = strict.create_session(tmp_path)
    with session.turn("one") as turn:
        turn.record(chunk("hi"))
    before = dump(home)
    service = Service.of(strict)

    def through_the_service(to_turn: int, **options: bool) -> object:
        return service.run(RevertSession(session.id, RevertRequest(to_turn, **options)))

    for call in (session.revert, session.revert_plan, through_the_service):
        with pytest.raises(turnback.InvalidOption) as refused:
            call(0, files=False, conversation=False)
        assert "a revert moves the files, the conversation, or both" in str(refused.value)
        assert isinstance(refused.value, turnback.TurnbackError)
    assert dump(home) == before


def test_a_session_made_again_under_its_id_is_the_one_stored(
    tb: turnback.Turnback, tmp_path: Path
) -> None:
    """``existing``: a front-end making the same session again gets it, unchanged; without it,
    a second session under one id is refused and nothing is written."""
    (tmp_path / "elsewhere").mkdir()
    first = tb.create_session(tmp_path, "first", "an agent", session_id="a" * 32)
    again = tb.create_session(
        tmp_path / "elsewhere", "again", "another", session_id="a" * 32, existing=True
    )
    assert again.id == first.id
    record = tb.session(first.id).record
    assert (record.workspace, record.title, record.agent) == (
        str(tmp_path.resolve()),
        "first",
        "an agent",
    )
    with pytest.raises(turnback.TurnbackError):
        tb.create_session(tmp_path, "twice", session_id="a" * 32)
    assert [s.id for s in tb.sessions()] == [first.id]
