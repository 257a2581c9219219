"""``doctor``: is this home healthy, and what to do about each thing that is not.

It reads everything and changes only what is safe to repair on sight: a damaged checkpoint ref
is dropped (and reported), exactly as a capture would drop it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from turnback.engine.owners import is_alive
from turnback.errors import TurnbackError
from turnback.model import HealthCheck, MessageKind, RevertState, TurnStatus, is_unreadable
from turnback.store.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from turnback.engine.handle import Turnback


def doctor(tb: Turnback) -> list[HealthCheck]:
    return [
        _git(tb),
        _home(tb.home),
        _database(tb),
        *_turns(tb),
        _rows(tb),
        *_shadows(tb),
    ]


def _git(tb: Turnback) -> HealthCheck:
    if tb.checkpoints is None:
        return HealthCheck("git", True, "workspace checkpoints are turned off; git is not needed")
    try:
        git = tb.checkpoints.snapshots.git
    except TurnbackError as error:
        return HealthCheck("git", False, str(error), "install git 2.30 or newer and put it on PATH")
    version = ".".join(map(str, git.version))
    return HealthCheck("git", True, f"git {version} at {git.executable}")


def _home(home: Path) -> HealthCheck:
    try:
        with tempfile.NamedTemporaryFile(dir=home, prefix=".doctor-"):
            pass
    except OSError as error:
        return HealthCheck(
            "home",
            False,
            f"cannot write in {home}: {error.strerror or error}",
            "make it writable, or choose another home with --home or TURNBACK_HOME",
        )
    stat = os.statvfs(home)
    free = stat.f_bavail * stat.f_frsize
    if free < 100 * 2**20:
        return HealthCheck(
            "home",
            False,
            f"{home} has only {free / 2**20:.0f} MiB free",
            "free some space: journals and checkpoints need room to be durable",
        )
    return HealthCheck("home", True, f"{home} is writable, {free / 2**30:.1f} GiB free")


def _database(tb: Turnback) -> HealthCheck:
    try:
        problems = tb.store.integrity_problems()
    except TurnbackError as error:
        return HealthCheck("database", False, str(error), "restore it from a backup")
    if problems:
        shown = "; ".join(problems[:5])
        return HealthCheck(
            "database",
            False,
            f"{tb.store.url} has {len(problems)} integrity problem(s): {shown}",
            "copy the file aside, then restore it from a backup or start a new home",
        )
    return HealthCheck("database", True, f"{tb.store.url}: schema {SCHEMA_VERSION}, integrity ok")


def _rows(tb: Turnback) -> HealthCheck:
    """Stored prompts, messages and events that cannot be read back. They are shown as
    unreadable wherever they appear, so nothing else breaks; this says where they are."""
    found: list[str] = []
    with tb.store.read() as tx:
        for session in tx.list_sessions():
            for turn in tx.session_turns(session.id):
                if is_unreadable(turn.prompt):
                    found.append(f"session {session.id[:12]} turn {turn.number}: the prompt")
                if any(is_unreadable(e.event) for e in tx.run_events(turn.token)):
                    found.append(f"session {session.id[:12]} turn {turn.number}: an event")
            for message in tx.messages(session.id):
                if message.kind is MessageKind.UNREADABLE:
                    found.append(f"session {session.id[:12]}: message {message.index} of a turn")
    if not found:
        return HealthCheck("stored rows", True, "every prompt, message and event reads back")
    return HealthCheck(
        "stored rows",
        False,
        f"{len(found)} stored value(s) cannot be read back and are shown as unreadable: "
        + "; ".join(found[:10])
        + (" …" if len(found) > 10 else ""),
        "nothing else is affected; restore the database from a backup to get them back",
    )


def _turns(tb: Turnback) -> list[HealthCheck]:
    with tb.store.read() as tx:
        running = tx.turns_with_status(TurnStatus.RUNNING)
        now = tx.now()
        dead = [
            t
            for t in running
            if not is_alive(tx.get_owner(t.owner_id) if t.owner_id else None, now)
        ]
        aside = tx.turns_with_status(TurnStatus.SET_ASIDE)
        unfinished = tx.reverts(
            None, (RevertState.STARTED, RevertState.FILES_RESTORED, RevertState.UNDOING)
        )
    checks = []
    if dead or unfinished:
        checks.append(
            HealthCheck(
                "recovery",
                False,
                f"{len(dead)} turn(s) and {len(unfinished)} revert(s) were left half done by "
                "processes that died",
                "run `turnback recover`",
            )
        )
    else:
        checks.append(HealthCheck("recovery", True, "nothing left half done"))
    if aside:
        sessions = sorted({t.session_id[:12] for t in aside})
        checks.append(
            HealthCheck(
                "set-aside turns",
                False,
                f"{len(aside)} turn(s) could not be recovered and wait for a decision",
                f"`turnback unrecovered {sessions[0]}` shows them; apply or discard each",
            )
        )
    return checks


def _shadows(tb: Turnback) -> list[HealthCheck]:
    if tb.checkpoints is None:
        return []
    workspaces = sorted({s.workspace for s in tb.sessions()})
    checks = []
    for workspace in workspaces:
        name = f"checkpoints of {workspace}"
        if not Path(workspace).is_dir():
            checks.append(
                HealthCheck(
                    name,
                    False,
                    "the workspace no longer exists",
                    "its checkpoints can be pruned with `turnback gc --keep 0`",
                )
            )
            continue
        try:
            problems = tb.checkpoints.snapshots.check(Path(workspace))
        except TurnbackError as error:
            checks.append(HealthCheck(name, False, str(error), "run `turnback doctor` again"))
            continue
        if problems:
            checks.append(
                HealthCheck(
                    name,
                    False,
                    "repaired: " + "; ".join(problems),
                    "nothing more to do; diffs of the dropped checkpoints are unavailable",
                )
            )
        else:
            checks.append(HealthCheck(name, True, "shadow repository and refs healthy"))
    return checks
