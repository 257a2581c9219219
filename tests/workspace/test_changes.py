"""Per-turn diffs: change kinds, line counts, binary flags and unified patches."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnback.errors import CheckpointUnavailable
from turnback.model import ChangeKind, FileChange
from turnback.workspace import Snapshots

from .conftest import Capture, write

LINES = "".join(f"line {i}\n" for i in range(1, 21))


def test_every_kind_with_counts(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    ws = any_workspace
    write(ws, "edit.txt", LINES)
    write(ws, "gone.txt", "bye\n")
    write(ws, "move_me.txt", LINES)
    write(ws, "image.png", b"\x89PNG\0\0\1\2")
    write(ws, "script.sh", "echo hi\n")
    write(ws, "becomes_link.txt", "target\n")
    before = capture("0")

    write(ws, "edit.txt", LINES.replace("line 3\n", "line three\n") + "line 21\nline 22\n")
    (ws / "gone.txt").unlink()
    (ws / "move_me.txt").rename(ws / "moved.txt")
    write(ws, "image.png", b"\x89PNG\0\0\3\4\5")
    (ws / "script.sh").chmod(0o755)
    (ws / "becomes_link.txt").unlink()
    (ws / "becomes_link.txt").symlink_to("edit.txt")
    write(ws, "new/file.py", "a = 1\nb = 2\n")
    after = capture("1")

    changes = {c.path: c for c in snapshots.changes(ws, before, after)}
    assert changes == {
        "edit.txt": FileChange("edit.txt", ChangeKind.MODIFIED, additions=3, deletions=1),
        "gone.txt": FileChange("gone.txt", ChangeKind.DELETED, additions=0, deletions=1),
        "moved.txt": FileChange(
            "moved.txt", ChangeKind.RENAMED, additions=0, deletions=0, old_path="move_me.txt"
        ),
        "image.png": FileChange("image.png", ChangeKind.MODIFIED, binary=True),
        "script.sh": FileChange("script.sh", ChangeKind.MODIFIED),
        "becomes_link.txt": FileChange(
            "becomes_link.txt", ChangeKind.TYPE_CHANGED, additions=1, deletions=1
        ),
        "new/file.py": FileChange("new/file.py", ChangeKind.ADDED, additions=2),
    }


def test_no_changes_between_equal_checkpoints(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    assert snapshots.changes(any_workspace, capture("0"), capture("1")) == []


def test_changes_accept_ref_names(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    capture("0")
    write(any_workspace, "README.md", "# renamed project\n")
    capture("1")
    assert snapshots.changes(any_workspace, "t/0", "t/1") == [
        FileChange("README.md", ChangeKind.MODIFIED, additions=1, deletions=1)
    ]


def test_patch_is_a_unified_diff_optionally_limited_to_paths(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    before = capture("0")
    write(any_workspace, "README.md", "# project\n\nMore words.\n")
    write(any_workspace, "src/app.py", "print('bye')\n")
    after = capture("1")
    full = snapshots.patch(any_workspace, before, after)
    assert "--- a/README.md\n+++ b/README.md\n" in full
    assert "+More words.\n" in full
    assert "-print('hello')\n+print('bye')\n" in full
    only = snapshots.patch(any_workspace, before, after, ["src/app.py"])
    assert "README.md" not in only and "+print('bye')" in only


def test_missing_checkpoints_are_reported_clearly(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    before = capture("0")
    with pytest.raises(CheckpointUnavailable, match="t/9"):
        snapshots.changes(any_workspace, before, "t/9")
    with pytest.raises(CheckpointUnavailable):
        snapshots.changes(any_workspace, before, "0" * 40)


def test_diffs_between_checkpoints_read_no_index(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    """A diff of two checkpoints reads their objects only: the shadow's index (which git's diff
    reads, when there is one, to take contents from the workspace instead) is not opened, so a
    large one costs nothing, and a damaged one breaks no diff."""
    write(any_workspace, "a.txt", LINES)
    before = capture("0")
    write(any_workspace, "a.txt", LINES + "line 21\n")
    after = capture("1")
    index = snapshots.shadow_dir(any_workspace) / "index"
    index.write_bytes(b"DIRC not an index")
    fresh = Snapshots(snapshots.home)  # remembers nothing: looks the checkpoints up
    for reader in (snapshots, fresh):
        [change] = reader.changes(any_workspace, before, after)
        assert (change.path, change.additions, change.deletions) == ("a.txt", 1, 0)
        assert "+line 21" in reader.patch(any_workspace, before, after)
