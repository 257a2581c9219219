"""The snapshot benchmark still runs (at smoke size), so it cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "snapshots.py"


def test_benchmark_runs_at_smoke_size() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, str(BENCH), "--smoke"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert "| step | what | min | median | max | ratio of medians | goal |" in result.stdout
    assert "| step | what | median | ratio | goal |" in result.stdout
    steps = ("(a)", "(s)", "(b)", "(p)", "(a2)", "(c)", "(w)", "(ta)", "(t0)", "(t)", "(tc)")
    for step in (*steps, "(d)", "(e0)", "(e)", "(f)"):
        assert f"| {step} |" in result.stdout
    assert "3/3 watched" in result.stdout  # every watched capture used its watcher


def test_benchmark_as_json_in_a_directory_it_makes(tmp_path: Path) -> None:
    parent = tmp_path / "not" / "made yet"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--json", "--dir", str(parent)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows = {row["id"]: row for row in report["rows"]}
    assert list(rows) == [
        *("a", "s", "b", "p", "a2", "c", "w", "ta", "t0", "t", "tc"),
        *("d", "e0", "e", "e+", "f"),
    ]
    assert all(row["files"] == 1000 and row["value"] > 0 for row in rows.values())
    assert {row["unit"] for row in rows.values()} == {"s", "B"}
    assert all(row["min"] <= row["median"] <= row["max"] for row in rows.values() if "min" in row)
    # a row with a goal says whether it was met; one without says null, as every benchmark does
    goals = {key for key, row in rows.items() if row["met"] is not None}
    assert goals == {"c", "tc", "d", "e", "f"}
    assert report["goals_met"] == all(row["met"] is not False for row in rows.values())
    assert list(parent.iterdir()) == [], "the benchmark left its scratch directory behind"
