"""Workspace checkpoints shared through a git remote: two machines (two homes, as
``TURNBACK_HOST`` names them) share one store and one remote, and each reads the other's turns.

A machine's workspace is the same path on each; the tests stand in for that by moving one
machine's copy of the workspace aside while the other works (``Machines.on``)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback.store import sqlite_url

CHUNK = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "ok"}}


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "--quiet", "--bare", str(path)], check=True)
    return path


def remote_refs(remote: Path) -> dict[str, str]:
    out = subprocess.run(
        ["git", "-C", str(remote), "for-each-ref", "--format=%(refname) %(objectname)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(line.split(" ") for line in out.splitlines())


class Machines:
    """Hosts ``a`` and ``b``: a home each, one store (``url``), one remote, one workspace path
    whose content is each host's own."""

    def __init__(self, root: Path, url: str, remote: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.url = url
        self.remote = remote
        self.monkeypatch = monkeypatch
        self.workspace = root / "workspace"
        self.workspace.mkdir()
        self.here = "a"

    @contextlib.contextmanager
    def on(self, host: str, **options: Any) -> Iterator[turnback.Turnback]:
        if host != self.here:  # this host's copy of the workspace comes in, the other's goes
            self.workspace.rename(self.root / f"workspace.{self.here}")
            mine = self.root / f"workspace.{host}"
            if mine.exists():
                mine.rename(self.workspace)
            else:
                self.workspace.mkdir()
            self.here = host
        self.monkeypatch.setenv("TURNBACK_HOST", host)
        options.setdefault("checkpoint_remote", self.remote)
        with turnback.open(self.root / f"home-{host}", database_url=self.url, **options) as tb:
            yield tb


def on_sqlite(root: Path, remote: str, monkeypatch: pytest.MonkeyPatch) -> Machines:
    """Hosts a and b sharing one SQLite store (under ``root/shared``)."""
    (root / "shared").mkdir()
    return Machines(root, sqlite_url(root / "shared"), remote, monkeypatch)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("postgres_url")
        return url
    (tmp_path / "shared").mkdir()
    return sqlite_url(tmp_path / "shared")


def write_turn(tb: turnback.Turnback, session: turnback.Session, files: dict[str, str]) -> None:
    with session.turn(f"write {', '.join(files)}") as turn:
        for name, text in files.items():
            (session.workspace / name).write_text(text)
        turn.record(CHUNK)


def wait_pushed(tb: turnback.Turnback) -> None:
    assert tb.checkpoints is not None
    assert tb.checkpoints.snapshots.remote is not None
    assert tb.checkpoints.snapshots.remote.wait(60)


def test_another_machine_diffs_and_reverts_turns_through_a_bare_remote(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = bare(tmp_path / "checkpoints.git")
    machines = Machines(tmp_path, store_url, str(remote), monkeypatch)
    with machines.on("a") as tb:
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {"a.txt": "one\n"})
        write_turn(tb, session, {"a.txt": "two\n", "b.txt": "new\n"})
        wait_pushed(tb)
        patches = [session.diff(n, patch=True).patch for n in (1, 2)]
        turns = session.turns()
    pushed = remote_refs(remote)
    for t in turns:
        assert pushed[f"refs/turnback/{session.id}/{t.token}/end"] == t.end_checkpoint
    with machines.on("b") as tb:  # b's workspace: the same files as a's head, by a sync
        for name in ("a.txt", "b.txt"):
            shutil.copy(tmp_path / "workspace.a" / name, machines.workspace / name)
        session = tb.session(session.id)
        assert [session.diff(n, patch=True).patch for n in (1, 2)] == patches
        assert "+two" in (session.range_diff(0, 2, patch=True).patch or "")
        plan = session.revert_plan(1)
        assert {f.path for f in plan.restore} | {f.path for f in plan.delete} == {"a.txt", "b.txt"}
        session.revert(1)
        assert (machines.workspace / "a.txt").read_text() == "one\n"
        assert not (machines.workspace / "b.txt").exists()
    assert (tmp_path / "workspace.a" / "b.txt").exists(), "a's own copy is not touched"


def test_without_a_remote_the_other_machine_is_named(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    machines = Machines(tmp_path, store_url, "", monkeypatch)
    with machines.on("a", checkpoint_remote=None) as tb:
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {"a.txt": "one\n"})
    with machines.on("b", checkpoint_remote=None) as tb:
        with pytest.raises(turnback.CheckpointUnavailable, match="are on host a") as error:
            tb.session(session.id).diff(1, patch=True)
        assert error.value.hosts == ("a",)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def git_daemon(tmp_path: Path) -> Iterator[str]:
    """A ``git daemon`` serving a bare repository, pushes allowed: its ``git://`` URL."""
    base = tmp_path / "served"
    base.mkdir()
    bare(base / "checkpoints.git")
    port = free_port()
    daemon = subprocess.Popen(
        [
            "git",
            "daemon",
            "--export-all",
            "--enable=receive-pack",
            "--reuseaddr",
            "--listen=127.0.0.1",
            f"--port={port}",
            f"--base-path={base}",
            str(base),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"git://127.0.0.1:{port}/checkpoints.git"
    try:
        deadline = time.monotonic() + 20
        while subprocess.run(["git", "ls-remote", url], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "git daemon did not start"
            time.sleep(0.1)
        yield url
    finally:
        daemon.terminate()
        daemon.wait(10)


def test_checkpoints_travel_through_git_daemon(
    tmp_path: Path, git_daemon: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    machines = on_sqlite(tmp_path, git_daemon, monkeypatch)
    with machines.on("a") as tb:
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {"a.txt": "one\n"})
        wait_pushed(tb)
        patch = session.diff(1, patch=True).patch
    with machines.on("b") as tb:
        assert tb.session(session.id).diff(1, patch=True).patch == patch
        token = tb.session(session.id).turns()[0].token
    served = remote_refs(tmp_path / "served" / "checkpoints.git")
    assert f"refs/turnback/{session.id}/{token}/end" in served


def test_a_remote_down_then_up_loses_nothing(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = tmp_path / "checkpoints.git"
    machines = Machines(tmp_path, store_url, str(remote), monkeypatch)
    with machines.on("a") as tb:  # the remote does not exist yet: every push fails
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {"a.txt": "one\n"})
        write_turn(tb, session, {"a.txt": "two\n"})
        wait_pushed(tb)
        failed = [a for a in session.activities() if a.code == "checkpoint.push.failed"]
        assert len(failed) == 1, "a push that keeps failing is said once"
        assert "pushed again" in failed[0].message and failed[0].level == "warning"
        assert "checkpoint remote" in [c.name for c in tb.doctor() if c.ok is False]
        turns = session.turns()
    bare(remote)
    with machines.on("a") as tb:
        tb.recover()  # pushes what the failed pushes left
        assert [c.ok for c in tb.doctor() if c.name == "checkpoint remote"] == [True]
    pushed = remote_refs(remote)
    for t in turns:
        for moment, commit in (("begin", t.begin_checkpoint), ("end", t.end_checkpoint)):
            assert pushed[f"refs/turnback/{session.id}/{t.token}/{moment}"] == commit
    with machines.on("b") as tb:
        assert "+two" in (tb.session(session.id).diff(2, patch=True).patch or "")


def test_the_next_capture_pushes_what_a_down_remote_missed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = tmp_path / "checkpoints.git"
    machines = on_sqlite(tmp_path, str(remote), monkeypatch)
    with machines.on("a") as tb:
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {"a.txt": "one\n"})
        wait_pushed(tb)
        bare(remote)
        write_turn(tb, session, {"a.txt": "two\n"})
        wait_pushed(tb)
        codes = [a.code for a in session.activities() if a.code.startswith("checkpoint.push")]
        assert codes == ["checkpoint.push.failed", "checkpoint.push.resumed"]
        first = session.turns()[0]
    assert remote_refs(remote)[f"refs/turnback/{session.id}/{first.token}/end"] == (
        first.end_checkpoint
    )


def test_a_push_never_holds_up_a_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote that answers nothing (a listener that never speaks) costs a turn nothing."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"git://127.0.0.1:{silent.getsockname()[1]}/checkpoints.git"
        machines = on_sqlite(tmp_path, url, monkeypatch)
        with machines.on("a") as tb:
            session = tb.create_session(machines.workspace)
            write_turn(tb, session, {"a.txt": "warm\n"})
            started = time.monotonic()
            for n in range(3):
                write_turn(tb, session, {"a.txt": f"{n}\n"})
            assert time.monotonic() - started < 5, "a turn waited for a push"
            assert tb.checkpoints is not None
            assert tb.checkpoints.snapshots.unpushed(machines.workspace) is not None


def pack_objects(remote: Path) -> int:
    """How many objects the remote's packs hold (it keeps each push as a pack)."""
    return sum(
        len(
            subprocess.run(
                ["git", "show-index"], stdin=index.open("rb"), capture_output=True, check=True
            ).stdout.splitlines()
        )
        for index in (remote / "objects" / "pack").glob("*.idx")
    )


def test_a_small_edit_pushes_a_small_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints have no parents, so without its carrier commit each push would send the
    whole tree again; with it a one-line edit sends its blob, the tree above it and commits
    (and the remote adds the base of a delta it was sent)."""
    remote = bare(tmp_path / "checkpoints.git")
    subprocess.run(["git", "-C", str(remote), "config", "receive.unpackLimit", "1"], check=True)
    machines = on_sqlite(tmp_path, str(remote), monkeypatch)
    with machines.on("a") as tb:
        for n in range(400):
            (machines.workspace / f"file-{n}.txt").write_text(f"line {n}\n" * 40)
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {"file-1.txt": "first edit\n"})
        wait_pushed(tb)
        whole = pack_objects(remote)
        write_turn(tb, session, {"file-2.txt": "second edit\n"})
        wait_pushed(tb)
        edit = pack_objects(remote) - whole
        assert whole > 400
        assert edit <= 8, edit
        turns = session.turns()
    assert remote_refs(remote)[f"refs/turnback/{session.id}/{turns[-1].token}/end"] == (
        turns[-1].end_checkpoint
    )


def test_where_the_remote_allows_a_filter_only_the_files_read_are_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = bare(tmp_path / "checkpoints.git")
    subprocess.run(
        ["git", "-C", str(remote), "config", "uploadpack.allowFilter", "true"], check=True
    )
    machines = on_sqlite(tmp_path, str(remote), monkeypatch)
    with machines.on("a") as tb:
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {f"file-{n}.txt": f"file {n}\n" for n in range(30)})
        write_turn(tb, session, {"file-1.txt": "edited\n"})
        wait_pushed(tb)
        patch = session.diff(2, patch=True).patch
    untouched = subprocess.run(
        ["git", "hash-object", str(tmp_path / "workspace.a" / "file-7.txt")]
        if (tmp_path / "workspace.a").exists()
        else ["git", "hash-object", str(machines.workspace / "file-7.txt")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with machines.on("b") as tb:
        session = tb.session(session.id)
        assert session.diff(2, patch=True).patch == patch
        assert tb.checkpoints is not None
        shadow = tb.checkpoints.snapshots.shadow_dir(machines.workspace)
        here = subprocess.run(
            [
                "git",
                "-c",
                "protocol.allow=never",
                "--git-dir",
                str(shadow),
                "cat-file",
                "-e",
                untouched,
            ],
            capture_output=True,
        )
        assert here.returncode != 0, "a file no diff read was fetched"
        session.revert(1)  # reads every file of turn 1's end: fetched as it reads them
        assert (machines.workspace / "file-7.txt").read_text() == "file 7\n"
        assert (machines.workspace / "file-1.txt").read_text() == "file 1\n"


def test_the_review_page_on_another_machine_shows_the_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from turnback.ui.app import build_app

    remote = bare(tmp_path / "checkpoints.git")
    machines = on_sqlite(tmp_path, str(remote), monkeypatch)
    with machines.on("a") as tb:
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {"page.txt": "seen from b\n"})
        wait_pushed(tb)
    with machines.on("b") as tb:
        app = build_app(tb, "token", read_only=True, hosts=["testserver"])
        with TestClient(app, follow_redirects=False) as client:
            key = client.post("/api/login", json={"token": "token"}).json()["key"]
            client.headers["authorization"] = f"Bearer {key}"
            diff = client.get(f"/api/sessions/{session.id}/turns/1/diff").json()
    assert "+seen from b" in diff["patch"]
