"""A process frozen inside a transaction on a fleet's PostgreSQL store (SIGSTOP, a paused VM)
holds its session's lock. turnback leaves the server's ``idle_in_transaction_session_timeout``
(the DBA's) in force, so once it passes the server ends that transaction, and the session is
everyone's again; the frozen process, continued, is told its write did not land."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import turnback
from tests.postgres_server import Server
from tests.store.test_sqlite_store import new_session
from turnback.errors import StoreUnavailable
from turnback.store import open_store

WORKER = Path(__file__).with_name("worker.py")
IDLE_TIMEOUT = 2.0


@pytest.fixture
def idle_timeout(postgres_server: Server) -> Iterator[float]:
    """The DBA's setting, for every new connection to the database, for this test alone."""
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(
            "ALTER DATABASE postgres SET idle_in_transaction_session_timeout = "
            f"'{int(IDLE_TIMEOUT * 1000)}ms'"
        )
    try:
        yield IDLE_TIMEOUT
    finally:
        with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
            admin.execute("ALTER DATABASE postgres RESET idle_in_transaction_session_timeout")


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def said(process: subprocess.Popen[str]) -> dict[str, Any]:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, f"the worker exited early: {process.stderr.read() if process.stderr else ''}"
    record: dict[str, Any] = json.loads(line)
    return record


def test_a_process_frozen_in_a_transaction_does_not_hold_the_session(
    postgres_url: str, idle_timeout: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNBACK_HOST", "here")
    tb = turnback.open(tmp_path / "home", database_url=postgres_url, checkpoints=False)
    frozen: subprocess.Popen[str] | None = None
    try:
        session = tb.create_session(tmp_path)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNBACK_")}
        env.update(TURNBACK_HOST="there", TURNBACK_FAULT="turn.begin.inside:stop")
        args = {"home": str(tmp_path / "there"), "url": postgres_url, "session": session.id}
        frozen = subprocess.Popen(
            [sys.executable, str(WORKER), "frozen", json.dumps(args)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while not stopped(frozen.pid):
            assert frozen.poll() is None, frozen.stderr.read() if frozen.stderr else ""
            assert time.monotonic() < deadline, "the worker never stopped inside its begin"
            time.sleep(0.02)

        # Another machine begins a turn in the session: it waits for the frozen transaction's
        # lock only until the server ends that transaction, well within its busy timeout (5 s).
        started = time.monotonic()
        turn = session.turn("meanwhile")
        waited = time.monotonic() - started
        turn.record(
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
        )
        turn.complete()
        assert waited < idle_timeout + 2.5, f"waited {waited:.1f}s for the frozen transaction"

        # Continued, the frozen process learns its begin did not land, and can go on.
        os.kill(frozen.pid, signal.SIGCONT)
        first, second = said(frozen), said(frozen)
        assert first["what"] == "begin" and first["error"] == "StoreUnavailable", first
        assert second == {"what": "again", "error": None, "token": second["token"]}
        assert frozen.wait(timeout=30) == 0, frozen.stderr.read() if frozen.stderr else ""
        frozen = None

        turns = tb.session(session.id).turns()
        assert [(t.number, t.prompt, t.status.value) for t in turns] == [
            (1, "meanwhile", "completed"),
            (2, "frozen", "completed"),
        ]
    finally:
        if frozen is not None:
            frozen.kill()
            frozen.wait()
        tb.close()


def test_a_transaction_ended_by_the_server_says_so_and_the_next_one_works(
    postgres_url: str, idle_timeout: float
) -> None:
    store = open_store(postgres_url)
    try:
        with pytest.raises(StoreUnavailable) as ended, store.read() as tx:
            time.sleep(idle_timeout + 1)
            tx.list_sessions()
        assert "idle_in_transaction_session_timeout" in str(ended.value)
        assert "nothing of it was written" in str(ended.value)
        with store.atomic() as tx:  # a new connection
            tx.insert_session(new_session())
        with store.read() as tx:
            assert len(tx.list_sessions()) == 1
    finally:
        store.close()
