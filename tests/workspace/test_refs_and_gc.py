"""Checkpoint refs: deletion, pruning with a keep list and an age, and bytes freed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from turnback.workspace import Snapshots
from turnback.workspace import scan as scan_module

from .conftest import write


def test_delete_refs(snapshots: Snapshots, workspace: Path) -> None:
    write(workspace, "a.txt", "a\n")
    snapshots.capture(workspace, "s/1/0")
    snapshots.capture(workspace, "s/1/1")
    snapshots.delete_refs(workspace, ["s/1/1", "s/1/never-existed"])
    assert snapshots.exists(workspace, "s/1/0")
    assert not snapshots.exists(workspace, "s/1/1")
    assert not snapshots.exists(workspace.parent, "s/1/0")  # a workspace with no shadow


def test_gc_prunes_unkept_old_refs_and_frees_their_objects(
    snapshots: Snapshots, workspace: Path
) -> None:
    for turn in range(12):
        write(workspace, "data.bin", os.urandom(20_000))  # incompressible, unique per turn
        snapshots.capture(workspace, f"s/1/{turn}")
    shadow = snapshots._shadow(workspace)
    # Nothing is old enough yet: nothing goes.
    removed, _ = snapshots.gc(workspace, keep=["s/1/0"], older_than=3600, object_grace=0)
    assert removed == 0
    size = shadow.size()
    removed, freed = snapshots.gc(workspace, keep=["s/1/0", "s/1/11"], older_than=0, object_grace=0)
    assert removed == 10
    assert freed > 9 * 20_000 and shadow.size() == size - freed
    assert snapshots.exists(workspace, "s/1/0") and snapshots.exists(workspace, "s/1/11")
    assert not snapshots.exists(workspace, "s/1/5")
    # What is kept can still be diffed and restored.
    changes = snapshots.changes(workspace, "s/1/0", "s/1/11")
    assert [c.path for c in changes] == ["data.bin"] and changes[0].binary
    write(workspace, "data.bin", b"now")
    now = snapshots.capture(workspace, "s/1/now").commit
    snapshots.restore(workspace, "s/1/0", current=now)
    assert len((workspace / "data.bin").read_bytes()) == 20_000


def test_gc_without_keep_removes_no_ref(snapshots: Snapshots, workspace: Path) -> None:
    write(workspace, "a.txt", "a\n")
    snapshots.capture(workspace, "s/1/0")
    assert snapshots.gc(workspace, object_grace=0)[0] == 0
    assert snapshots.exists(workspace, "s/1/0")


def test_gc_keeps_young_unreferenced_objects(snapshots: Snapshots, workspace: Path) -> None:
    write(workspace, "a.txt", "a\n")
    first = snapshots.capture(workspace, "s/1/0").commit
    snapshots.delete_refs(workspace, ["s/1/0"])
    snapshots.gc(workspace)  # default grace: a capture in flight keeps its objects
    assert snapshots.exists(workspace, first)
    snapshots.gc(workspace, object_grace=0)
    assert snapshots.exists(workspace, first)  # the shadow's index still names the blob ...
    write(workspace, "a.txt", "b\n")
    snapshots.capture(workspace, "s/1/1")
    snapshots.gc(workspace, object_grace=0)
    assert not snapshots.exists(workspace, first)  # ... until nothing does


def test_progress_is_reported(home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_module, "BATCH", 100)
    seen: list[tuple[str, int, int]] = []
    snapshots = Snapshots(home, progress=lambda *args: seen.append(args))
    empty = snapshots.capture(workspace, "s/1/empty").commit
    for i in range(250):
        write(workspace, f"d{i % 10}/f{i}.txt", str(i))
    full = snapshots.capture(workspace, "s/1/0").commit
    assert len(snapshots.changes(workspace, empty, full)) == 250
    snapshots.gc(workspace)
    assert [s for s in seen if s[0] == "capture"] == [
        ("capture", 0, 250),
        ("capture", 100, 250),
        ("capture", 200, 250),
        ("capture", 250, 250),
    ]
    assert ("gc", 3, 3) in seen
