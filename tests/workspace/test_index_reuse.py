"""Warm captures that leave the shadow's index alone: the trees are still exactly the files."""

from __future__ import annotations

from pathlib import Path

from turnback.workspace import Snapshots
from turnback.workspace.shadow import INDEX_TREE
from turnback.workspace.snapshots import SYNC_AFTER

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
