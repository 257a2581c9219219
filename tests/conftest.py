"""Fixtures shared by the whole suite: a home, an open turnback on it, a session."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback.engine.owners import current_owner
from turnback.model import JournalEntry, Owner, Turn, TurnStatus
from turnback.store import Tx

from .postgres_server import Server


@pytest.fixture(autouse=True)
def _no_real_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test may write to the user's real data directory."""
    monkeypatch.setenv("TURNBACK_HOME", str(tmp_path_factory.mktemp("default-home")))
    monkeypatch.delenv("TURNBACK_DATABASE_URL", raising=False)
    monkeypatch.delenv("TURNBACK_FAULT", raising=False)
    monkeypatch.delenv("TURNBACK_CHECKPOINT_REMOTE", raising=False)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Server]:
    """One throwaway PostgreSQL server for the whole run (tests/postgres_server.py)."""
    server = Server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: Server) -> Iterator[str]:
    """The URL of a fresh PostgreSQL store of this test's own (a schema), dropped after it."""
    url = postgres_server.create_schema()
    try:
        yield url
    finally:
        postgres_server.drop_schema(url)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A turnback home that does not exist yet."""
    return tmp_path / "home"


@pytest.fixture
def tb(home: Path) -> Iterator[turnback.Turnback]:
    handle = turnback.open(home=home)
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def session(tb: turnback.Turnback, tmp_path: Path) -> turnback.Session:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return tb.create_session(workspace=workspace, title="test", agent="test-agent")


AbandonTurn = Callable[..., Turn]


def insert_next_turn(tx: Tx, session_id: str, **fields: Any) -> Turn:
    """Insert a turn on top of the session's head, straight in the store, as another writer
    would; ``fields`` (status, owner_id, prompt, …) fill in the row."""
    record = tx.get_session(session_id)
    assert record is not None
    head = tx.get_turn(record.head) if record.head else None
    turn = Turn(
        token=uuid.uuid4().hex,
        session_id=session_id,
        number=head.number + 1 if head else 1,
        parent=record.head,
        started_at=time.time(),
        **fields,
    )
    tx.insert_turn(turn)
    return turn


def abandon(
    tb: turnback.Turnback,
    session: turnback.Session,
    events: Sequence[dict[str, Any]] = (),
    prompt: Any = "do it",
) -> Turn:
    """Make a running turn whose owner is dead, as a crash leaves it, straight in the store.

    The owner has this process's pid with another start time: a reused pid, so it is dead."""
    me = current_owner()
    dead = Owner(
        id="dead" + uuid.uuid4().hex[:20],
        host=me.host,
        boot_id=me.boot_id,
        pid=me.pid,
        start_time=me.start_time + 1,
        created_at=time.time(),
    )
    with tb.store.atomic() as tx:
        tx.upsert_owner(dead)
        turn = insert_next_turn(
            tx, session.id, owner_id=dead.id, status=TurnStatus.RUNNING, prompt=prompt
        )
        tx.append_journal(
            [
                JournalEntry(turn.token, seq, str(e["sessionUpdate"]), json.dumps(e), time.time())
                for seq, e in enumerate(events, start=1)
            ]
        )
    return turn


@pytest.fixture
def abandoned_turn(tb: turnback.Turnback) -> AbandonTurn:
    """:func:`abandon` on ``tb``."""
    return functools.partial(abandon, tb)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """Mount small tmpfs file systems, unmounted afterwards: ``small_disk(bytes)`` is one.

    It needs root (CI runs as root); it skips only where mounting is impossible."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        point = tmp_path / f"disk{len(mounted)}"
        point.mkdir()
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
        mounted.append(point)
        return point

    try:
        yield mount
    finally:
        for point in reversed(mounted):
            subprocess.run(["umount", "-l", str(point)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill a small disk with one file until at most ``leave`` bytes are free."""
    filler = disk / "filler.bin"
    with filler.open("ab") as out:
        while True:
            free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
            if free <= leave:
                break
            try:
                out.write(b"\0" * min(65536, max(4096, free - leave)))
                out.flush()
            except OSError:
                break
    return filler


def at_once(*workers: Callable[[], list[str]]) -> list[str]:
    """Run each worker in a thread of its own, all at the same time; returns what they said went
    wrong, in the order of the workers (a worker that raised says so)."""
    found: list[list[str]] = [[] for _ in workers]

    def run(index: int) -> None:
        try:
            found[index] = workers[index]()
        except BaseException as error:  # pragma: no cover - reported below
            found[index] = [f"worker {index} raised {error!r}"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [line for lines in found for line in lines]
