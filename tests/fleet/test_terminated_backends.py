"""Writers whose PostgreSQL backends keep being terminated (``pg_terminate_backend``, every 50 to
250 ms) while they run turns in each durability mode, then are killed with SIGKILL: no
acknowledged event is lost, no event is stored twice, every turn ends once (its begin, flushes
and end read back after each commit whose reply was lost), recovery settles each killed turn
exactly once, and every session takes a new turn afterwards (README, Design, invariants 1-3,
5 and 6).

CI runs a short version; ``TURNBACK_TORTURE_KILLS=200`` (``make torture``) the long one.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

import turnback
from turnback.model import TurnStatus

from .steady_writer import EVENTS

ROOT = Path(__file__).resolve().parents[2]  # the writer runs as tests.fleet.steady_writer
KILLS = int(os.environ.get("TURNBACK_TORTURE_KILLS", "30"))
MODES = ("strict", "batched", "turn")

#: The writers' backends: turnback names its connections, this test's own connection not so.
_BACKENDS = (
    "SELECT pid, state FROM pg_stat_activity "
    "WHERE application_name = 'turnback' AND pid <> pg_backend_pid()"
)


def start_writer(
    url: str, home: Path, session_id: str, mode: str, ack: Path
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNBACK_")}
    args = {"url": url, "home": str(home), "session": session_id, "mode": mode, "ack": str(ack)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fleet.steady_writer", json.dumps(args)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def acks_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def terminate_backends(url: str, kills: int, writers: list[subprocess.Popen[bytes]]) -> int:
    """Terminate one of the writers' backends every 50 to 250 ms, ``kills`` times -- one in a
    transaction when there is one; how many were in one."""
    rng = random.Random(kills)
    busy = done = 0
    with psycopg.connect(url, autocommit=True, application_name="torture") as pg:
        while done < kills:
            time.sleep(rng.uniform(0.05, 0.25))
            for writer in writers:
                if writer.poll() is not None:
                    stderr = writer.stderr.read().decode() if writer.stderr else ""
                    pytest.fail(f"a writer exited {writer.returncode}: {stderr[-3000:]}")
            backends = pg.execute(_BACKENDS).fetchall()
            working = [pid for pid, state in backends if state != "idle"]
            pids = working or [pid for pid, _ in backends]
            if not pids:
                continue
            pid = rng.choice(pids)
            [(terminated,)] = pg.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchall()
            if terminated:
                done += 1
                busy += bool(working)
    return busy


def required(acks: list[dict[str, Any]], mode: str, token: str) -> list[str]:
    """The events of turn ``token`` that must be durable, by what was acknowledged."""
    events = [a for a in acks if a["what"] == "event" and a["token"] == token]
    if any(a["what"] == "end" and a["token"] == token for a in acks) or mode == "strict":
        return [a["id"] for a in events]
    if mode == "turn":
        return []
    last_boundary = max((i for i, a in enumerate(events) if a["boundary"]), default=-1)
    return [a["id"] for a in events[: last_boundary + 1]]  # with everything before it


def test_terminated_backends_lose_no_acknowledged_event_and_wedge_no_session(
    postgres_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    with turnback.open(home, database_url=postgres_url, checkpoints=False) as tb:
        sessions = {mode: tb.create_session(tmp_path / mode).id for mode in MODES}
    ack = {mode: tmp_path / f"{mode}.jsonl" for mode in MODES}
    writers = [start_writer(postgres_url, home, sessions[m], m, ack[m]) for m in MODES]
    try:
        deadline = time.monotonic() + 60
        while not all(any(a["what"] == "end" for a in acks_of(ack[m])) for m in MODES):
            assert time.monotonic() < deadline, "the writers did not get going"
            time.sleep(0.05)
        busy = terminate_backends(postgres_url, KILLS, writers)
        time.sleep(0.3)
    finally:
        for writer in writers:
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=30)
    assert busy >= KILLS // 4, f"only {busy} of {KILLS} kills hit a backend at work"

    with turnback.open(home, database_url=postgres_url, checkpoints=False) as tb:
        report = tb.recover()
        assert not report.live and not report.set_aside
        assert not tb.recover().recovered, "a second recovery found more to do"
        for mode in MODES:
            acks = acks_of(ack[mode])
            errors = Counter(a["during"] for a in acks if a["what"] == "error")
            assert errors, f"{mode}: the writer never met a store error"
            session = tb.session(sessions[mode])
            turns = {t.token: t for t in session.turns()}
            begun = [a["token"] for a in acks if a["what"] == "begin"]
            ended = {a["token"] for a in acks if a["what"] == "end"}
            assert set(begun) <= set(turns), f"{mode}: an acknowledged begin was lost"
            for token in begun:
                turn = turns[token]
                if token in ended:
                    assert turn.status is TurnStatus.COMPLETED, (mode, turn)
                else:  # the turn the writer was in when it was killed (maybe at its end)
                    assert token == begun[-1], (mode, turn)
                    assert turn.status in (TurnStatus.INTERRUPTED, TurnStatus.COMPLETED)
                stored = [
                    e.event["_meta"]["id"]
                    for e in session.run_events(token)
                    if isinstance(e.event.get("_meta"), dict) and "id" in e.event["_meta"]
                ]
                assert len(stored) == len(set(stored)), f"{mode}: an event was stored twice"
                order = [f"{turn.prompt.split()[1]}.{i}" for i in range(1, EVENTS + 1)]
                assert stored == [i for i in order if i in stored], f"{mode}: out of order"
                missing = [i for i in required(acks, mode, token) if i not in stored]
                assert not missing, f"{mode}: acknowledged events were lost: {missing}"
            for token, turn in turns.items():  # begins whose caller saw them fail
                if token not in begun:
                    assert turn.status in (TurnStatus.FAILED, TurnStatus.INTERRUPTED), turn
                    assert turn.event_count == 0, f"{mode}: a turn its caller never had ran"
            recovered = Counter(a.turn for a in session.activities() if a.code == "turn.recovered")
            assert all(n == 1 for n in recovered.values()), f"{mode}: recovered twice"
            last = turns[begun[-1]]
            assert last.status is TurnStatus.COMPLETED or recovered[last.token] == 1
            with session.turn("after the storm") as turn:
                turn.record({"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}})
            assert session.get_turn(turn.token).status is TurnStatus.COMPLETED
