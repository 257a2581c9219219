"""The workspace commands as a user runs them: log with files, diff, revert (and --undo), gc."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
from pathlib import Path

import pytest

import turnback

from .test_cli import TURNBACK, chunk, ok, ok_json, run


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def session_id(home: Path, workspace: Path) -> str:
    with turnback.open(home) as tb:
        session = tb.create_session(workspace)
        with session.turn("create a") as turn:
            turn.record(chunk("writing a.py"))
            (workspace / "a.py").write_text("one\ntwo\n")
        (workspace / "hand.txt").write_text("by hand\n")
        with session.turn("edit a"):
            (workspace / "a.py").write_text("one\nTWO\n")
        return session.id


def test_log_shows_files_and_changes_outside_turns(home: Path, session_id: str) -> None:
    text = ok(home, "log", session_id)
    assert "  1 event  " in text and "  0 events  " in text  # turn 1's one chunk; turn 2
    assert "A a.py" in text and "M a.py" in text and "+1 -1" in text
    assert "changed outside any turn: A hand.txt" in text
    turns = ok_json(home, "log", session_id)["turns"]
    assert [[f["path"] for f in t["files"]] for t in turns] == [["a.py"], ["a.py"]]
    assert [f["path"] for f in turns[1]["outside"]] == ["hand.txt"]
    assert all(t["checkpoints"]["begin"] and t["checkpoints"]["end"] for t in turns)


def test_diff_patch_stat_and_json(home: Path, session_id: str) -> None:
    patch = ok(home, "diff", session_id, "2")
    assert "-two" in patch and "+TWO" in patch and "by hand" not in patch.split("diff --git")[-1]
    assert "a.py" in ok(home, "diff", session_id, "2", "--stat")
    data = ok_json(home, "diff", session_id, "2")
    assert data["available"] and "+TWO" in data["patch"]
    assert [f["kind"] for f in data["files"]] == ["modified"]


def test_revert_and_undo(home: Path, workspace: Path, session_id: str) -> None:
    refused = run(home, "revert", session_id, "1")  # no terminal, no --yes
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert (workspace / "a.py").read_text() == "one\nTWO\n"
    data = ok_json(home, "revert", session_id, "1", "--yes")
    assert data["state"] == "committed" and data["files"] and data["conversation"]
    assert (workspace / "a.py").read_text() == "one\ntwo\n"
    assert (workspace / "hand.txt").exists(), "a file made before turn 2 began was deleted"
    assert "undid revert" in ok(home, "revert", "--undo", session_id, "--yes")
    assert (workspace / "a.py").read_text() == "one\nTWO\n"
    assert (
        ok_json(home, "revert", session_id, "1", "--files-only", "--yes")["conversation"] is False
    )


def test_revert_usage_errors_and_conflicts(home: Path, workspace: Path, session_id: str) -> None:
    both = run(home, "revert", session_id, "1", "--files-only", "--conversation-only", "--yes")
    assert both.returncode == 2
    assert run(home, "revert", "--undo", session_id, "1", "--yes").returncode == 2
    assert run(home, "revert", session_id, "--yes").returncode == 2
    nothing = run(home, "revert", session_id, "2", "--yes")
    assert nothing.returncode == 3 and "already at turn 2" in nothing.stderr
    (workspace / "a.py").write_text("one\nMINE\n")
    conflict = run(home, "revert", session_id, "1", "--keep-user-edits", "--yes")
    assert conflict.returncode == 3 and "a.py" in conflict.stderr
    assert (workspace / "a.py").read_text() == "one\nMINE\n"
    assert "<- revert 1: back to turn 1, keeping hand edits (refused, nothing changed)" in ok(
        home, "log", session_id
    )


def test_gc(home: Path, session_id: str) -> None:
    log = ok_json(home, "log", session_id)
    planned = ok_json(home, "gc", "--keep", "1", "--older-than", "0", "--dry-run")
    assert planned["dry_run"] and planned["bytes_freed"] == 0
    assert "nothing was changed" in ok(home, "gc", "--keep", "1", "--dry-run")
    assert ok_json(home, "log", session_id) == log  # a dry run changes nothing
    assert ok(home, "diff", session_id, "1")
    data = ok_json(home, "gc", "--keep", "1", "--older-than", "0")
    assert data["checkpoints_released"] == 1 and data["refs_removed"] >= 1
    assert (planned["checkpoints_released"], planned["refs_removed"]) == (
        data["checkpoints_released"],
        data["refs_removed"],
    )
    # the diff it took away says where to look, and the activities say why
    gone = run(home, "diff", session_id, "1")
    assert gone.returncode == 1 and "turnback activities" in gone.stderr
    activities = ok(home, "activities", session_id)
    assert "gc released the workspace checkpoints of turn 1 (it kept the last 1)" in activities
    assert "freed" in ok(home, "gc")
    assert run(home, "gc", "--keep", "-1").returncode == 2


def test_gc_prints_small_sizes_in_kib_and_bytes(home: Path, session_id: str) -> None:
    from turnback.cli import _size

    text = ok(home, "gc", "--keep", "1", "--older-than", "0")
    freed = re.search(r"freed (\d+ B|\d+\.\d KiB)$", text.strip())
    assert freed and freed.group(1) != "0 B", text  # a few KiB, once "0.0 MiB"
    assert (_size(0), _size(1023), _size(44606), _size(5 * 2**20)) == (
        "0 B",
        "1023 B",
        "43.6 KiB",
        "5.0 MiB",
    )
    assert run(home, "gc", "--keep", "-1").returncode == 2


def test_progress_shows_only_on_a_terminal_after_a_moment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from turnback.cli import Progress

    quiet = Progress()
    quiet.enabled = False  # stderr is not a terminal
    quiet("gc", 1, 3)
    slow = Progress(delay=0.0)
    slow.enabled = True
    slow("capture", 1, 3)
    slow("capture", 3, 3)
    quick = Progress(delay=60.0)
    quick.enabled = True
    quick("capture", 1, 3)  # within the moment: nothing shown
    err = capsys.readouterr().err
    assert "capture: 1/3" in err and "capture: 3/3" in err
    assert "gc" not in err and err.count("capture: 1/3") == 1


def test_revert_dry_run_shows_the_plan_and_changes_nothing(
    home: Path, workspace: Path, session_id: str
) -> None:
    (workspace / "a.py").write_text("one\nMINE\n")
    plan = ok_json(home, "revert", session_id, "1", "--dry-run")
    assert set(plan) == {"restore", "delete", "keep", "conflicts"}
    assert [(c["path"], c["additions"], c["deletions"]) for c in plan["restore"]] == [
        ("a.py", 1, 1)
    ]
    assert plan["keep"] == [] or all("reason" in c for c in plan["keep"])
    assert [c["path"] for c in plan["conflicts"]] == ["a.py"]  # the hand edit it overwrites
    text = ok(home, "revert", session_id, "1", "--dry-run")
    assert "restore" in text and "a.py" in text and "conflict" in text
    assert (workspace / "a.py").read_text() == "one\nMINE\n"
    assert ok_json(home, "log", session_id)["turns"][1]["reverted_by"] is None
    # a conflict under --json is JSON on standard output, exit code 3, nothing written
    refused = run(home, "revert", session_id, "1", "--keep-user-edits", "--yes", "--json")
    assert refused.returncode == 3
    assert json.loads(refused.stdout)["conflicts"] == ["a.py"]
    assert (workspace / "a.py").read_text() == "one\nMINE\n"


def test_the_revert_prompt_goes_to_the_terminal_not_to_standard_output(
    home: Path, workspace: Path, session_id: str
) -> None:
    controller, terminal = pty.openpty()
    try:
        child = subprocess.Popen(
            [TURNBACK, "--home", str(home), "revert", session_id, "1", "--json"],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=terminal,
            env={**os.environ, "NO_COLOR": "1"},
        )
        seen = b""
        while b"[y/N]" not in seen:
            seen += os.read(controller, 4096)
        os.write(controller, b"y\n")
        out, _ = child.communicate(timeout=60)
    finally:
        os.close(controller)
        os.close(terminal)
    assert child.returncode == 0
    assert b"restore" in seen and b"a.py" in seen  # the plan, shown before asking
    assert json.loads(out)["state"] == "committed"
    assert (workspace / "a.py").read_text() == "one\ntwo\n"


def test_a_running_turn_is_first_class_in_log_show_and_diff(
    home: Path, workspace: Path, session_id: str
) -> None:
    with turnback.open(home, durability="strict") as tb:
        running = tb.session(session_id).turn("still at work")
        for text in ("one", "two", "three"):
            running.record(
                {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
            )
        (workspace / "new.py").write_text("so far\n")
        [*_, turn] = ok_json(home, "log", session_id)["turns"]
        assert (turn["number"], turn["status"], turn["events"]) == (3, "running", 3)
        text = ok(home, "log", session_id)
        assert "3 events so far" in text and "process is gone" not in text
        assert "still at work" in ok(home, "show", session_id, "3")
        timeline = ok(home, "show", session_id, "3", "--events").splitlines()[-3:]
        assert [line.split()[:2] for line in timeline] == [
            [str(seq), "agent_message_chunk"] for seq in (1, 2, 3)
        ]
        events = ok_json(home, "show", session_id, "3")["events"]
        assert [e["event"]["content"]["text"] for e in events] == ["one", "two", "three"]
        data = ok_json(home, "diff", session_id, "3")
        assert data["available"] and [f["path"] for f in data["files"]] == ["new.py"]
        assert "+so far" in ok(home, "diff", session_id, "3")
        running.complete()


def test_log_is_a_timeline(home: Path, workspace: Path, session_id: str) -> None:
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        session.revert(1)
        session.undo_revert()
        session.revert(1, files=False)
    (workspace / "tab\there.txt").write_text("by hand, after the last turn\n")
    text = ok(home, "log", session_id)
    lines = text.splitlines()
    assert "<- head" in next(line for line in lines if line.lstrip().startswith("1 "))
    reverts = [line for line in lines if "revert " in line and "back to turn 1" in line]
    assert len(reverts) == 2 and "undone" in reverts[0] and "committed" in reverts[1]
    assert lines.index(reverts[0]) > lines.index(
        next(line for line in lines if line.lstrip().startswith("2 "))
    )
    since = next(line for line in lines if "changed since the head, in no turn yet" in line)
    assert since.endswith('A "tab\\there.txt"')  # quoted as git quotes it: one row, one line
    data = ok_json(home, "log", session_id)
    assert [r["state"] for r in data["reverts"]] == ["undone", "committed"]
    assert [f["path"] for f in data["since_head"]] == ["a.py", "hand.txt", "tab\there.txt"]


def test_log_fits_the_terminal_and_counts_wide_characters() -> None:
    from turnback.cli import _fit, _width

    assert _width("日本語") == 6 and _width("abc") == 3
    assert _fit("日本語のプロンプト", 7) == "日本語…" and _width(_fit("x" * 50, 10)) == 10


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run the CLI with its standard output on a terminal; what reached the terminal."""
    controller, terminal = pty.openpty()
    try:
        child = subprocess.Popen(
            [TURNBACK, *args], stdin=terminal, stdout=terminal, stderr=terminal, env=env
        )
        os.close(terminal)
        seen = b""
        while True:
            try:
                data = os.read(controller, 65536)
            except OSError:  # the terminal closed with the child
                break
            if not data:
                break
            seen += data
        child.wait(timeout=60)
    finally:
        os.close(controller)
    assert child.returncode == 0, seen
    return seen.decode(errors="replace")


def test_long_output_goes_through_the_pager_on_a_terminal(
    home: Path, session_id: str, tmp_path: Path
) -> None:
    paged = tmp_path / "paged.txt"
    pager = tmp_path / "pager"
    pager.write_text(f"#!/bin/sh\ncat > {paged}\n")
    pager.chmod(0o755)
    env = {**os.environ, "NO_COLOR": "1", "PAGER": str(pager)}
    shown = _on_a_terminal(["--home", str(home), "diff", session_id, "2"], env)
    assert "+TWO" in paged.read_text() and "+TWO" not in shown
    paged.unlink()
    shown = _on_a_terminal(["--home", str(home), "--no-pager", "diff", session_id, "2"], env)
    assert "+TWO" in shown and not paged.exists()
    _on_a_terminal(["--home", str(home), "show", session_id, "2", "--events"], env)
    assert "user_message_chunk" in paged.read_text() or "edit a" in paged.read_text()
    # on a terminal, --stat is coloured
    colour = {k: v for k, v in env.items() if k != "NO_COLOR"}
    stat = _on_a_terminal(["--home", str(home), "diff", session_id, "2", "--stat"], colour)
    assert "\x1b[32m+1" in stat and "\x1b[31m-1" in stat


def test_the_plan_puts_the_hand_edits_in_the_way_first_and_counts_ignored_files(
    home: Path, workspace: Path
) -> None:
    (workspace / ".gitignore").write_text("*.o\n")
    with turnback.open(home) as tb:
        session = tb.create_session(workspace)
        with session.turn("build and edit"):
            (workspace / "a.py").write_text("agent\n")
            for n in range(300):
                (workspace / f"part{n}.o").write_text("object\n")
        session_id = session.id
    (workspace / "a.py").write_text("agent\nmine\n")

    lines = ok(home, "revert", session_id, "0", "--dry-run").splitlines()
    assert lines[1].split()[:2] == ["conflict", "a.py"]
    assert "the revert overwrites it" in lines[1]
    assert [line for line in lines if "part" in line] == []
    assert any("300 ignored paths" in line for line in lines)
    assert len(lines) < 10
    # what the hint says --keep-user-edits does is what it does
    assert "--keep-user-edits refuses" in lines[-1]
    kept = ok(home, "revert", session_id, "0", "--dry-run", "--keep-user-edits").splitlines()
    assert "refuses it and writes nothing" in kept[1]
    refused = run(home, "revert", session_id, "0", "--yes", "--keep-user-edits")
    assert refused.returncode == 3
    assert (workspace / "a.py").read_text() == "agent\nmine\n"
    # the JSON plan still lists every path
    assert len(ok_json(home, "revert", session_id, "0", "--dry-run")["keep"]) == 300
    # the refused revert is in the log as refused, not as a failure rolled back
    log = ok(home, "log", session_id)
    assert "(refused, nothing changed)" in log and "rolled back" not in log


def test_global_options_are_taken_after_the_command_too(
    home: Path, workspace: Path, session_id: str
) -> None:
    for args in (
        ["log", session_id, "--home", str(home), "--no-pager"],
        ["log", session_id, f"--home={home}"],
        ["diff", session_id, "1", "--stat", "--no-pager", "--home", str(home)],
        ["revert", session_id, "1", "--dry-run", "--home", str(home)],
        ["sessions", "--json", "--home", str(home), "--no-pager"],
    ):
        done = run(None, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert "a.py" in done.stdout or session_id in done.stdout, (args, done.stdout)
    missing = run(None, "sessions", "--home")
    assert missing.returncode == 2 and "'--home' requires an argument" in missing.stderr
    # what follows `--` is an argument, never the global option
    shown = run(home, "show", session_id, "1", "--", "--home")
    assert shown.returncode == 2 and "unexpected extra argument (--home)" in shown.stderr


def test_diff_stat_on_another_host_lists_the_stored_files(
    home: Path, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNBACK_HOST", "elsewhere")
    stat = ok(home, "diff", session_id, "2", "--stat").splitlines()
    assert stat[-1].split() == ["M", "a.py", "+1", "-1"]
    patch = run(home, "diff", session_id, "2")  # the patch needs the checkpoints' host
    assert patch.returncode == 1 and "are on host" in patch.stderr
