"""The journal benchmark still runs and still prints every row (so it cannot rot unnoticed)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from ..postgres_server import Server
from .smoke import run_bench

ROWS = (
    "s0",
    "s0'",
    "s",
    "s'",
    "c",
    "e4",
    "e",
    "b0",
    "b",
    "w50",
    "wmax",
    "m0",
    "m",
    "d0",
    "d",
    "D0",
    "D",
    "sm0",
    "sm",
    "lg",
    "b4",
    "b4t",
    "r",
    "r'",
)
GOALS = {"s", "b", "m", "d", "D", "sm", "b4", "r", "r'"}
GOAL_LINES = tuple(f"| ({row}) |" for row in GOALS)


def cell(table: str, row: str) -> str:
    """The value cell of a row of the printed table."""
    line = next(line for line in table.splitlines() if line.startswith(f"| ({row}) |"))
    return line.split("|")[3].strip()


def test_smoke_run_prints_the_whole_table(tmp_path: Path) -> None:
    done = run_bench("journal", tmp_path)

    assert done.returncode == 0, done.stderr
    for row in ROWS:
        assert f"| ({row}) |" in done.stdout, f"row ({row}) missing from:\n{done.stdout}"
    goals = [line for line in done.stdout.splitlines() if line.startswith(GOAL_LINES)]
    assert len(goals) == len(GOALS), goals
    assert all(line.rstrip(" |").endswith(("PASS", "**MISS**")) for line in goals), goals
    assert "goals met" in done.stdout or "MISS:" in done.stdout
    # (c) is 1 / (s): the table shows it in ms, so the two cells multiply to 1,000
    strict, commit = cell(done.stdout, "s"), cell(done.stdout, "c")
    assert strict.endswith(" /s") and commit.endswith(" ms"), (strict, commit)
    product = float(strict.removesuffix(" /s").replace(",", "")) * float(commit.removesuffix(" ms"))
    assert 990 < product < 1010, (strict, commit)
    assert list(tmp_path.iterdir()) == [], "the benchmark left its scratch directory behind"


def test_smoke_run_as_json(tmp_path: Path) -> None:
    done = run_bench("journal", tmp_path, "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["id"] for row in report["rows"]] == list(ROWS)
    assert all(row["value"] > 0 for row in report["rows"])
    rows = {row["id"]: row for row in report["rows"]}
    assert {row["unit"] for row in rows.values()} == {"/s", "s", "B"}
    # (c) is 1 / (s), so its value is in the seconds its unit says (0.5 ms: 0.0005 "s", not "ms")
    assert (rows["s"]["unit"], rows["c"]["unit"]) == ("/s", "s")
    assert abs(rows["s"]["value"] * rows["c"]["value"] - 1) < 1e-9
    assert {row["unit"] for row in rows.values() if row["id"] in ("e4", "e", "sm", "r")} == {"s"}
    assert {row["id"] for row in report["rows"] if row["met"] is not None} == GOALS


def test_smoke_run_measures_a_fleet_store_too(tmp_path: Path, postgres_server: Server) -> None:
    done = run_bench("journal", tmp_path, "--database-url", postgres_server.url())

    assert done.returncode == 0, done.stderr
    for row in (*ROWS, "p0", "ps", "pb", "pr", "pl"):
        assert f"| ({row}) |" in done.stdout, f"row ({row}) missing from:\n{done.stdout}"
    assert "PostgreSQL 15" in done.stdout
    with psycopg.connect(postgres_server.url()) as conn:
        schemas = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'turnback_bench_%'"
        ).fetchall()
    assert schemas == [], "the benchmark left its scratch schemas behind"


def test_a_database_url_that_cannot_be_used_is_one_line_before_anything_runs(
    tmp_path: Path,
) -> None:
    done = run_bench("journal", tmp_path, "--database-url", "postgresql://nobody@127.0.0.1:1/x")

    assert done.returncode == 1 and done.stdout == ""
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert (
        "cannot use the PostgreSQL database" in done.stderr and "Connection refused" in done.stderr
    )
    assert list(tmp_path.iterdir()) == [], "it measured before checking the URL"
