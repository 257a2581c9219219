"""The hooks benchmark still runs and still prints every row (so it cannot rot unnoticed)."""

from __future__ import annotations

import json
from pathlib import Path

from .smoke import run_bench

ROWS = ["p", "g", "u", "t", "a", "e", "u'", "t'", "a'", "e'", "c", "c'"]


def test_smoke_run_prints_the_table(tmp_path: Path) -> None:
    done = run_bench("hooks", tmp_path)

    assert done.returncode == 0, done.stderr
    for row in ROWS:
        assert f"| ({row}) |" in done.stdout, f"row {row} missing from:\n{done.stdout}"
    for row in ("u'", "t'"):
        line = next(line for line in done.stdout.splitlines() if line.startswith(f"| ({row}) |"))
        assert line.rstrip(" |").endswith(("PASS", "**MISS**")), line
    assert list(tmp_path.iterdir()) == [], "the benchmark left its scratch directory behind"


def test_smoke_run_as_json(tmp_path: Path) -> None:
    done = run_bench("hooks", tmp_path, "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["id"] for row in report["rows"]] == ROWS
    assert report["files"] == 500 and all(row["value"] > 0 for row in report["rows"])
    assert [row["id"] for row in report["rows"] if row["met"] is not None] == ["u'", "t'"]
