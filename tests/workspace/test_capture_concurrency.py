"""Captures of one workspace at the same time: from two threads of one :class:`Snapshots`, from
two objects of one process, and from two processes. Each waits for the other, none deletes a
lock another holds, and each checkpoint holds what its caller wrote before it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import at_once
from turnback.workspace import Snapshots
from turnback.workspace.git import Git

from .conftest import write

ROUNDS = 25


def read_file(snapshots: Snapshots, workspace: Path, commit: str, path: str) -> str:
    """The content of ``path`` in a checkpoint, read through the shadow repository."""
    shadow = snapshots._shadow(workspace)
    spec = f"{commit}:{path}"
    out = shadow.run("cat-file", "blob", spec, deadline=time.monotonic() + 60).stdout
    return out.decode()


def capturing(snapshots: Snapshots, workspace: Path, name: str, rounds: int) -> list[str]:
    """Write ``<name>.txt`` and capture, ``rounds`` times; returns what went wrong."""
    wrong: list[str] = []
    for turn in range(rounds):
        content = f"{name} {turn}\n"
        write(workspace, f"{name}.txt", content)
        if turn % 5 == 4:  # now and then a new file too: the shadow's index is rewritten
            write(workspace, f"{name}/{turn}.txt", content)
        try:
            commit = snapshots.capture(workspace, f"{name}/{turn}").commit
        except Exception as error:
            wrong.append(f"capture {name}/{turn} failed: {error}")
            continue
        held = read_file(snapshots, workspace, commit, f"{name}.txt")
        if held != content:
            wrong.append(f"checkpoint {name}/{turn} holds {held!r}, not {content!r}")
    return wrong


def settled(home: Path, workspace: Path, names: list[str], problems: list[str]) -> None:
    """Afterwards the shadow is sound and a fresh capture holds every worker's last file."""
    snapshots = Snapshots(home, problems=lambda _ws, message: problems.append(message))
    assert snapshots.check(workspace) == []
    final = snapshots.capture(workspace, "final").commit
    for name in names:
        assert read_file(snapshots, workspace, final, f"{name}.txt") == f"{name} {ROUNDS - 1}\n"
    assert problems == []


def test_two_threads_of_one_snapshots_capture_one_workspace_in_turn(
    home: Path, any_workspace: Path, snapshots: Snapshots, problems: list[str]
) -> None:
    wrong = at_once(
        lambda: capturing(snapshots, any_workspace, "one", ROUNDS),
        lambda: capturing(snapshots, any_workspace, "two", ROUNDS),
    )
    assert wrong == []
    assert problems == []  # nothing was rebuilt, no lock was found and removed
    settled(home, any_workspace, ["one", "two"], problems)


def test_two_snapshots_of_one_process_capture_one_workspace_in_turn(
    home: Path, any_workspace: Path, problems: list[str]
) -> None:
    def made() -> Snapshots:
        return Snapshots(home, problems=lambda _ws, message: problems.append(message))

    first, second = made(), made()
    wrong = at_once(
        lambda: capturing(first, any_workspace, "one", ROUNDS),
        lambda: capturing(second, any_workspace, "two", ROUNDS),
    )
    assert wrong == []
    assert problems == []
    settled(home, any_workspace, ["one", "two"], problems)


def test_an_index_written_a_second_later_hides_no_rewrite_made_while_git_ran(
    any_workspace: Path, snapshots: Snapshots, problems: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """This git compares files' times in whole seconds and trusts an entry older than its index
    file. A git that read a file and wrote the index in the next second (a busy machine makes
    that happen) left an edit made in between, to the same size in the same second, unseen by
    every later capture: the race the tests above caught now and then. Here every git command
    in the shadow leaves its index dated in the next second, and the rewrite comes in the
    second the file was read."""
    snapshots.capture(any_workspace, "first/0")
    index = snapshots._shadow(any_workspace).dir / "index"
    run = Git.run

    def written_late(self: Git, *args: object, **kwargs: object) -> object:
        try:
            return run(self, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            if index.exists():
                later = (time.time_ns() // 10**9 + 1) * 10**9
                os.utime(index, ns=(later, later))

    monkeypatch.setattr(Git, "run", written_late)
    for attempt in range(20):  # until the write, the capture and the rewrite share one second
        while time.time() % 1 > 0.2:
            time.sleep(0.01)
        file = write(any_workspace, f"f{attempt}.txt", "take 0\n")
        second = file.stat().st_mtime_ns // 10**9
        snapshots.capture(any_workspace, f"try{attempt}/0")
        file.write_text("take 1\n")
        if file.stat().st_ctime_ns // 10**9 == second:
            break
    else:
        pytest.fail("no capture fitted in one second")
    commit = snapshots.capture(any_workspace, f"try{attempt}/1").commit
    assert read_file(snapshots, any_workspace, commit, f"f{attempt}.txt") == "take 1\n"
    assert problems == []


CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from tests.workspace.test_capture_concurrency import capturing
from turnback.workspace import Snapshots
problems = []
snapshots = Snapshots(Path(sys.argv[1]), problems=lambda _ws, message: problems.append(message))
wrong = capturing(snapshots, Path(sys.argv[2]), sys.argv[3], int(sys.argv[5]))
print("\\n".join(wrong + [f"problem: {p}" for p in problems]))
"""


def test_two_processes_capture_one_workspace_in_turn(
    home: Path, any_workspace: Path, problems: list[str]
) -> None:
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(home), str(any_workspace), name, root, str(ROUNDS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("one", "two")
    ]
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        assert out.strip() == ""
    settled(home, any_workspace, ["one", "two"], problems)


def test_a_lock_file_left_by_a_killed_git_is_removed_by_the_next_capture(
    home: Path, any_workspace: Path, snapshots: Snapshots
) -> None:
    snapshots.capture(any_workspace, "t/0")
    shadow = snapshots._shadow(any_workspace)
    # a git that took the index's lock file and was killed before it finished
    git = subprocess.Popen(
        [snapshots.git.executable, "update-index", "--stdin"],
        env={**os.environ, **shadow.env()},
        cwd=any_workspace,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lock = shadow.dir / "index.lock"
    deadline = time.monotonic() + 30
    while not lock.exists():
        assert git.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    git.kill()
    git.wait()
    assert lock.exists()
    write(any_workspace, "new.txt", "new\n")  # a new file: the capture writes the index
    commit = snapshots.capture(any_workspace, "t/1").commit
    assert read_file(snapshots, any_workspace, commit, "new.txt") == "new\n"
    assert not lock.exists()


HOLDER = """
import subprocess, sys, time
from pathlib import Path
from turnback.workspace import Snapshots
snapshots = Snapshots(Path(sys.argv[1]))
shadow = snapshots._shadow(Path(sys.argv[2]))
with shadow.locked(time.monotonic() + 60):
    git = snapshots.git.start(["update-index", "--stdin"], env=shadow.env())
    while not (shadow.dir / "index.lock").exists():
        time.sleep(0.01)
    print("holding", flush=True)
    time.sleep(float(sys.argv[3]))
    git.communicate(b"")
"""


def test_a_capture_waits_for_another_process_whose_git_holds_the_index(
    home: Path, any_workspace: Path, snapshots: Snapshots, problems: list[str]
) -> None:
    snapshots.capture(any_workspace, "t/0")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(home), str(any_workspace), "1.0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "holding\n"
    started = time.monotonic()
    write(any_workspace, "new.txt", "new\n")
    commit = snapshots.capture(any_workspace, "t/1").commit
    waited = time.monotonic() - started
    assert holder.wait(timeout=60) == 0, holder.stderr.read() if holder.stderr else ""
    assert waited > 0.5  # it waited for the holder instead of removing its live lock file
    assert read_file(snapshots, any_workspace, commit, "new.txt") == "new\n"
    assert problems == []


def test_a_capture_waits_for_another_thread_whose_git_holds_the_index(
    home: Path, any_workspace: Path, snapshots: Snapshots, problems: list[str]
) -> None:
    snapshots.capture(any_workspace, "t/0")
    shadow = snapshots._shadow(any_workspace)
    holding = threading.Event()

    def hold() -> None:
        with shadow.locked(time.monotonic() + 60):
            git = snapshots.git.start(["update-index", "--stdin"], env=shadow.env())
            while not (shadow.dir / "index.lock").exists():
                time.sleep(0.01)
            holding.set()
            time.sleep(1.0)
            git.communicate(b"")

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(30)
    started = time.monotonic()
    write(any_workspace, "new.txt", "new\n")
    try:
        commit = snapshots.capture(any_workspace, "t/1").commit
    finally:
        holder.join()
    assert time.monotonic() - started > 0.5
    assert read_file(snapshots, any_workspace, commit, "new.txt") == "new\n"
    assert problems == []
