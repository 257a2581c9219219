"""The proxy benchmark still runs and still prints its table (so it cannot rot unnoticed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .smoke import run_bench

STARTUP = ("(i-ts)", "(i-py)", "(new-ts)", "(new-py)")
FLOOR = ("(i-ts-c)", "(i-py-c)")  # initialize through a process that only copies bytes


def test_smoke_run_prints_the_table_and_cleans_up(tmp_path: Path) -> None:
    done = run_bench("proxy", tmp_path)

    assert done.returncode == 0, done.stderr
    for row in ("(n)", "(s)", "(c)", "(cpu)", "(cpu-c)", "(cpu-a)", "(r)", *STARTUP, *FLOOR):
        assert f"| {row} |" in done.stdout, f"row {row} missing from:\n{done.stdout}"
    for row in ("(n)", "(s)", "(cpu)", *STARTUP):
        line = next(line for line in done.stdout.splitlines() if line.startswith(f"| {row} |"))
        assert line.rstrip(" |").endswith(("PASS", "**MISS**")), line
    for row in STARTUP + FLOOR:  # the time added: its median, then its min to max over the rounds
        line = next(line for line in done.stdout.splitlines() if line.startswith(f"| {row} |"))
        assert re.search(r"\| [+-]\d+ ms \([+-]\d+ to [+-]\d+\) \|", line), line
    assert list(tmp_path.iterdir()) == [], "the benchmark left its scratch directory behind"


def test_smoke_run_as_json(tmp_path: Path) -> None:
    done = run_bench("proxy", tmp_path, "--json", "--startups", "0")  # start-ups: above

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["id"] for row in report["rows"]] == ["n", "s", "c", "cpu", "cpu-c", "cpu-a", "r"]
    assert report["chunks"] == 500
    # CPU is counted in clock ticks: 500 chunks may take fewer than one of the proxy's
    assert all(row["direct"] > 0 and row["proxy"] >= 0 for row in report["rows"])
    assert all(row["proxy"] > 0 for row in report["rows"] if not row["id"].startswith("cpu"))
