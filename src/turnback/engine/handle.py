"""The handles the public API returns: :class:`Turnback` (one home) and :class:`Session`."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Unpack

from turnback.engine import diffs, handoff, owners, recovery, rescue, revert, sessions
from turnback.engine.checkpoints import PushReports, WorkspaceCheckpoints, collect_garbage
from turnback.engine.journal import Journal
from turnback.engine.owners import Lease, is_alive
from turnback.engine.sessions import normalise_id
from turnback.engine.turns import (
    RunningTurn,
    begin,
    encode,
    end_unconfirmed,
    journal_messages,
    reopen,
    stranded,
    validate_prompt,
)
from turnback.errors import (
    AmbiguousId,
    CheckpointUnavailable,
    InvalidOption,
    RevertInProgress,
    SessionNotFound,
    StoreCorrupt,
    TurnbackError,
    TurnInProgress,
    TurnNotFound,
)
from turnback.home import home_of
from turnback.model import (
    UNFINISHED_REVERTS,
    Activity,
    ActivityLevel,
    Durability,
    FileChange,
    GcReport,
    Handoff,
    HealthCheck,
    Message,
    RangeDiff,
    RecoveryReport,
    Rescue,
    Revert,
    RevertOptions,
    RevertPlan,
    RevertRequest,
    RunEvent,
    SessionRecord,
    StepCheckpoint,
    SweepReport,
    ToolCheckpoint,
    Turn,
    TurnDiff,
    TurnStatus,
    UnrecoveredTurn,
    conversation,
)
from turnback.store import DEFAULT_DATABASE, Store, Tx, open_store, sqlite_url


def default_home() -> Path:
    """``$TURNBACK_HOME``, else the platform's per-user data directory."""
    return Path(home_of(None))


def _refuse_an_emptied_database(home: Path) -> None:
    """A 0-byte database is what a process killed during a home's very first open leaves, and
    the store makes it a new one: there is nothing in it to lose. Not so when the home already
    holds workspace checkpoints: then the file held sessions and was emptied (a full disk, a
    bad copy), and a new database beside those checkpoints would hide the loss and let gc prune
    them. That is refused, with nothing written."""
    database = home / DEFAULT_DATABASE
    log = database.with_name(DEFAULT_DATABASE + "-wal")
    try:
        emptied = database.stat().st_size == 0 and not (log.exists() and log.stat().st_size)
    except OSError:
        return  # no file (a new home), or one the store reports on itself
    if not emptied:
        return
    from turnback.workspace.snapshots import holds_checkpoints

    if holds_checkpoints(home):
        raise StoreCorrupt(
            f"the database {database} is empty (0 bytes), yet {home} holds the workspace "
            "checkpoints of earlier sessions: it was emptied (a full disk or a bad copy, say) and "
            "was left as it is. Put it back from a backup, or move it away to start afresh "
            "(the checkpoints stay until gc removes them)"
        )


class Turnback:
    """turnback on one home: sessions, turns, recovery and sweep. Close it when done."""

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        durability: Durability | str = Durability.BATCHED,
        database_url: str | None = None,
        busy_timeout: float = 5.0,
        batch_window: float = 0.01,
        create: bool = True,
        checkpoints: bool = True,
        progress: Callable[[str, int, int], None] | None = None,
        lease_seconds: float | None = None,
        owner_pid: int | None = None,
        checkpoint_remote: str | None = None,
    ) -> None:
        """``owner_pid``: the process of this host that owns the turns this handle begins, when
        not this one -- an agent whose hooks, each a short-lived process, write its turns.
        ``checkpoint_remote`` (else ``TURNBACK_CHECKPOINT_REMOTE``): a git remote that a fleet's
        machines share their workspace checkpoints through (see ``turnback.workspace.remote``)."""
        try:
            mode = Durability(durability)
        except ValueError:
            choices = ", ".join(m.value for m in Durability)
            raise InvalidOption(
                f"durability must be one of {choices}, not {durability!r}"
            ) from None
        lease = owners.lease_seconds(lease_seconds)  # checked before anything is opened
        self.home = (Path(home).expanduser() if home is not None else default_home()).absolute()
        url = database_url or os.environ.get("TURNBACK_DATABASE_URL") or sqlite_url(self.home)
        if url == sqlite_url(self.home):
            _refuse_an_emptied_database(self.home)
        self.store: Store = open_store(url, busy_timeout=busy_timeout, create=create)
        self.durability = mode
        self.journal = Journal(self.store, mode, window=batch_window)
        #: this process's lease on the turns it runs; losing it stops them (OwnershipLost)
        self.lease = Lease(
            lambda: open_store(url, busy_timeout=busy_timeout),
            lease,
            on_lost=self.journal.lose_all,
            process=owner_pid,
        )
        remote = checkpoint_remote or os.environ.get("TURNBACK_CHECKPOINT_REMOTE") or None
        if remote:  # the workspace is loaded on first use (see holds_checkpoints's import)
            from turnback.workspace.remote import check_url

            remote = check_url(remote)
        #: what records the background pushes' failures (its own connection, as the lease's)
        self.pushes = PushReports(lambda: open_store(url, busy_timeout=busy_timeout))
        #: workspace checkpoints of turns; None when turned off (``checkpoints=False``)
        self.checkpoints = (
            WorkspaceCheckpoints(
                self.home,
                progress=progress,
                remote=remote,
                on_push=self.pushes.record,
            )
            if checkpoints
            else None
        )
        #: how long ``close`` lets the checkpoint pushes asked for run; one that has not run
        #: by then is pushed by the next capture, recover or doctor (nothing is lost)
        self.push_wait = 10.0
        self._closed = False
        self._closing: list[Callable[[], None]] = []
        atexit.register(self._close_at_exit)

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` first when this handle closes (what works on the handle stops
        before its store does)."""
        self._closing.append(callback)

    # sessions

    def create_session(
        self,
        workspace: str | os.PathLike[str] = ".",
        title: str | None = None,
        agent: str | None = None,
        *,
        session_id: str | None = None,
        existing: bool = False,
    ) -> Session:
        """A new session; ``session_id`` (32 hexadecimal digits) names it, when a front-end
        derives it from the agent's own session id (``existing``: the session already stored
        under it, if there is one)."""
        return Session(
            self, sessions.create(self.store, workspace, title, agent, session_id, existing)
        )

    def session(self, ref: str) -> Session:
        """The session whose id is ``ref`` or starts with it."""
        return Session(self, sessions.find(self.store, ref, self.home))

    def sessions(self) -> list[SessionRecord]:
        with self.store.read() as tx:
            return tx.list_sessions()

    def conversations(self) -> dict[str, tuple[int, Any]]:
        """Per session id: how many turns its conversation holds, and its first prompt (one
        query for every session; a session with no turn is absent)."""
        with self.store.read() as tx:
            return tx.conversation_overview()

    # recovery

    def recover(self) -> RecoveryReport:
        """Settle every turn whose owner died (apply it as interrupted, or set it aside), and
        every revert a dead process left half done (roll it back, or finish its undo)."""
        reverts = revert.recover_reverts(self.store, self.checkpoints, lease=self.lease)
        report = recovery.recover(self.store, checkpoints=self.checkpoints)
        if self.checkpoints is not None and self.checkpoints.remote is not None:
            # checkpoints a failed push, or a process that died first, left unpushed: pushed
            # from the background (a remote that is down must not hold up a recovery)
            self.checkpoints.push_later([(s.id, s.workspace) for s in self.sessions()])
        return dataclasses.replace(report, reverts=tuple(reverts))

    def unrecovered(self) -> list[UnrecoveredTurn]:
        return recovery.unrecovered(self.store)

    def sweep(self) -> SweepReport:
        self.journal.flush()
        return recovery.sweep(self.store)

    def activities(self, limit: int = 1000) -> list[Activity]:
        with self.store.read() as tx:
            return tx.activities(None, limit)

    def gc(
        self, keep: int | None = None, older_than: float | None = None, *, dry_run: bool = False
    ) -> GcReport:
        """Prune workspace checkpoints: refs no row names (older than ``older_than`` seconds,
        default an hour), and with ``keep`` the checkpoints of all but each session's last
        ``keep`` turns, and give back the space the database no longer needs. Reports the bytes
        freed in the home. ``dry_run`` counts what it would release and remove, and changes
        nothing."""
        report = (
            GcReport(dry_run=dry_run)
            if self.checkpoints is None
            else collect_garbage(
                self.store, self.checkpoints, keep=keep, older_than=older_than, dry_run=dry_run
            )
        )
        if dry_run:
            return report
        self.journal.flush()
        freed = self.store.compact()  # the database's log, left at full size by a killed process
        return dataclasses.replace(report, bytes_freed=report.bytes_freed + freed)

    def doctor(self) -> list[HealthCheck]:
        """Check git, the home, the database, recovery and every shadow repository."""
        from turnback.engine.doctor import doctor

        return doctor(self)

    def close(self) -> None:
        """Write what the journal still holds and let go of the store; raises the store's error
        when that cannot be written (everything is let go all the same)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._close_at_exit)
        with contextlib.ExitStack() as closing:  # each runs, last first, whatever one raises
            closing.callback(self.store.close)
            closing.callback(self.journal.close)
            closing.callback(self.pushes.close)
            if self.checkpoints is not None:
                closing.callback(self.checkpoints.close, self.push_wait)
            closing.callback(self.lease.close)
            for callback in self._closing:
                closing.callback(callback)

    def _close_at_exit(self) -> None:
        """:meth:`close` for a process that exits without closing: nobody is left to catch
        its error, so it is said in one line instead of a traceback."""
        try:
            self.close()
        except TurnbackError as error:
            print(
                f"turnback: at exit, the events still waiting were not written: {error}. "
                "Every event acknowledged as durable is kept, and a turn left running is "
                "recovered the next time this home is opened",
                file=sys.stderr,
            )

    def __enter__(self) -> Turnback:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _live_counts(tx: Tx, turns: list[Turn]) -> list[Turn]:
    """``turns`` with a running turn's event count read from its journal."""
    return [
        dataclasses.replace(t, event_count=tx.journal_size(t.token)[0])
        if t.status is TurnStatus.RUNNING
        else t
        for t in turns
    ]


class Session:
    """One conversation with one agent in one workspace."""

    def __init__(self, tb: Turnback, session_id: str) -> None:
        self._tb = tb
        self.id = session_id

    def __repr__(self) -> str:
        return f"<Session {self.id[:12]}>"

    @property
    def record(self) -> SessionRecord:
        with self._tb.store.read() as tx:
            record = tx.get_session(self.id)
        if record is None:
            raise SessionNotFound(f"session {self.id} no longer exists")
        return record

    @property
    def workspace(self) -> Path:
        return Path(self.record.workspace)

    def fork(
        self,
        workspace: str | os.PathLike[str] | None = None,
        title: str | None = None,
        agent: str | None = None,
    ) -> Session:
        """A new session whose conversation is a copy of this one's, in one transaction
        (``turnback.engine.sessions.fork`` says what is copied)."""
        return Session(self._tb, sessions.fork(self._tb.store, self.id, workspace, title, agent))

    def delete(self) -> None:
        """Remove this session from the store: its turns, conversation, timeline, activities
        and reverts; ``gc`` then releases its workspace checkpoints. Refused while a turn runs
        (TurnInProgress) and while a turn is set aside (invariant 7)."""
        sessions.delete(self._tb.store, self.id)

    def set_agent_state(self, state: dict[str, object]) -> None:
        """Remember what the runtime needs of the agent behind this session (its own session
        id, say): kept on the session record, read back as ``record.agent_state``."""
        encode(state, "the agent state")
        with self._tb.store.atomic() as tx:
            tx.set_agent_state(self.id, state, time.time())

    def turn(self, prompt: Any) -> RunningTurn:
        """Begin a turn: its row and prompt are durable when this returns.

        A running turn whose owner died is recovered first; a live one raises TurnInProgress,
        unless it is this process's own that the store could not end (a full disk): that one is
        ended first, as it was to end, and so is one whose begin this process could not confirm
        (the store's reply was lost): failed, since its caller was told the begin had failed.
        So is a revert of the workspace a dead process left half done (rolled back, or its undo
        finished); a live one raises RevertInProgress."""
        store = self._tb.store
        workspace = self.record.workspace  # read first: after the begin, nothing may fail
        try:
            turn = self._begin(prompt)
        except RevertInProgress as held:
            with store.read() as tx:
                owner = tx.get_owner(held.owner_id) if held.owner_id else None
                now = tx.now()
            if is_alive(owner, now):
                raise
            revert.recover_reverts(store, self._tb.checkpoints, lease=self._tb.lease)
            turn = self._begin(prompt)
        except TurnInProgress as busy:
            left = stranded(busy.running_token)
            if left is not None:  # this process could not write its end: end it now
                left.end_stranded()
                turn = self._begin(prompt)
            elif end_unconfirmed(store, self._tb.journal, busy.running_token):
                turn = self._begin(prompt)  # nor confirm its begin: its caller never ran it
            else:
                with store.read() as tx:
                    running = tx.get_turn(busy.running_token)
                    owner = tx.get_owner(running.owner_id) if running and running.owner_id else None
                    now = tx.now()
                if running is None or is_alive(owner, now):
                    raise
                recovery.recover_turn(store, running, self._tb.checkpoints)
                turn = self._begin(prompt)
        return RunningTurn(
            store, self._tb.journal, turn, workspace=workspace, checkpoints=self._tb.checkpoints
        )

    def continue_turn(self) -> RunningTurn | None:
        """The session's running turn, to record in and end from this process, if this handle's
        owner runs it (a hook process continuing its agent's turn); None when no turn runs or
        another owner runs it. It records under the turn's own fencing token."""
        workspace = self.record.workspace
        with self._tb.store.read() as tx:
            turn = tx.running_turn(self.id)
            if turn is None or turn.owner_id != self._tb.lease.owner().id:
                return None
            _, last = tx.journal_size(turn.token)
        return self._running(turn, workspace, last + 1)

    def reopen(self, ref: int | str) -> RunningTurn:
        """Continue the interrupted turn ``ref`` (the session's head) from its last step
        checkpoint: it is running again, under this process, and ends like any other turn. What
        it recorded after that checkpoint leaves the conversation (see ``turns.reopen``)."""
        workspace = self.record.workspace  # read first: after the reopen, nothing may fail
        turn, next_seq = reopen(self._tb.store, self.get_turn(ref).token, lease=self._tb.lease)
        return self._running(turn, workspace, next_seq)

    def _running(self, turn: Turn, workspace: str, next_seq: int) -> RunningTurn:
        """``turn`` to go on recording in from ``next_seq``, under this handle."""
        return RunningTurn(
            self._tb.store,
            self._tb.journal,
            turn,
            workspace=workspace,
            checkpoints=self._tb.checkpoints,
            next_seq=next_seq,
        )

    def _begin(self, prompt: Any) -> Turn:
        """Begin with a baseline: the workspace is captured first, then the turn's row, prompt
        and checkpoint commit together (invariants 1 and 4)."""
        validate_prompt(prompt)
        checkpoints = self._tb.checkpoints
        if checkpoints is None:
            return begin(self._tb.store, self.id, prompt, lease=self._tb.lease)
        with self._tb.store.read() as tx:
            record = tx.get_session(self.id)
            head = tx.get_turn(record.head) if record and record.head else None
        if record is None:
            raise SessionNotFound(f"session {self.id} no longer exists")
        token = uuid.uuid4().hex
        since = head.end_checkpoint if head else None
        checkpoints.begins(record.workspace)
        capture = checkpoints.for_turn(record.workspace, self.id, token, "begin", since)

        def prepare(tx: Tx, turn: Turn) -> None:
            if turn.parent != (head.token if head else None):
                capture.changes = []  # the head moved meanwhile: the comparison is stale
            capture.write(tx, self.id, turn.token)

        return begin(
            self._tb.store, self.id, prompt, lease=self._tb.lease, token=token, prepare=prepare
        )

    def turns(self) -> list[Turn]:
        """Every turn of the session, oldest first; a running turn counts its events so far."""
        with self._tb.store.read() as tx:
            return _live_counts(tx, tx.session_turns(self.id))

    def timeline(self) -> list[TurnDiff]:
        """Every turn with the files it changed and those changed before it outside any turn,
        oldest first, from a fixed number of queries whatever the session's length."""
        with self._tb.store.read() as tx:
            turns = _live_counts(tx, tx.session_turns(self.id))
            changes = tx.session_file_changes(self.id)
        return [
            TurnDiff(
                t,
                tuple(changes.get((t.token, "turn"), ())),
                tuple(changes.get((t.token, "before"), ())),
                bool(t.begin_checkpoint and t.end_checkpoint),
            )
            for t in turns
        ]

    def is_live(self, item: Turn | Revert) -> bool:
        """Whether a turn is running, or a revert or undo moving files, under a live process (one
        that died leaves it so until recovery settles it)."""
        if isinstance(item, Turn):
            unfinished = item.status is TurnStatus.RUNNING
        else:
            unfinished = item.state in UNFINISHED_REVERTS
        if not unfinished:
            return False
        with self._tb.store.read() as tx:
            return is_alive(tx.get_owner(item.owner_id) if item.owner_id else None, tx.now())

    def get_turn(self, ref: int | str) -> Turn:
        """A turn by number or by token prefix. A number is a turn's position in the
        conversation; a running or set-aside turn keeps the number it was begun with, and is
        reached by it unless a turn of the conversation has that number too."""
        return sessions.find_turn(self.turns(), ref, self.id)

    def conversation(self) -> list[Turn]:
        """The turns of the session's current conversation, in order: how every front-end
        counts and numbers them."""
        return conversation(self.turns())

    def running(self) -> Turn | None:
        with self._tb.store.read() as tx:
            return tx.running_turn(self.id)

    def messages(self) -> list[Message]:
        with self._tb.store.read() as tx:
            return tx.messages(self.id)

    def turn_messages(self, ref: int | str) -> list[Message]:
        """A turn's messages; a running turn's are folded from its journal so far, and a
        set-aside turn's from its journal as recovery left it."""
        turn = self.get_turn(ref)
        with self._tb.store.read() as tx:
            if turn.status in (TurnStatus.RUNNING, TurnStatus.SET_ASIDE):
                return journal_messages(tx, turn)
            return tx.turn_messages(turn.token)

    def run_events(self, ref: int | str) -> list[RunEvent]:
        """A turn's raw events, in order; a running turn's those durable so far, and a
        set-aside turn's its journal as recovery left it."""
        token = self.get_turn(ref).token
        with self._tb.store.read() as tx:
            return tx.run_events(token)

    def diff(
        self, ref: int | str, *, patch: bool = False, paths: Sequence[str] | None = None
    ) -> TurnDiff:
        """What a turn changed in the workspace (from its stored file changes; no git call
        unless ``patch`` asks for the unified patch too, of every file or only of ``paths``:
        a rename needs its old path too)."""
        turn = self.get_turn(ref)
        workspace = self.record.workspace
        return diffs.turn_diff(
            self._tb.store, self._tb.checkpoints, workspace, turn, patch=patch, paths=paths
        )

    def range_diff(self, from_turn: int, to_turn: int, *, patch: bool = False) -> RangeDiff:
        """What the workspace changed from the end of turn ``from_turn`` (0: before the first
        turn) to the end of turn ``to_turn``, both in the conversation: the agent's changes and
        the edits made by hand in between alike."""
        if not 0 <= from_turn <= to_turn:
            raise TurnNotFound(
                f"a range goes from an earlier turn to a later one, not {from_turn} to {to_turn}"
            )
        checkpoints = self._tb.checkpoints
        old, new = (
            diffs.checkpoint_after(checkpoints, self.record.workspace, self.get_turn(max(n, 1)), n)
            for n in (from_turn, to_turn)
        )
        assert checkpoints is not None
        return diffs.range_diff(
            checkpoints, self.record.workspace, (from_turn, to_turn), (old, new), patch=patch
        )

    def changes_since_head(self) -> list[FileChange] | None:
        """What changed in the workspace since the head turn ended (by hand, or a ``git pull``),
        or ``None`` when that cannot be known (see ``turnback.engine.diffs.since_head``)."""
        record = self.record
        with self._tb.store.read() as tx:
            head = tx.get_turn(record.head) if record.head else None
        return diffs.since_head(self._tb.checkpoints, record.workspace, head)

    def revert(
        self,
        target: int | RevertRequest,
        /,
        *,
        rollback: revert.ConversationRollback | None = None,
        **options: Unpack[RevertOptions],
    ) -> Revert:
        """Rewind to turn ``target`` (0: before the first): files, conversation or both.

        Validates everything first, captures the workspace so the revert can be undone, moves
        the files, then rolls the conversation back in one transaction; later turns are kept as
        reverted history. ``keep_user_edits`` undoes only the agent's own changes (RevertConflict,
        with nothing written, where they clash with hand edits). ``target`` may be a whole
        :class:`RevertRequest` instead of a number and options."""
        return revert.revert(
            *self._reverting(),
            RevertRequest.of(target, **options),
            rollback,
            lease=self._tb.lease,
        )

    def revert_plan(
        self, target: int | RevertRequest, /, **options: Unpack[RevertOptions]
    ) -> RevertPlan:
        """What ``revert`` with the same arguments would do to the files, writing nothing: the
        files restored and deleted (with +/-), the files kept (ignored, not captured, existing
        before the turns, or hand edits under ``keep_user_edits``) and the hand edits in the way
        (``conflicts``). Raises what the revert would raise before it writes."""
        return revert.plan(*self._reverting(), RevertRequest.of(target, **options))

    def _reverting(self) -> tuple[Store, WorkspaceCheckpoints | None, str]:
        """What the engine's revert, its first steps and its plan take before their own
        arguments -- once the journal is on disk, since they read the turns."""
        self._tb.journal.flush()
        return self._tb.store, self._tb.checkpoints, self.id

    def undo_revert(self) -> Revert:
        """Undo the last revert: files, turns and head as they were just before it."""
        return revert.undo_revert(
            self._tb.store, self._tb.checkpoints, self.id, lease=self._tb.lease
        )

    def settle_interrupted_revert(self) -> Revert | None:
        """Settle the revert or undo of this session that this process left unfinished when it
        was interrupted (KeyboardInterrupt), as recovery would once the process is gone: a
        revert is rolled back, an undo finished. Returns it settled; None if there is none."""
        return revert.settle_interrupted(self._tb.store, self._tb.checkpoints, self.id)

    def reverts(self) -> list[Revert]:
        with self._tb.store.read() as tx:
            return tx.reverts(self.id)

    def tool_checkpoints(self, ref: int | str) -> list[ToolCheckpoint]:
        """The workspace checkpoints taken before the turn's tools, in order."""
        token = self.get_turn(ref).token
        with self._tb.store.read() as tx:
            return tx.tool_checkpoints(token)

    def rescue(
        self,
        paths: Sequence[str],
        ref: int | str | None = None,
        *,
        before_tool: int = 0,
        force: bool = False,
    ) -> Rescue:
        """Bring ``paths`` back as they were before tool ``before_tool`` of turn ``ref`` (0: at
        its begin; no turn: the running or last turn), keeping hand edits made since the turn
        ended unless ``force`` (see ``turnback.engine.rescue``); undone by :meth:`undo_rescue`."""
        checkpoints = self._tb.checkpoints
        if checkpoints is None:
            raise CheckpointUnavailable("workspace checkpoints are turned off for this handle")
        self._tb.journal.flush()
        turn = self.rescue_turn(ref)
        checkpoints.bring(self.record.workspace, [turn], "a rescue")
        relative = rescue.relative_paths(self.record.workspace, paths)
        return rescue.rescue(
            self._tb.store, checkpoints, self.id, turn, before_tool, relative, force=force
        )

    def handoff(self, to_host: str) -> Handoff:
        """Give this session to this machine (``to_host`` must name it): the workspace here is
        brought to the session's head -- from the checkpoint remote when another machine took
        its checkpoints -- and the session moves here under a new fencing token, after which
        its turns begin only here. Refused while a turn runs (TurnInProgress) and when the
        workspace here holds changes that are not the session's (WorkspaceDiverged, naming
        them, nothing written). See ``turnback.engine.handoff``."""
        self._tb.journal.flush()
        return handoff.handoff(self._tb.store, self._tb.checkpoints, self.id, to_host)

    def rescue_turn(self, ref: int | str | None = None) -> Turn:
        """The turn ``ref``, else the one a rescue is about when none is named: the running
        turn, else the last one."""
        return rescue.running_or_head(self.turns()) if ref is None else self.get_turn(ref)

    def undo_rescue(self, *, force: bool = False) -> Rescue:
        """Put the paths of the last rescue back as they were just before it; a path changed
        since the rescue is a conflict (RevertConflict) unless ``force``."""
        checkpoints = self._tb.checkpoints
        if checkpoints is None:
            raise CheckpointUnavailable("workspace checkpoints are turned off for this handle")
        return rescue.undo(self._tb.store, checkpoints, self.id, force=force)

    def rescues(self) -> list[Rescue]:
        with self._tb.store.read() as tx:
            return tx.rescues(self.id)

    def step_checkpoints(self, ref: int | str) -> list[StepCheckpoint]:
        """The step checkpoints a running or interrupted turn can resume from, oldest first."""
        token = self.get_turn(ref).token
        with self._tb.store.read() as tx:
            return tx.step_checkpoints(token)

    def activities(self, limit: int = 1000) -> list[Activity]:
        with self._tb.store.read() as tx:
            return tx.activities(self.id, limit)

    def add_activity(
        self,
        level: ActivityLevel | str,
        code: str,
        message: str,
        data: dict[str, object] | None = None,
        turn: str | None = None,
    ) -> Activity:
        """Record a user-visible line on the session, such as ``checkpoint.capture.failed``."""
        now = time.time()
        with self._tb.store.atomic() as tx:
            activity_id = tx.insert_activity(
                self.id, turn, ActivityLevel(level), code, message, data or {}, now
            )
        return Activity(
            activity_id, self.id, turn, ActivityLevel(level), code, message, data or {}, now
        )

    def unrecovered(self) -> list[UnrecoveredTurn]:
        return recovery.unrecovered(self._tb.store, self.id)

    def apply(self, ref: str) -> Turn:
        """Apply a set-aside turn on top of the current head."""
        return recovery.apply(self._tb.store, self._set_aside(ref))

    def discard(self, ref: str) -> int:
        """Delete a set-aside turn; returns how many events it held."""
        turn = self._set_aside(ref)
        self._tb.journal.discard(turn.token)
        return recovery.discard(self._tb.store, turn)

    def _set_aside(self, ref: str) -> Turn:
        prefix = normalise_id(ref, "turn")
        found = [u.turn for u in self.unrecovered() if u.turn.token.startswith(prefix)]
        if len(found) == 1:
            return found[0]
        if found:
            raise AmbiguousId(f"{ref!r} matches {len(found)} set-aside turns; give more characters")
        return self.get_turn(ref)  # exists but is not set aside: apply/discard say so

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Session) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)
