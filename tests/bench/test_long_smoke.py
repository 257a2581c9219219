"""The long-session benchmark (bench/long.py) still runs and still prints its table (so it cannot
rot unnoticed); at its smoke size the repack already keeps the packs few."""

from __future__ import annotations

import json
from pathlib import Path

from .smoke import run_bench


def test_smoke_run_as_json(tmp_path: Path) -> None:
    done = run_bench("long", tmp_path, "--json")

    assert done.returncode == 0, done.stderr
    rows = {row["id"]: row["value"] for row in json.loads(done.stdout)["rows"]}
    assert list(rows) == ["early", "late", "grow", "early0", "late0", "grow0", "packs", "packs0"]
    assert rows["packs"] < rows["packs0"] / 4  # 120 turns: over 100 packs without the repack
    assert all(value > 0 for value in rows.values())
    assert list(tmp_path.iterdir()) == [], "the benchmark left its scratch directory behind"
