"""The runtime benchmark still runs and still prints its table (so it cannot rot unnoticed)."""

from __future__ import annotations

import json
from pathlib import Path

from .smoke import run_bench


def test_smoke_run_prints_the_table(tmp_path: Path) -> None:
    done = run_bench("runtime", tmp_path)

    assert done.returncode == 0, done.stderr
    for row in ("(a)", "(t)", "(t/a)", "(o)"):
        assert f"| {row} |" in done.stdout, f"row {row} missing from:\n{done.stdout}"
    ratio = next(line for line in done.stdout.splitlines() if line.startswith("| (t/a) |"))
    assert ratio.rstrip(" |").endswith(("PASS", "**MISS**")), ratio
    assert list(tmp_path.iterdir()) == [], "the benchmark left its scratch directory behind"


def test_smoke_run_as_json(tmp_path: Path) -> None:
    done = run_bench("runtime", tmp_path, "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["id"] for row in report["rows"]] == ["a", "t", "t/a", "o"]
    assert report["chunks"] == 500 and all(row["value"] > 0 for row in report["rows"][:3])
