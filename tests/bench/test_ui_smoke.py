"""The review page's benchmark still runs and still prints its table (so it cannot rot)."""

from __future__ import annotations

import json
from pathlib import Path

from .smoke import run_bench


def test_smoke_run_prints_every_row_with_a_verdict_and_cleans_up(tmp_path: Path) -> None:
    done = run_bench("ui", tmp_path, "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["id"] for row in report["rows"]] == ["t", "p", "d", "f", "s"]
    assert [row["unit"] for row in report["rows"]] == ["x", "x", "x", "ms", "ms"]
    assert (report["turns"], report["files"]) == (50, 100)
    for row in report["rows"]:
        assert row["server"]["min"] <= row["server"]["median"] <= row["server"]["max"]
        assert row["value"] > 0 and isinstance(row["met"], bool)  # every row has a goal
    assert list(tmp_path.iterdir()) == [], "the benchmark left its scratch directory behind"
