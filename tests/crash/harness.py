"""What the crash suite does around a killed process: run it, then check what survived.

The checks read the SQLite file directly, next to the public API, so they see exactly what is
durable and not what a handle believes.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import turnback
from turnback.model import whole_event

CHILD = Path(__file__).with_name("child.py")
TABLES = (
    "sessions",
    "turns",
    "events",
    "messages",
    "step_checkpoints",
    "activities",
)


@dataclass
class Acks:
    """What the killed process was told had succeeded."""

    begun: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    ended: str | None = None
    done: bool = False

    @classmethod
    def read(cls, path: Path) -> Acks:
        acks = cls()
        if not path.exists():
            return acks
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["what"] == "begin":
                acks.begun = record["token"]
            elif record["what"] == "event":
                acks.events.append(record)
            elif record["what"] == "end":
                acks.ended = record["end"]
            elif record["what"] == "done":
                acks.done = True
        return acks


def query(home: Path, sql: str, params: Sequence[Any] = (), *, write: bool = False) -> list[Any]:
    """Rows of one statement (``?`` placeholders) read straight from the store the test uses:
    TURNBACK_DATABASE_URL's PostgreSQL database, else the home's SQLite file."""
    url = os.environ.get("TURNBACK_DATABASE_URL")
    if url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            cursor = pg.execute(sql.replace("?", "%s"), tuple(params))
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
    mode = "rw" if write else "ro"
    conn = sqlite3.connect(f"file:{home / 'turnback.db'}?mode={mode}", uri=True)
    try:
        with conn:
            return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def run_child(
    home: Path,
    scenario: str,
    args: dict[str, Any],
    *,
    fault: str | None = None,
    fault_log: Path | None = None,
    expect_kill: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TURNBACK_") or k == "TURNBACK_DATABASE_URL"
    }
    if fault:
        env["TURNBACK_FAULT"] = fault
    if fault_log:
        env["TURNBACK_FAULT_LOG"] = str(fault_log)
    result = subprocess.run(
        [sys.executable, str(CHILD), scenario, str(home), json.dumps(args)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    if expect_kill:
        assert result.returncode == -signal.SIGKILL, (
            f"the child was meant to die at {fault} but exited {result.returncode}: "
            f"{result.stderr.decode()[-2000:]}"
        )
    else:
        assert result.returncode == 0, result.stderr.decode()[-2000:]
    return result


def kill_stream_after(home: Path, args: dict[str, Any], delay: float) -> Acks:
    """Run the ``stream`` scenario, SIGKILL it ``delay`` seconds after its turn began (or once
    it has ended), and read what it acknowledged."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), "stream", str(home), json.dumps(args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    ack = Path(args["ack"])
    deadline = time.monotonic() + 60
    while not ack.exists() and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.01)  # let it begin
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) in (-signal.SIGKILL, 0)
    return Acks.read(ack)


def dump(home: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every durable row, in a stable order."""
    return {table: sorted(query(home, f"SELECT * FROM {table}"), key=repr) for table in TABLES}


def event_id(event: dict[str, Any]) -> str | None:
    if event.get("sessionUpdate") == "_turnback/step_checkpoint":
        return f"step{event['step']}"
    meta = event.get("_meta")
    if isinstance(meta, dict) and "crash" in meta:
        return str(meta["crash"])
    return None


def durable_ids(home: Path, token: str) -> list[str]:
    """Ids of the stream's events that survived, from the journal or the committed timeline.
    Each chunk among them reads back whole, its text (stored apart) included."""
    rows = query(
        home,
        "SELECT id - id / 4294967296 * 4294967296, payload, text FROM events "
        "WHERE id / 4294967296 = (SELECT id FROM turns WHERE token = ?) ORDER BY id",
        (token,),
    )
    ids = []
    for _seq, payload, text in rows:
        try:
            event = whole_event(json.loads(payload), text)
        except ValueError:
            continue  # a row the test corrupted on purpose
        found = event_id(event)
        if found and event.get("sessionUpdate") == "agent_message_chunk":
            assert text is not None, f"the text of {found} was stored in its payload"
            assert event["content"] == {"type": "text", "text": f"chunk {found[1:]} "}, found
        if found:
            ids.append(found)
    return ids


def durable_text(ids: Sequence[str]) -> str:
    """The text the stream's chunks among ``ids`` hold, in order (see ``child.event``)."""
    return "".join(f"chunk {i[1:]} " for i in ids if i.startswith("e") and int(i[1:]) % 5)


def recorded_order(events: int, steps: bool) -> list[str]:
    return [f"step{i}" if steps and i % 7 == 0 else f"e{i}" for i in range(1, events + 1)]


def settle_and_check(home: Path, session_id: str) -> turnback.RecoveryReport:
    """Recover in a fresh process state, then prove recovery is idempotent and the session usable:
    a second recovery changes no row, and a new turn begins and completes on top."""
    with turnback.open(home) as tb:
        report = tb.recover()
        assert not report.live, f"no owner is alive, yet {report.live} were left running"
        settled = dump(home)
        again = tb.recover()
        assert dump(home) == settled, "a second recovery changed the durable state"
        assert [u.turn.token for u in again.set_aside] == [u.turn.token for u in report.set_aside]
        session = tb.session(session_id)
        head_before = session.record.head
        numbers = [t.number for t in session.turns() if t.status.ended]
        with session.turn("one more turn after the crash") as turn:
            turn.record({"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}})
        after = session.get_turn(turn.token)
        assert after.status is turnback.TurnStatus.COMPLETED
        assert after.parent == head_before
        assert after.number == (max(numbers) if numbers else 0) + 1
    return report


def check_stream(
    home: Path, session_id: str, acks: Acks, *, mode: str, events: int, steps: bool
) -> None:
    """The invariants of a killed stream, after recovery."""
    with turnback.open(home) as tb:
        turns = [t for t in tb.session(session_id).turns() if t.prompt == "do the work"]
    if acks.begun is None:
        assert len(turns) <= 1, "a turn that never returned from begin exists twice"
    else:
        assert [t.token for t in turns] == [acks.begun], "the acknowledged turn was lost"
    if not turns:
        return
    turn = turns[0]
    ids = durable_ids(home, turn.token)
    assert len(ids) == len(set(ids)), f"an event is present twice: {ids}"
    order = recorded_order(events, steps)
    assert ids == order[: len(ids)], "what survived is not a prefix of what was recorded"
    acked = [e["id"] for e in acks.events]
    if mode == "strict":
        required = acked
    elif mode == "batched":
        required = [e["id"] for e in acks.events if e["boundary"]]
    else:
        required = acked if acks.ended else []
    missing = [i for i in required if i not in ids]
    assert not missing, f"acknowledged events were lost under {mode}: {missing}"
    if acks.ended:
        expected = {"complete": "completed", "fail": "failed", "cancel": "cancelled"}[acks.ended]
        assert turn.status == expected
    else:
        assert turn.status.ended, f"turn left {turn.status} after recovery"
    with turnback.open(home) as tb:
        messages = tb.session(session_id).turn_messages(turn.token)
    assert [m.kind for m in messages].count(turnback.MessageKind.USER) == 1, "applied twice"
    agent = "".join(m.text for m in messages if m.kind is turnback.MessageKind.AGENT)
    assert agent == durable_text(ids), "the conversation does not hold the durable chunks' text"
