"""Benchmark of `turnback log` on a long session, next to `turnback sessions` on the same home.

    python bench/log.py                  # the recorded run: 1,000 turns, 7 rounds
    python bench/log.py --smoke          # 50 turns, 2 rounds: a few seconds
    python bench/log.py --turns 2000 --rounds 5 --json

A home holds one session of N turns, each with three file changes and a change made between
turns (the rows `log` shows), the last two turns with real workspace checkpoints so `log` also
captures the workspace to show what changed since the head. Each round runs, as a user does,
the installed command line in a fresh process, output to a pipe:

(s)  ``turnback sessions``: the baseline, the cost of starting turnback and reading the home;
(l)  ``turnback log SESSION``: the whole timeline of the N turns.
     goal: (l) - (s) <= 0.3 s at the median, at 1,000 turns

Rounds interleave (s) and (l) so a slow stretch of the machine hits both; min, median and max
are printed. Before the timeline read every turn's file changes from one query per turn, each of
which re-read the session's turns: 7.7-13.3 s at 1,000 turns. The exit code is 0 when the goal is
missed (MISS is printed), 1 when the benchmark itself went wrong.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    import turnback
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(SRC))
    import turnback

from rounds import DIR_HELP, interleaved, machine, scratch_dir, spread, verdict  # noqa: E402

from turnback.model import ChangeKind, FileChange  # noqa: E402

GOAL = 0.3


def build(home: Path, workspace: Path, turns: int) -> str:
    """A session of ``turns`` turns; the last two with real workspace checkpoints."""
    workspace.mkdir()
    with turnback.open(home, checkpoints=False) as tb:
        session = tb.create_session(workspace, title="a long session")
        for number in range(1, turns - 1):
            with session.turn(f"turn {number}: change three files of the module") as turn:
                turn.record(
                    {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": f"done with {number}"},
                    }
                )
            changes = [
                FileChange(f"src/module_{number % 40}/file_{i}.py", ChangeKind.MODIFIED, 12, 3)
                for i in range(3)
            ]
            with tb.store.atomic() as tx:
                tx.insert_file_changes(turn.turn.token, "turn", changes)
                tx.insert_file_changes(
                    turn.turn.token, "before", [FileChange("notes.txt", ChangeKind.MODIFIED, 1, 1)]
                )
        session_id = session.id
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        for number in (turns - 1, turns):
            with session.turn(f"turn {number}: write a file"):
                (workspace / f"file_{number}.txt").write_text(f"{number}\n")
    return session_id


def timed(command: list[str]) -> float:
    env = {**os.environ, "NO_COLOR": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="50 turns, 2 rounds")
    parser.add_argument("--turns", type=int, default=None, help="turns in the session (1000)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (7)")
    parser.add_argument("--dir", type=Path, default=None, help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    turns = max(3, args.turns or (50 if args.smoke else 1000))
    rounds = args.rounds or (2 if args.smoke else 7)
    script = shutil.which("turnback", path=str(Path(sys.executable).parent)) or "turnback"
    scratch = scratch_dir(args.dir, "turnback-bench-log-")
    try:
        home = scratch / "home"
        session_id = build(home, scratch / "workspace", turns)
        times = interleaved(
            rounds,
            {
                "s": lambda _: timed([script, "--home", str(home), "sessions"]),
                "l": lambda _: timed([script, "--home", str(home), "log", session_id]),
            },
        )
        sessions, logs = times["s"], times["l"]
        with turnback.open(home) as tb:
            shown = len(tb.session(session_id).timeline())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if shown != turns:
        print(f"the session holds {shown} turns, not {turns}", file=sys.stderr)
        return 1
    added = statistics.median(logs) - statistics.median(sessions)
    met = added <= GOAL

    report: dict[str, Any] = {
        "turns": turns,
        "rounds": rounds,
        "machine": machine(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "rows": [
            # each value is the median of the rounds, as the goal reads them; seconds
            {
                "id": "s",
                "what": "turnback sessions, median",
                **spread(sessions),
                "value": statistics.median(sessions),
                "unit": "s",
                "met": None,
            },
            {
                "id": "l",
                "what": "turnback log, median",
                **spread(logs),
                "value": statistics.median(logs),
                "unit": "s",
                "met": None,
            },
            {
                "id": "l-s",
                "what": "log beyond sessions, difference of the medians",
                "value": added,
                "unit": "s",
                "met": met,
            },
        ],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"turnback log benchmark: {turns:,} turns, {rounds} interleaved rounds")
    print(f"{report['machine']}; {report['date']}")
    print()
    print("| row | what | min | median | max | goal | |")
    print("|---|---|---|---|---|---|---|")
    for row, values in (("s", sessions), ("l", logs)):
        name = "turnback sessions (baseline)" if row == "s" else "turnback log SESSION"
        cells = " | ".join(f"{v * 1000:,.0f} ms" for v in spread(values).values())
        print(f"| ({row}) | {name} | {cells} | | |")
    cells = f"| | {added * 1000:,.0f} ms | | <= {GOAL * 1000:.0f} ms | {verdict(met)} |"
    print(f"| (l-s) | log beyond sessions, medians {cells}")
    print()
    print("goals met" if met else f"MISS: (l-s) {added:.3f} s > {GOAL} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
