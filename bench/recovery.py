"""Benchmark of recovery on a fleet's store: round trips to PostgreSQL per recovered turn.

    python bench/recovery.py --database-url 'postgresql://user@/db?host=/run/postgresql'
    python bench/recovery.py --database-url URL --smoke      # tiny sizes (the smoke test)
    python bench/recovery.py --database-url URL --turns 1000 --json

A process begins one turn in each of ``--turns`` sessions, records a few events in each (one an
unfinished tool call) and dies by SIGKILL; another runs ``recover()`` over them, connected
through a relay that counts round trips on the wire (``bench/wire.py``): every burst the client
sends after the server last answered it is one. The floor is measured through the same relay in
the same run: a ``SELECT 1`` round trip.

(f)   floor: one ``SELECT 1`` round trip, median of 200
(f3)  floor per turn: three of them, the goal's budget for one recovered turn
(n)   round trips of ``recover()`` per recovered turn, counted on the wire      goal: <= 3
(pr)  ``recover()`` per turn, journal only, against (f3)

The store is a scratch schema of the database the URL names (dropped at the end), journal only
(no workspace captures). The URL must reach the server over a unix socket (``?host=/dir``), which
the relay stands in front of.

The exit code is 0 when a goal is missed (this is a measurement; MISS is printed), 1 when the
benchmark itself went wrong (say recovery did not recover every turn it should have).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from journal import (
    BenchError,
    Row,
    crash_child,
    journal_only,
    make_workspace,
    scratch_schema,
    server_settings,
)
from rounds import DIR_HELP, machine, scratch_dir, verdict
from wire import RoundTrips

import turnback

GOAL = 3  # round trips per recovered turn
FLOOR_SAMPLES = 200


def floor(url: str) -> float:
    """Seconds of one ``SELECT 1`` round trip through the relay, median of FLOOR_SAMPLES."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        times = []
        for _ in range(FLOOR_SAMPLES):
            started = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(url: str, scratch: Path, turns: int, events: int) -> list[Row]:
    workspace = make_workspace(scratch)
    with scratch_schema(url) as schema:
        store = schema("recovery")
        options: dict[str, Any] = {**journal_only(), "database_url": store}
        home = scratch / "home"
        crash_child(home, workspace, turns, events, options, "recovery")
        relay = RoundTrips(store)
        try:
            one = floor(relay.url())
            with turnback.open(home, **{**options, "database_url": relay.url()}) as tb:
                counted = relay.count
                started = time.perf_counter()
                report = tb.recover()
                spent = time.perf_counter() - started
                trips = relay.count - counted
        finally:
            relay.close()
    if len(report.recovered) != turns or report.set_aside or report.live:
        raise BenchError(
            f"recover() should have recovered all {turns} turns, but recovered "
            f"{len(report.recovered)}, set aside {len(report.set_aside)} and found "
            f"{len(report.live)} live"
        )
    per_turn = trips / turns
    return [
        Row("f", "floor: one SELECT 1 round trip", one, "s"),
        Row("f3", "floor per turn: three round trips", 3 * one, "s"),
        Row(
            "n",
            f"round trips of recover() per recovered turn ({trips:,} for {turns:,} turns)",
            per_turn,
            "",
            goal=f"<= {GOAL}",
            met=per_turn <= GOAL,
        ),
        Row(
            "pr",
            "recover() on PostgreSQL, journal only, per turn",
            spent / turns,
            "s",
            "f3",
            (spent / turns) / (3 * one),
        ),
    ]


def cell(row: Row) -> str:
    if row.unit == "s":
        return f"{row.value * 1000:.3g} ms"
    return f"{row.value:.3g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--database-url", required=True, help="a PostgreSQL server's database")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--turns", type=int, help="dead turns to recover (default 1,000)")
    parser.add_argument("--events-per-turn", type=int, default=5)
    parser.add_argument("--dir", type=Path, help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args()
    turns = args.turns or (20 if args.smoke else 1000)
    scratch = scratch_dir(args.dir, "turnback-bench-recovery-")
    try:
        rows = measure(args.database_url, scratch, turns, args.events_per_turn)
    except (BenchError, ValueError) as error:
        print(f"bench/recovery.py: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([dataclasses.asdict(row) for row in rows]))
        return 0
    print(f"{machine()}; {server_settings(args.database_url)}")
    print(f"{turns:,} dead turns of {args.events_per_turn} events each\n")
    print("| row | what | value | ratio | goal | |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        ratio = f"{row.ratio:.3g}x ({row.baseline})" if row.ratio is not None else ""
        print(
            f"| ({row.id}) | {row.what} | {cell(row)} | {ratio} | {row.goal} | {verdict(row.met)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
