"""Named fault points for the crash suite.

``point("turn.end.before")`` does nothing unless the environment this process started with arms
that name:
``TURNBACK_FAULT=turn.end.before`` kills this process with SIGKILL when the point is reached
(``TURNBACK_FAULT=name:raise`` raises :class:`FaultInjected` instead, and ``name:stop`` stops it
with SIGSTOP, frozen where it stands until a SIGCONT; ``name@3`` fires on the third time it is
reached). When ``TURNBACK_FAULT_LOG`` names a file, every point reached is appended to it
first, so a test can prove which points its scenarios reach.
"""

from __future__ import annotations

import os
import signal

#: Every fault point in turnback, by write order. The crash suite kills a process at each one, and
#: fails if the source names a point missing here, so a new step cannot escape it unnoticed.
POINTS: frozenset[str] = frozenset(
    {
        # schema migrations (store/sqlite.py, store/postgres.py)
        "store.migrate.inside",
        # turn lifecycle (engine/turns.py)
        "turn.begin.before",
        "turn.begin.inside",
        "turn.begin.after",
        "turn.reopen.before",
        "turn.reopen.inside",
        "turn.reopen.after",
        "turn.record.before",
        "turn.record.after",
        "turn.step.before",
        "turn.step.after",
        "turn.end.before",
        "turn.end.inside",
        "turn.end.after",
        # journal durability (engine/journal.py)
        "journal.flush.before",
        "journal.flush.after",
        # recovery and set-aside (engine/recovery.py)
        "recover.turn.before",
        "recover.apply.inside",
        "recover.set_aside.inside",
        "recover.turn.after",
        "apply.before",
        "apply.inside",
        "apply.after",
        "discard.before",
        "discard.inside",
        "discard.after",
        # workspace capture (workspace/snapshots.py): snapshots before references
        "capture.shadow",
        "capture.index",
        "capture.commit",
        "capture.ref",
        # moving files (workspace/snapshots.py)
        "restore.plan",
        "restore.file",
        "restore.done",
        # reverts and their undo (engine/revert.py)
        "revert.captured",
        "revert.started",
        "revert.files",
        "revert.commit.inside",
        "revert.done",
        "revert.rollback.files",
        "undo.started",
        "undo.files",
        "undo.commit.inside",
        "undo.done",
    }
)


class FaultInjected(RuntimeError):
    """Raised by an armed fault point whose action is ``raise``."""


_counts: dict[str, int] = {}


def _armed() -> tuple[str, str, int] | None:
    spec = os.environ.get("TURNBACK_FAULT")
    if not spec:
        return None
    name, _, action = spec.partition(":")
    name, _, nth = name.partition("@")
    return name, action or "kill", int(nth or 1)


# Read once: a fault is armed through the environment of the process a test starts. Checking
# two variables on every call would cost the journal's hot path about a third of its throughput.
_ARMED = _armed()
_LOG = os.environ.get("TURNBACK_FAULT_LOG")


def point(name: str) -> None:
    if _ARMED is None and _LOG is None:
        return
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as out:
            out.write(name + "\n")
    if _ARMED is None or _ARMED[0] != name:
        return
    _counts[name] = _counts.get(name, 0) + 1
    if _counts[name] != _ARMED[2]:
        return
    if _ARMED[1] == "raise":
        raise FaultInjected(name)
    os.kill(os.getpid(), signal.SIGSTOP if _ARMED[1] == "stop" else signal.SIGKILL)
