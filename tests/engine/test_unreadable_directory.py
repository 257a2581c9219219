"""A directory of the workspace that cannot be read is named, never passed over in silence: the
capture's activity says so, the revert plan keeps it ("unreadable"), and a revert leaves what
is inside it alone.

chmod 000 stops nobody running as root (CI does), so the scenario runs in a child process that
permissions do stop: as root, one without the capabilities that bypass them
(CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), dropped from its bounding set before it starts."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

_PR_CAPBSET_DROP = 24
_BYPASSING_PERMISSIONS = (1, 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH

SCENARIO = """
import json, os, sys
from pathlib import Path
import turnback

home, ws = Path(sys.argv[1]), Path(sys.argv[2])
out = {}
with turnback.open(home) as tb:
    session = tb.create_session(ws)
    out["watched"] = tb.checkpoints.watch(ws) is not None  # captures look at what changed
    with session.turn("one"):
        (ws / "a.txt").write_text("one\\n")
        (ws / "secret").mkdir()
        (ws / "secret" / "s.txt").write_text("s\\n")
    (ws / "locked").mkdir()
    (ws / "locked" / "l.txt").write_text("l\\n")
    (ws / ".gitignore").write_text("cache/\\n")
    (ws / "cache").mkdir()  # ignored: neither captured nor reported
    for name in ("secret", "locked", "cache"):
        (ws / name).chmod(0)
    try:
        os.listdir(ws / "secret")
    except PermissionError:
        out["unreadable"] = True
    with session.turn("two"):
        (ws / "a.txt").write_text("two\\n")
    out["skipped"] = [
        (a.message, a.data) for a in session.activities() if a.code == "checkpoint.files.skipped"
    ]
    out["fallback"] = [
        a.message for a in session.activities() if a.code == "checkpoint.watch.fallback"
    ]
    plan = session.revert_plan(0)
    out["delete"] = [c.path for c in plan.delete]
    out["kept"] = dict(plan.kept_because)
    out["state"] = session.revert(0).state.value

print(json.dumps(out))
"""


def _without_permission_bypass() -> None:
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in _BYPASSING_PERMISSIONS:
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_an_unreadable_directory_is_named_kept_by_the_plan_and_left_alone(
    home: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    try:
        child = subprocess.run(
            [sys.executable, "-c", SCENARIO, str(home), str(workspace)],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=_without_permission_bypass,
        )
    finally:
        for name in ("secret", "locked", "cache"):
            if (workspace / name).exists():
                (workspace / name).chmod(0o755)
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout)
    assert out.get("unreadable"), "the directory could be read: the test proves nothing"
    if out["watched"]:  # the watcher could not follow the directory: a scan found it
        assert out["fallback"]
    message, data = out["skipped"][-1]
    assert "2 directory(ies) that cannot be read were left out" in message
    assert data["directories"] == ["locked/", "secret/"]  # not the ignored cache/
    assert "a.txt" in out["delete"] and "secret/s.txt" not in out["delete"]  # turn 1 made both
    assert out["kept"]["secret/"] == "unreadable" and out["kept"]["locked/"] == "unreadable"
    assert out["state"] == "committed"
    assert not (workspace / "a.txt").exists()
    assert (workspace / "secret" / "s.txt").read_text() == "s\n"
    assert (workspace / "locked" / "l.txt").read_text() == "l\n"
