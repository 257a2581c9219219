"""The proxy benchmark still runs and still prints its table (so it cannot rot unnoticed)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from .smoke import run_bench

GOALS = ("i-ts", "i-py", "new-ts", "new-py", "new-fast")
# through a process that only copies bytes, a bare interpreter's start, and the CPU of the
# process in front of the agent (the copier's, the proxy's): no goal
FLOORS = ("i-ts-c", "i-py-c", "new-fast-c", "py", "i-ts-cpu", "new-fast-cpu")
# each again beside busy processes (--load, default 2)
STARTUP = tuple(f"({row}{load})" for row in GOALS for load in ("", "-load"))
FLOOR = tuple(f"({row}{load})" for row in FLOORS for load in ("", "-load"))


def test_smoke_run_prints_the_table_and_cleans_up(tmp_path: Path) -> None:
    # every agent started four ways, then again beside busy processes: on a loaded machine the
    # scripted agent alone takes seconds to start
    done = run_bench("proxy", tmp_path, timeout=300)

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


def test_smoke_run_as_json_in_a_directory_it_makes(tmp_path: Path) -> None:
    parent = tmp_path / "not" / "made yet"
    done = run_bench("proxy", parent, "--json", "--startups", "0")  # start-ups: above

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [row["id"] for row in report["rows"]] == ["n", "s", "c", "cpu", "cpu-c", "cpu-a", "r"]
    assert report["chunks"] == 500
    # CPU is counted in clock ticks: 500 chunks may take fewer than one of the proxy's
    assert all(row["direct"] > 0 and row["proxy"] >= 0 for row in report["rows"])
    assert all(row["proxy"] > 0 for row in report["rows"] if not row["id"].startswith("cpu"))
    # a row with a goal says whether it was met; one without says null, as every benchmark does
    assert {row["id"] for row in report["rows"] if row["met"] is not None} == {"n", "s", "cpu"}
    assert all(isinstance(row["met"], bool) for row in report["rows"] if row["goal"] != "-")
    assert {row["id"]: row["unit"] for row in report["rows"]} == {
        "n": "ms",
        "s": "x",
        "c": "x",
        "cpu": "x",
        "cpu-c": "x",
        "cpu-a": "x",
        "r": "ms",
    }
    assert list(parent.iterdir()) == [], "the benchmark left its scratch directory behind"


def test_the_byte_copier_has_a_help_of_its_own() -> None:
    copier = Path(__file__).resolve().parents[2] / "bench" / "copier.py"
    done = subprocess.run(
        [sys.executable, str(copier), "--help"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and "AGENT_COMMAND" in done.stdout, done  # not run as the agent
    usage = subprocess.run(
        [sys.executable, str(copier)], capture_output=True, text=True, timeout=30
    )
    assert usage.returncode == 2 and "usage:" in usage.stderr
