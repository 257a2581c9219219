"""`turnback doctor`: each problem is found, explained, and given something to do."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import turnback

from .test_cli import TURNBACK, ok_json, run


def make_home(home: Path, workspace: Path) -> str:
    workspace.mkdir()
    with turnback.open(home) as tb:
        session = tb.create_session(workspace)
        with session.turn("write a"):
            (workspace / "a.txt").write_text("a\n")
        return session.id


def test_a_healthy_home(home: Path, tmp_path: Path) -> None:
    make_home(home, tmp_path / "ws")
    checks = ok_json(home, "doctor")
    assert all(c["ok"] for c in checks), checks
    assert {"git", "home", "database", "recovery"} <= {c["name"] for c in checks}


def test_a_damaged_ref_is_repaired_and_reported(home: Path, tmp_path: Path) -> None:
    make_home(home, tmp_path / "ws")
    refs = [p for p in (home / "shadow").rglob("refs/turnback/**/*") if p.is_file()]
    refs[0].write_bytes(b"")  # a crash of another tool left a 0-byte ref
    result = run(home, "doctor")
    assert result.returncode == 0, "a repair is reported, not a failure"
    repaired = next(line for line in result.stdout.splitlines() if "repaired:" in line)
    assert repaired.startswith("ok") and refs[0].name in repaired
    assert "repaired:" not in run(home, "doctor").stdout, "the repair did not hold"


def test_a_dead_turn_asks_for_recovery(home: Path, tmp_path: Path) -> None:
    session_id = make_home(home, tmp_path / "ws")
    child = (
        "import os, signal, sys, turnback\n"
        "tb = turnback.open(sys.argv[1]); tb.session(sys.argv[2]).turn('dies')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    python = Path(TURNBACK).parent / "python"
    subprocess.run([str(python), "-c", child, str(home), session_id], check=False)
    result = run(home, "doctor")
    assert result.returncode == 1 and "turnback recover" in result.stdout
    run(home, "recover")
    assert run(home, "doctor").returncode == 0


def test_git_missing(home: Path, tmp_path: Path) -> None:
    make_home(home, tmp_path / "ws")
    env = {**os.environ, "PATH": str(Path(TURNBACK).parent), "NO_COLOR": "1"}
    result = subprocess.run(
        [TURNBACK, "--home", str(home), "doctor"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 1
    assert "FAIL  git" in result.stdout and "install git" in result.stdout


def test_doctor_prints_its_checklist_on_a_damaged_database_header(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "turnback.db").write_bytes(b"not a database, a damaged header " * 4)
    result = run(home, "doctor")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ok    git") and lines[1].startswith("ok    home")
    assert lines[2].startswith("FAIL  database") and "backup" in result.stdout
    skipped = [line for line in lines if line.startswith("skip")]
    assert skipped == [
        f"skip  {name}: the database cannot be opened"
        for name in ("recovery", "stored rows", "checkpoints")
    ], lines
    checks = json.loads(run(home, "doctor", "--json").stdout)
    assert [c["ok"] for c in checks] == [True, True, False, None, None, None]


def test_a_home_nothing_has_run_with_is_not_a_failure_and_doctor_creates_nothing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "not yet"
    result = run(home, "doctor")
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ok    git: git ") and " at " in lines[0]
    assert (
        lines[1]
        == f"ok    home: {home} does not exist yet: turnback makes it when it first stores a turn"
    )
    assert lines[2].startswith("ok    database: there is no turnback database")
    assert "restore it from a backup" not in result.stdout
    assert lines[3:] == [
        f"skip  {name}: nothing is stored yet"
        for name in ("recovery", "stored rows", "checkpoints")
    ]
    checks = json.loads(run(home, "doctor", "--json").stdout)
    assert [c["ok"] for c in checks] == [True, True, True, None, None, None]
    assert not home.exists(), "doctor created the home it was asked about"


def test_read_commands_and_doctor_work_on_a_read_only_home(
    tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    disk = small_disk(16 * 2**20)
    home = disk / "home"
    session_id = make_home(home, tmp_path / "ws")
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    for command in (
        ["sessions"],
        ["log", session_id],
        ["show", session_id, "1"],
        ["diff", session_id, "1"],
        ["activities", session_id],
    ):
        result = run(home, *command)
        assert result.returncode == 0, (command, result.stderr)
    assert session_id[:12] in run(home, "sessions").stdout
    doctor = run(home, "doctor")
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr
    assert "FAIL  home" in doctor.stdout and "ok    database" in doctor.stdout
