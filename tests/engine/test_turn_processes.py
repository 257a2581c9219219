"""What git a turn runs through the public API: from a process's second turn in a workspace on,
a file watcher says what changed, so no turn scans the workspace, and a turn that follows the
last one with nothing changed in between writes no object to begin."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import turnback
from turnback.workspace.watcher import AVAILABLE


@pytest.fixture
def logged_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``git`` first on PATH that logs each command line, then runs the real git."""
    real = shutil.which("git")
    assert real is not None
    log = tmp_path / "git.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(real).parent}")
    return log


def commands(log: Path) -> list[str]:
    """The git subcommands logged (each line's word after its ``-c`` settings), then cleared."""
    found = []
    for line in log.read_text().splitlines():
        words = line.split(" ")
        while words and words[0] == "-c":
            words = words[2:]
        found.append(words[0])
    log.write_text("")
    return found


@pytest.mark.skipif(not AVAILABLE, reason="no file watcher on this platform")
def test_a_process_s_later_turns_run_no_scan(tmp_path: Path, logged_git: Path) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "src").mkdir(parents=True)
    for n in range(20):
        (workspace / "src" / f"f{n}.py").write_text(f"n = {n}\n")
    ran: list[list[str]] = []
    with turnback.open(tmp_path / "home") as tb:
        session = tb.create_session(workspace)
        logged_git.write_text("")
        for n in range(4):
            with session.turn(f"turn {n}"):
                (workspace / "src" / f"f{n}.py").write_text(f"n = {n} + 1\n")
                (workspace / f"new{n}.txt").write_text("new\n")
            ran.append(commands(logged_git))
        (workspace / "src" / "f9.py").write_text("by hand, between turns\n")
        with session.turn("after a hand edit"):
            pass
        ran.append(commands(logged_git))
        turns = session.turns()
        diffs = [session.diff(turn.token) for turn in turns]
    # the first two turns scan (the second sets the watcher's baseline); later ones do not
    assert "status" in ran[0] and "status" in ran[1]
    for later in ran[2:]:
        assert "status" not in later and "ls-files" not in later, later
    # nothing changed since the last turn's end: its begin writes nothing, starts no git;
    # its end writes one commit, asks whether the new file is ignored, and diffs the two
    assert sorted(ran[3]) == ["check-ignore", "diff-tree", "fast-import"]
    # a hand edit between turns is a new begin checkpoint, and the turn's "before" changes
    assert ran[4].count("fast-import") == 1
    assert [(f.path, f.kind) for f in diffs[3].files] == [
        ("new3.txt", turnback.ChangeKind.ADDED),
        ("src/f3.py", turnback.ChangeKind.MODIFIED),
    ]
    assert [f.path for f in diffs[4].outside] == ["src/f9.py"]
    assert diffs[4].files == ()
    assert all(turn.begin_checkpoint and turn.end_checkpoint for turn in turns)
