"""A revert or undo stopped midway, as a user stops one: Ctrl-C (SIGINT to the command's process
group) or a killed process, then what the commands say and what recovery puts back.

The revert runs as the installed ``turnback`` script. Its fault log is a FIFO that the test
reads: the command blocks on it once the test stops reading, so the signal lands while the files
are moving (after ``restore.file``), never before or after, however fast the machine is."""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

import turnback

from .test_cli import TURNBACK, run

FILES = 400  # per turn; the test stops the revert midway however many there are


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "notes.txt").write_text("the user's notes\n")
    return path


def files(workspace: Path) -> dict[str, str]:
    return {
        str(p.relative_to(workspace)): p.read_text()
        for p in sorted(workspace.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(workspace).parts
    }


@pytest.fixture
def session_id(home: Path, workspace: Path, request: pytest.FixtureRequest) -> str:
    """Two turns that create files (``FILES`` each, or the test's indirect parameter), with a
    hand edit between them."""
    count = getattr(request, "param", FILES)
    with turnback.open(home) as tb:
        session = tb.create_session(workspace)
        with session.turn("create the first files"):
            for i in range(count):
                (workspace / "one" / f"{i % 20}").mkdir(parents=True, exist_ok=True)
                (workspace / "one" / f"{i % 20}" / f"f{i}.txt").write_text(f"first {i}\n")
        (workspace / "notes.txt").write_text("the user's notes, edited by hand\n")
        with session.turn("create more files"):
            for i in range(count):
                (workspace / "two" / f"{i % 20}").mkdir(parents=True, exist_ok=True)
                (workspace / "two" / f"{i % 20}" / f"f{i}.txt").write_text(f"second {i}\n")
        return session.id


class Stoppable:
    """``turnback ARGS`` whose fault points the test reads one by one from a FIFO; while the
    test does not read, the command blocks at its next point (the FIFO's buffer is one page)."""

    def __init__(self, home: Path, tmp_path: Path, *args: str) -> None:
        fifo = tmp_path / "points"
        os.mkfifo(fifo)
        self.fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, 4096)
        self.points: list[str] = []
        self._partial = b""
        env = {**os.environ, "NO_COLOR": "1", "TURNBACK_FAULT_LOG": str(fifo)}
        self.child = subprocess.Popen(
            [TURNBACK, "--home", str(home), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,  # a process group of its own, as a terminal gives it
        )

    def read_until(self, point: str, after: int = 0) -> int:
        """Read points until ``point`` is reached at an index >= ``after``; its index."""
        while True:
            for index in range(after, len(self.points)):
                if self.points[index] == point:
                    return index
            after = max(after, len(self.points))
            assert self.child.poll() is None, f"it ended before {point}: {self.finish()}"
            self._read(10.0)

    def _read(self, timeout: float) -> None:
        select.select([self.fd], [], [], timeout)
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            data = b""
        if not data:  # no writer between two points: ready at once, with nothing
            time.sleep(0.01)
        *lines, self._partial = (self._partial + data).split(b"\n")
        self.points += [line.decode() for line in lines]

    def interrupt(self, sig: int = signal.SIGINT) -> None:
        os.killpg(self.child.pid, sig)

    def finish(self) -> tuple[int, str, str]:
        """Read the points until the command exits: (exit code, stdout, stderr)."""
        while self.child.poll() is None:
            self._read(0.1)
        self._read(0)
        os.close(self.fd)
        out, err = self.child.communicate(timeout=60)
        return self.child.returncode, out, err


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_ctrl_c_during_a_revert_rolls_it_back_there(
    home: Path, workspace: Path, session_id: str, tmp_path: Path, as_json: bool
) -> None:
    before = files(workspace)
    args = ["revert", session_id, "0", "--yes", *(["--json"] if as_json else [])]
    command = Stoppable(home, tmp_path, *args)
    command.read_until("restore.file")
    command.interrupt()
    code, out, err = command.finish()

    assert code == 130, err
    assert "Aborted!" not in err
    assert f"revert {1} was rolled back midway" in err.splitlines()[-1]
    # stopped while the files moved, then put back the way recovery would
    points = command.points
    assert "revert.files" not in points and "revert.rollback.files" in points
    assert files(workspace) == before
    if as_json:
        data = json.loads(out)
        assert data["interrupted"] is True and data["revert"]["state"] == "rolled_back"
        assert "rolled back midway" in data["error"]
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        assert [r.state for r in session.reverts()] == ["rolled_back"]
        assert session.record.head == session.turns()[-1].token
        with session.turn("a turn on the workspace as it was"):
            pass  # nothing holds it


def test_ctrl_c_during_an_undo_finishes_the_undo(
    home: Path, workspace: Path, session_id: str, tmp_path: Path
) -> None:
    before = files(workspace)
    with turnback.open(home) as tb:
        tb.session(session_id).revert(0)
    assert files(workspace) == {"notes.txt": "the user's notes\n"}
    command = Stoppable(home, tmp_path, "revert", "--undo", session_id, "--yes")
    command.read_until("restore.file")
    command.interrupt()
    code, _out, err = command.finish()

    assert code == 130, err
    assert "the undo of revert 1 cannot stop halfway, so it was finished" in err
    assert "undo.files" in command.points
    assert files(workspace) == before
    with turnback.open(home) as tb:
        assert [r.state for r in tb.session(session_id).reverts()] == ["undone"]


@pytest.mark.parametrize("session_id", [800], indirect=True)
def test_ctrl_c_twice_leaves_the_revert_to_recover(
    home: Path, workspace: Path, session_id: str, tmp_path: Path
) -> None:
    """The first Ctrl-C comes once the revert has moved 900 of its 1,600 and more paths, so
    the rollback has more points to log than the FIFO holds twice over: it is still moving files
    when the second one lands. (The revert itself, 4 KB of points past where the test stopped
    reading, cannot have finished either.)"""
    before = files(workspace)
    command = Stoppable(home, tmp_path, "revert", session_id, "0", "--yes")
    first = -1
    for _ in range(900):
        first = command.read_until("restore.file", after=first + 1)
    command.interrupt()
    rolling_back = command.read_until("restore.plan", after=first + 1)
    command.read_until("restore.file", after=rolling_back)
    command.interrupt()  # while the rollback moves the files
    code, _out, err = command.finish()

    assert code == 130, err
    assert "revert.rollback.files" not in command.points
    last = err.splitlines()[-1]
    assert "partly reverted" in last and "`turnback recover`" in last
    assert files(workspace) != before
    recovered = run(home, "recover")
    assert recovered.returncode == 0, recovered
    assert f"rolled back revert 1 of session {session_id[:12]}" in recovered.stdout
    assert files(workspace) == before


def test_a_killed_revert_is_called_interrupted_until_recover_rolls_it_back(
    home: Path, workspace: Path, session_id: str
) -> None:
    before = files(workspace)
    env = {**os.environ, "NO_COLOR": "1", "TURNBACK_FAULT": "restore.file@50"}
    killed = subprocess.run(
        [TURNBACK, "--home", str(home), "revert", session_id, "0", "--yes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert killed.returncode == -signal.SIGKILL
    assert files(workspace) != before  # half reverted

    log = run(home, "log", session_id)
    assert "revert 1: back to turn 0 (started; interrupted, its process is gone: run " in (
        " ".join(log.stdout.split())
    )
    for args in (["revert", "--undo", session_id], ["revert", session_id, "1"]):
        refused = run(home, *args, "--yes")
        assert refused.returncode == 3, refused
        said = " ".join(refused.stderr.split())
        assert "is moving the files" not in said
        assert f"revert 1 of session {session_id[:12]} was interrupted midway" in said
        assert "its process is gone" in said and "run `turnback recover`" in said

    recovered = run(home, "recover")
    assert f"rolled back revert 1 of session {session_id[:12]}" in recovered.stdout
    assert files(workspace) == before
    log = run(home, "log", session_id)
    assert "(rolled back)" in log.stdout and "interrupted" not in log.stdout


def test_a_live_revert_says_what_to_do_once_it_has_finished(
    home: Path, workspace: Path, session_id: str, tmp_path: Path
) -> None:
    command = Stoppable(home, tmp_path, "revert", session_id, "0", "--yes")
    command.read_until("restore.file")  # and blocked there while the test reads nothing
    try:
        for args, then in (
            (["revert", "--undo", session_id], "undo the revert once it has finished"),
            (["revert", session_id, "1"], "revert once it has finished"),
        ):
            refused = run(home, *args, "--yes")
            assert refused.returncode == 3, refused
            said = " ".join(refused.stderr.split())
            assert f"revert 1 of session {session_id[:12]} is moving the files" in said
            assert then in said and "begin" not in said
        log = run(home, "log", session_id)  # without waiting for the files to stop moving
        assert "(started)" in log.stdout and "interrupted" not in log.stdout
        data = json.loads(run(home, "log", session_id, "--json").stdout)
        assert data["since_head"] is None and data["reverts"][0]["state"] == "started"
    finally:
        code, _out, err = command.finish()
    assert code == 0, err
