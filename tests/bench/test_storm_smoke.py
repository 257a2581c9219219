"""The request-storm benchmark (bench/storm.py) still runs and still prints its table (so it
cannot rot unnoticed)."""

from __future__ import annotations

import json
from pathlib import Path

from .smoke import run_bench


def test_smoke_run_prints_the_table(tmp_path: Path) -> None:
    done = run_bench("storm", tmp_path)

    assert done.returncode == 0, done.stderr
    for row in ("(100)", "(1000)", "(flat)"):
        assert f"| {row} |" in done.stdout, f"row {row} missing from:\n{done.stdout}"
    flat = next(line for line in done.stdout.splitlines() if line.startswith("| (flat) |"))
    assert flat.rstrip(" |").endswith(("PASS", "**MISS**")), flat
    assert list(tmp_path.iterdir()) == [], "the benchmark left its scratch directory behind"


def test_smoke_run_as_json(tmp_path: Path) -> None:
    done = run_bench("storm", tmp_path, "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["id"] for row in report["rows"]] == ["100", "1000", "flat"]
    assert all(row["value"] > 0 for row in report["rows"])
