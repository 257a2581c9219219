"""A long session does not slow down: once captures leave enough packs, one of them starts a
repack in the background that merges them, holding the shadow's lock while it runs."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from turnback.workspace import Snapshots
from turnback.workspace.capture import PACKS

from .conftest import write


def packs(shadow_dir: Path) -> int:
    return len(list((shadow_dir / "objects" / "pack").glob("*.pack")))


def test_captures_keep_the_packs_few_and_every_checkpoint_whole(
    snapshots: Snapshots, workspace: Path
) -> None:
    write(workspace, "big.txt", "".join(f"line {n}\n" for n in range(2_000)))
    commits = []
    most = 0
    for turn in range(3 * PACKS):
        write(workspace, f"notes/{turn % 7}.txt", f"turn {turn}\n")
        commits.append(snapshots.capture(workspace, f"s/1/{turn}").commit)
        shadow = snapshots._shadow(workspace)
        most = max(most, packs(shadow.dir))
    assert most <= PACKS + 1  # a repack may still run while one more capture waits for it
    with shadow.locked(time.monotonic() + 60):  # the repack holds the lock until it is done
        assert packs(shadow.dir) < PACKS // 2
    checked = subprocess.run(
        ["git", f"--git-dir={shadow.dir}", "fsck", "--connectivity-only", "--no-dangling"],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
    # every checkpoint still reads back: its files as they were
    for turn in (0, PACKS, len(commits) - 1):
        shown = subprocess.run(
            ["git", f"--git-dir={shadow.dir}", "show", f"{commits[turn]}:notes/{turn % 7}.txt"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert shown.stdout == f"turn {turn}\n"
