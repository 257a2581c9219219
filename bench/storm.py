"""Benchmark of a permission-request storm: an agent asks N permissions at once, in one turn.

    python bench/storm.py                     # the recorded run: 100, 1,000 and 10,000 requests
    python bench/storm.py --smoke             # 100 and 1,000 requests, 1 round: a few seconds
    python bench/storm.py --sizes 100 5000 --rounds 1 --json

An agent on bare JSON-RPC lines (``bench/storm_agent.py``, so that the SDK's costs stay out of
it) sends N ``session/request_permission`` requests without waiting for any answer, each for its
own tool call, and ends the turn once all are answered. ``turnback.runtime.AgentRuntime``
(``batched`` durability) records each request in the turn and makes it durable -- in the
session's pending requests -- before its ``on_permission`` callback is asked, and each answer
durable before the agent hears it. Timed: the prompt, on an agent already running and past a
first prompt, from sent to ended (the turn's begin and end included).

(N)     time through the runtime for N requests, and the time per request.
(flat)  time per request at the largest N over that at the smallest, in the same run: the
        baseline is the storm's own small size. goal: <= 2.0 (a storm costs linear time: each
        request and its answer is one small durable write, however many are pending).

Each size runs once a round, sizes interleaved; the best round of each is reported. A size that
fails (the turn does not end completed with every request allowed) is printed as such, with
why: the exit code is 0 when the goal is missed (MISS is printed), 1 when the run itself broke.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    import turnback
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(SRC))
    import turnback

from rounds import DIR_HELP, interleaved, machine, scratch_dir, verdict  # noqa: E402

from turnback.model import TurnStatus  # noqa: E402
from turnback.runtime import AgentRuntime  # noqa: E402

AGENT = (sys.executable, str(Path(__file__).resolve().parent / "storm_agent.py"))
GOAL = 2.0


async def storm(home: Path, workspace: Path, requests: int) -> float:
    """One prompt of ``requests`` permission requests through the runtime; its seconds."""
    with turnback.open(home=home, durability="batched") as tb:
        session = tb.create_session(workspace=workspace)
        async with await AgentRuntime.start(
            tb, session, AGENT, on_permission=lambda request: "allow"
        ) as runtime:
            await runtime.prompt("hello")
            started = time.perf_counter()
            turn = await runtime.prompt(f"storm {requests}")
            elapsed = time.perf_counter() - started
        said = "".join(m.text for m in session.turn_messages(turn.number))
    if turn.status is not TurnStatus.COMPLETED or f"allowed {requests} of {requests}" not in said:
        raise RuntimeError(f"the turn ended {turn.status.value}: {turn.detail or said!r}")
    return elapsed


def measure(scratch: Path, sizes: list[int], rounds: int) -> dict[str, list[float | str]]:
    """Each size's seconds in each round, or why it failed."""

    def side(size: int) -> Callable[[int], float | str]:
        def one(index: int) -> float | str:
            workspace = scratch / f"w{size}-{index}"
            workspace.mkdir()
            try:
                return asyncio.run(storm(scratch / f"h{size}-{index}", workspace, size))
            except Exception as error:  # reported in the table: the old code fails past ~1,500
                return f"{type(error).__name__}: {error}"

        return one

    return interleaved(rounds, {str(size): side(size) for size in sizes})


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="100 and 1,000 requests, 1 round")
    parser.add_argument("--sizes", type=int, nargs="+", help="requests per storm")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (3)")
    parser.add_argument("--dir", type=Path, default=None, help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    sizes = sorted(args.sizes or ([100, 1_000] if args.smoke else [100, 1_000, 10_000]))
    rounds = args.rounds or (1 if args.smoke else 3)
    scratch = scratch_dir(args.dir, "turnback-bench-requests-")
    try:
        times = measure(scratch, sizes, rounds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows: list[dict[str, object]] = []
    per_request: dict[int, float] = {}
    for size in sizes:
        done = [t for t in times[str(size)] if isinstance(t, float)]
        if not done:
            failed = next(str(t) for t in times[str(size)])
            rows.append(
                {
                    "id": str(size),
                    "what": f"{size:,} requests: failed ({failed})",
                    "value": None,
                    "unit": "s",
                    "met": None,
                }
            )
            continue
        best = min(done)
        per_request[size] = best / size
        rows.append(
            {
                "id": str(size),
                "what": f"{size:,} requests through AgentRuntime",
                "value": best,
                "unit": "s",
                "per_request_ms": best / size * 1000,
                "met": None,
            }
        )
    smallest, largest = sizes[0], sizes[-1]
    flat = per_request[largest] / per_request[smallest] if largest in per_request else None
    met = flat is not None and flat <= GOAL
    rows.append(
        {
            "id": "flat",
            "what": f"per request at {largest:,} / at {smallest:,}",
            "value": flat,
            "unit": "x",
            "met": met,
        }
    )
    report = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "sizes": sizes,
        "rounds": rounds,
        "times": times,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"turnback request-storm benchmark: {rounds} round(s), best of each")
        print(f"{report['machine']}; {report['date']}")
        print()
        print("| row | what | value | per request | goal | |")
        print("|---|---|---|---|---|---|")
        for row in rows[:-1]:
            if row["value"] is None:
                print(f"| ({row['id']}) | {row['what']} | | | | |")
                continue
            value = float(row["value"])  # type: ignore[arg-type]
            print(
                f"| ({row['id']}) | {int(row['id']):,} requests through AgentRuntime | "
                f"{value * 1000:,.0f} ms | {value / int(row['id']) * 1000:.3f} ms | | |"
            )
        shown = f"{flat:.2f}x" if flat is not None else "none (a size failed)"
        print(f"| (flat) | {rows[-1]['what']} | {shown} | | <= {GOAL}x | {verdict(met)} |")
        print()
        print("goals met" if met else f"MISS: (flat) {shown} > {GOAL}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
