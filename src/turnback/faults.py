"""Named fault points for the crash suite.

``point("turn.end.before")`` does nothing unless the environment this process started with arms
that name:
``TURNBACK_FAULT=turn.end.before`` kills this process with SIGKILL when the point is reached
(``TURNBACK_FAULT=name:raise`` raises :class:`FaultInjected` instead; ``name:lost`` raises
:class:`~turnback.errors.StoreUnavailable` as a store does when the reply to a commit was lost,
or the store cannot be reached; ``name:stop`` stops it with SIGSTOP, frozen where it stands until
a SIGCONT; ``name@3`` fires on the third time it is reached). Several faults are armed at once by
separating them with commas. When ``TURNBACK_FAULT_LOG`` names a file, every point reached is
appended to it first, so a test can prove which points its scenarios reach.
"""

from __future__ import annotations

import os
import signal

from turnback.errors import StoreUnavailable

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
        # reading back what a commit whose outcome is unknown wrote (engine/reconcile.py)
        "turn.begin.reconcile",
        "turn.end.reconcile",
        "journal.reconcile",
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
        # workspace capture (workspace/capture.py, scan.py): snapshots before references
        "capture.shadow",
        "capture.index",
        "capture.commit",
        "capture.ref",
        # moving files (workspace/restore.py)
        "restore.plan",
        "restore.file",
        "restore.done",
        # rescues of files from a turn's checkpoints (engine/rescue.py)
        "rescue.recorded",
        "rescue.done",
        # a session/new that turnback acp's start answered, made a row (acp/launch.py)
        "answered.row",
        # handing a session off to another machine (engine/handoff.py)
        "handoff.accepted",
        "handoff.inside",
        "handoff.after",
        # reverts and their undo (engine/revert.py)
        "revert.captured",
        "revert.started",
        "revert.files",
        "revert.commit.inside",
        "revert.done",
        "revert.rollback.files",
        "revert.takeover",
        "undo.started",
        "undo.files",
        "undo.commit.inside",
        "undo.done",
    }
)


class FaultInjected(RuntimeError):
    """Raised by an armed fault point whose action is ``raise``."""


_counts: dict[str, int] = {}


def _armed() -> dict[str, list[tuple[int, str]]]:
    """Each armed point's (occurrence, action) pairs."""
    armed: dict[str, list[tuple[int, str]]] = {}
    for spec in filter(None, os.environ.get("TURNBACK_FAULT", "").split(",")):
        name, _, action = spec.strip().partition(":")
        name, _, nth = name.partition("@")
        armed.setdefault(name, []).append((int(nth or 1), action or "kill"))
    return armed


# Read once: a fault is armed through the environment of the process a test starts. Checking
# two variables on every call would cost the journal's hot path about a third of its throughput.
_ARMED = _armed() or None
_LOG = os.environ.get("TURNBACK_FAULT_LOG")


def point(name: str) -> None:
    if _ARMED is None and _LOG is None:
        return
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as out:
            out.write(name + "\n")
    if _ARMED is None or name not in _ARMED:
        return
    _counts[name] = _counts.get(name, 0) + 1
    for nth, action in _ARMED[name]:
        if _counts[name] != nth:
            continue
        if action == "raise":
            raise FaultInjected(name)
        if action == "lost":
            raise StoreUnavailable(f"the store's reply was lost at {name} (an injected fault)")
        os.kill(os.getpid(), signal.SIGSTOP if action == "stop" else signal.SIGKILL)
