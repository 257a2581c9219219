"""The crash suite's workloads, with the power cut as well: the home and the workspace live on a
disk that drops every write not yet synced (:mod:`powerfs`). A process is killed with SIGKILL at
a fault point or at a random moment, the disk loses power and comes back, and then:

* the database opens and reads back whole (``PRAGMA integrity_check``);
* recovery is exactly once: run twice it changes nothing the second time, the interrupted turn
  holds its prompt once, and a new turn begins and completes on top;
* nothing acknowledged was lost: in ``strict`` mode no acknowledged event, in ``batched`` mode
  no event acknowledged at a boundary, in every mode no begun or ended turn;
* every shadow repository passes ``git fsck``, and ``turnback doctor`` passes.

The acknowledgements are written off that disk, as the outside world records them. CI runs a
few cuts; ``make torture`` (``TURNBACK_TORTURE=1``) runs every fault point in every
mode and ``TURNBACK_POWER_CUTS`` (default 200 there) cuts at random moments.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

import turnback
from tests.crash.harness import (
    Acks,
    check_stream,
    kill_stream_after,
    run_child,
    settle_and_check,
)
from tests.crash.test_crash import STREAM_CASES, _stream_args
from tests.crash.test_crash_workspace import CAPTURE

from .disk import PowerDisk, why_not

TORTURE = os.environ.get("TURNBACK_TORTURE") == "1"
CUTS = int(os.environ.get("TURNBACK_POWER_CUTS", "200" if TORTURE else "3"))
EVENTS = 24
TURNBACK = str(Path(sys.executable).parent / "turnback")

# In CI, one fault point of each write order, in the mode where it matters most.
SMALL_STREAM = [
    ("turn.begin.inside", 1, "strict", "complete", False),
    ("journal.flush.after", 2, "batched", "complete", False),
    ("turn.step.after", 2, "batched", "complete", True),
    ("turn.end.inside", 1, "strict", "complete", True),
]
SMALL_CAPTURE = [("capture.ref", 2)]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[PowerDisk]:
    """A power-loss disk with a workspace that was on it before it was mounted."""
    reason = why_not()
    if reason is not None and not os.path.exists("/dev/fuse"):
        pytest.skip(f"POWER-LOSS TESTS NOT RUN: {reason}")
    assert reason is None, reason
    power = PowerDisk(tmp_path)
    (power.backing / "workspace").mkdir()
    (power.backing / "workspace" / "notes.txt").write_text("the user's notes\n")
    power.mount()
    try:
        yield power
    finally:
        power.close()


def new_session(disk: PowerDisk) -> tuple[Path, str]:
    home = disk.path / "home"
    with turnback.open(home) as tb:
        return home, tb.create_session(disk.path / "workspace").id


def check_disk(home: Path) -> None:
    """After recovery: the database reads back whole; a turn's diff is there, or -- its
    workspace checkpoint lost with the power, since the shadow's objects and refs are not
    synced -- says it is unavailable, never worse; every shadow repository passes git fsck,
    and doctor passes."""
    with closing(sqlite3.connect(f"file:{home / 'turnback.db'}?mode=ro", uri=True)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with turnback.open(home, create=False) as tb:
        for record in tb.sessions():
            session = tb.session(record.id)
            for turn in session.turns():
                try:
                    diff = session.diff(turn.token, patch=True)
                except turnback.CheckpointUnavailable:
                    continue
                assert diff.available == (diff.patch is not None)
    for shadow in sorted((home / "shadow").glob("*.git")):
        fsck = subprocess.run(
            ["git", "--git-dir", str(shadow), "fsck", "--full", "--no-dangling"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert fsck.returncode == 0, f"git fsck of {shadow.name}: {fsck.stdout}{fsck.stderr}"
    doctor = subprocess.run(
        [TURNBACK, "--home", str(home), "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    failed = [c for c in json.loads(doctor.stdout) if c["ok"] is False]
    assert doctor.returncode == 0 and not failed, failed or doctor.stderr


def test_a_new_home_its_session_and_shadow_repository_survive_a_power_loss(
    disk: PowerDisk,
) -> None:
    home, session_id = new_session(disk)
    with turnback.open(home) as tb, tb.session(session_id).turn("make the shadow"):
        pass
    [shadow] = (home / "shadow").glob("*.git")

    disk.lose_power()

    with turnback.open(home, create=False) as tb:
        assert tb.session(session_id).workspace == disk.path / "workspace"
        assert [t.prompt for t in tb.session(session_id).turns()] == ["make the shadow"]
    assert (shadow / "config").is_file(), "the shadow repository was lost with the power"
    check_disk(home)


@pytest.mark.parametrize(
    ("point", "nth", "mode", "end", "steps"), STREAM_CASES if TORTURE else SMALL_STREAM
)
def test_power_lost_while_running_a_turn(
    disk: PowerDisk,
    tmp_path: Path,
    point: str,
    nth: int,
    mode: str,
    end: str,
    steps: bool,
) -> None:
    home, session_id = new_session(disk)
    args = _stream_args(tmp_path, session_id, mode=mode, end=end, steps=steps)
    run_child(home, "stream", args, fault=f"{point}@{nth}")

    disk.lose_power()

    acks = Acks.read(tmp_path / "ack.jsonl")
    settle_and_check(home, session_id)
    check_stream(home, session_id, acks, mode=mode, events=EVENTS, steps=steps)
    check_disk(home)


@pytest.mark.parametrize("seed", range(CUTS))
def test_power_lost_at_a_random_moment_while_streaming(
    disk: PowerDisk, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    mode = ("strict", "batched")[seed % 2]
    events = 2000
    home, session_id = new_session(disk)
    args = _stream_args(tmp_path, session_id, mode=mode, events=events, pause_every=20)
    acks = kill_stream_after(home, args, rng.uniform(0.0, 1.5))

    disk.lose_power()

    settle_and_check(home, session_id)
    check_stream(home, session_id, acks, mode=mode, events=events, steps=False)
    check_disk(home)


@pytest.mark.parametrize(
    ("point", "nth"),
    [(p, n) for p in CAPTURE for n in (1, 2)] if TORTURE else SMALL_CAPTURE,
)
def test_power_lost_while_capturing(disk: PowerDisk, tmp_path: Path, point: str, nth: int) -> None:
    home, session_id = new_session(disk)
    ack = tmp_path / "ack.jsonl"
    args = {"session": session_id, "ack": str(ack), "files": {"a.txt": "from the agent\n"}}
    run_child(home, "edit", args, fault=f"{point}@{nth}")

    disk.lose_power()

    acks = Acks.read(ack)
    settle_and_check(home, session_id)  # recovers, twice; a new turn begins and completes
    with turnback.open(home) as tb:
        turns = tb.session(session_id).turns()
    assert turns[-1].begin_checkpoint and turns[-1].end_checkpoint, "captures fail after it"
    if acks.begun is not None:
        assert turns[0].token == acks.begun and turns[0].status.ended
    check_disk(home)
