"""Watched captures: a watcher says which paths changed, and the capture is the same as a scan.

The property test runs random edit scripts in a workspace captured by two :class:`Snapshots`
at the same moments, one fed by its watcher and one scanning, and compares every checkpoint.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from turnback.workspace import Snapshots
from turnback.workspace.watcher import AVAILABLE

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="inotify is Linux's")

IGNORES = "*.log\nbuild/\n"
LIMIT = 12  # paths a watcher takes between captures before it gives up (kept small to reach it)
MAX_BYTES = 64  # files larger than this are skipped, in both

names = st.sampled_from(["f", "g.txt", "h.log", "big"])
directories = st.sampled_from(["", "a", "a/b", "c", "build"])
paths = st.builds(lambda d, n: f"{d}/{n}" if d else n, directories, names)
contents = st.sampled_from([b"", b"one\n", b"two\n", b"x" * (MAX_BYTES + 1)])
steps = st.one_of(
    st.tuples(st.just("write"), paths, contents),
    st.tuples(st.just("delete"), paths),
    st.tuples(st.just("rename"), paths, paths),
    st.tuples(st.just("move_dir"), directories, directories),
    st.tuples(st.just("delete_dir"), directories),
    st.tuples(st.just("chmod"), paths),
    st.tuples(st.just("symlink"), paths, names),
    st.tuples(st.just("rewrite"), paths, st.integers(2, 30)),
    st.tuples(st.just("flood"), st.integers(LIMIT, 3 * LIMIT)),
    st.tuples(st.just("ignore"), st.sampled_from(["*.txt\n", IGNORES])),
)


def apply(workspace: Path, step: tuple[object, ...]) -> None:
    """Do one edit; edits that make no sense here (a missing source, say) do nothing."""
    kind = step[0]
    with_path = workspace / str(step[1]) if len(step) > 1 else workspace
    try:
        if kind == "write":
            assert isinstance(step[2], bytes)
            with_path.parent.mkdir(parents=True, exist_ok=True)
            with_path.write_bytes(step[2])
        elif kind == "delete":
            with_path.unlink()
        elif kind == "rename":
            target = workspace / str(step[2])
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(with_path, target)
        elif kind == "move_dir" and step[1] and step[2]:
            target = workspace / (str(step[2]) + "-moved")
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(with_path, target)
        elif kind == "delete_dir" and step[1]:
            shutil.rmtree(with_path)
        elif kind == "chmod":
            with_path.chmod(with_path.stat().st_mode ^ 0o100)
        elif kind == "symlink":
            with_path.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(str(step[2]), with_path)
        elif kind == "rewrite":
            assert isinstance(step[2], int)
            with_path.parent.mkdir(parents=True, exist_ok=True)
            for i in range(step[2]):
                with_path.write_bytes(b"%d\n" % i)
        elif kind == "flood":
            assert isinstance(step[1], int)
            (workspace / "flood").mkdir(exist_ok=True)
            for i in range(step[1]):
                (workspace / "flood" / f"n{i}").write_bytes(b"%d\n" % i)
                (workspace / f"top{i % 3}").write_bytes(b"%d\n" % i)
        elif kind == "ignore":
            (workspace / ".gitignore").write_text(str(step[1]))
    except (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, OSError):
        pass


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="turnback-watched-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@settings(
    max_examples=int(os.environ.get("TURNBACK_WATCH_EXAMPLES", "20")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(script=st.lists(st.lists(steps, max_size=4), min_size=1, max_size=5))
def test_every_watched_capture_equals_a_scan(
    scratch: Path, script: list[list[tuple[object, ...]]]
) -> None:
    """Edits, a capture by each, edits, a capture by each, …: the same trees and skipped files."""
    run = Path(tempfile.mkdtemp(dir=scratch))
    workspace = run / "ws"
    workspace.mkdir()
    (workspace / ".gitignore").write_text(IGNORES)
    (workspace / "a").mkdir()
    (workspace / "a" / "f").write_bytes(b"start\n")
    watched = Snapshots(run / "watched", max_file_bytes=MAX_BYTES)
    scanned = Snapshots(run / "scanned", max_file_bytes=MAX_BYTES)
    assert watched.watch(workspace, limit=LIMIT)
    try:
        watched.capture(workspace, "t/base")
        scanned.capture(workspace, "t/base")
        for n, edits in enumerate(script):
            for step in edits:
                apply(workspace, step)
            mine = watched.capture(workspace, f"t/{n}")
            theirs = scanned.capture(workspace, f"t/{n}")
            assert not theirs.watched
            event("watched" if mine.watched else f"scanned: {mine.fallback}")
            assert (mine.tree, mine.skipped) == (theirs.tree, theirs.skipped), (mine, theirs)
    finally:
        watched.unwatch(workspace)


def test_a_watched_capture_reads_only_what_changed(scratch: Path) -> None:
    workspace = scratch / "ws"
    for i in range(200):
        path = workspace / f"d{i % 7}" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{i}\n")
    snapshots = Snapshots(scratch / "home")
    assert snapshots.watch(workspace)
    first = snapshots.capture(workspace, "t/0")
    assert not first.watched and first.fallback is None  # the baseline is a scan
    for i in range(10):
        (workspace / f"d{i % 7}" / f"f{i}.txt").write_text("changed\n")
    (workspace / "new").mkdir()
    (workspace / "new" / "made.txt").write_text("new\n")
    (workspace / "d1" / "f1.txt").unlink()
    second = snapshots.capture(workspace, "t/1")
    assert second.watched and second.fallback is None
    third = snapshots.capture(workspace, "t/2")  # nothing changed: the same commit
    assert third.watched and third.commit == second.commit
    snapshots.unwatch(workspace)
    scan = Snapshots(scratch / "other").capture(workspace, "t/0")
    assert scan.tree == second.tree
    changed = {c.path for c in snapshots.changes(workspace, first.commit, second.commit)}
    assert changed == {*(f"d{i % 7}/f{i}.txt" for i in range(10)), "new/made.txt"}
    after = snapshots.capture(workspace, "t/3")  # unwatched again: a scan
    assert not after.watched and after.tree == second.tree


def test_a_watcher_in_doubt_falls_back_to_a_scan_and_says_why(scratch: Path) -> None:
    workspace = scratch / "ws"
    workspace.mkdir()
    snapshots = Snapshots(scratch / "home")
    assert snapshots.watch(workspace, limit=5)
    snapshots.capture(workspace, "t/0")
    for i in range(6):
        (workspace / f"f{i}").write_text("x\n")
    flooded = snapshots.capture(workspace, "t/1")
    assert not flooded.watched and flooded.fallback == "more than 5 paths changed"
    (workspace / ".gitignore").write_text("f1\n")
    ignored = snapshots.capture(workspace, "t/2")
    assert not ignored.watched and ignored.fallback and "ignore rules" in ignored.fallback
    (workspace / "f2").write_text("y\n")
    back = snapshots.capture(workspace, "t/3")
    assert back.watched and back.fallback is None
    snapshots.unwatch(workspace)
