"""The checkpoint remote at the workspace layer: what a push and its mark of unpushed
checkpoints do, with real git against a real bare repository."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from turnback.errors import CheckpointUnavailable, InvalidOption
from turnback.workspace import Snapshots
from turnback.workspace import remote as remote_module
from turnback.workspace.remote import (
    UNPUSHED,
    CheckpointRemote,
    PushResult,
    _unmark,
    check_url,
    shown,
)


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "--quiet", "--bare", str(path)], check=True)
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    return root


def remote_refs(remote: Path) -> list[str]:
    listed = ["git", "-C", str(remote), "for-each-ref", "--format=%(refname)"]
    return subprocess.run(listed, capture_output=True, text=True, check=True).stdout.split()


def test_a_push_clears_the_mark_and_a_failed_one_keeps_it_with_why(
    tmp_path: Path, workspace: Path
) -> None:
    remote = tmp_path / "remote.git"
    snapshots = Snapshots(tmp_path / "home", remote=str(remote))
    snapshots.capture(workspace, "s1/t1/end")  # its push, in the background, fails
    assert snapshots.remote is not None and snapshots.remote.wait(60)
    error = snapshots.unpushed(workspace)
    assert error and error.startswith(f"`git push` to {remote} failed")
    bare(remote)
    assert snapshots.push(workspace) is None
    assert snapshots.unpushed(workspace) is None
    assert "refs/turnback/s1/t1/end" in remote_refs(remote)
    snapshots.close()


def test_a_mark_made_during_a_push_outlives_it(tmp_path: Path) -> None:
    mark = tmp_path / UNPUSHED
    mark.write_text("push failed\ntoken-1")
    seen = mark.read_text()
    mark.write_text("push failed\ntoken-2")  # a capture marks while the push runs
    _unmark(mark, seen)
    assert mark.read_text() == "\ntoken-2", "kept, and the failure it carried is gone"
    _unmark(mark, "\ntoken-2")
    assert not mark.exists()
    assert list(tmp_path.iterdir()) == [], "no temporary file is left behind"


def test_a_fetch_from_a_remote_that_is_not_there_says_so(tmp_path: Path, workspace: Path) -> None:
    snapshots = Snapshots(tmp_path / "home", remote=str(tmp_path / "nowhere.git"))
    with pytest.raises(CheckpointUnavailable, match="could not be fetched from the checkpoint"):
        snapshots.fetch(workspace, ["s1"])
    without = Snapshots(tmp_path / "home2")
    with pytest.raises(CheckpointUnavailable, match="no checkpoint remote is set"):
        without.fetch(workspace, ["s1"])


@pytest.mark.parametrize("url", ["", "  ", "--upload-pack=touch /tmp/x", "a\nb"])
def test_a_remote_git_could_not_take_is_refused(url: str) -> None:
    with pytest.raises(InvalidOption, match="must be a URL git accepts"):
        CheckpointRemote(url)


def test_a_process_gone_before_its_push_leaves_the_mark_and_loses_nothing(
    tmp_path: Path, workspace: Path
) -> None:
    """The process exits while its push hangs (a remote that never answers): the next one
    that looks finds the mark, and its push sends the checkpoint."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"git://127.0.0.1:{silent.getsockname()[1]}/checkpoints.git"
        script = (
            "import os, sys\n"
            "from pathlib import Path\n"
            "from turnback.workspace import Snapshots\n"
            f"s = Snapshots(Path({str(tmp_path / 'home')!r}), remote={url!r})\n"
            f"s.capture(Path({str(workspace)!r}), 's1/t1/end')\n"
            "os._exit(0)\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
    remote = bare(tmp_path / "remote.git")
    snapshots = Snapshots(tmp_path / "home", remote=str(remote))
    assert snapshots.unpushed(workspace) is not None
    assert snapshots.push(workspace) is None
    assert "refs/turnback/s1/t1/end" in remote_refs(remote)


def test_a_remotes_credentials_are_never_said(tmp_path: Path, workspace: Path) -> None:
    """What a failed push or fetch says goes to activities, which a fleet's database and review
    page show: the user and token a URL carries are left out."""
    url = "https://alice:s3cr3t-token@127.0.0.1:9/checkpoints.git"
    assert shown(url) == "https://127.0.0.1:9/checkpoints.git"
    assert shown("ssh://git@host/x.git") == "ssh://host/x.git"
    assert shown("/srv/checkpoints.git") == "/srv/checkpoints.git"
    snapshots = Snapshots(tmp_path / "home", remote=url)
    snapshots.capture(workspace, "s1/t1/end")  # its push, in the background, fails
    assert snapshots.remote is not None and snapshots.remote.wait(60)
    error = snapshots.unpushed(workspace)
    assert error and "127.0.0.1:9" in error and "s3cr3t" not in error, error
    with pytest.raises(CheckpointUnavailable) as caught:
        snapshots.fetch(workspace, ["s1"])
    assert "s3cr3t" not in str(caught.value)
    snapshots.close()


def test_a_push_that_cannot_note_its_success_leaves_the_pushing_going(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk full as a push clears its mark: the mark stays (pushed again, nothing lost),
    and the background pushing goes on for the captures after it."""
    remote = bare(tmp_path / "remote.git")
    snapshots = Snapshots(tmp_path / "home", remote=str(remote))
    failed: list[Path] = []

    def unmark(mark: Path, seen: str | None) -> None:
        if not failed:
            failed.append(mark)
            raise OSError(errno.ENOSPC, "No space left on device")
        _unmark(mark, seen)

    monkeypatch.setattr(remote_module, "_unmark", unmark)
    for n in (1, 2, 3):
        (workspace / "f.txt").write_text(f"{n}\n")
        snapshots.capture(workspace, f"s1/t{n}/end")
        assert snapshots.remote is not None and snapshots.remote.wait(20), f"push {n} never ran"
    assert failed
    assert {f"refs/turnback/s1/t{n}/end" for n in (1, 2, 3)} <= set(remote_refs(remote))
    assert snapshots.unpushed(workspace) is None
    snapshots.close()


def test_a_remote_given_as_a_relative_path_is_one_remote_for_every_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_url("../checkpoints.git") == str(tmp_path.parent / "checkpoints.git")
    assert check_url("git@host:team/checkpoints.git") == "git@host:team/checkpoints.git"
    assert check_url("file:///srv/c.git") == "file:///srv/c.git"


def test_a_push_that_keeps_failing_is_reported_once_though_a_capture_marks_beside_it(
    tmp_path: Path, workspace: Path
) -> None:
    """A capture marks the shadow (keeping the last push's error) while the previous push may
    be writing that error: the mark can lose it. The pushing thread remembers the failure, so
    the next failed push is not reported as the first again."""
    snapshots = Snapshots(tmp_path / "home", remote=str(tmp_path / "nowhere.git"))
    assert snapshots.remote is not None
    heard: list[PushResult] = []
    snapshots.remote.on_push = heard.append
    snapshots.capture(workspace, "s1/t1/end")
    assert snapshots.remote.wait(60)
    mark = snapshots.shadow_dir(workspace) / UNPUSHED
    mark.write_text("\na capture's mark, made as the push wrote its error")
    (workspace / "f.txt").write_text("more\n")
    snapshots.capture(workspace, "s1/t2/end")
    assert snapshots.remote.wait(60)
    assert [r.error is not None for r in heard] == [True], heard
    bare(tmp_path / "nowhere.git")
    snapshots.capture(workspace, "s1/t3/end")
    assert snapshots.remote.wait(60)
    assert [(r.error is None, r.recovered) for r in heard[1:]] == [(True, True)], heard
    snapshots.close()
