"""Benchmark of a long session: does turn N cost what turn 5 did?

    python bench/long.py                     # the recorded run: 2,000 turns on 1,000 files
    python bench/long.py --smoke             # 120 turns on 200 files: seconds
    python bench/long.py --turns 5000 --json

Two sessions run side by side, a turn of one then a turn of the other, each in a home and a
workspace of its own: one as turnback runs (a capture that leaves ``PACKS`` packs or more starts
a repack in the background, see ``turnback.workspace.capture``), and one with that repack off,
the baseline measured in the same run. Each turn, through the public API (``with
session.turn()``), edits one file; timed: the whole turn, its two captures included.

(early)  a turn near the start: the median of turns 2 to 51 (turn 1 builds the shadow).
(late)   a turn near the end: the median of the last 50.
(grow)   (late) / (early). goal: <= 1.25 with the repack (turn N costs what turn 5 does).
(grow0)  the same without the repack, for comparison.
(packs)  the packs each shadow holds at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    import turnback
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(SRC))
    import turnback

from rounds import DIR_HELP, machine, scratch_dir, verdict  # noqa: E402

from turnback.workspace import capture  # noqa: E402

GOAL = 1.25
WINDOW = 50


def workspace_of(root: Path, files: int) -> Path:
    root.mkdir(parents=True)
    for n in range(files):
        folder = root / f"pkg{n // 100}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod_{n}.py").write_text(f"def f_{n}(x):\n    return x + {n}\n")
    return root


def packs(home: Path) -> int:
    return sum(1 for _ in (home / "shadow").glob("*.git/objects/pack/*.pack"))


def measure(scratch: Path, turns: int, files: int) -> dict[str, list[float]]:
    """Per side, the seconds of each turn, in order."""
    sides = {"repack": capture.PACKS, "none": 10**9}
    handles = {
        side: turnback.open(home=scratch / side / "home", durability="batched") for side in sides
    }
    sessions = {
        side: handles[side].create_session(workspace_of(scratch / side / "ws", files))
        for side in sides
    }
    times: dict[str, list[float]] = {side: [] for side in sides}
    try:
        for number in range(turns):
            for side in sides if number % 2 == 0 else reversed(list(sides)):
                capture.PACKS = sides[side]
                session = sessions[side]
                edited = Path(session.record.workspace) / f"pkg0/mod_{number % files}.py"
                started = time.perf_counter()
                with session.turn(f"turn {number + 1}"):
                    edited.write_text(f"def f(x):\n    return x * {number}\n")
                times[side].append(time.perf_counter() - started)
    finally:
        capture.PACKS = sides["repack"]
        for handle in handles.values():
            handle.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="120 turns on 200 files")
    parser.add_argument("--turns", type=int, default=None, help="turns per session (2,000)")
    parser.add_argument("--files", type=int, default=None, help="files in each workspace (1,000)")
    parser.add_argument("--dir", type=Path, default=None, help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    turns = args.turns or (120 if args.smoke else 2_000)
    files = args.files or (200 if args.smoke else 1_000)
    if turns < WINDOW + 2:
        parser.error(f"--turns must be at least {WINDOW + 2}")
    scratch = scratch_dir(args.dir, "turnback-bench-long-")
    try:
        times = measure(scratch, turns, files)
        left = {side: packs(scratch / side / "home") for side in times}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    early = {side: statistics.median(t[1 : WINDOW + 1]) for side, t in times.items()}
    late = {side: statistics.median(t[-WINDOW:]) for side, t in times.items()}
    grow = late["repack"] / early["repack"]
    rows = [
        {"id": "early", "what": "turn 2-51, median", "value": early["repack"], "unit": "s"},
        {
            "id": "late",
            "what": f"last {WINDOW} turns, median",
            "value": late["repack"],
            "unit": "s",
        },
        {"id": "grow", "what": "(late) / (early)", "value": grow, "unit": "x", "met": grow <= GOAL},
        {"id": "early0", "what": "turn 2-51, no repack", "value": early["none"], "unit": "s"},
        {"id": "late0", "what": f"last {WINDOW}, no repack", "value": late["none"], "unit": "s"},
        {"id": "grow0", "what": "(late0) / (early0)", "value": late["none"] / early["none"]},
        {"id": "packs", "what": "packs left: with repack", "value": left["repack"], "unit": ""},
        {"id": "packs0", "what": "packs left: no repack", "value": left["none"], "unit": ""},
    ]
    report = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "turns": turns,
        "files": files,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"turnback long-session benchmark: {turns:,} turns on {files:,} files, two sessions")
    print(f"{report['machine']}; {report['date']}")
    print()
    print("| row | what | value | goal | |")
    print("|---|---|---:|---|---|")
    for row in rows:
        value = row["value"]
        shown = (
            f"{value * 1000:.1f} ms"
            if row.get("unit") == "s"
            else f"{value:.2f}x"
            if row.get("unit", "x") == "x"
            else f"{value:,}"
        )
        goal = f"<= {GOAL}x" if "met" in row else ""
        print(f"| ({row['id']}) | {row['what']} | {shown} | {goal} | {verdict(row.get('met'))} |")
    print()
    print("goals met" if grow <= GOAL else f"MISS: (grow) {grow:.2f}x > {GOAL}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
