"""The checkpoint remote benchmark (bench/remote.py) still runs and still prints its rows (so it
cannot rot unnoticed)."""

from __future__ import annotations

import json
from pathlib import Path

from .smoke import run_bench


def test_smoke_run_prints_the_table(tmp_path: Path) -> None:
    done = run_bench("remote", tmp_path)

    assert done.returncode == 0, done.stderr
    for row in ("(bytes)", "(time)"):
        line = next(x for x in done.stdout.splitlines() if x.startswith(f"| {row} |"))
        assert line.rstrip(" |").endswith(("PASS", "**MISS**")), line
    assert list(tmp_path.iterdir()) == [], "the benchmark left its scratch directory behind"


def test_smoke_run_as_json(tmp_path: Path) -> None:
    done = run_bench("remote", tmp_path, "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["id"] for row in report["rows"]] == ["bytes", "time"]
    assert all(row[side] > 0 for row in report["rows"] for side in ("ours", "same", "git"))
    sent = report["rows"][0]
    assert sent["ours"] < sent["same"], "a small edit's push sent the whole tree again"
