"""Plain restores: files equal to a checkpoint, and nothing else touched (invariant 10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from turnback.workspace import Snapshots
from turnback.workspace.shadow import Entry
from turnback.workspace.writer import WorkspaceWriter

from .conftest import Capture, commit_all, git, tree_digest, with_submodule, write


def test_restore_brings_back_every_kind_of_change(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    ws = any_workspace
    write(ws, "text.txt", "one\ntwo\n")
    write(ws, "blob.bin", bytes(range(256)) * 4)
    write(ws, "move_me.txt", "moving\n")
    write(ws, "run.sh", "#!/bin/sh\n")
    write(ws, "was_file", "a file\n")
    write(ws, "tree/leaf.txt", "leaf\n")
    (ws / "link").symlink_to("text.txt")
    before_digest = tree_digest(ws)
    before = capture("0")

    write(ws, "text.txt", "one\nTWO\nthree\n")
    write(ws, "blob.bin", b"\0" * 10)
    (ws / "move_me.txt").rename(ws / "moved.txt")
    (ws / "run.sh").chmod(0o755)
    (ws / "was_file").unlink()
    (ws / "was_file").mkdir()
    write(ws, "was_file/inner.txt", "now a directory\n")
    (ws / "tree/leaf.txt").unlink()
    (ws / "tree").rmdir()
    write(ws, "tree", "now a file\n")
    (ws / "link").unlink()
    (ws / "link").symlink_to("blob.bin")
    write(ws, "added/deep/new.py", "x = 1\n")
    after = capture("1")

    done = snapshots.restore(ws, before, current=after)
    assert tree_digest(ws) == before_digest
    assert os.readlink(ws / "link") == "text.txt"
    assert done == sorted(
        [
            "added/deep/new.py",
            "blob.bin",
            "link",
            "move_me.txt",
            "moved.txt",
            "run.sh",
            "text.txt",
            "tree",
            "tree/leaf.txt",
            "was_file",
            "was_file/inner.txt",
        ]
    )
    # Restoring again changes nothing.
    assert snapshots.restore(ws, before, current=capture("2")) == []


def test_symlinks_are_restored_as_links_and_never_written_through(
    snapshots: Snapshots, workspace: Path, tmp_path: Path, problems: list[str]
) -> None:
    outside = tmp_path / "outside"
    write(outside, "secret.txt", "do not touch\n")
    write(outside, "dir/x.txt", "outside x\n")
    outside_before = tree_digest(outside)
    ws = workspace
    write(ws, "config.ini", "[a]\n")
    write(ws, "data/x.txt", "inside x\n")
    (ws / "escape").symlink_to(outside / "secret.txt")
    before_digest = tree_digest(ws)
    before = snapshots.capture(ws, "t/0").commit

    # The agent turns a file and a directory into links that point outside, and retargets one.
    (ws / "config.ini").unlink()
    (ws / "config.ini").symlink_to(outside / "secret.txt")
    (ws / "data/x.txt").unlink()
    (ws / "data").rmdir()
    (ws / "data").symlink_to(outside / "dir")
    (ws / "escape").unlink()
    (ws / "escape").symlink_to(outside / "dir" / "x.txt")
    after = snapshots.capture(ws, "t/1").commit

    snapshots.restore(ws, before, current=after)
    assert tree_digest(ws) == before_digest
    assert (ws / "data").is_dir() and not (ws / "data").is_symlink()
    assert os.readlink(ws / "escape") == str(outside / "secret.txt")
    assert tree_digest(outside) == outside_before
    assert problems == []


def test_a_parent_that_became_a_link_outside_is_refused(
    snapshots: Snapshots, workspace: Path, tmp_path: Path, problems: list[str]
) -> None:
    outside = tmp_path / "outside"
    write(outside, "x.txt", "outside\n")
    ws = workspace
    write(ws, "data/x.txt", "v1\n")
    before = snapshots.capture(ws, "t/0").commit
    write(ws, "data/x.txt", "v2\n")
    after = snapshots.capture(ws, "t/1").commit
    # Between the capture and the restore the directory is swapped for a link outside.
    (ws / "data/x.txt").unlink()
    (ws / "data").rmdir()
    (ws / "data").symlink_to(outside)

    assert snapshots.restore(ws, before, current=after) == []
    assert (outside / "x.txt").read_text() == "outside\n"
    assert sorted(os.listdir(outside)) == ["x.txt"]
    assert any("data/x.txt" in p and "symbolic link" in p for p in problems)


def test_untracked_empty_and_ignored_paths_are_left_alone(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    ws = any_workspace
    write(ws, ".gitignore", "*.log\nbuild/\n")
    (ws / "empty").mkdir()
    before = capture("0")
    write(ws, "src/app.py", "print('agent')\n")
    write(ws, "agent.txt", "by the agent\n")
    write(ws, "run.log", "ignored\n")
    write(ws, "build/out.o", "ignored too\n")
    after = capture("1")
    snapshots.restore(ws, before, current=after)
    assert (ws / "src/app.py").read_text() == "print('hello')\n"
    assert not (ws / "agent.txt").exists()
    assert (ws / "run.log").read_text() == "ignored\n"
    assert (ws / "build/out.o").read_text() == "ignored too\n"
    assert (ws / "empty").is_dir()
    if (ws / ".git").exists():
        assert "agent.txt" not in git(ws, "status", "--porcelain")


def test_files_that_existed_before_the_undone_turns_are_kept(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    ws = any_workspace
    end_of_turn_1 = capture("1-end")
    write(ws, "notes.md", "the user's notes\n")  # between turn 1 and turn 2
    write(ws, "todo.md", "the user's todo\n")
    begin_of_turn_2 = capture("2-begin")
    write(ws, "notes.md", "the user's notes\nand the agent's addition\n")
    (ws / "todo.md").unlink()
    write(ws, "agent.py", "made by the agent\n")
    write(ws, "README.md", "# changed by the agent\n")
    now = capture("now")

    snapshots.restore(ws, end_of_turn_1, current=now, keep=begin_of_turn_2)
    assert (ws / "notes.md").read_text() == "the user's notes\n"
    assert (ws / "todo.md").read_text() == "the user's todo\n"
    assert not (ws / "agent.py").exists()
    assert (ws / "README.md").read_text() == "# project\n"

    # Without ``keep`` a plain restore is exact: the notes go too.
    snapshots.restore(ws, end_of_turn_1, current=capture("again"))
    assert not (ws / "notes.md").exists()


def test_large_files_are_left_alone(home: Path, workspace: Path, problems: list[str]) -> None:
    snapshots = Snapshots(home, max_file_bytes=100, problems=lambda _w, m: problems.append(m))
    write(workspace, "data.bin", b"small")
    write(workspace, "big.bin", b"B" * 500)
    before = snapshots.capture(workspace, "t/0").commit
    write(workspace, "data.bin", b"L" * 500)  # grows past the limit during the turn
    write(workspace, "big.bin", b"C" * 500)
    after = snapshots.capture(workspace, "t/1")
    assert after.skipped == ("big.bin", "data.bin")
    assert snapshots.restore(workspace, before, current=after.commit) == []
    assert (workspace / "data.bin").read_bytes() == b"L" * 500
    assert (workspace / "big.bin").read_bytes() == b"C" * 500
    assert any("data.bin" in p for p in problems)


def test_nested_repositories_and_submodules_are_left_alone(
    snapshots: Snapshots, workspace: Path, tmp_path: Path
) -> None:
    with_submodule(workspace, tmp_path / "library", "v = 1\n")
    before = snapshots.capture(workspace, "t/0").commit

    sub = workspace / "vendor/lib"
    write(sub, "lib.py", "v = 2\n")
    git(sub, "commit", "-qam", "2")
    sub_head = git(sub, "rev-parse", "HEAD")
    nested = workspace / "fresh"
    write(nested, "f.txt", "f\n")
    commit_all(nested, "f")
    write(workspace, "main.py", "import lib  # agent\n")
    after = snapshots.capture(workspace, "t/1").commit

    assert snapshots.restore(workspace, before, current=after) == ["main.py"]
    assert git(sub, "rev-parse", "HEAD") == sub_head
    assert (sub / "lib.py").read_text() == "v = 2\n"
    assert (nested / "f.txt").read_text() == "f\n" and (nested / ".git").is_dir()


CHILD = """
import sys
from pathlib import Path
from turnback.workspace import Snapshots
from turnback.workspace.shadow import Entry
from turnback.workspace.writer import WorkspaceWriter
Snapshots(Path(sys.argv[1])).restore(Path(sys.argv[2]), sys.argv[3], current=sys.argv[4])
"""


@pytest.mark.parametrize("fault", ["restore.plan", "restore.file@3", "restore.done"])
def test_a_restore_killed_midway_finishes_when_run_again(
    home: Path, any_workspace: Path, fault: str
) -> None:
    snapshots = Snapshots(home)
    ws = any_workspace
    for i in range(6):
        write(ws, f"f{i}.txt", f"{i}\n")
    expected = tree_digest(ws)
    before = snapshots.capture(ws, "t/0").commit
    for i in range(6):
        write(ws, f"f{i}.txt", f"{i} changed\n")
    write(ws, "extra.txt", "x\n")
    after = snapshots.capture(ws, "t/1").commit
    env = {**os.environ, "TURNBACK_FAULT": fault, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(home), str(ws), before, after],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert child.returncode == -9, child.stderr
    assert not [p for p in os.listdir(ws) if p.endswith(".tmp")]
    snapshots.restore(ws, before, current=snapshots.capture(ws, "t/2").commit)
    assert tree_digest(ws) == expected


def test_unusual_file_names_round_trip(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    names = ["sp ace.txt", "tab\there.txt", "new\nline.txt", "ünïcödé.txt", "-dash", "*star?"]
    names.append(os.fsdecode(b"latin1-\xe9.txt"))
    for name in names:
        write(any_workspace, f"odd/{name}", name.encode("utf-8", "surrogateescape"))
    expected = tree_digest(any_workspace)
    before = capture("0")
    for name in names:
        (any_workspace / "odd" / name).unlink()
    write(any_workspace, "odd/sp ace.txt", "changed")
    after = capture("1")
    changed = snapshots.changes(any_workspace, before, after)
    assert sorted(c.path for c in changed) == sorted(f"odd/{n}" for n in names)
    snapshots.restore(any_workspace, before, current=after)
    assert tree_digest(any_workspace) == expected


def test_ctrl_c_while_the_writer_goes_down_a_path_stays_a_ctrl_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt landing as the writer closes a directory it has gone past (here: raised
    by that close, once it has closed) reaches the caller as itself, not as the OSError of a
    descriptor closed twice, which a restore would report as a file it could not write."""
    workspace = tmp_path / "workspace"
    (workspace / "a" / "b").mkdir(parents=True)
    close = os.close
    interrupted: list[int] = []

    def close_then_interrupt(fd: int) -> None:
        close(fd)
        if not interrupted:
            interrupted.append(fd)
            raise KeyboardInterrupt

    with WorkspaceWriter(workspace) as writer:
        monkeypatch.setattr(os, "close", close_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            writer.write("a/b/c.txt", Entry("100644", "0" * 40), b"new\n", absent=True)
        monkeypatch.setattr(os, "close", close)
    assert interrupted, "the writer closed no directory on its way down"
    assert sorted(p.name for p in workspace.rglob("*")) == ["a", "b"]
