"""Captures: what goes into a checkpoint, what stays out, and what is never written."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from turnback.errors import GitFailed, InvalidId
from turnback.workspace import Snapshots

from .conftest import commit_all, git, with_submodule, write


def listing(snapshots: Snapshots, workspace: Path, commit: str) -> dict[str, str]:
    """path -> mode of every entry in a checkpoint, read through the shadow repository."""
    shadow = snapshots._shadow(workspace)
    out = shadow.run("ls-tree", "-r", "-z", commit, deadline=time.monotonic() + 60).stdout.decode()
    entries = {}
    for item in filter(None, out.split("\0")):
        meta, path = item.split("\t", 1)
        entries[path] = meta.split(" ")[0]
    return entries


def test_capture_records_files_and_repeats_the_tree_when_nothing_changed(
    snapshots: Snapshots, any_workspace: Path
) -> None:
    first = snapshots.capture(any_workspace, "t/0")
    second = snapshots.capture(any_workspace, "t/1")
    assert listing(snapshots, any_workspace, first.commit) == {
        "README.md": "100644",
        "src/app.py": "100644",
    }
    assert second.tree == first.tree
    assert first.ref == "t/0" and first.skipped == ()
    write(any_workspace, "src/app.py", "print('changed')\n")
    third = snapshots.capture(any_workspace, "t/2")
    assert third.tree != first.tree


def test_a_capture_of_an_unchanged_workspace_names_the_last_commit_again(
    home: Path, tmp_path: Path, any_workspace: Path
) -> None:
    """Nothing changed since this object's last capture: the new ref names the same commit, with
    no object written; one status ran, and no fast-import: the refs are moved directly."""
    log = tmp_path / "git.log"
    wrapper = tmp_path / "logging-git"
    real = subprocess.run(["which", "git"], capture_output=True, text=True, check=True).stdout
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real.strip()} "$@"\n')
    wrapper.chmod(0o755)

    def captured(snapshots: Snapshots, ref: str) -> tuple[str, str, str, set[Path]]:
        log.write_text("")
        before = set(home.glob("shadow/*.git/objects/**/*"))
        checkpoint = snapshots.capture(any_workspace, ref)
        written = set(home.glob("shadow/*.git/objects/**/*")) - before
        return checkpoint.commit, checkpoint.tree, log.read_text(), written

    snapshots = Snapshots(home, git=str(wrapper))
    first, tree, _, _ = captured(snapshots, "t/0")
    again, same_tree, ran, written = captured(snapshots, "t/1")
    assert (again, same_tree) == (first, tree)
    assert ran.count(" status ") == 1 and " fast-import " not in ran
    assert len(ran.splitlines()) == 1 and not written
    refs = home.glob("shadow/*.git/refs/turnback/t/1")
    assert [ref.read_text() for ref in refs] == [first + "\n"]
    assert not list(home.glob("shadow/*.git/**/*.lock"))
    assert snapshots.exists(any_workspace, "t/0") and snapshots.exists(any_workspace, "t/1")

    write(any_workspace, "src/app.py", "print('changed')\n")
    changed, _, ran, written = captured(snapshots, "t/2")
    assert changed != first and written
    # Another Snapshots (another process) trusts no commit it did not write itself: it scans.
    other, _, ran, _ = captured(Snapshots(home, git=str(wrapper)), "t/3")
    assert " status " in ran and snapshots.exists(any_workspace, other)


def test_a_capture_that_skips_a_file_is_a_commit_of_its_own(home: Path, workspace: Path) -> None:
    """The same tree with a file now skipped is not the same checkpoint: its commit says what
    was skipped, so a restore to it leaves that file alone."""
    snapshots = Snapshots(home, max_file_bytes=1000)
    write(workspace, "small.txt", "s\n")
    clean = snapshots.capture(workspace, "t/0")
    write(workspace, "huge.bin", b"h" * 5000)
    skipping = snapshots.capture(workspace, "t/1")
    assert skipping.tree == clean.tree and skipping.commit != clean.commit
    assert skipping.skipped == ("huge.bin",)
    (workspace / "small.txt").write_text("changed\n")
    snapshots.restore(workspace, "t/1", current=snapshots.capture(workspace, "t/2").commit)
    assert (workspace / "huge.bin").read_bytes() == b"h" * 5000  # skipped: left alone
    assert (workspace / "small.txt").read_text() == "s\n"


def test_warm_capture_sees_a_change_with_the_same_size_and_mtime_second(
    snapshots: Snapshots, any_workspace: Path
) -> None:
    first = snapshots.capture(any_workspace, "t/0")
    file = any_workspace / "src" / "app.py"
    before = file.stat()
    file.write_text("print('HELLO')\n")  # same length
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))
    second = snapshots.capture(any_workspace, "t/1")
    assert second.tree != first.tree


def test_symlinks_executables_binary_and_empty_directories(
    snapshots: Snapshots, workspace: Path
) -> None:
    write(workspace, "run.sh", "#!/bin/sh\n").chmod(0o755)
    write(workspace, "blob.bin", bytes(range(256)))
    (workspace / "link").symlink_to("run.sh")
    (workspace / "outside").symlink_to("/etc/passwd")
    (workspace / "empty").mkdir()
    checkpoint = snapshots.capture(workspace, "t/0")
    assert listing(snapshots, workspace, checkpoint.commit) == {
        "run.sh": "100755",
        "blob.bin": "100644",
        "link": "120000",
        "outside": "120000",
    }


def test_ignored_files_and_dot_git_are_never_captured(
    snapshots: Snapshots, workspace: Path
) -> None:
    write(workspace, "keep.txt", "kept\n")
    write(workspace, ".gitignore", "*.log\nbuild/\n")
    write(workspace, "debug.log", "noise\n")
    write(workspace, "build/out.o", "obj\n")
    write(workspace, "sub/.gitignore", "secret.txt\n")
    write(workspace, "sub/secret.txt", "s\n")
    write(workspace, "sub/visible.txt", "v\n")
    git(workspace, "init", "-q")
    write(workspace, ".git/info/exclude", "private.md\n")
    write(workspace, "private.md", "mine\n")
    entries = listing(snapshots, workspace, snapshots.capture(workspace, "t/0").commit)
    assert sorted(entries) == [".gitignore", "keep.txt", "sub/.gitignore", "sub/visible.txt"]


def test_nested_repository_and_submodule_are_gitlinks(
    snapshots: Snapshots, workspace: Path, tmp_path: Path
) -> None:
    with_submodule(workspace, tmp_path / "library", "x = 1\n")
    nested = workspace / "tools"
    write(nested, "tool.py", "t = 1\n")
    commit_all(nested, "tool")
    empty_nested = workspace / "scratch"
    write(empty_nested, "draft.txt", "no commit yet\n")
    git(empty_nested, "init", "-q")
    before_dotgit = digest_git_dir(nested / ".git")
    before_modules = digest_git_dir(workspace / ".git" / "modules")

    checkpoint = snapshots.capture(workspace, "t/0")
    entries = listing(snapshots, workspace, checkpoint.commit)
    assert entries["vendor/lib"] == "160000"
    assert entries["tools"] == "160000"
    assert "tools/tool.py" not in entries and "vendor/lib/lib.py" not in entries
    assert not any(path.startswith("scratch") for path in entries)
    assert checkpoint.skipped == ("scratch",)
    assert digest_git_dir(nested / ".git") == before_dotgit  # never renamed, entered or written
    assert digest_git_dir(workspace / ".git" / "modules") == before_modules
    assert (nested / ".git").is_dir() and (workspace / "vendor/lib/.git").is_file()

    head = git(nested, "rev-parse", "HEAD").strip()
    write(nested, "tool.py", "t = 2\n")
    git(nested, "commit", "-qam", "tool 2")
    moved = snapshots.capture(workspace, "t/1")
    changes = snapshots.changes(workspace, checkpoint.commit, moved.commit)
    assert [(c.path, c.kind.value) for c in changes] == [("tools", "modified")]
    assert git(nested, "rev-parse", "HEAD").strip() != head


def test_large_files_are_skipped_and_reported(home: Path, workspace: Path) -> None:
    snapshots = Snapshots(home, max_file_bytes=1000)
    write(workspace, "small.txt", "s" * 10)
    write(workspace, "huge.bin", b"h" * 5000)
    first = snapshots.capture(workspace, "t/0")
    assert first.skipped == ("huge.bin",)
    assert set(listing(snapshots, workspace, first.commit)) == {"small.txt"}
    write(workspace, "small.txt", "s" * 5000)  # a tracked file that grows too large
    second = snapshots.capture(workspace, "t/1")
    assert second.skipped == ("huge.bin", "small.txt")
    assert listing(snapshots, workspace, second.commit) == {}
    # It is not reported as deleted: it is still there, only too large to capture.
    assert snapshots.changes(workspace, first.commit, second.commit) == []
    assert snapshots.capture(workspace, "t/2").skipped == ("huge.bin", "small.txt")  # still


def test_first_capture_of_a_git_workspace_reuses_the_users_index(
    snapshots: Snapshots, workspace: Path
) -> None:
    for i in range(50):
        write(workspace, f"pkg/m{i}.py", f"v = {i}\n")
    commit_all(workspace)
    head_tree = git(workspace, "rev-parse", "HEAD^{tree}").strip()
    checkpoint = snapshots.capture(workspace, "t/0")
    assert checkpoint.tree == head_tree
    shadow = snapshots._shadow(workspace)
    # The user's objects are borrowed, not copied: the shadow holds only the commit it wrote.
    alternates = (shadow.dir / "objects/info/alternates").read_text().strip()
    assert alternates == str(workspace / ".git" / "objects")
    counts = dict(
        line.split(": ")
        for line in shadow.run("count-objects", "-v", deadline=time.monotonic() + 60)
        .stdout.decode()
        .splitlines()
    )
    assert int(counts["count"]) + int(counts["in-pack"]) == 1


def digest_git_dir(dotgit: Path) -> dict[str, str]:
    result = {}
    for path in sorted(dotgit.rglob("*")):
        if path.is_file():
            result[str(path.relative_to(dotgit))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return result


def test_the_users_git_directory_is_never_written(snapshots: Snapshots, workspace: Path) -> None:
    write(workspace, "a.txt", "one\n")
    write(workspace, "b.txt", "two\n")
    commit_all(workspace)
    git(workspace, "pack-refs", "--all")
    write(workspace, "a.txt", "one, edited\n")
    git(workspace, "add", "a.txt")
    write(workspace, "c.txt", "untracked\n")
    status_before = git(workspace, "status", "--porcelain")
    before = digest_git_dir(workspace / ".git")
    stat_before = {
        name: (workspace / ".git" / name).stat().st_mtime_ns
        for name in ("HEAD", "index", "config", "packed-refs")
    }

    first = snapshots.capture(workspace, "t/0")
    write(workspace, "b.txt", "two, by the agent\n")
    write(workspace, "d.txt", "new\n")
    second = snapshots.capture(workspace, "t/1")
    snapshots.changes(workspace, first.commit, second.commit)
    snapshots.restore(workspace, first.commit, current=second.commit)
    third = snapshots.capture(workspace, "t/2")
    snapshots.gc(workspace, keep=["t/0"], object_grace=0)
    snapshots.check(workspace)

    assert third.tree == first.tree
    assert digest_git_dir(workspace / ".git") == before
    assert {
        name: (workspace / ".git" / name).stat().st_mtime_ns
        for name in ("HEAD", "index", "config", "packed-refs")
    } == stat_before
    assert git(workspace, "status", "--porcelain") == status_before
    git(workspace, "fsck", "--no-progress")


def test_inherited_git_environment_and_user_config_are_ignored(
    snapshots: Snapshots, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    before = digest_git_dir(other / ".git")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    # A user's global config that, if read, would hide a.txt from the capture.
    write(tmp_path, "ignore-all", "a.txt\n")
    write(tmp_path, "gitconfig", f"[core]\n\texcludesFile = {tmp_path / 'ignore-all'}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("HOME", str(tmp_path))
    write(tmp_path, ".gitconfig", f"[core]\n\texcludesFile = {tmp_path / 'ignore-all'}\n")
    write(workspace, "a.txt", "a\n")
    checkpoint = snapshots.capture(workspace, "t/0")
    assert set(listing(snapshots, workspace, checkpoint.commit)) == {"a.txt"}
    assert digest_git_dir(other / ".git") == before


def test_ref_names_are_validated(snapshots: Snapshots, workspace: Path) -> None:
    for bad in ["", "a/../b", "a//b", "x.lock", "-x", "a b", "a/.hidden"]:
        with pytest.raises(InvalidId):
            snapshots.capture(workspace, bad)


def test_time_budget(home: Path, workspace: Path) -> None:
    write(workspace, "a.txt", "a\n")
    snapshots = Snapshots(home, time_budget=0.0)
    with pytest.raises(GitFailed, match="time budget"):
        snapshots.capture(workspace, "t/0")


def test_zero_byte_ref_is_repaired_and_reported(
    snapshots: Snapshots, any_workspace: Path, problems: list[str]
) -> None:
    first = snapshots.capture(any_workspace, "t/0")
    snapshots.capture(any_workspace, "t/1")
    shadow = snapshots._shadow(any_workspace)
    (shadow.dir / "refs/turnback/t/1").write_bytes(b"")  # what a crash without fsync leaves
    assert not snapshots.exists(any_workspace, "t/1")
    assert any("t/1" in p and "damaged" in p for p in problems)
    assert snapshots.exists(any_workspace, "t/0")
    again = snapshots.capture(any_workspace, "t/1")  # the name is usable again
    assert again.tree == first.tree
    (shadow.dir / "refs/turnback/t/0").write_bytes(b"\0garbage")
    found = snapshots.check(any_workspace)
    assert len(found) == 1 and "t/0" in found[0]
    assert snapshots.check(any_workspace) == []
    assert snapshots.exists(any_workspace, "t/1")
    assert snapshots.exists(any_workspace, first.commit)  # the object outlives its ref


def test_capture_over_a_damaged_ref_replaces_it(
    snapshots: Snapshots, any_workspace: Path, problems: list[str]
) -> None:
    snapshots.capture(any_workspace, "t/0")
    ref = snapshots._shadow(any_workspace).dir / "refs/turnback/t/0"
    ref.write_bytes(b"")
    checkpoint = snapshots.capture(any_workspace, "t/0")
    assert ref.read_text() == checkpoint.commit + "\n"
    assert problems


CHILD = """
import sys
import threading
import time
from pathlib import Path
from turnback.workspace import Snapshots
Snapshots(Path(sys.argv[1])).capture(Path(sys.argv[2]), sys.argv[3])
"""


@pytest.mark.parametrize(
    "fault", ["capture.shadow", "capture.index", "capture.commit", "capture.ref"]
)
def test_a_capture_killed_at_any_step_leaves_a_usable_shadow(
    home: Path, any_workspace: Path, fault: str, tmp_path: Path
) -> None:
    snapshots = Snapshots(home)
    base = snapshots.capture(any_workspace, "t/0")
    write(any_workspace, "src/app.py", "print('turn 1')\n")
    log = tmp_path / "faults.log"
    env = {**os.environ, "TURNBACK_FAULT": fault, "TURNBACK_FAULT_LOG": str(log)}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(home), str(any_workspace), "t/1"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert child.returncode == -9, child.stderr
    reached = log.read_text().split()
    assert reached[-1] == fault
    assert snapshots.exists(any_workspace, "t/1") == (fault == "capture.ref")
    again = snapshots.capture(any_workspace, "t/1")
    assert [c.path for c in snapshots.changes(any_workspace, base.commit, again.commit)] == [
        "src/app.py"
    ]
    assert snapshots.check(any_workspace) == []


def test_concurrent_captures_of_one_workspace_are_serialised(
    home: Path, any_workspace: Path
) -> None:
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        snapshots = Snapshots(home)
        try:
            for turn in range(4):
                write(any_workspace, f"{name}.txt", f"{name} {turn}\n")
                snapshots.capture(any_workspace, f"{name}/{turn}")
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    final = Snapshots(home).capture(any_workspace, "final")
    assert {"one.txt", "two.txt"} <= set(listing(Snapshots(home), any_workspace, final.commit))


def test_a_lost_or_damaged_head_of_the_shadow_is_reset_and_checkpoints_survive(
    snapshots: Snapshots, any_workspace: Path, problems: list[str]
) -> None:
    first = snapshots.capture(any_workspace, "t/0")
    head = snapshots._shadow(any_workspace).dir / "HEAD"
    for damage in (b"", None):
        if damage is None:
            head.unlink()
        else:
            head.write_bytes(damage)
        write(any_workspace, "README.md", f"# {damage!r}\n")
        later = snapshots.capture(any_workspace, "t/1")
        assert [c.path for c in snapshots.changes(any_workspace, first.commit, later.commit)] == [
            "README.md"
        ]
        assert snapshots.exists(any_workspace, "t/0")
    assert sum("HEAD" in p for p in problems) == 2


def test_a_long_capture_reports_its_progress_as_it_goes(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("turnback.workspace.scan.BATCH", 100)  # 1,000 in use: same code
    workspace = tmp_path / "many"
    workspace.mkdir()
    for i in range(250):
        (workspace / f"f{i}.txt").write_text(f"{i}\n")
    heard: list[tuple[str, int, int]] = []
    Snapshots(home, progress=lambda *call: heard.append(call)).capture(workspace, "first")
    assert heard == [("capture", n, 250) for n in (0, 100, 200, 250)]


def test_the_same_checkpoint_under_a_ref_that_cannot_be_written_fails_cleanly(
    home: Path, any_workspace: Path
) -> None:
    """Nothing changed, so the capture moves the refs itself: a ref git could not write either
    (a ref already stands where its directory would be) is a GitFailed, and leaves no lock."""
    snapshots = Snapshots(home)
    first = snapshots.capture(any_workspace, "t/0")
    with pytest.raises(GitFailed, match="t/0/again"):
        snapshots.capture(any_workspace, "t/0/again")
    assert not list(home.glob("shadow/*.git/**/*.lock"))
    # the failed capture let go of what it remembered: the next one takes a whole checkpoint,
    # of the same files (a new commit when the clock has moved on to the next second)
    assert snapshots.capture(any_workspace, "t/1").tree == first.tree
    assert snapshots.exists(any_workspace, "t/1")


def test_the_same_checkpoint_again_never_names_a_commit_gc_pruned(
    home: Path, any_workspace: Path
) -> None:
    """A process that finds its last checkpoint again reuses its commit; but another process
    may have moved the shadow on and a gc pruned that commit since (its ref let go). The new
    ref must then not name the missing commit, which would leave every later capture of the
    shadow failing: this capture fails instead, and the next one takes a whole checkpoint."""
    first_process, other_process = Snapshots(home), Snapshots(home)
    taken = first_process.capture(any_workspace, "t/0")
    (any_workspace / "other.txt").write_text("another process's moment\n")
    other_process.capture(any_workspace, "t/1")
    (any_workspace / "other.txt").unlink()
    first_process.delete_refs(any_workspace, ["t/0"])
    shadow = first_process.shadow_dir(any_workspace)
    for args in (["reflog", "expire", "--expire=now", "--all"], ["gc", "-q", "--prune=now"]):
        subprocess.run(["git", f"--git-dir={shadow}", *args], check=True)
    assert not first_process.exists(any_workspace, taken.commit)

    with pytest.raises(GitFailed):
        first_process.capture(any_workspace, "t/2")
    again = first_process.capture(any_workspace, "t/3")
    assert again.tree == taken.tree and first_process.exists(any_workspace, "t/3")
    assert other_process.capture(any_workspace, "t/4").tree == taken.tree
    assert first_process.check(any_workspace) == []
