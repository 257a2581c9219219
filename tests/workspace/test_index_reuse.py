"""Warm captures that leave the shadow's index alone: the trees are still exactly the files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from turnback.workspace import Snapshots
from turnback.workspace import plan as plan_module
from turnback.workspace.plan import FileReader
from turnback.workspace.scan import SYNC_AFTER
from turnback.workspace.shadow import INDEX_TREE

from .conftest import write


def test_a_file_edited_and_then_put_back_is_captured_as_it_is(home: Path, workspace: Path) -> None:
    write(workspace, "a.txt", "original\n")
    write(workspace, "b.txt", "b\n")
    snapshots = Snapshots(home)
    first = snapshots.capture(workspace, "t/0")
    shadow = snapshots._shadow(workspace)
    noted = shadow.noted_tree(INDEX_TREE)
    assert noted == first.tree
    write(workspace, "a.txt", "edited\n")
    edited = snapshots.capture(workspace, "t/1")
    assert edited.tree != first.tree
    assert shadow.noted_tree(INDEX_TREE) == noted  # only a tracked file changed: index untouched
    write(workspace, "a.txt", "original\n")  # what the index still holds
    back = snapshots.capture(workspace, "t/2")
    assert back.tree == first.tree
    write(workspace, "c.txt", "new\n")  # a new file: the index is brought up to date
    grown = snapshots.capture(workspace, "t/3")
    assert shadow.noted_tree(INDEX_TREE) == grown.tree
    assert grown.tree == Snapshots(home / "other").capture(workspace, "t/0").tree


def test_files_read_by_the_last_capture_are_read_again_only_when_they_may_have_changed(
    home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(workspace, "a.txt", "a0\n")
    write(workspace, "b.txt", "b0\n")
    snapshots = Snapshots(home)
    snapshots.capture(workspace, "t/0")
    read: list[str] = []
    original = FileReader.read

    def reading(self: FileReader, full: bytes, info: object = None) -> object:
        read.append(Path(full.decode()).name)
        return original(self, full, info)  # type: ignore[arg-type]

    monkeypatch.setattr(FileReader, "read", reading)
    fresh = iter(range(100))

    def captured_exactly(ref: str, racy: float) -> list[str]:
        """Capture; check the tree is what a first capture finds; return the files read."""
        monkeypatch.setattr(plan_module, "RACY_NS", int(racy * 1e9))
        read.clear()
        tree = snapshots.capture(workspace, ref).tree
        reads = sorted(read)
        assert tree == Snapshots(home / f"fresh-{next(fresh)}").capture(workspace, "t").tree
        return reads

    write(workspace, "a.txt", "a1\n")
    write(workspace, "b.txt", "b1\n")
    time.sleep(0.05)  # read well after they changed: a later capture may trust them
    assert captured_exactly("t/1", racy=0.02) == ["a.txt", "b.txt"]
    write(workspace, "a.txt", "a2\n")  # the same size, new times
    # b.txt comes from the last checkpoint; a.txt is read too soon after it changed: within
    # the same tick of the file clock it could change again unseen
    assert captured_exactly("t/2", racy=60) == ["a.txt"]
    time.sleep(0.05)
    assert captured_exactly("t/3", racy=0.02) == ["a.txt"]  # so it is read again
    assert captured_exactly("t/4", racy=0.02) == []  # now both are trusted
    write(workspace, "b.txt", "b0\n")  # back to what the index holds: no longer reported
    assert captured_exactly("t/5", racy=0.02) == ["a.txt"]  # the index's tree with a.txt


def test_many_edited_files_bring_the_index_up_to_date(home: Path, workspace: Path) -> None:
    for i in range(SYNC_AFTER + 1):
        write(workspace, f"d/f{i}.txt", "v1\n")
    snapshots = Snapshots(home)
    snapshots.capture(workspace, "t/0")
    shadow = snapshots._shadow(workspace)
    for i in range(SYNC_AFTER + 1):
        write(workspace, f"d/f{i}.txt", "v2\n")
    second = snapshots.capture(workspace, "t/1")
    assert shadow.noted_tree(INDEX_TREE) == second.tree
    assert second.tree == Snapshots(home / "other").capture(workspace, "t/0").tree


def test_check_removes_what_a_killed_fast_import_left(home: Path, workspace: Path) -> None:
    write(workspace, "a.txt", "a\n")
    snapshots = Snapshots(home)
    snapshots.capture(workspace, "t/0")
    report = snapshots._shadow(workspace).dir / "fast_import_crash_12345"
    report.write_text("fatal: stream ends early\n")
    snapshots.check(workspace)
    assert not report.exists()
    assert snapshots.exists(workspace, "t/0")
