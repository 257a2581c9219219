"""The snapshot benchmark still runs (at smoke size), so it cannot rot."""

from __future__ import annotations

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
    for step in ("(a)", "(s)", "(b)", "(p)", "(a2)", "(c)", "(w)", "(d)", "(e0)", "(e)", "(f)"):
        assert f"| {step} |" in result.stdout
    assert "3/3 watched" in result.stdout  # every watched capture used its watcher
