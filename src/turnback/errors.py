"""The exception tree. Every message says what happened, to what, and what to do next."""

from __future__ import annotations

#: What settles an error (or an activity, as ``data["remedy"]``), for each surface to word in its
#: own terms: the library names no CLI command, the proxy no terminal. Wait for the running turn
#: to end or cancel it (and, should its process have died, recover it); recover what a dead
#: process left half done; list the sessions; list the session's turns; read the session's
#: activities for why; decide (apply or discard) the session's set-aside turns; look at what a
#: turn kept; give the agent longer to answer ``initialize``; prune a workspace's checkpoints.
WAIT = "wait"
RECOVER = "recover"
SESSIONS = "sessions"
TURNS = "turns"
ACTIVITIES = "activities"
DECIDE = "decide"
SHOW = "show"
INITIALIZE_TIMEOUT = "initialize_timeout"
GC = "gc"


class TurnbackError(Exception):
    """Base of every error turnback raises on purpose. Its message says what happened, to what,
    in no surface's terms. Besides it, it may carry structured fields: the ``session`` id and
    ``turn`` number concerned, that turn's ``state``, and a ``remedy`` (``WAIT``, ``RECOVER``,
    ...) from which the CLI and the proxy each word their own hint."""

    #: Exit code the CLI uses for this error: 1 error, 3 conflict.
    exit_code = 1
    session: str | None = None
    turn: int | None = None
    state: str | None = None
    remedy: str | None = None

    def __init__(self, *args: object, remedy: str | None = None) -> None:
        super().__init__(*args)
        if remedy is not None:
            self.remedy = remedy

    def settled_by(
        self,
        remedy: str,
        *,
        session: str | None = None,
        turn: int | None = None,
        state: str | None = None,
    ) -> TurnbackError:
        """Name what settles this error (and the session, turn and state it concerns);
        returns it, to raise."""
        self.remedy = remedy
        self.session = session if session is not None else self.session
        self.turn = turn if turn is not None else self.turn
        self.state = state if state is not None else self.state
        return self


class InvalidId(TurnbackError, ValueError):
    """An id or prefix that cannot name anything (wrong characters, empty)."""


class InvalidOption(TurnbackError, ValueError):
    """An option turnback cannot use -- an argument of a call, or a setting in the environment
    such as ``TURNBACK_LEASE_SECONDS``; the message names it and says what is accepted."""


class ExtraMissing(TurnbackError):
    """A command needs a package that ``pip install turnback`` leaves out; the message names
    the extra that brings it (``pip install 'turnback[ui]'``)."""


class SessionNotFound(TurnbackError, LookupError):
    pass


class AmbiguousId(TurnbackError, LookupError):
    """A prefix that matches more than one session or turn."""


class TurnNotFound(TurnbackError, LookupError):
    pass


class InvalidEvent(TurnbackError, ValueError):
    """An event or prompt that cannot be journaled; nothing was written."""

    #: the field that is wrong, as a path (``prompt[0].text``), when one is
    field: str | None = None


class TurnInProgress(TurnbackError):
    """A second turn was begun while one is running (docs/design.md, invariant 8)."""

    exit_code = 3

    def __init__(
        self,
        message: str,
        running_token: str,
        *,
        turn: int | None = None,
        state: str | None = "running",
        remedy: str | None = WAIT,
    ) -> None:
        super().__init__(message)
        self.running_token = running_token
        self.turn, self.state, self.remedy = turn, state, remedy


class RevertInProgress(TurnInProgress):
    """A turn was begun on a workspace whose revert (or undo) has not finished: the revert holds
    the workspace until it commits or rolls back."""

    def __init__(self, message: str, revert_id: int, owner_id: str | None) -> None:
        super().__init__(message, "", state="reverting", remedy=WAIT)
        self.revert_id = revert_id
        self.owner_id = owner_id


class TurnNotRunning(TurnbackError):
    """An operation that needs a running turn met one that has ended."""

    exit_code = 3


class OwnershipLost(TurnNotRunning):
    """This process's turn was taken over by another (its lease ran out, or its process was
    judged dead): nothing it writes for the turn lands any more. Stop the turn locally."""

    def __init__(self, message: str, token: str) -> None:
        super().__init__(message)
        self.token = token


class SessionElsewhere(TurnbackError):
    """A turn was begun on a machine that does not hold its session: a handoff gave the
    session to ``host``, where its turns run (and its workspace is)."""

    exit_code = 3

    def __init__(self, message: str, host: str) -> None:
        super().__init__(message)
        self.host = host


class NotSetAside(TurnbackError):
    """Apply or discard named a turn that is not set aside."""

    exit_code = 3


class StoreError(TurnbackError):
    """The durable store cannot be used."""


class StoreCorrupt(StoreError):
    """The database file is damaged, or is not a turnback database."""


class StoreLocked(StoreError):
    """Another process held the database longer than the busy timeout."""


class StoreUnavailable(StoreError):
    """The database cannot be opened or written (permissions, disk full, missing directory)."""


class StoreNotFound(StoreUnavailable):
    """Opened without ``create`` and there is no database yet."""


class SchemaTooNew(StoreError):
    """The database was written by a newer turnback."""


class WorkspaceError(TurnbackError):
    """Something about the workspace's files or the shadow repository went wrong."""


class GitUnavailable(WorkspaceError):
    """git is not installed, not on PATH, or too old."""


class GitFailed(WorkspaceError):
    """A git command failed or timed out."""


class CheckpointUnavailable(WorkspaceError):
    """A workspace checkpoint a diff or revert needs does not exist (or was pruned), or lives
    on another host of a fleet (named in ``hosts``)."""

    def __init__(self, message: str, hosts: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.hosts = hosts


class NothingToRevert(TurnbackError):
    """A revert or undo that has nothing to do, or would drop newer work."""

    exit_code = 3


class RevertConflict(WorkspaceError):
    """A revert would overwrite changes it must keep; nothing was written."""

    exit_code = 3

    def __init__(self, message: str, paths: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.paths = paths


class WorkspaceDiverged(WorkspaceError):
    """A handoff found this machine's workspace holding changes that are not the session's
    (``paths``); nothing was written and the session stayed where it was."""

    exit_code = 3

    def __init__(self, message: str, paths: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.paths = paths


class RestoreIncomplete(WorkspaceError):
    """Files of a restore could not be written (a full disk, say); ``paths`` names them."""

    def __init__(
        self, message: str, paths: tuple[str, ...] = (), *, remedy: str | None = None
    ) -> None:
        super().__init__(message, remedy=remedy)
        self.paths = paths


class AgentError(TurnbackError):
    """Something about the agent process or its protocol went wrong."""


class AgentUnavailable(AgentError):
    """The agent could not be started, or did not answer ``initialize`` in time."""


class AgentDied(AgentError):
    """The agent process exited (or closed its output) while the runtime needed it."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


class ResumeUnavailable(AgentError):
    """There is no interrupted turn to resume, or nothing to resume it from."""


class RollbackUnavailable(AgentError):
    """The agent's conversation cannot be rolled back, so the revert was refused."""

    exit_code = 3
