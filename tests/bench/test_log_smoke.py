"""The log benchmark still runs and still prints its table (so it cannot rot unnoticed)."""

from __future__ import annotations

import json
from pathlib import Path

from .smoke import run_bench


def test_smoke_run_prints_the_table(tmp_path: Path) -> None:
    done = run_bench("log", tmp_path)

    assert done.returncode == 0, done.stderr
    for row in ("(s)", "(l)", "(l-s)"):
        assert f"| {row} |" in done.stdout, f"row {row} missing from:\n{done.stdout}"
    goal = next(line for line in done.stdout.splitlines() if line.startswith("| (l-s) |"))
    assert goal.rstrip(" |").endswith(("PASS", "**MISS**")), goal
    assert list(tmp_path.iterdir()) == [], "the benchmark left its scratch directory behind"


def test_smoke_run_as_json(tmp_path: Path) -> None:
    done = run_bench("log", tmp_path, "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["id"] for row in report["rows"]] == ["s", "l", "l-s"]
    assert report["turns"] == 50 and all(row["value"] > 0 for row in report["rows"][:2])
    # the goal is on medians, and so is every value: not the fastest round
    sessions, log, added = report["rows"]
    assert (sessions["value"], log["value"]) == (sessions["median"], log["median"])
    assert added["value"] == log["median"] - sessions["median"]
    assert [row["met"] for row in report["rows"]][:2] == [None, None]
    assert isinstance(added["met"], bool)
