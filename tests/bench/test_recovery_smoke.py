"""The recovery benchmark still runs, prints every row and meets its goal at smoke size (so it
cannot rot unnoticed)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from ..postgres_server import Server
from .smoke import run_bench

ROWS = ("f", "f3", "n", "pr")


def test_smoke_run_prints_every_row(tmp_path: Path, postgres_server: Server) -> None:
    done = run_bench("recovery", tmp_path, "--database-url", postgres_server.url())

    assert done.returncode == 0, done.stderr
    for row in ROWS:
        assert f"| ({row}) |" in done.stdout, f"row ({row}) missing from:\n{done.stdout}"
    assert "| (n) |" in done.stdout and "PASS" in done.stdout
    with psycopg.connect(postgres_server.url()) as conn:
        schemas = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'turnback_bench_%'"
        ).fetchall()
    assert schemas == [], "the benchmark left its scratch schemas behind"


def test_smoke_run_in_json(tmp_path: Path, postgres_server: Server) -> None:
    done = run_bench("recovery", tmp_path, "--database-url", postgres_server.url(), "--json")

    assert done.returncode == 0, done.stderr
    rows = {row["id"]: row for row in json.loads(done.stdout)}
    assert set(rows) == set(ROWS)
    assert rows["n"]["met"] is True and rows["n"]["value"] <= 3
