"""When a turn's workspace checkpoints are taken, and what their failures become.

Invariant 4, snapshots before references: :meth:`Snapshots.capture` returns only once the
checkpoint's objects and ref are on disk, and only then does the engine commit a row that names
the commit. A crash in between leaves a ref no row names, which ``gc`` removes after a grace
period; it can never leave a row naming a commit that does not exist.

Invariant 1: a turn's baseline is taken before its agent runs. A capture that fails never blocks a
turn: the failure becomes an activity (``checkpoint.capture.failed``), the turn's checkpoint stays
empty, and its diff says it is unavailable. Captures of a workspace that keep failing back off
(``checkpoint.capture.skipped``), so a missing git or a huge tree costs one failure, not one per
turn.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import field
from pathlib import Path

from turnback.engine.owners import listed, require_here
from turnback.errors import TurnbackError
from turnback.model import (
    ActivityLevel,
    FileChange,
    GcReport,
    Revert,
    RevertState,
    Turn,
    TurnStatus,
    WorkspaceCheckpoint,
    conversation,
)
from turnback.records import record
from turnback.store import Store, Tx

TYPE_CHECKING = False
if TYPE_CHECKING:  # at run time imported on first use: opening turnback and a session/new need
    from turnback.workspace import CaptureBackoff, Snapshots  # no capture (``turnback acp``)
    from turnback.workspace.remote import PushResult


@record
class Note:
    """An activity to record in the transaction that uses the capture it describes."""

    level: ActivityLevel
    code: str
    message: str
    data: dict[str, object] = field(default_factory=dict)

    def record(self, tx: Tx, session_id: str, turn: str | None) -> None:
        tx.insert_activity(
            session_id, turn, self.level, self.code, self.message, self.data, time.time()
        )


@record(frozen=False)
class TurnCapture:
    """A checkpoint taken for a turn (or its absence), the file changes since the checkpoint it
    is compared with, and the notes to record about it."""

    moment: str  # "begin" or "end"
    commit: str | None = None
    changes: list[FileChange] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def write(self, tx: Tx, session_id: str, token: str) -> None:
        """Record it on the turn, inside the caller's transaction (after the capture: inv. 4)."""
        tx.set_checkpoint(token, self.moment, self.commit)
        if self.changes:
            scope = "before" if self.moment == "begin" else "turn"
            tx.insert_file_changes(token, scope, self.changes)
        for note in self.notes:
            note.record(tx, session_id, token)


def ref_for(session_id: str, token: str, moment: str) -> str:
    """The shadow ref of a turn's checkpoint: ``<session>/<turn>/<begin|end>``."""
    return f"{session_id}/{token}/{moment}"


#: The most workspaces one process follows with a file watcher at a time (:meth:`follow`): each
#: watcher holds inotify watches, which the user has a limit of.
FOLLOWED = 8


class WorkspaceCheckpoints:
    """The engine's use of :class:`Snapshots`: captures, diffs and restores whose failures are
    returned as notes instead of raised, where a turn must go on regardless."""

    def __init__(
        self,
        home: Path,
        *,
        progress: Callable[[str, int, int], None] | None = None,
        max_file_bytes: int = 50 * 2**20,
        time_budget: float = 60.0,
        remote: str | None = None,
        on_push: Callable[[PushResult], None] | None = None,
    ) -> None:
        #: the checkpoint remote's URL, when checkpoints are shared through one
        self.remote = remote
        self._on_push = on_push
        self._problems: list[tuple[Path, str]] = []
        self._options = {"max_file_bytes": max_file_bytes, "time_budget": time_budget}
        self._home = home
        self.progress = progress
        self._snapshots: Snapshots | None = None
        self._backoff: dict[str, CaptureBackoff] = {}
        self._changes: dict[tuple[str, str, str], tuple[FileChange, ...]] = {}
        self._begun: set[str] = set()  # workspaces where a turn of this process began
        self._followed: dict[str, str | None] = {}  # the least recently followed first

    @property
    def snapshots(self) -> Snapshots:
        """Made on first use, so opening turnback writes nothing and needs no git."""
        if self._snapshots is None:
            from turnback.workspace import Snapshots

            self._snapshots = Snapshots(
                self._home,
                progress=self.progress,
                problems=lambda workspace, message: self._problems.append((workspace, message)),
                max_file_bytes=int(self._options["max_file_bytes"]),
                time_budget=float(self._options["time_budget"]),
                remote=self.remote,
                on_push=self._on_push,
            )
        return self._snapshots

    def bring(self, workspace: str, turns: Sequence[Turn], what: str) -> None:
        """Make these turns' checkpoints readable here. Without a checkpoint remote that means
        they were taken on this host (CheckpointUnavailable names the hosts that hold them);
        with one, whatever of them this host lacks is fetched from it, whichever host took them
        (CheckpointUnavailable when the remote cannot give them)."""
        if self.remote is None:
            require_here(turns, what)
            return
        path = Path(workspace)
        commits = {c for t in turns for c in (t.begin_checkpoint, t.end_checkpoint) if c}
        if all(self.snapshots.exists(path, commit) for commit in sorted(commits)):
            return
        self.snapshots.fetch(path, sorted({t.session_id for t in turns}))

    def push(self, workspaces: Sequence[str]) -> list[tuple[str, str]]:
        """Push now the checkpoints the remote lacks of each workspace marked as holding
        some (a push that failed, or one a process did not live to run); the
        ``(workspace, error)`` of each push that failed again."""
        failed = []
        for workspace in self._unpushed(workspaces):
            try:
                error = self.snapshots.push(Path(workspace))
            except (TurnbackError, OSError) as problem:
                error = str(problem)
            if error is not None:
                failed.append((workspace, error))
        return failed

    def push_later(self, sessions: Sequence[tuple[str, str]]) -> None:
        """:meth:`push` from the background thread, for each ``(session, workspace)``."""
        unpushed = set(self._unpushed(sorted({w for _s, w in sessions})))
        for session, workspace in sessions:
            if workspace in unpushed:
                with contextlib.suppress(TurnbackError, OSError):
                    self.snapshots.push_later(Path(workspace), session)

    def _unpushed(self, workspaces: Sequence[str]) -> list[str]:
        """Those of ``workspaces`` whose checkpoints the remote may lack."""
        if self.remote is None:
            return []
        found = []
        for workspace in workspaces:
            with contextlib.suppress(TurnbackError, OSError):
                if (
                    Path(workspace).is_dir()
                    and self.snapshots.unpushed(Path(workspace)) is not None
                ):
                    found.append(workspace)
        return found

    def close(self, wait: float = 10.0) -> None:
        """Stop the watchers :meth:`follow` started, and let the background pushes asked for
        run (``wait`` seconds at most)."""
        followed, self._followed = self._followed, {}
        for watched in followed.values():
            if watched is not None:
                self.unwatch(watched)
        if self._snapshots is not None:
            self._snapshots.close(wait)

    def for_turn(
        self,
        workspace: str,
        session_id: str,
        token: str,
        moment: str,
        since: str | None,
        *,
        shared: dict[str, WorkspaceCheckpoint | None] | None = None,
    ) -> TurnCapture:
        """Capture a turn's ``begin`` or ``end`` checkpoint and what changed ``since`` a commit
        (the previous turn's end for a begin: changes made outside any turn; the turn's own
        begin for an end: what the turn did).

        With ``shared``, one capture per workspace serves every turn that passes the same dict
        (recovery settles many turns of a workspace at one moment): the first turn's ref keeps
        the commit alive, and each turn's row names it."""
        if shared is not None and workspace in shared:
            checkpoint, notes = shared[workspace], list[Note]()
        else:
            checkpoint, notes = self.capture(workspace, ref_for(session_id, token, moment))
            if shared is not None:
                shared[workspace] = checkpoint
        commit = checkpoint.commit if checkpoint else None
        changes, more = self.changes(workspace, since, commit)
        return TurnCapture(moment, commit, changes, notes + more)

    def capture(
        self, workspace: str, ref: str, *, share: bool = True
    ) -> tuple[WorkspaceCheckpoint | None, list[Note]]:
        """Capture ``workspace``; never raises a turnback error (it becomes a note). Without
        ``share`` a checkpoint remote does not get it (a capture gone within the call)."""
        from turnback.workspace import CaptureBackoff

        backoff = self._backoff.setdefault(workspace, CaptureBackoff())
        now = time.time()
        if not backoff.should_try(now):
            wait = backoff.next_try - now
            return (
                None,
                [
                    Note(
                        ActivityLevel.WARNING,
                        "checkpoint.capture.skipped",
                        f"no workspace checkpoint was taken: captures of {workspace} failed "
                        f"{backoff.failures} times in a row; the next try is in {wait:.0f}s",
                        {"ref": ref, "failures": backoff.failures},
                    )
                ],
            )
        try:
            checkpoint = self.snapshots.capture(Path(workspace), ref, share=share)
        except (TurnbackError, OSError) as error:
            delay = backoff.record_failure(now)
            return (
                None,
                [
                    *self.take_problems(),
                    Note(
                        ActivityLevel.ERROR,
                        "checkpoint.capture.failed",
                        f"the workspace checkpoint could not be taken: {error}",
                        {"ref": ref, "failures": backoff.failures, "retry_in": delay},
                    ),
                ],
            )
        backoff.record_success()
        notes = self.take_problems()
        if checkpoint.fallback is not None:
            notes.append(
                Note(
                    ActivityLevel.INFO,
                    "checkpoint.watch.fallback",
                    f"the file watcher of {workspace} could not say what changed "
                    f"({checkpoint.fallback}), so this checkpoint scanned every file",
                    {"reason": checkpoint.fallback},
                )
            )
        if checkpoint.skipped:
            shown = ", ".join(checkpoint.skipped[:5])
            more = f" and {len(checkpoint.skipped) - 5} more" if len(checkpoint.skipped) > 5 else ""
            directories = [path for path in checkpoint.skipped if path.endswith("/")]
            files = len(checkpoint.skipped) - len(directories)
            what = [
                f"{count} {noun}"
                for count, noun in (
                    (files, "file(s) over the size limit or unreadable"),
                    (len(directories), "directory(ies) that cannot be read"),
                )
                if count
            ]
            notes.append(
                Note(
                    ActivityLevel.WARNING,
                    "checkpoint.files.skipped",
                    f"{' and '.join(what)} were left out of the checkpoint, and reverts leave "
                    f"them alone: {shown}{more}",
                    {"paths": list(checkpoint.skipped), "directories": directories},
                )
            )
        return checkpoint, notes

    def watch(self, workspace: Path) -> str | None:
        """Watch the workspace while a session runs in it, so its captures skip the scan; a
        watcher that cannot start only costs that speed. Returns the workspace to pass to
        :meth:`unwatch`, or ``None`` when no watcher runs."""
        try:
            return str(workspace) if self.snapshots.watch(workspace) else None
        except (TurnbackError, OSError):
            return None

    def unwatch(self, workspace: str) -> None:
        with contextlib.suppress(TurnbackError, OSError):
            self.snapshots.unwatch(Path(workspace))

    def begins(self, workspace: str) -> None:
        """A turn of this process begins in ``workspace``: from its second on, the workspace is
        followed (:meth:`follow`), so the captures of a process that runs turns one after
        another need no scan, and one that runs a single turn sets up no watcher it would not
        use. A workspace something else watches (a running ``AgentRuntime``) is left to it."""
        if workspace not in self._begun:
            self._begun.add(workspace)
        elif workspace in self._followed or not self._watched(workspace):
            self.follow(workspace)

    def _watched(self, workspace: str) -> bool:
        try:
            return self.snapshots.watching(Path(workspace))
        except (TurnbackError, OSError):
            return False

    def follow(self, workspace: str) -> None:
        """Watch ``workspace`` until :meth:`close`, at most :data:`FOLLOWED` workspaces at a
        time: the least recently followed one is let go first."""
        if workspace in self._followed:
            self._followed[workspace] = self._followed.pop(workspace)  # the most recent now
            return
        if len(self._followed) >= FOLLOWED:
            oldest = next(iter(self._followed))
            watched = self._followed.pop(oldest)
            if watched is not None:
                self.unwatch(watched)
        self._followed[workspace] = self.watch(Path(workspace))

    def changes(
        self, workspace: str, old: str | None, new: str | None
    ) -> tuple[list[FileChange], list[Note]]:
        """The file changes between two commits; a note when they cannot be computed."""
        if not old or not new or old == new:
            return [], []  # nothing to compare, or nothing changed: no git to run
        key = (workspace, old, new)
        if key in self._changes:  # commits never change, so neither does their diff
            return list(self._changes[key]), []
        try:
            changes = self.snapshots.changes(Path(workspace), old, new)
        except (TurnbackError, OSError) as error:
            return (
                [],
                [
                    Note(
                        ActivityLevel.WARNING,
                        "checkpoint.diff.failed",
                        f"the checkpoints were captured, but their file summary is unavailable: "
                        f"{error}",
                    )
                ],
            )
        if len(self._changes) >= 4096:
            self._changes.clear()
        self._changes[key] = tuple(changes)
        return changes, []

    def take_problems(self) -> list[Note]:
        """Damage the snapshots found and repaired on the way (a damaged ref, say), as notes."""
        problems, self._problems = self._problems, []
        return [
            Note(
                ActivityLevel.WARNING,
                "checkpoint.repaired",
                message,
                {"workspace": str(workspace)},
            )
            for workspace, message in problems
        ]


class PushReports:
    """Records what the background pushes to a checkpoint remote met, as activities of the
    sessions whose checkpoints they carried: ``checkpoint.push.failed`` when a workspace's push
    fails (once, until one succeeds: the next capture, ``recover`` and ``doctor`` push again),
    ``checkpoint.push.resumed`` when one succeeds after that. It writes on a connection of its
    own (``connect`` opens it), from the pushing thread."""

    def __init__(self, connect: Callable[[], Store]) -> None:
        self.connect = connect
        self._store: Store | None = None
        self._lock = threading.Lock()
        self._closed = False

    def record(self, result: PushResult) -> None:
        if result.error is not None:
            level, code = ActivityLevel.WARNING, "checkpoint.push.failed"
            message = (
                f"the workspace checkpoints of {result.workspace} could not be pushed to the "
                f"checkpoint remote ({result.error}); they are kept here and pushed again by "
                "the next capture, recover or doctor"
            )
        else:
            level, code = ActivityLevel.INFO, "checkpoint.push.resumed"
            message = (
                f"the workspace checkpoints of {result.workspace} that could not be pushed "
                "before have been pushed to the checkpoint remote"
            )
        data: dict[str, object] = {"workspace": str(result.workspace), "error": result.error}
        with self._lock:
            if self._closed:  # a push that outlived the handle: its mark says it, not a row
                return
            if self._store is None:
                self._store = self.connect()
            for session in result.sessions:
                with contextlib.suppress(TurnbackError), self._store.atomic() as tx:
                    if tx.get_session(session) is not None:
                        tx.insert_activity(session, None, level, code, message, data, time.time())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._store is not None:
                self._store.close()
                self._store = None


#: Refs and objects that no row names are garbage once older than this: younger ones may belong
#: to a capture whose row another process has not committed yet.
REF_GRACE = 3600.0


#: The activity a deleted session leaves (outside any session): gc still visits its workspace.
DELETED = "session.deleted"


def collect_garbage(
    store: Store,
    checkpoints: WorkspaceCheckpoints,
    *,
    keep: int | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
) -> GcReport:
    """Release old turns' checkpoints (``keep``) and those of reverts that can no longer be
    undone, then prune what no row names; with ``dry_run``, count what that would release and
    remove and change nothing (the release is rolled back).

    Rows stop naming a checkpoint (one transaction) before its ref is deleted: the reverse of
    invariant 4's order, so no row ever names a pruned checkpoint. Each session whose turns'
    checkpoints go gets an activity that says so (what a missing diff's message points to)."""
    released: list[str] = []
    try:
        with store.atomic() as tx:
            sessions = tx.list_sessions()
            if keep is not None:
                now = time.time()
                for session in sessions:
                    turns = tx.session_turns(session.id)
                    kept = {t.token for t in conversation(turns)[-keep:]} if keep > 0 else set()
                    going = [
                        t
                        for t in turns
                        if t.token not in kept
                        and t.status is not TurnStatus.RUNNING
                        and (t.begin_checkpoint or t.end_checkpoint)
                    ]
                    released += [t.token for t in going]
                    if going:
                        tx.insert_activity(
                            session.id,
                            None,
                            ActivityLevel.INFO,
                            "checkpoint.gc",
                            f"gc released the workspace checkpoints of {_turns(going)} (it kept "
                            f"the last {keep}): their diffs, and reverts of the files to them, "
                            "are no longer available",
                            {"turns": [t.token for t in going], "keep": keep},
                            now,
                        )
                tx.release_checkpoints(released)
            spent = [r.id for s in sessions for r in _spent_reverts(tx, s.id)]
            tx.release_revert_checkpoints(spent)
            named = tx.checkpoint_commits()
            deleted = {
                str(a.data.get("workspace"))
                for a in tx.activities(None, limit=1_000_000)
                if a.code == DELETED and a.session_id is None
            }
            if dry_run:
                raise _Counted()
    except _Counted:
        pass  # the transaction rolled back: nothing was released
    deleted = {w for w in deleted if Path(w).is_dir()}  # nothing to prune where it is gone
    refs = freed = 0
    problems: list[str] = []
    workspaces = sorted({s.workspace for s in sessions} | deleted)
    for done, workspace in enumerate(workspaces, start=1):
        try:
            grace = REF_GRACE if older_than is None else older_than
            removed, bytes_freed = checkpoints.snapshots.gc(
                Path(workspace), keep=named, older_than=grace, object_grace=grace, dry_run=dry_run
            )
        except TurnbackError as error:
            problems.append(f"{workspace}: {error}")
            continue
        refs += removed
        freed += bytes_freed
        if checkpoints.progress is not None:
            checkpoints.progress("gc", done, len(workspaces))
    return GcReport(len(released) + len(spent), refs, freed, tuple(problems), dry_run)


class _Counted(Exception):
    """Ends a dry run's transaction, rolling back what it released."""


def _turns(turns: Sequence[Turn]) -> str:
    numbers = sorted(t.number for t in turns)
    if len(numbers) == 1:
        return f"turn {numbers[0]}"
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"turns {numbers[0]} to {numbers[-1]}"
    return f"turns {listed(numbers)}"


def _spent_reverts(tx: Tx, session_id: str) -> list[Revert]:
    """Reverts whose checkpoints nothing can use again: rolled back, undone, or committed with a
    turn made after them. ``undo_revert`` refuses to drop such a turn, and one that a later
    revert took out of the conversation comes back when that revert is undone, which must
    happen first. One in progress is kept: recovery finishes or rolls it back with them."""
    turns = [t for t in tx.session_turns(session_id) if t.status.ended]
    ended = (RevertState.COMMITTED, RevertState.ROLLED_BACK, RevertState.UNDONE)
    return [
        r
        for r in tx.reverts(session_id, ended)
        if (r.target or r.undo_checkpoint)
        and (
            r.state is not RevertState.COMMITTED or any(t.started_at > r.created_at for t in turns)
        )
    ]
