"""A late heartbeat loses nothing: a process loses a turn only when another actually took it
over (its fencing token no longer names a running turn), never because its lease ran out while
another process held a lock (README, Fleets; Design, invariant 5).

A real second process holds the lock the heartbeat needs -- SQLite's one write lock, or on
PostgreSQL the owner's row -- for twice the lease."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import turnback

LEASE = 3.0
HELD = 6.0

#: Holds the lock, says so, then says how the owner's lease stood when it let go.
_SQLITE_HOLDER = """
import json, sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[3]))
[(expires,)] = conn.execute("SELECT lease_expires FROM owners WHERE id = ?", (sys.argv[2],))
print(json.dumps({"expires": expires, "now": time.time()}), flush=True)
conn.execute("COMMIT")
"""
_POSTGRES_HOLDER = """
import json, sys, time, psycopg
with psycopg.connect(sys.argv[1]) as conn:
    conn.execute("SELECT 1 FROM owners WHERE id = %s FOR UPDATE", (sys.argv[2],))
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
    [(expires, now)] = conn.execute(
        "SELECT lease_expires, extract(epoch FROM clock_timestamp())::float8 FROM owners "
        "WHERE id = %s", (sys.argv[2],)
    ).fetchall()
    print(json.dumps({"expires": expires, "now": now}), flush=True)
"""


def chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{tmp_path / 'home' / 'turnback.db'}"


def hold_lock(url: str, owner_id: str, seconds: float) -> subprocess.Popen[str]:
    """A process holding the lock the heartbeat of ``owner_id`` needs, once it says so."""
    if url.startswith("sqlite:///"):
        script, target = _SQLITE_HOLDER, url.removeprefix("sqlite:///")
    else:
        script, target = _POSTGRES_HOLDER, url
    holder = subprocess.Popen(
        [sys.executable, "-c", script, target, owner_id, str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "held\n", holder.stderr.read() if holder.stderr else ""
    return holder


def released(holder: subprocess.Popen[str]) -> dict[str, float]:
    """Wait for ``holder`` to let go; how the lease stood then."""
    out, err = holder.communicate(timeout=60)
    assert holder.returncode == 0, err
    stood: dict[str, float] = json.loads(out)
    return stood


@contextmanager
def working(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[turnback.Session, turnback.RunningTurn, subprocess.Popen[str]]]:
    """A turn of host ``a`` with a 3-second lease (strict), one event durable, and a process
    that has just begun to hold the lock its heartbeat needs for 6 seconds."""
    monkeypatch.setenv("TURNBACK_HOST", "a")
    with turnback.open(
        tmp_path / "home",
        database_url=url,
        lease_seconds=LEASE,
        checkpoints=False,
        durability="strict",
    ) as tb:
        session = tb.create_session(tmp_path)
        turn = session.turn("work")
        turn.record(chunk("before "))
        assert turn.turn.owner_id is not None
        yield session, turn, hold_lock(url, turn.turn.owner_id, HELD)


def test_a_lock_held_past_the_lease_leaves_the_live_owner_its_turn(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with working(url, tmp_path, monkeypatch) as (session, turn, holder):
        stood = released(holder)
        assert stood["expires"] < stood["now"], "the lease did not run out while the lock was held"
        time.sleep(1.0)  # the heartbeat that waited for the lock has given up, and beaten again
        turn.record(chunk("after "))
        turn.complete()
        assert session.get_turn(turn.token).status is turnback.TurnStatus.COMPLETED
        assert [e.event["content"]["text"] for e in session.run_events(turn.token)] == [
            "before ",
            "after ",
        ]
        with session.turn("the next one") as later:
            later.record(chunk("still this process's"))
        assert later.turn.owner_id == turn.turn.owner_id, "the owner was retired"
        assert "turn.ownership.lost" not in [a.code for a in session.activities()]


def test_a_turn_taken_over_while_its_heartbeat_waits_is_fenced_off(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease ran out while the heartbeat waited for a lock, and another machine recovered
    the turn meanwhile: the live owner's next writes are refused, nothing of them lands."""
    with working(postgres_url, tmp_path, monkeypatch) as (session, turn, holder):
        time.sleep(LEASE + 0.5)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNBACK_")}
        recovered = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, turnback; r = turnback.open(sys.argv[1], database_url=sys.argv[2], "
                "checkpoints=False).recover(); print(len(r.recovered))",
                str(tmp_path / "other-home"),
                postgres_url,
            ],
            env={**env, "TURNBACK_HOST": "b"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (recovered.returncode, recovered.stdout) == (0, "1\n"), recovered.stderr
        released(holder)
        with pytest.raises(turnback.OwnershipLost, match="taken over"):
            turn.record(chunk("after the takeover "))
        with pytest.raises(turnback.OwnershipLost):
            turn.complete()
        taken = session.get_turn(turn.token)
        assert taken.status is turnback.TurnStatus.INTERRUPTED
        texts = [e.event.get("content", {}).get("text") for e in session.run_events(turn.token)]
        assert "after the takeover " not in texts
