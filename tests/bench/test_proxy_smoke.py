"""The proxy benchmark still runs and still prints its table (so it cannot rot unnoticed)."""

from __future__ import annotations

import json
from pathlib import Path

from .smoke import run_bench


def test_smoke_run_prints_the_table_and_cleans_up(tmp_path: Path) -> None:
    done = run_bench("proxy", tmp_path)

    assert done.returncode == 0, done.stderr
    for row in ("(n)", "(s)", "(c)", "(r)"):
        assert f"| {row} |" in done.stdout, f"row {row} missing from:\n{done.stdout}"
    for row in ("(n)", "(s)"):
        line = next(line for line in done.stdout.splitlines() if line.startswith(f"| {row} |"))
        assert line.rstrip(" |").endswith(("PASS", "**MISS**")), line
    assert list(tmp_path.iterdir()) == [], "the benchmark left its scratch directory behind"


def test_smoke_run_as_json(tmp_path: Path) -> None:
    done = run_bench("proxy", tmp_path, "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["id"] for row in report["rows"]] == ["n", "s", "c", "r"]
    assert report["chunks"] == 500
    assert all(row["direct"] > 0 and row["proxy"] > 0 for row in report["rows"])
