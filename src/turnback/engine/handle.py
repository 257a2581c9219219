"""The handles the public API returns: :class:`Turnback` (one home) and :class:`Session`."""

from __future__ import annotations

import atexit
import dataclasses
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from turnback.engine import owners, recovery, revert
from turnback.engine.checkpoints import DELETED, WorkspaceCheckpoints, collect_garbage
from turnback.engine.journal import Journal
from turnback.engine.owners import Lease, host_identity, is_alive, require_here
from turnback.engine.revert import ConversationRollback, StartedRevert
from turnback.engine.turns import (
    UNFINISHED_REVERTS,
    RunningTurn,
    begin,
    encode,
    journal_messages,
    reopen,
    require_idle,
    stranded,
    validate_prompt,
)
from turnback.errors import (
    ACTIVITIES,
    DECIDE,
    SESSIONS,
    TURNS,
    AmbiguousId,
    CheckpointUnavailable,
    InvalidId,
    InvalidOption,
    RevertInProgress,
    SessionNotFound,
    StoreCorrupt,
    TurnbackError,
    TurnInProgress,
    TurnNotFound,
)
from turnback.model import (
    Activity,
    ActivityLevel,
    Durability,
    FileChange,
    GcReport,
    HealthCheck,
    Message,
    RangeDiff,
    RecoveryReport,
    Revert,
    RevertPlan,
    RevertRequest,
    RunEvent,
    SessionRecord,
    StepCheckpoint,
    SweepReport,
    Turn,
    TurnDiff,
    TurnStatus,
    UnrecoveredTurn,
)
from turnback.store import DEFAULT_DATABASE, Store, Tx, open_store, sqlite_url
from turnback.workspace.snapshots import holds_checkpoints

_HEX = re.compile(r"[0-9a-f]+")


def default_home() -> Path:
    """``$TURNBACK_HOME``, else the platform's per-user data directory."""
    configured = os.environ.get("TURNBACK_HOME")
    if configured:
        return Path(configured).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("turnback", appauthor=False))


def normalise_id(text: str, what: str) -> str:
    value = text.strip().lower()
    if not value or not _HEX.fullmatch(value):
        raise InvalidId(
            f"{text!r} is not a {what} id: ids are hexadecimal (a unique prefix is enough)"
        )
    return value


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
    if emptied and holds_checkpoints(home):
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
    ) -> None:
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
        )
        #: workspace checkpoints of turns; None when turned off (``checkpoints=False``)
        self.checkpoints = (
            WorkspaceCheckpoints(self.home, progress=progress) if checkpoints else None
        )
        self._closed = False
        atexit.register(self.close)

    # sessions

    def create_session(
        self,
        workspace: str | os.PathLike[str] = ".",
        title: str | None = None,
        agent: str | None = None,
    ) -> Session:
        now = time.time()
        record = SessionRecord(
            id=uuid.uuid4().hex,
            workspace=str(Path(workspace).expanduser().resolve()),
            title=title,
            agent=agent,
            head=None,
            status="open",
            pending_requests=(),
            created_at=now,
            updated_at=now,
        )
        with self.store.atomic() as tx:
            tx.insert_session(record)
        return Session(self, record.id)

    def session(self, ref: str) -> Session:
        """The session whose id is ``ref`` or starts with it."""
        prefix = normalise_id(ref, "session")
        with self.store.read() as tx:
            exact = tx.get_session(prefix)
            matches = [exact] if exact else tx.find_sessions(prefix, limit=6)
        if not matches:
            raise SessionNotFound(f"no session matches {ref!r} in {self.home}").settled_by(SESSIONS)
        if len(matches) > 1:
            names = ", ".join(m.id[:12] for m in matches[:5])
            raise AmbiguousId(
                f"{ref!r} matches {len(matches)}{'+' if len(matches) > 5 else ''} sessions "
                f"({names}); give more characters"
            )
        return Session(self, matches[0].id)

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
        reverts = revert.recover_reverts(self.store, self.checkpoints)
        report = recovery.recover(self.store, checkpoints=self.checkpoints)
        return dataclasses.replace(report, reverts=tuple(reverts))

    def unrecovered(self) -> list[UnrecoveredTurn]:
        return recovery.unrecovered(self.store)

    def sweep(self) -> SweepReport:
        self.journal.flush()
        return recovery.sweep(self.store)

    def activities(self, limit: int = 1000) -> list[Activity]:
        with self.store.read() as tx:
            return tx.activities(None, limit)

    def gc(self, keep: int | None = None, older_than: float | None = None) -> GcReport:
        """Prune workspace checkpoints: refs no row names (older than ``older_than`` seconds,
        default an hour), and with ``keep`` the checkpoints of all but each session's last
        ``keep`` turns, and give back the space the database no longer needs. Reports the bytes
        freed in the home."""
        report = (
            GcReport()
            if self.checkpoints is None
            else collect_garbage(self.store, self.checkpoints, keep=keep, older_than=older_than)
        )
        self.journal.flush()
        freed = self.store.compact()  # the database's log, left at full size by a killed process
        return dataclasses.replace(report, bytes_freed=report.bytes_freed + freed)

    def doctor(self) -> list[HealthCheck]:
        """Check git, the home, the database, recovery and every shadow repository."""
        from turnback.engine.doctor import doctor

        return doctor(self)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        try:
            self.lease.close()
            self.journal.close()
        finally:
            self.store.close()

    def __enter__(self) -> Turnback:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ambiguous(ref: int | str, found: list[Turn], remedy: str) -> AmbiguousId:
    names = ", ".join(f"{t.token[:12]} (turn {t.number}, {t.status})" for t in found[:5])
    return AmbiguousId(
        f"{ref!r} matches {len(found)} turns: {names}{' …' if len(found) > 5 else ''}; {remedy}"
    )


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
        """A new session whose conversation is a copy of this one's, in one transaction.

        Each turn of the conversation is copied (new tokens, the same numbers, statuses and
        timeline; reverted and set-aside turns are not), with its file changes and step
        checkpoints, so an interrupted head can be continued in the fork too. In the same
        workspace the copies name the same workspace checkpoints; in another they have none."""
        now = time.time()
        with self._tb.store.atomic() as tx:
            source = tx.get_session(self.id)
            if source is None:
                raise SessionNotFound(f"session {self.id} no longer exists")
            place = str(Path(workspace).expanduser().resolve()) if workspace else source.workspace
            same = place == source.workspace
            fork = SessionRecord(
                id=uuid.uuid4().hex,
                workspace=place,
                title=title or f"fork of {source.title or source.id[:12]}",
                agent=agent if agent is not None else source.agent,
                head=None,
                status="open",
                pending_requests=(),
                created_at=now,
                updated_at=now,
            )
            tx.insert_session(fork)
            parent: str | None = None
            turns = sorted(
                (t for t in tx.session_turns(self.id) if t.in_conversation), key=lambda t: t.number
            )
            for turn in turns:
                token = uuid.uuid4().hex
                tx.insert_turn(
                    dataclasses.replace(
                        turn,
                        token=token,
                        session_id=fork.id,
                        parent=parent,
                        owner_id=None,
                        begin_checkpoint=turn.begin_checkpoint if same else None,
                        end_checkpoint=turn.end_checkpoint if same else None,
                    )
                )
                tx.insert_messages(
                    [
                        dataclasses.replace(m, session_id=fork.id, turn=token)
                        for m in tx.turn_messages(turn.token)
                    ]
                )
                tx.insert_run_events(
                    [
                        dataclasses.replace(e, session_id=fork.id, turn=token)
                        for e in tx.run_events(turn.token)
                    ]
                )
                for scope in ("before", "turn"):
                    tx.insert_file_changes(token, scope, tx.file_changes(turn.token, scope))
                for step in tx.step_checkpoints(turn.token):  # an interrupted turn's
                    tx.insert_step_checkpoint(dataclasses.replace(step, turn=token))
                parent = token
            tx.set_head(fork.id, parent, now)
            tx.insert_activity(
                fork.id,
                None,
                ActivityLevel.INFO,
                "session.forked",
                f"forked from session {self.id[:12]} with {len(turns)} turn(s)",
                {"source": self.id, "turns": len(turns)},
                now,
            )
        return Session(self._tb, fork.id)

    def delete(self) -> None:
        """Remove this session from the store: its turns, conversation, timeline, activities
        and reverts. Its workspace checkpoints are named by nothing any more, so ``gc``
        releases them. Refused while a turn runs (TurnInProgress) and while a turn is set
        aside (invariant 7: only apply or discard removes one)."""
        with self._tb.store.atomic() as tx:
            if tx.get_session(self.id) is None:
                raise SessionNotFound(f"session {self.id} no longer exists")
            require_idle(tx, self.id, "deleting the session")
            aside = [t for t in tx.session_turns(self.id) if t.status is TurnStatus.SET_ASIDE]
            if aside:
                raise TurnInProgress(
                    f"session {self.id[:12]} has {len(aside)} set-aside turn(s) (turn "
                    f"{aside[0].number} first), kept until each is applied or discarded, so it "
                    "cannot be deleted yet",
                    aside[0].token,
                    turn=aside[0].number,
                    state=TurnStatus.SET_ASIDE.value,
                    remedy=DECIDE,
                )
            record = tx.get_session(self.id)
            assert record is not None
            tx.delete_session(self.id)
            # Kept outside the session (which is gone): says what went, and tells gc which
            # workspace's shadow repository holds the checkpoints nothing names any more.
            tx.insert_activity(
                None,
                None,
                ActivityLevel.INFO,
                DELETED,
                f"session {self.id[:12]} in {record.workspace} was deleted",
                {"session": self.id, "workspace": record.workspace},
                time.time(),
            )

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
        ended first, as it was to end.
        So is a revert of the workspace a dead process left half done (rolled back, or its undo
        finished); a live one raises RevertInProgress."""
        store = self._tb.store
        try:
            turn = self._begin(prompt)
        except RevertInProgress as held:
            with store.read() as tx:
                owner = tx.get_owner(held.owner_id) if held.owner_id else None
                now = tx.now()
            if is_alive(owner, now):
                raise
            revert.recover_reverts(store, self._tb.checkpoints)
            turn = self._begin(prompt)
        except TurnInProgress as busy:
            left = stranded(busy.running_token)
            if left is not None:  # this process could not write its end: end it now
                left.end_stranded()
                turn = self._begin(prompt)
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
            store,
            self._tb.journal,
            turn,
            workspace=self.record.workspace,
            checkpoints=self._tb.checkpoints,
        )

    def reopen(self, ref: int | str) -> RunningTurn:
        """Continue the interrupted turn ``ref`` (the session's head) from its last step
        checkpoint: it is running again, under this process, and ends like any other turn. What
        it recorded after that checkpoint leaves the conversation (see ``turns.reopen``)."""
        turn, next_seq = reopen(self._tb.store, self.get_turn(ref).token, lease=self._tb.lease)
        return RunningTurn(
            self._tb.store,
            self._tb.journal,
            turn,
            workspace=self.record.workspace,
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
        turns = self.turns()
        if isinstance(ref, int) or (isinstance(ref, str) and ref.strip().isdigit()):
            number = int(ref)
            numbered = [t for t in turns if t.number == number]
            found = (
                [t for t in numbered if t.in_conversation]
                or [t for t in numbered if t.status is TurnStatus.RUNNING]
                or [t for t in numbered if t.status is TurnStatus.SET_ASIDE]
            )
            if len(found) > 1 and found[0].status is TurnStatus.SET_ASIDE:
                raise _ambiguous(ref, found, "give a token prefix")
            if found:
                return found[-1]
            if isinstance(ref, str) and len(ref.strip()) >= 4:  # 4+ digits: a token prefix too
                by_token = [t for t in turns if t.token.startswith(ref.strip())]
                if len(by_token) == 1:
                    return by_token[0]
            reached = {t.number for t in turns if t.in_conversation or not t.status.ended}
            raise TurnNotFound(
                f"session {self.id[:12]} has no turn {number} (it has {len(reached)})"
            ).settled_by(TURNS, session=self.id)
        prefix = normalise_id(str(ref), "turn")
        found = [t for t in turns if t.token.startswith(prefix)]
        if len(found) > 1:
            raise _ambiguous(ref, found, "give more characters")
        if not found:
            raise TurnNotFound(f"session {self.id[:12]} has no turn matching {ref!r}")
        return found[0]

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
        with self._tb.store.read() as tx:
            files = tx.file_changes(turn.token, "turn")
            outside = tx.file_changes(turn.token, "before")
        if turn.status is TurnStatus.RUNNING and turn.begin_checkpoint and self._tb.checkpoints:
            return self._running_diff(turn, tuple(outside), patch)
        available = bool(turn.begin_checkpoint and turn.end_checkpoint)
        text = None
        if patch:
            require_here([turn], "its patch")
            if not available or self._tb.checkpoints is None:
                moment = "begin" if not turn.begin_checkpoint else "end"
                raise CheckpointUnavailable(
                    f"turn {turn.number} has no workspace checkpoint at its {moment} (the capture "
                    "failed, was skipped or pruned, or the turn is still running), so its diff "
                    "is unavailable"
                ).settled_by(ACTIVITIES, session=self.id)
            assert turn.begin_checkpoint and turn.end_checkpoint
            text = self._tb.checkpoints.snapshots.patch(
                Path(self.record.workspace), turn.begin_checkpoint, turn.end_checkpoint, paths
            )
        return TurnDiff(turn, tuple(files), tuple(outside), available, text)

    def range_diff(self, from_turn: int, to_turn: int, *, patch: bool = False) -> RangeDiff:
        """What the workspace changed from the end of turn ``from_turn`` (0: before the first
        turn) to the end of turn ``to_turn``, both in the conversation: the agent's changes and
        the edits made by hand in between alike."""
        if not 0 <= from_turn <= to_turn:
            raise TurnNotFound(
                f"a range goes from an earlier turn to a later one, not {from_turn} to {to_turn}"
            )
        old = self._checkpoint_after(from_turn)
        new = self._checkpoint_after(to_turn)
        assert self._tb.checkpoints is not None
        snapshots, workspace = self._tb.checkpoints.snapshots, Path(self.record.workspace)
        files = snapshots.changes(workspace, old, new)
        text = snapshots.patch(workspace, old, new) if patch else None
        return RangeDiff(from_turn, to_turn, tuple(files), text)

    def _checkpoint_after(self, number: int) -> str:
        """The workspace checkpoint at the end of turn ``number`` (0: the first turn's begin)."""
        turn = self.get_turn(max(number, 1))
        commit = turn.begin_checkpoint if number == 0 else turn.end_checkpoint
        if commit is None or self._tb.checkpoints is None:
            moment = "beginning" if number == 0 else "end"
            raise CheckpointUnavailable(
                f"turn {turn.number} has no workspace checkpoint at its {moment} (the capture "
                "failed, was skipped or pruned, or checkpoints are off), so no range can start "
                "or end there"
            )
        require_here([turn], "a diff from or to it")
        return commit

    def changes_since_head(self) -> list[FileChange] | None:
        """What changed in the workspace since the head turn ended (by hand, or a ``git pull``):
        the head's end checkpoint against the workspace now, captured under a ref that is gone
        once this returns. ``None`` when that cannot be known (checkpoints off, no head, or no
        capture possible, as on a read-only home)."""
        checkpoints = self._tb.checkpoints
        record = self.record
        with self._tb.store.read() as tx:
            head = tx.get_turn(record.head) if record.head else None
        if checkpoints is None or head is None or not head.end_checkpoint:
            return None
        if head.host and head.host != host_identity()[0]:
            return None  # its checkpoint is on that host, and so is the workspace it saw
        ref = f"{self.id}/now-{uuid.uuid4().hex}"
        captured, _notes = checkpoints.capture(record.workspace, ref)
        if captured is None:
            return None
        snapshots, path = checkpoints.snapshots, Path(record.workspace)
        try:
            return snapshots.changes(path, head.end_checkpoint, captured.commit)
        except TurnbackError:
            return None
        finally:
            snapshots.delete_refs(path, [ref])

    def _running_diff(self, turn: Turn, outside: tuple[FileChange, ...], patch: bool) -> TurnDiff:
        """A running turn's diff so far: its begin checkpoint against the workspace now,
        captured under a ref that is gone once this returns."""
        checkpoints = self._tb.checkpoints
        assert checkpoints is not None and turn.begin_checkpoint
        require_here([turn], "its diff while it runs")
        workspace = self.record.workspace
        ref = f"{self.id}/now-{uuid.uuid4().hex}"
        captured, notes = checkpoints.capture(workspace, ref)
        if captured is None:
            if patch:
                reason = notes[-1].message if notes else "the capture failed"
                raise CheckpointUnavailable(
                    f"turn {turn.number} is running and the workspace cannot be captured now "
                    f"({reason}), so its diff so far is unavailable"
                )
            return TurnDiff(turn, (), outside, False)
        snapshots, path = checkpoints.snapshots, Path(workspace)
        try:
            files = snapshots.changes(path, turn.begin_checkpoint, captured.commit)
            text = snapshots.patch(path, turn.begin_checkpoint, captured.commit) if patch else None
        finally:
            snapshots.delete_refs(path, [ref])
        return TurnDiff(turn, tuple(files), outside, True, text)

    def revert(
        self,
        to_turn: int,
        *,
        files: bool = True,
        conversation: bool = True,
        keep_user_edits: bool = False,
        rollback: revert.ConversationRollback | None = None,
    ) -> Revert:
        """Rewind to turn ``to_turn`` (0: before the first): files, conversation or both.

        Validates everything first, captures the workspace so the revert can be undone, moves
        the files, then rolls the conversation back in one transaction; later turns are kept as
        reverted history. ``keep_user_edits`` undoes only the agent's own changes (RevertConflict,
        with nothing written, where they clash with hand edits)."""
        request = RevertRequest(to_turn, files, conversation, keep_user_edits)
        return revert.revert(*self._reverting(), request, rollback)

    def start_revert(
        self,
        to_turn: int,
        *,
        files: bool = True,
        conversation: bool = True,
        keep_user_edits: bool = False,
        rollback: ConversationRollback | None = None,
    ) -> StartedRevert:
        """:meth:`revert` up to the agent's side: validated (``rollback.check`` included),
        captured, the files moved. Roll the agent back on your side, then call ``finish()`` on
        the result (or ``abandon(why)``, which puts the files back)."""
        request = RevertRequest(to_turn, files, conversation, keep_user_edits)
        return revert.start_revert(*self._reverting(), request, rollback)

    def revert_plan(
        self,
        to_turn: int,
        *,
        files: bool = True,
        conversation: bool = True,
        keep_user_edits: bool = False,
    ) -> RevertPlan:
        """What ``revert`` with the same arguments would do to the files, writing nothing: the
        files restored and deleted (with +/-), the files kept (ignored, not captured, existing
        before the turns, or hand edits under ``keep_user_edits``) and the hand edits in the way
        (``conflicts``). Raises what the revert would raise before it writes."""
        request = RevertRequest(to_turn, files, conversation, keep_user_edits)
        return revert.plan(*self._reverting(), request)

    def _reverting(self) -> tuple[Store, WorkspaceCheckpoints | None, str]:
        """What the engine's revert, its first steps and its plan take before their own
        arguments -- once the journal is on disk, since they read the turns."""
        self._tb.journal.flush()
        return self._tb.store, self._tb.checkpoints, self.id

    def undo_revert(self) -> Revert:
        """Undo the last revert: files, turns and head as they were just before it."""
        return revert.undo_revert(self._tb.store, self._tb.checkpoints, self.id)

    def settle_interrupted_revert(self) -> Revert | None:
        """Settle the revert or undo of this session that this process left unfinished when it
        was interrupted (KeyboardInterrupt), as recovery would once the process is gone: a
        revert is rolled back, an undo finished. Returns it settled; None if there is none."""
        return revert.settle_interrupted(self._tb.store, self._tb.checkpoints, self.id)

    def reverts(self) -> list[Revert]:
        with self._tb.store.read() as tx:
            return tx.reverts(self.id)

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
