"""``doctor``: is this home healthy, and what to do about each thing that is not.

It reads everything and changes only what is safe to repair on sight: a damaged checkpoint ref
is dropped (and reported), exactly as a capture would drop it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from turnback.engine.owners import is_alive
from turnback.errors import DECIDE, GC, RECOVER, StoreNotFound, TurnbackError
from turnback.model import (
    UNFINISHED_REVERTS,
    HealthCheck,
    MessageKind,
    SessionRecord,
    TurnStatus,
    is_unreadable,
)
from turnback.store.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from turnback.engine.checkpoints import WorkspaceCheckpoints
    from turnback.store import Store
    from turnback.workspace.git import Git


class Examined(Protocol):
    """What doctor reads of an open home (a :class:`~turnback.engine.handle.Turnback`)."""

    @property
    def home(self) -> Path: ...

    @property
    def store(self) -> Store: ...

    @property
    def checkpoints(self) -> WorkspaceCheckpoints | None: ...

    def sessions(self) -> list[SessionRecord]: ...


def doctor(tb: Examined) -> list[HealthCheck]:
    """Every check, each reported whatever the others found: one that cannot run is a failed
    check saying why, never an exception (a read-only home, a damaged database)."""
    try:
        workspaces = sorted({session.workspace for session in tb.sessions()})
    except TurnbackError:  # the database check says what is wrong with it
        workspaces = []
    return [
        _git(tb),
        _home(tb.home, workspaces),
        _database(tb),
        *_guarded("recovery", lambda: _turns(tb)),
        *_guarded("stored rows", lambda: [_rows(tb)]),
        *_guarded("checkpoints", lambda: _shadows(tb, workspaces)),
        *_guarded("checkpoint remote", lambda: _remote(tb, workspaces)),
    ]


def doctor_unopened(home: Path, error: TurnbackError) -> list[HealthCheck]:
    """The checks that need no database, then the database's: nothing stored yet when there is
    none (doctor creates nothing), else why it cannot be opened. The checks that read the
    database follow, skipped (``ok`` is None) with the reason."""
    from turnback.workspace.git import Git

    def git() -> HealthCheck:
        with tempfile.TemporaryDirectory(prefix="turnback-doctor-") as scratch:
            found = Git(home=Path(scratch))  # its home for git, outside turnback's home
        return HealthCheck("git", True, _git_detail(found))

    if isinstance(error, StoreNotFound):
        database = HealthCheck("database", True, str(error))
        skipped = "nothing is stored yet"
    else:
        database = HealthCheck("database", False, str(error), _DATABASE_FIX)
        skipped = "the database cannot be opened"
    return [
        *_guarded("git", lambda: [git()]),
        _home(home, []) if home.exists() else _missing_home(home),
        database,
        *(HealthCheck(name, None, skipped) for name in ("recovery", "stored rows", "checkpoints")),
    ]


def _missing_home(home: Path) -> HealthCheck:
    parent = next(folder for folder in home.parents if folder.exists())
    if not os.access(parent, os.W_OK | os.X_OK):
        return HealthCheck(
            "home",
            False,
            f"{home} does not exist, and it cannot be made: {parent} is not writable",
            "make it writable, or choose another home with --home or TURNBACK_HOME",
        )
    return HealthCheck(
        "home", True, f"{home} does not exist yet: turnback makes it when it first stores a turn"
    )


_DATABASE_FIX = "copy the file aside, then restore it from a backup or start a new home"


def _guarded(name: str, checks: Callable[[], list[HealthCheck]]) -> list[HealthCheck]:
    try:
        return checks()
    except (TurnbackError, OSError) as error:
        text = str(error) if isinstance(error, TurnbackError) else error.strerror or str(error)
        return [HealthCheck(name, False, f"could not be checked: {text}", _fix_for(error))]


def _fix_for(error: BaseException) -> str:
    if isinstance(error, OSError):
        return "make the home writable (checks repair what they find), then check again"
    return "the message above says what failed; fix that, then check again"


def _git(tb: Examined) -> HealthCheck:
    if tb.checkpoints is None:
        return HealthCheck("git", True, "workspace checkpoints are turned off; git is not needed")
    try:
        git = tb.checkpoints.snapshots.git
    except TurnbackError as error:
        return HealthCheck("git", False, str(error), "install git 2.30 or newer and put it on PATH")
    return HealthCheck("git", True, _git_detail(git))


def _git_detail(git: Git) -> str:
    return f"git {'.'.join(map(str, git.version))} at {git.executable}"


def _home(home: Path, workspaces: list[str]) -> HealthCheck:
    try:
        with tempfile.NamedTemporaryFile(dir=home, prefix=".doctor-"):
            pass
    except OSError as error:
        return HealthCheck(
            "home",
            False,
            f"cannot write in {home}: {error.strerror or error} (commands that only read work)",
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
    detail = f"{home} is writable, {free / 2**30:.1f} GiB free"
    inside = [w for w in workspaces if home.resolve().is_relative_to(w)]
    if inside:
        return HealthCheck(
            "home",
            True,
            f"{detail}; it is inside the workspace {inside[0]}: checkpoints leave it out, but "
            "the agent can see and change turnback's files there",
            "keep the home outside your workspaces (move it, then point --home or "
            "TURNBACK_HOME at it)",
        )
    return HealthCheck("home", True, detail)


def _database(tb: Examined) -> HealthCheck:
    try:
        problems = tb.store.integrity_problems()
    except TurnbackError as error:
        return HealthCheck("database", False, str(error), _DATABASE_FIX)
    if problems:
        shown = "; ".join(problems[:5])
        return HealthCheck(
            "database",
            False,
            f"{tb.store.url} has {len(problems)} integrity problem(s): {shown}",
            _DATABASE_FIX,
        )
    return HealthCheck("database", True, f"{tb.store.url}: schema {SCHEMA_VERSION}, integrity ok")


def _rows(tb: Examined) -> HealthCheck:
    """Stored prompts, messages and events that cannot be read back. They are shown as
    unreadable wherever they appear, so nothing else breaks; this says where they are."""
    found: list[str] = []
    with tb.store.read() as tx:
        for session in tx.list_sessions():
            names: dict[str, str] = {}  # each turn as the findings name it
            for turn in tx.session_turns(session.id):
                name = f"session {session.id[:12]} turn {turn.number}"
                if not turn.status.ended:
                    name += f" ({turn.status.value})"
                names[turn.token] = name
                if is_unreadable(turn.prompt):
                    found.append(f"{name}: the prompt")
                # a turn's events whatever its status: a running or set-aside one's journal too
                for event in tx.run_events(turn.token):
                    if is_unreadable(event.event):
                        found.append(f"{name}: event {event.seq}")
            for message in tx.messages(session.id):
                if message.kind is MessageKind.UNREADABLE:
                    found.append(f"{names[message.turn]}: message {message.index}")
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


def _turns(tb: Examined) -> list[HealthCheck]:
    with tb.store.read() as tx:
        running = tx.turns_with_status(TurnStatus.RUNNING)
        now = tx.now()
        dead = [
            t
            for t in running
            if not is_alive(tx.get_owner(t.owner_id) if t.owner_id else None, now)
        ]
        aside = tx.turns_with_status(TurnStatus.SET_ASIDE)
        unfinished = tx.reverts(None, UNFINISHED_REVERTS)
    checks = []
    if dead or unfinished:
        checks.append(
            HealthCheck(
                "recovery",
                False,
                f"{len(dead)} turn(s) and {len(unfinished)} revert(s) were left half done by "
                "processes that died",
                "recovery settles them",
                RECOVER,
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
                "apply or discard each",
                DECIDE,
                sessions[0],
            )
        )
    return checks


def _shadows(tb: Examined, workspaces: list[str]) -> list[HealthCheck]:
    if tb.checkpoints is None:
        return []
    snapshots = tb.checkpoints.snapshots
    checks = []
    for workspace in workspaces:
        name = f"checkpoints of {workspace}"
        if not Path(workspace).is_dir():
            checks.append(
                HealthCheck(
                    name,
                    False,
                    "the workspace no longer exists",
                    "its checkpoints can be pruned",
                    GC,
                )
            )
            continue
        try:
            problems = snapshots.check(Path(workspace))
        except (TurnbackError, OSError) as error:
            text = str(error) if isinstance(error, TurnbackError) else error.strerror or str(error)
            fix = (
                _fix_for(error)
                if isinstance(error, OSError)
                else f"move its shadow repository {snapshots.shadow_dir(Path(workspace))} aside: "
                "the next turn starts a fresh one (diffs and reverts of earlier turns stay "
                "unavailable)"
            )
            checks.append(HealthCheck(name, False, text, fix))
            continue
        if problems:
            checks.append(
                HealthCheck(
                    name,
                    True,
                    "repaired: " + "; ".join(problems),
                    "nothing more to do; diffs of the dropped checkpoints are unavailable",
                )
            )
        else:
            checks.append(HealthCheck(name, True, "shadow repository and refs healthy"))
    return checks


def _remote(tb: Examined, workspaces: list[str]) -> list[HealthCheck]:
    """Push what a failed push, or a process that died before its push, left unpushed."""
    if tb.checkpoints is None or tb.checkpoints.remote is None:
        return []
    from turnback.workspace.remote import shown

    remote = shown(tb.checkpoints.remote)
    failed = tb.checkpoints.push(workspaces)
    if not failed:
        return [HealthCheck("checkpoint remote", True, f"every checkpoint is pushed to {remote}")]
    return [
        HealthCheck(
            "checkpoint remote",
            False,
            f"the checkpoints of {workspace} could not be pushed: {error}",
            f"make {remote} reachable; the next capture, recover or doctor pushes them (they "
            "are kept here until then)",
        )
        for workspace, error in failed
    ]
