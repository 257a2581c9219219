"""Benchmark of the journal's durability modes (docs/design.md, invariant 3) and of recovery.

    python bench/journal.py                  # the recorded run, about a minute
    python bench/journal.py --smoke          # tiny sizes, a few seconds (the smoke test)
    python bench/journal.py --events 5000 --turns 200 --dir /mnt/disk --json
    python bench/journal.py --database-url postgresql://user@host/db   # and a fleet's store

Every goal is read next to a baseline measured in the same run on the same filesystem, because
absolute times on shared machines drift. Measurements that are compared with each other run in
interleaved rounds, so a slow stretch of the machine hits both sides alike.

(s0)  raw ``os.write`` + ``os.fdatasync`` of records the size of one event, appending to a file
(s0') the same, overwriting a preallocated file (no block allocation: what a reused WAL does)
(s)   ``strict``: ``turn.record()`` of agent_message_chunk events        goal: >= 0.7x (s0)
(c)   one strict durable commit, 1 / (s): the cost floor of one synced transaction
(e4)  completing a turn of a quarter as many chunks as (s), in ``turn`` mode
(e)   completing the strict turn, 4x (e4)'s chunks (no goal): its journal's rows stay in place as
      its timeline, so the ratio to (e4) is about 1, not the 4 a cost linear in events would give
(b0)  ``turn`` mode: ``turn.record()`` with nothing synced, the ceiling for (b)
(b)   ``batched`` (default): events/s including the final flush, a tool_call boundary every 100
      goal: >= 0.25x (b0) (the 50,000 events/s first set, against the (b0) of that time: a
      ratio, so a slower CPU does not fail it)
(w)   how long an acknowledged boundary event waited in ``record()``: median and longest
(r)   ``recover()`` of turns left running by a SIGKILLed process, per turn, the journal alone
      (``checkpoints=False`` where turnback has workspace checkpoints)   goal: < 5 ms a turn
(m0)  the text of a streamed chunk (bytes), the least any fold of it can keep
(m)   what a running turn keeps in memory per streamed chunk (bytes, traced by ``tracemalloc``
      across a turn of (b)'s chunks in batched mode, the journal flushed as it goes): the folded
      conversation, which grows with the turn (it keeps the seqs of text chunks, not their text)
                                                         goal: <= (m0) + 50 bytes a chunk
(r')  the same with turnback's default options (a workspace capture per recovered turn, where
      turnback has workspace checkpoints)                              goal: < 5 ms a turn
(d0)  the payload of an agent_message_chunk event of 120 characters of text (its JSON, bytes)
(d)   the database's bytes per such event: turns of 1,000 recorded and completed, VACUUMed,
      the pages of ``events`` and ``messages`` and their indexes from SQLite's ``dbstat``
                                                                goal: <= 1.25x (d0) + 40 bytes
(D0), (D) the same for chunks of 4,000 characters                 goal: <= 1.25x (D0) + 40 bytes
(sm0) a plain ``SELECT group_concat(text, '')`` of the texts of 100 turns of 1,000 chunks,
      by turn, from a table of their own keyed (turn, seq), in a file of their own
(sm)  ``Session.messages()`` of a session of those turns (what ``session/load`` replays),
      interleaved with (sm0), medians                                 goal: <= 2x (sm0)
(lg)  LangGraph's SQLite checkpointer (``SqliteSaver.put_writes``, langgraph-checkpoint-sqlite in
      a virtualenv of its own, ``bench/.langgraph``, which ``make`` makes) storing chunk events
      of 4,000 characters, 100 to a call (a committed transaction each), in a process of its own
(b4)  ``batched``: ``turn.record()`` of the same events, a tool_call boundary every 100,
      including the final flush, interleaved with (lg) in rounds      goal: >= 1.0x (lg)
(b4t) floor: the same in ``turn`` mode (nothing synced but the one flush at the end of each
      round), interleaved with them: what recording costs without any durability work

With ``--database-url postgresql://…`` the same run also measures a fleet's store, each in a
scratch schema of that database (dropped at the end):

(p0)  a raw psycopg loop of INSERT + COMMIT, one row the size of an event, on the same server
(ps)  ``strict`` on PostgreSQL: ``turn.record()``, interleaved with (p0)   goal: >= 0.7x (p0)
(pb)  ``batched`` on PostgreSQL, as (b)                                   goal: >= 0.5x (b)
(pr)  ``recover()`` on PostgreSQL, journal only, per turn
(pl)  a machine (``TURNBACK_HOST``) with a 1 s lease begins a turn and dies; a peer on another
      host runs ``recover()`` every 0.5 s: the time from the lease's expiry, in database time,
      to the turn recovered, median of three                           goal: < 2 s

Each session works in one small generated project, kept apart from every turnback home.

The exit code is 0 when a goal is missed (this is a measurement; MISS is printed), 1 when the
benchmark itself went wrong (say recovery did not recover every turn it should have).
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    import turnback
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(SRC))
    import turnback

from rounds import verdict  # noqa: E402

#: one streamed piece of an agent's answer, the most common event by far
CHUNK: dict[str, Any] = {
    "sessionUpdate": "agent_message_chunk",
    "content": {"type": "text", "text": "Looking at the failing test, the fixture opens the " * 2},
}
BOUNDARY_EVERY = 100

STRICT_GOAL = 0.7  # strict appends >= this x raw append + fdatasync
BATCHED_GOAL = 0.25  # batched events/s >= this x turn mode's (50,000/s against 202,000/s)
RECOVER_GOAL = 0.005  # seconds per interrupted turn
FOLD_MEMORY_GOAL = 50.0  # bytes kept per streamed chunk beyond its text
STORAGE_GOAL = (1.25, 40)  # database bytes per event <= this x its payload + these bytes
PG_BATCHED_GOAL = 0.5  # batched on PostgreSQL >= this x batched on SQLite
LEASE_SECONDS = 1.0  # the dying machine's lease in the lease-expiry measurement
LEASE_POLL = 0.5  # how often its peer runs recover()
LEASE_GOAL = 2.0  # seconds from lease expiry to recovery

#: Runs in a child process: begin one turn in each of many sessions, record a few events (one an
#: unfinished tool call), make them durable, and die by SIGKILL without ending any turn.
CRASHING_CHILD = """
import json, os, signal, sys
import turnback
home, workspace, turns, events = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
chunk = {chunk!r}
tb = turnback.open(home, **json.loads(sys.argv[5]))
for i in range(turns):
    turn = tb.create_session(workspace, title=f"bench {{i}}").turn(f"prompt {{i}}")
    for j in range(events):
        if j == 1:
            turn.record({{"sessionUpdate": "tool_call", "toolCallId": f"call-{{i}}",
                         "title": "Run the tests", "kind": "execute", "status": "pending"}})
        else:
            turn.record(chunk)
tb.journal.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""


class BenchError(Exception):
    """The benchmark could not measure what it meant to (not a missed goal)."""


def journal_only() -> dict[str, Any]:
    """Options that leave out workspace checkpoints, where this turnback has them, so that a turn
    costs only its journal (no git capture at its begin, end and recovery)."""
    if "checkpoints" in inspect.signature(turnback.Turnback).parameters:
        return {"checkpoints": False}
    return {}


def make_workspace(scratch: Path) -> Path:
    """A small project for the sessions to work in, apart from every turnback home."""
    workspace = scratch / "workspace"
    (workspace / "src").mkdir(parents=True)
    (workspace / "tests").mkdir()
    (workspace / "README.md").write_text("# app\n\nA small project.\n")
    (workspace / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (workspace / "tests" / "test_app.py").write_text(
        "from app import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    return workspace


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    what: str
    value: float  # "/s": events per second; "s": seconds (the table shows ms); "B": bytes
    unit: str
    baseline: str | None = None  # the id of the row the ratio is against
    ratio: float | None = None
    goal: str = ""
    met: bool | None = None  # None: no goal


@dataclass(frozen=True, slots=True)
class Sizes:
    events: int
    batched_events: int
    turns: int
    events_per_turn: int
    memory_chunks: int
    storage_events: int
    rounds: int
    message_turns: int = 100
    message_chunks: int = 1_000
    pg_events: int = 0
    pg_batched_events: int = 0


# -- measurements ------------------------------------------------------------------------------


def split(total: int, rounds: int) -> Iterator[int]:
    """``total`` as ``rounds`` near-equal positive parts."""
    rounds = max(1, min(rounds, total))
    for i in range(rounds):
        yield total * (i + 1) // rounds - total * i // rounds


def bench_strict(scratch: Path, workspace: Path, events: int, rounds: int) -> list[Row]:
    """(s0), (s0'), (s), (c): strict appends against raw synced writes, interleaved; (e4), (e):
    completing turns of a quarter as many chunks and of all of them."""
    record = json.dumps(CHUNK, separators=(",", ":"), ensure_ascii=False).encode()
    appending = os.open(scratch / "raw-append", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    overwriting = os.open(scratch / "raw-overwrite", os.O_WRONLY | os.O_CREAT, 0o600)
    tb = turnback.open(scratch / "strict", durability="strict", **journal_only())
    try:
        os.write(overwriting, bytes(len(record) * events))
        os.fsync(overwriting)
        os.lseek(overwriting, 0, os.SEEK_SET)
        turn = tb.create_session(workspace, title="strict").turn("bench strict appends")
        turn.record(CHUNK)  # warm up: the first commit of a fresh database costs more

        def raw_append(n: int) -> None:
            for _ in range(n):
                os.write(appending, record)
                os.fdatasync(appending)

        def raw_overwrite(n: int) -> None:
            for _ in range(n):
                os.write(overwriting, record)
                os.fdatasync(overwriting)

        def strict(n: int) -> None:
            for _ in range(n):
                turn.record(CHUNK)

        runs = [raw_append, raw_overwrite, strict]
        spent = dict.fromkeys(runs, 0.0)
        for i, n in enumerate(split(events, rounds)):
            for run in runs[i % 3 :] + runs[: i % 3]:  # rotate who goes first
                started = time.perf_counter()
                run(n)
                spent[run] += time.perf_counter() - started
        started = time.perf_counter()
        turn.complete()
        commit = time.perf_counter() - started
    finally:
        os.close(appending)
        os.close(overwriting)
        tb.close()
    append_rate = events / spent[raw_append]
    overwrite_rate = events / spent[raw_overwrite]
    strict_rate = events / spent[strict]
    floor = spent[strict] / events
    quarter = (events + 1) // 4
    quarter_commit = time_complete(scratch, workspace, quarter)
    size = f"{len(record)} B"
    return [
        Row("s0", f"raw os.write + fdatasync, appending ({size})", append_rate, "/s"),
        Row(
            "s0'",
            "raw os.write + fdatasync, preallocated file",
            overwrite_rate,
            "/s",
            "s0",
            overwrite_rate / append_rate,
        ),
        Row(
            "s",
            "strict: durable turn.record() appends",
            strict_rate,
            "/s",
            "s0",
            strict_rate / append_rate,
            f">= {STRICT_GOAL:.1f}x (s0)",
            strict_rate >= STRICT_GOAL * append_rate,
        ),
        Row(
            "s'", "  the same against (s0')", strict_rate, "/s", "s0'", strict_rate / overwrite_rate
        ),
        Row("c", "one strict durable commit, 1 / (s)", floor, "s"),
        Row("e4", f"complete() of a turn of {quarter:,} chunks", quarter_commit, "s"),
        Row(
            "e",
            f"complete() of the strict turn, {events + 1:,} chunks (4x (e4)'s; it does not grow "
            "with the turn, so about 1x)",
            commit,
            "s",
            "e4",
            commit / quarter_commit,
        ),
    ]


def time_complete(scratch: Path, workspace: Path, chunks: int) -> float:
    """Seconds ``complete()`` takes to fold a turn of ``chunks`` chunks into its session."""
    with turnback.open(scratch / "complete", durability="turn", **journal_only()) as tb:
        turn = tb.create_session(workspace, title="complete").turn("bench complete")
        for _ in range(chunks):
            turn.record(CHUNK)
        started = time.perf_counter()
        turn.complete()
        return time.perf_counter() - started


def bench_batched(
    scratch: Path, workspace: Path, events: int, rounds: int, floor: float
) -> tuple[list[Row], float]:
    """(b0), (b), (w): batched against turn mode, interleaved; boundary waits timed in record()."""
    batched_tb = turnback.open(scratch / "batched", **journal_only())  # the default mode
    turn_tb = turnback.open(scratch / "turn-mode", durability="turn", **journal_only())
    waits: list[float] = []
    try:
        batched = batched_tb.create_session(workspace, title="batched").turn("bench batched")
        unsynced = turn_tb.create_session(workspace, title="turn mode").turn("bench turn mode")
        spent = {"batched": 0.0, "turn": 0.0}
        done = 0
        for i, n in enumerate(split(events, rounds)):
            order = ["batched", "turn"] if i % 2 == 0 else ["turn", "batched"]
            for mode in order:
                turn = batched if mode == "batched" else unsynced
                mine: list[float] = []
                started = time.perf_counter()
                for seq in range(done, done + n):
                    if seq % BOUNDARY_EVERY == BOUNDARY_EVERY - 1:
                        event = {
                            "sessionUpdate": "tool_call",
                            "toolCallId": f"call-{seq}",
                            "title": "Read src/app.py",
                            "kind": "read",
                            "status": "pending",
                        }
                        before = time.perf_counter()
                        turn.record(event)
                        mine.append(time.perf_counter() - before)
                    else:
                        turn.record(CHUNK)
                if mode == "batched":
                    batched_tb.journal.flush()  # the round counts once all of it is durable
                    waits += mine
                spent[mode] += time.perf_counter() - started
            done += n
        journal_longest = batched_tb.journal.longest_boundary_wait
    finally:
        batched_tb.close()
        turn_tb.close()
    if not waits:
        raise BenchError(f"{events} batched events include no boundary event; use more events")
    turn_rate = events / spent["turn"]
    batched_rate = events / spent["batched"]
    median, longest = statistics.median(waits), max(waits)
    rows = [
        Row("b0", "turn mode: turn.record(), nothing synced", turn_rate, "/s"),
        Row(
            "b",
            f"batched: turn.record(), boundary every {BOUNDARY_EVERY}, incl. final flush",
            batched_rate,
            "/s",
            "b0",
            batched_rate / turn_rate,
            f">= {BATCHED_GOAL:.2f}x (b0)",
            batched_rate >= BATCHED_GOAL * turn_rate,
        ),
        Row(
            "w50",
            f"  boundary event wait, median of {len(waits):,}",
            median,
            "s",
            "c",
            median / floor,
        ),
        Row("wmax", "  boundary event wait, longest", longest, "s", "c", longest / floor),
    ]
    return rows, journal_longest


def bench_fold_memory(scratch: Path, workspace: Path, chunks: int) -> list[Row]:
    """(m0), (m): the memory a running turn keeps per chunk, from tracemalloc."""
    text = CHUNK["content"]["text"]
    with turnback.open(scratch / "memory", **journal_only()) as tb:
        turn = tb.create_session(workspace, title="memory").turn("bench memory")
        turn.record(CHUNK)  # the first event: whatever is built once is built now
        tb.journal.flush()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for seq in range(chunks):
                # a new event each time, as parsed off the agent's wire
                turn.record({**CHUNK, "content": {"type": "text", "text": f"{text}{seq:06d}"}})
                if seq % 1000 == 999:
                    tb.journal.flush()
            tb.journal.flush()
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        turn.complete()
    size = len(text.encode()) + 6
    per_chunk = kept / chunks
    return [
        Row("m0", "text of one streamed chunk", size, "B"),
        Row(
            "m",
            f"memory a running turn keeps per chunk, its text included, {chunks:,} chunks",
            per_chunk,
            "B",
            "m0",
            per_chunk / size,
            f"<= (m0) + {FOLD_MEMORY_GOAL:.0f} B",
            per_chunk <= size + FOLD_MEMORY_GOAL,
        ),
    ]


def bench_storage(scratch: Path, workspace: Path, text: int, events: int, ids: str) -> list[Row]:
    """(d0), (d) or (D0), (D): the bytes the database spends on an event of ``text`` characters,
    against its payload."""
    words = "Looking at the failing test, the fixture opens the database twice. "
    event = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": (words * (text // len(words) + 1))[:text]},
    }
    payload = len(json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode())
    home = scratch / f"storage-{text}"
    with turnback.open(home, durability="turn", **journal_only()) as tb:
        session = tb.create_session(workspace, title=f"storage {text}")
        for count in split(events, max(1, events // 1000)):
            with session.turn("bench storage") as turn:
                for _ in range(count):
                    turn.record(event)
    conn = sqlite3.connect(home / "turnback.db")
    try:
        conn.execute("VACUUM")
        [(used,)] = conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name IN ('events', 'messages') "
            "OR name IN (SELECT name FROM sqlite_master WHERE type = 'index' "
            "AND tbl_name IN ('events', 'messages'))"
        ).fetchall()
    finally:
        conn.close()
    per_event = used / events
    goal = STORAGE_GOAL[0] * payload + STORAGE_GOAL[1]
    return [
        Row(f"{ids}0", f"payload of a chunk event of {text:,} characters", payload, "B"),
        Row(
            ids,
            f"database bytes per such event (events + messages, {events:,} events)",
            per_event,
            "B",
            f"{ids}0",
            per_event / payload,
            f"<= {STORAGE_GOAL[0]}x ({ids}0) + {STORAGE_GOAL[1]} B",
            per_event <= goal,
        ),
    ]


MESSAGES_GOAL = 2.0  # Session.messages() <= this x a plain group_concat of the same texts


def bench_messages(
    scratch: Path, workspace: Path, turns: int, chunks: int, rounds: int
) -> list[Row]:
    """(sm0), (sm): reading back the conversation of ``turns`` turns of ``chunks`` chunks each,
    against a plain ``SELECT group_concat`` of the same texts from a table of their own, in
    interleaved rounds (medians)."""
    text = CHUNK["content"]["text"]
    home = scratch / "messages"
    texts = sqlite3.connect(scratch / "texts.db", isolation_level=None)
    texts.execute(  # in key order: group_concat by turn reads it without sorting
        "CREATE TABLE chunks (turn INTEGER NOT NULL, seq INTEGER NOT NULL, text TEXT NOT NULL, "
        "PRIMARY KEY (turn, seq)) WITHOUT ROWID"
    )
    texts.execute("BEGIN")
    with turnback.open(home, durability="turn", **journal_only()) as tb:
        session = tb.create_session(workspace, title="messages")
        for number in range(turns):
            with session.turn(f"prompt {number}") as turn:
                for seq in range(chunks):
                    chunk_text = f"{text}{seq:06d}"
                    turn.record({**CHUNK, "content": {"type": "text", "text": chunk_text}})
                    texts.execute("INSERT INTO chunks VALUES (?, ?, ?)", (number, seq, chunk_text))
    texts.execute("COMMIT")
    plain: list[float] = []
    read: list[float] = []
    try:
        with turnback.open(home, **journal_only()) as tb:
            session = tb.session(session.id)
            for i in range(rounds):
                for side in ("plain", "read") if i % 2 else ("read", "plain"):
                    started = time.perf_counter()
                    if side == "plain":
                        joined = texts.execute(
                            "SELECT group_concat(text, '') FROM chunks GROUP BY turn"
                        ).fetchall()
                        plain.append(time.perf_counter() - started)
                        assert len(joined) == turns
                    else:
                        messages = session.messages()
                        read.append(time.perf_counter() - started)
                        assert len(messages) == 2 * turns and messages[1].text.startswith(text)
    finally:
        texts.close()
    baseline, measured = statistics.median(plain), statistics.median(read)
    return [
        Row(
            "sm0",
            f"plain SELECT group_concat of the texts of {turns} x {chunks:,} chunks, by turn",
            baseline,
            "s",
        ),
        Row(
            "sm",
            f"Session.messages() of a session of {turns} turns x {chunks:,} chunks",
            measured,
            "s",
            "sm0",
            measured / baseline,
            f"<= {MESSAGES_GOAL:.0f}x (sm0)",
            measured <= MESSAGES_GOAL * baseline,
        ),
    ]


LANGGRAPH = Path(__file__).resolve().parent / ".langgraph"
LANGGRAPH_GOAL = 1.0  # 4 KB batched appends >= this x LangGraph's put_writes


def bench_langgraph(scratch: Path, workspace: Path, events: int, rounds: int) -> list[Row]:
    """(lg), (b4): 4 KB events through LangGraph's SqliteSaver.put_writes and turnback's batched
    mode, interleaved."""
    python = LANGGRAPH / "bin" / "python"
    if not (LANGGRAPH / ".installed").exists():
        raise BenchError(
            f"the (lg) row needs LangGraph's checkpointer in {LANGGRAPH}; run "
            "`make bench/.langgraph/.installed` (pip install from PyPI) first"
        )
    text = 4000
    words = "Looking at the failing test, the fixture opens the database twice. "
    event = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": (words * (text // len(words) + 1))[:text]},
    }
    peer_script = Path(__file__).with_name("langgraph_peer.py")
    peer = subprocess.Popen(
        [python, peer_script, scratch / "langgraph.db", str(BOUNDARY_EVERY), str(text)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert peer.stdin is not None and peer.stdout is not None
    handles = {
        mode: turnback.open(scratch / f"{mode}-4k", durability=mode, **journal_only())
        for mode in ("batched", "turn")
    }
    try:
        if peer.stdout.readline().strip() != "ready":
            raise BenchError("LangGraph's peer process did not start (its error is above)")
        turns = {
            mode: tb.create_session(workspace, title=f"{mode} 4 KB").turn("bench 4 KB")
            for mode, tb in handles.items()
        }
        sides = ["batched", "langgraph", "turn"]
        spent = dict.fromkeys(sides, 0.0)
        done = 0
        for i, n in enumerate(split(events, rounds)):
            for side in sides[i % 3 :] + sides[: i % 3]:
                if side == "langgraph":
                    peer.stdin.write(f"{n}\n")
                    peer.stdin.flush()
                    spent[side] += float(peer.stdout.readline())
                    continue
                tb, turn = handles[side], turns[side]
                started = time.perf_counter()
                for seq in range(done, done + n):
                    if seq % BOUNDARY_EVERY == BOUNDARY_EVERY - 1:
                        turn.record(
                            {
                                "sessionUpdate": "tool_call",
                                "toolCallId": f"call-{seq}",
                                "title": "Read src/app.py",
                                "kind": "read",
                                "status": "pending",
                            }
                        )
                    else:
                        turn.record(event)
                tb.journal.flush()
                spent[side] += time.perf_counter() - started
            done += n
        for turn in turns.values():
            turn.complete()
    finally:
        for tb in handles.values():
            tb.close()
        peer.stdin.close()
        peer.wait(timeout=60)
    langgraph_rate, turnback_rate = events / spent["langgraph"], events / spent["batched"]
    floor = events / spent["turn"]
    return [
        Row(
            "lg",
            f"LangGraph SqliteSaver.put_writes of 4,000-character chunks, {BOUNDARY_EVERY} a call",
            langgraph_rate,
            "/s",
        ),
        Row(
            "b4",
            f"batched: turn.record() of the same chunks, boundary every {BOUNDARY_EVERY}",
            turnback_rate,
            "/s",
            "lg",
            turnback_rate / langgraph_rate,
            f">= {LANGGRAPH_GOAL:.1f}x (lg)",
            turnback_rate >= LANGGRAPH_GOAL * langgraph_rate,
        ),
        Row(
            "b4t",
            "floor: the same in turn mode (nothing synced but once a round)",
            floor,
            "/s",
            "lg",
            floor / langgraph_rate,
        ),
    ]


def crash_child(
    home: Path,
    workspace: Path,
    turns: int,
    events: int,
    options: dict[str, Any],
    name: str,
    extra_env: dict[str, str] | None = None,
) -> None:
    """Run CRASHING_CHILD with ``options``; it must die by SIGKILL, its turns left running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNBACK_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    env.update(extra_env or {})
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            CRASHING_CHILD.format(chunk=CHUNK),
            str(home),
            str(workspace),
            str(turns),
            str(events),
            json.dumps(options),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != -signal.SIGKILL:
        raise BenchError(
            f"the child that begins {turns} turns ({name}) should have died by SIGKILL, but "
            f"exited with {child.returncode}:\n{child.stderr.strip()}"
        )


def bench_recover(
    home: Path,
    workspace: Path,
    turns: int,
    events: int,
    options: dict[str, Any],
    name: str,
) -> float:
    """Seconds per turn of ``recover()`` of ``turns`` turns, begun with ``options`` by a process
    that was then SIGKILLed."""
    crash_child(home, workspace, turns, events, options, name)
    with turnback.open(home, **options) as tb:
        started = time.perf_counter()
        report = tb.recover()
        spent = time.perf_counter() - started
    if len(report.recovered) != turns or report.set_aside or report.live:
        raise BenchError(
            f"recover() ({name}) should have recovered all {turns} turns, but recovered "
            f"{len(report.recovered)}, set aside {len(report.set_aside)} and found "
            f"{len(report.live)} live"
        )
    return spent / turns


def recover_rows(
    scratch: Path, workspace: Path, turns: int, events: int, floor: float
) -> list[Row]:
    """(r) the journal's recovery alone, (r') recovery with turnback's default options."""
    rows: list[Row] = []
    for i, (row_id, options, name) in enumerate(
        (
            ("r", journal_only(), "journal only" if journal_only() else "default options"),
            ("r'", {}, "default options"),
        )
    ):
        home = scratch / f"recover-{i}"
        per_turn = bench_recover(home, workspace, turns, events, options, name)
        what = f"recover(), {name}, per turn"
        if row_id == "r":
            what += f" ({turns:,} turns of {events} events, owner SIGKILLed)"
        rows.append(
            Row(
                row_id,
                what,
                per_turn,
                "s",
                "c",
                per_turn / floor,
                f"< {RECOVER_GOAL * 1000:g} ms",
                per_turn < RECOVER_GOAL,
            )
        )
    return rows


# -- a fleet's store: PostgreSQL -----------------------------------------------------------------


@contextmanager
def scratch_schema(url: str) -> Iterator[Callable[[str], str]]:
    """URLs of fresh schemas in the database ``url`` names, all dropped at the end: the benchmark
    never touches the database's own tables."""
    import psycopg

    names: list[str] = []

    def schema(name: str) -> str:
        full = f"turnback_bench_{os.getpid()}_{name}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{full}" CASCADE')
            conn.execute(f'CREATE SCHEMA "{full}"')
        names.append(full)
        return f"{url}{'&' if '?' in url else '?'}options={quote(f'-c search_path={full}')}"

    try:
        yield schema
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for full in names:
                conn.execute(f'DROP SCHEMA IF EXISTS "{full}" CASCADE')


def server_settings(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
        commit = conn.execute("SHOW synchronous_commit").fetchone()
    return (
        f"PostgreSQL {version[0] if version else '?'}, fsync={fsync[0] if fsync else '?'}, "
        f"synchronous_commit={commit[0] if commit else '?'}"
    )


def bench_postgres(url: str, workspace: Path, sizes: Sizes, sqlite_batched: float) -> list[Row]:
    """(p0), (ps): strict appends against a raw psycopg INSERT + COMMIT loop, interleaved; (pb)
    batched against turnback's SQLite batched (b); (pr) recovery per turn; (pl) lease expiry to
    recovery by a peer that runs recover() every half second."""
    import psycopg

    record = json.dumps(CHUNK, separators=(",", ":"), ensure_ascii=False)
    with scratch_schema(url) as schema:
        raw = psycopg.connect(schema("raw"))
        raw.execute(
            "CREATE TABLE events (turn TEXT, seq BIGINT, kind TEXT, payload TEXT, "
            "at DOUBLE PRECISION, PRIMARY KEY (turn, seq))"
        )
        raw.commit()
        tb = turnback.open(
            workspace.parent / "pg-strict",
            durability="strict",
            database_url=schema("strict"),
            **journal_only(),
        )
        try:
            turn = tb.create_session(workspace, title="strict").turn("bench strict appends")
            turn.record(CHUNK)
            seq = iter(range(10**9))

            def raw_commit(n: int) -> None:
                for _ in range(n):
                    raw.execute(
                        "INSERT INTO events VALUES (%s, %s, %s, %s, %s)",
                        ("t", next(seq), "agent_message_chunk", record, time.time()),
                    )
                    raw.commit()

            def strict(n: int) -> None:
                for _ in range(n):
                    turn.record(CHUNK)

            spent = {raw_commit: 0.0, strict: 0.0}
            for i, n in enumerate(split(sizes.pg_events, sizes.rounds)):
                for run in (raw_commit, strict) if i % 2 == 0 else (strict, raw_commit):
                    started = time.perf_counter()
                    run(n)
                    spent[run] += time.perf_counter() - started
            turn.complete()
        finally:
            tb.close()
            raw.close()
        raw_rate = sizes.pg_events / spent[raw_commit]
        strict_rate = sizes.pg_events / spent[strict]

        progress(f"postgres batched: {sizes.pg_batched_events:,} events ...")
        with turnback.open(
            workspace.parent / "pg-batched", database_url=schema("batched"), **journal_only()
        ) as tb:
            turn = tb.create_session(workspace, title="batched").turn("bench batched")
            started = time.perf_counter()
            for i in range(sizes.pg_batched_events):
                if i % BOUNDARY_EVERY == BOUNDARY_EVERY - 1:
                    turn.record(
                        {"sessionUpdate": "tool_call", "toolCallId": f"c{i}", "status": "pending"}
                    )
                else:
                    turn.record(CHUNK)
            tb.journal.flush()
            batched_rate = sizes.pg_batched_events / (time.perf_counter() - started)
            turn.complete()

        progress(f"postgres recover: {sizes.turns:,} turns left by a killed process ...")
        options = {**journal_only(), "database_url": schema("recover")}
        per_turn = bench_recover(
            workspace.parent / "pg-recover",
            workspace,
            sizes.turns,
            sizes.events_per_turn,
            options,
            "PostgreSQL",
        )
        progress("postgres lease expiry: a machine dies, a peer takes its turn over ...")
        lags = [lease_expiry_to_recovery(schema(f"lease{i}"), workspace) for i in range(3)]
    lag = statistics.median(lags)
    return [
        Row("p0", "raw psycopg INSERT + COMMIT, one row an event", raw_rate, "/s"),
        Row(
            "ps",
            "strict on PostgreSQL: durable turn.record() appends",
            strict_rate,
            "/s",
            "p0",
            strict_rate / raw_rate,
            f">= {STRICT_GOAL:.1f}x (p0)",
            strict_rate >= STRICT_GOAL * raw_rate,
        ),
        Row(
            "pb",
            f"batched on PostgreSQL, boundary every {BOUNDARY_EVERY}, incl. final flush",
            batched_rate,
            "/s",
            "b",
            batched_rate / sqlite_batched,
            f">= {PG_BATCHED_GOAL:.1f}x (b)",
            batched_rate >= PG_BATCHED_GOAL * sqlite_batched,
        ),
        Row("pr", "recover() on PostgreSQL, journal only, per turn", per_turn, "s"),
        Row(
            "pl",
            f"lease expiry to recovered, peer polling every {LEASE_POLL}s "
            f"(median of {len(lags)}: {', '.join(f'{x:.2f}' for x in lags)} s)",
            lag,
            "s",
            goal=f"< {LEASE_GOAL:g} s",
            met=lag < LEASE_GOAL,
        ),
    ]


def lease_expiry_to_recovery(url: str, workspace: Path) -> float:
    """Seconds from the lease's expiry (database time) of a turn whose machine died to its
    recovery by a peer on another host that runs ``recover()`` every LEASE_POLL seconds."""
    options = {**journal_only(), "database_url": url}
    home = workspace.parent / f"pg-lease-{time.monotonic_ns()}"
    machine = {"TURNBACK_HOST": "dying-machine", "TURNBACK_LEASE_SECONDS": str(LEASE_SECONDS)}
    crash_child(home, workspace, 1, 3, options, "the dying machine", machine)
    previous = os.environ.get("TURNBACK_HOST")
    os.environ["TURNBACK_HOST"] = "peer-machine"
    try:
        with turnback.open(home, **options) as tb:
            with tb.store.read() as tx:
                [running] = tx.turns_with_status(turnback.TurnStatus.RUNNING)
                owner = tx.get_owner(running.owner_id or "")
            if owner is None or owner.lease_expires is None:
                raise BenchError("the dying machine's turn has no lease")
            while True:  # the peer's loop
                if tb.recover().recovered:
                    with tb.store.read() as tx:
                        return tx.now() - owner.lease_expires
                time.sleep(LEASE_POLL)
    finally:
        if previous is None:
            os.environ.pop("TURNBACK_HOST", None)
        else:
            os.environ["TURNBACK_HOST"] = previous


# -- the report --------------------------------------------------------------------------------


def filesystem_type(path: Path) -> str:
    try:
        out = subprocess.run(
            ["df", "-T", str(path)], capture_output=True, text=True, check=True
        ).stdout
        return out.splitlines()[1].split()[1]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def value_text(row: Row) -> str:
    if row.unit == "/s":
        return f"{row.value:,.0f} /s"
    if row.unit == "B":
        return f"{row.value:,.0f} B"
    ms = row.value * 1000  # seconds, shown in ms
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def ratio_text(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.3g}x"


def table(rows: list[Row]) -> str:
    baselines = {row.baseline for row in rows}
    lines = [
        "| | measurement | value | ratio | goal | result |",
        "|---|---|---:|---:|---|---|",
    ]
    for row in rows:
        ratio = f"{ratio_text(row.ratio)} ({row.baseline})" if row.ratio is not None else ""
        if row.id in baselines:
            ratio = ratio or "baseline"
        lines.append(
            f"| ({row.id}) | {row.what} | {value_text(row)} | {ratio} | {row.goal} | "
            f"{verdict(row.met)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--events", type=int, help="strict events (default 30,000)")
    parser.add_argument("--batched-events", type=int, help="batched events (default 500,000)")
    parser.add_argument("--turns", type=int, help="interrupted turns to recover (default 1,000)")
    parser.add_argument("--events-per-turn", type=int, default=5)
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 20)")
    parser.add_argument("--dir", type=Path, help="where to measure (default: the current dir)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument(
        "--database-url", help="also measure a PostgreSQL store (scratch schemas in this database)"
    )
    parser.add_argument("--pg-events", type=int, help="strict events on PostgreSQL (default 5,000)")
    args = parser.parse_args(argv)
    small = args.smoke
    sizes = Sizes(
        events=args.events or (200 if small else 30_000),
        batched_events=args.batched_events or (5_000 if small else 500_000),
        turns=args.turns or (50 if small else 1_000),
        events_per_turn=max(2, args.events_per_turn),
        rounds=args.rounds or (4 if small else 20),
        memory_chunks=2_000 if small else 100_000,
        storage_events=2_000 if small else 20_000,
        message_turns=10 if small else 100,
        message_chunks=100 if small else 1_000,
        pg_events=args.pg_events or (100 if small else 5_000),
        pg_batched_events=(2_000 if small else 100_000),
    )
    postgres = None
    if args.database_url:  # before anything is measured: a URL that cannot be used is one line
        try:
            postgres = server_settings(args.database_url)
        except Exception as error:  # psycopg's errors, or psycopg missing
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            print(
                f"bench/journal.py: cannot use the PostgreSQL database --database-url names "
                f"({reason}); check that the server is running and the URL names it (with the "
                "postgres extra installed), then retry",
                file=sys.stderr,
            )
            return 1
    parent = (args.dir or Path.cwd()).resolve()
    parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".turnback-bench-journal-", dir=parent))
    machine: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "filesystem": filesystem_type(scratch),
        "dir": str(parent),
        "load_average_before": round(os.getloadavg()[0], 2),
    }
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    try:
        progress(f"strict: {sizes.events:,} events against raw synced writes ...")
        workspace = make_workspace(scratch)
        rows = bench_strict(scratch, workspace, sizes.events, sizes.rounds)
        floor = next(row.value for row in rows if row.id == "c")
        progress(f"batched: {sizes.batched_events:,} events against turn mode ...")
        batched, journal_longest = bench_batched(
            scratch, workspace, sizes.batched_events, sizes.rounds, floor
        )
        rows += batched
        progress(f"memory: {sizes.memory_chunks:,} chunks of a running turn, traced ...")
        rows += bench_fold_memory(scratch, workspace, sizes.memory_chunks)
        progress(f"storage: {sizes.storage_events:,} events of 120 and 4,000 characters ...")
        rows += bench_storage(scratch, workspace, 120, sizes.storage_events, "d")
        rows += bench_storage(scratch, workspace, 4000, sizes.storage_events // 4, "D")
        progress(f"messages: {sizes.message_turns} turns of {sizes.message_chunks:,} chunks ...")
        rows += bench_messages(
            scratch, workspace, sizes.message_turns, sizes.message_chunks, sizes.rounds // 2 + 1
        )
        progress(f"4 KB: {sizes.batched_events // 25:,} events against LangGraph's put_writes ...")
        rows += bench_langgraph(scratch, workspace, sizes.batched_events // 25, sizes.rounds)
        progress(f"recover: {sizes.turns:,} turns left by a killed process ...")
        rows += recover_rows(scratch, workspace, sizes.turns, sizes.events_per_turn, floor)
        if args.database_url:
            machine["postgres"] = postgres
            progress(f"postgres strict: {sizes.pg_events:,} events against raw commits ...")
            sqlite_batched = next(row.value for row in rows if row.id == "b")
            rows += bench_postgres(args.database_url, workspace, sizes, sqlite_batched)
    except BenchError as error:
        print(f"bench/journal.py: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load_before, load_after = machine["load_average_before"], round(os.getloadavg()[0], 2)
    machine["load_average_after"] = load_after
    missed = [row for row in rows if row.met is False]
    if args.json:
        print(
            json.dumps(
                {
                    "date": date,
                    "machine": machine,
                    "sizes": asdict(sizes),
                    "journal_longest_boundary_wait": journal_longest,
                    "rows": [asdict(row) for row in rows],
                    "goals_met": not missed,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"\n{date}; {machine['cores']} cores, Python {machine['python']}, "
        f"{machine['filesystem']} at {machine['dir']}; load average {load_before:.2f} before, "
        f"{load_after:.2f} after"
        + (f"; {machine['postgres']} over {args.database_url}" if args.database_url else "")
    )
    print(
        f"strict {sizes.events:,} events, batched {sizes.batched_events:,} events, "
        f"recover {sizes.turns:,} turns x {sizes.events_per_turn} events; "
        f"{sizes.rounds} interleaved rounds\n"
    )
    print(table(rows))
    if small:
        print("\n--smoke sizes only show that the benchmark runs; its numbers mean little.")
    print(
        f"\nJournal.longest_boundary_wait (the flush alone): {journal_longest * 1000:.3g} ms. "
        "Ratios against (c) are in units of one synced transaction."
    )
    if missed:
        print("MISS: " + "; ".join(f"({row.id}) {row.what.strip()}" for row in missed))
    else:
        print(f"all {sum(row.met is not None for row in rows)} goals met")
    return 0


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
