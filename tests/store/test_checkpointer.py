"""The SQLite store copies its write-ahead log back into the database on a thread and connection of
its own: commits never wait for a checkpoint, yet the log stays bounded, a failing checkpointer
hands the work back to the commits, and closing the store does not wait on it for long."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback import faults
from turnback.store import sqlite as sqlite_backend

PAGE = 4096
TEXT = "x" * 4000  # more than a page of log an event


def chunk(i: int) -> dict[str, Any]:
    return {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": TEXT + str(i)},
    }


def boundary(i: int) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": f"t{i}", "title": "t", "status": "pending"}


def wal_frames(home: Path) -> int:
    """Frames the log file has room for: its real size, which only grows until it is restarted."""
    size = os.stat(home / "turnback.db-wal").st_size
    return (size - 32) // (PAGE + 24)


def stream(tb: turnback.Turnback, workspace: Path, events: int) -> tuple[str, str]:
    """A batched turn of 4 KB chunks with a boundary every 100; returns its session and token."""
    session = tb.create_session(workspace)
    with session.turn("stream") as turn:
        for i in range(events):
            turn.record(chunk(i))
            if i % 100 == 99:
                turn.record(boundary(i))
    return session.id, turn.token


def checkpointers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "turnback-checkpointer"]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def tb(home: Path) -> Iterator[turnback.Turnback]:
    with turnback.open(home, checkpoints=False) as handle:
        yield handle


def events_in_the_file(home: Path, token: str) -> int:
    """Events of the turn that another connection reads (SQLite ids: turn number << 32 | seq)."""
    conn = sqlite3.connect(f"file:{home / 'turnback.db'}?mode=ro", uri=True)
    try:
        return int(
            conn.execute(
                "SELECT count(*) FROM events "
                "WHERE id / 4294967296 = (SELECT id FROM turns WHERE token = ?)",
                (token,),
            ).fetchone()[0]
        )
    finally:
        conn.close()


def test_the_log_stays_bounded_under_a_long_batched_stream(
    tb: turnback.Turnback, home: Path, tmp_path: Path
) -> None:
    events = 3 * sqlite_backend.BOUND_PAGES  # more than three times the bound's pages of log
    _, token = stream(tb, tmp_path, events)
    assert checkpointers(), "the checkpointer never started"
    frames = wal_frames(home)
    # The log is reused from its start once a checkpoint has copied all of it; a commit adds at
    # most a batch past the bound before its own checkpoint runs.
    assert frames <= sqlite_backend.BOUND_PAGES + 1000, f"the log grew to {frames} pages"
    # The database file holds most of what was written: the log was copied back as it went.
    assert os.stat(home / "turnback.db").st_size > events * PAGE
    assert events_in_the_file(home, token) == events + events // 100


def test_a_failing_checkpointer_is_logged_and_commits_checkpoint_again(
    tb: turnback.Turnback,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(faults, "_ARMED", ("store.checkpoint.before", "raise", 1))
    caplog.set_level(logging.WARNING, logger="turnback.store")
    events = 2 * sqlite_backend.BOUND_PAGES  # more than twice the bound's pages of log
    _, token = stream(tb, tmp_path, events)
    assert any(
        "checkpointer" in r.getMessage() and "stopped" in r.getMessage() for r in caplog.records
    )
    assert not checkpointers(), "the failed checkpointer's thread is still there"
    store = tb.store
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == (
        sqlite_backend.CHECKPOINT_PAGES
    )
    frames = wal_frames(home)
    assert frames <= sqlite_backend.CHECKPOINT_PAGES + 1000, f"the log grew to {frames} pages"
    assert events_in_the_file(home, token) == events + events // 100


def test_closing_the_store_does_not_wait_long_for_a_checkpoint(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    entered = threading.Event()
    point = faults.point

    def stuck(name: str) -> None:
        if name == "store.checkpoint.before":  # a checkpoint that takes a very long time
            entered.set()
            release.wait(30)
        point(name)

    monkeypatch.setattr(sqlite_backend.faults, "point", stuck)
    tb = turnback.open(home, checkpoints=False)
    try:
        session_id, token = stream(tb, tmp_path, 2 * sqlite_backend.CHECKPOINT_PAGES)
        assert entered.wait(10), "the checkpointer never began"
        frames = wal_frames(home)  # commits left the log to it past the threshold
        assert frames > sqlite_backend.CHECKPOINT_PAGES + 1000, f"the log held {frames} pages"
    finally:
        started = time.monotonic()
        tb.close()
        closing = time.monotonic() - started
    release.set()
    assert closing < 3.0, f"close waited {closing:.1f}s for the checkpointer"
    deadline = time.monotonic() + 10
    while checkpointers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not checkpointers(), "the checkpointer outlived its store"
    with turnback.open(home, checkpoints=False) as again:
        turns = [t.token for t in again.session(session_id).turns()]
    assert token in turns


def test_a_closed_store_leaves_no_thread_and_no_log(
    tb: turnback.Turnback, home: Path, tmp_path: Path
) -> None:
    stream(tb, tmp_path, sqlite_backend.CHECKPOINT_PAGES)
    assert checkpointers()
    tb.close()
    assert not checkpointers()
    assert not (
        home / "turnback.db-wal"
    ).exists()  # the last connection checkpointed and removed it
