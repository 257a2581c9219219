"""Reverts and their undo (docs/design.md, invariant 9: reverts are undoable and ordered).

A revert's write order, each step a fault point of the crash suite:

1. Validate everything while nothing is written: the target turn is in the conversation, no turn
   runs in this session or in another session on the same workspace, the checkpoints the files
   need exist, and the agent's conversation can be rolled back (``rollback.check``).
2. Capture the workspace as it is now: the *undo checkpoint* (``revert.captured``). Its objects
   and ref are on disk before step 3 names it (invariant 4).
3. One transaction: again no turn runs on the workspace and the head has not moved (the capture
   may have taken long), then a revert row in state ``started``, naming the undo checkpoint and
   its owner, who claims (or renews) its lease as for a turn (``revert.started``). From this row
   until step 5 or a rollback, the revert *holds* its workspace: a turn's begin refuses while a
   revert row of the workspace is unfinished (``turns.require_no_revert``). The row is durable,
   so a killed revert holds until recovery settles it, and no turn can commit on a parent the
   revert is taking away.
4. Move the files: restore checkpoint N, or with ``keep_user_edits`` undo only the agent's changes
   (the ``restore.*`` points). Then the agent's own rollback, if there is one (``revert.files``).
5. One transaction: later turns marked reverted (kept as history), head moved back, the row
   ``committed`` (``revert.commit.inside``, ``revert.done``) -- if the row is still this
   process's and unfinished, else ``OwnershipLost`` and nothing is written (a revert's process
   judged dead may wake up to find its revert settled).

Who may settle a revert whose process stopped: a revert's owner holds a lease like a turn's
(:mod:`turnback.engine.owners`), renewed by the same heartbeat, so a revert is judged as a turn
is: by its pid on its own host, by its lease anywhere else. Recovery takes a dead owner's revert
over in one transaction that moves the row to itself, only if the row still names that owner
and the owner is still dead in the database's clock (``revert.takeover``); from then on the row
names the recoverer, and every write of a revert -- the commit of step 5, a rollback, the end of
an undo -- checks, under the session's lock, that the row is unfinished and names the process
writing (``_require_unfinished``): the row's owner is the revert's fencing token. A process that
was stopped past its lease and wakes up finds its revert taken over and writes nothing
(``OwnershipLost``). Another host settles only what needs no files of the dead one's: a
conversation-only revert (rolled back) or undo (finished). A files revert's workspace and
checkpoints are on its own host, so it is settled there, and holds its workspace until then.

The transactions of steps 3 and of an undo's row lock every session of the workspace (the
concurrency contract of :mod:`turnback.store.sql`), as a begin does, so on a store with
per-session locks a revert and a begin on two sessions of one workspace still serialise.

A crash after 3 and before 5 commits leaves a ``started`` revert whose owner is dead, and
``recover()`` rolls it back: it restores the undo checkpoint -- exactly the files as they were
before the revert -- and marks the row ``rolled_back``. Rolling back is always possible (it needs
no agent and no other checkpoint) and idempotent (restoring an exact checkpoint twice changes
nothing the second time). A revert that fails or conflicts rolls back the same way, at once; so
does one that could not write every file (a full disk: ``RestoreIncomplete`` names them). When
the rollback cannot write them either, the revert stays unfinished, holding its workspace, and
recovery finishes the rollback once it can.

``undo_revert`` runs the same order in reverse -- capture, row ``undoing``, restore the undo
checkpoint, then one transaction that puts the turns and head back and marks the row ``undone`` --
and recovery *finishes* an interrupted undo, since its files step is the same exact restore.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from turnback import faults
from turnback.engine.checkpoints import WorkspaceCheckpoints
from turnback.engine.owners import Lease, current_owner, host_identity, is_alive
from turnback.engine.turns import require_held_here, require_no_revert
from turnback.errors import (
    RECOVER,
    TURNS,
    CheckpointUnavailable,
    InvalidOption,
    NothingToRevert,
    OwnershipLost,
    RestoreIncomplete,
    RevertConflict,
    SessionNotFound,
    TurnbackError,
    TurnInProgress,
    TurnNotFound,
    WorkspaceError,
)
from turnback.model import (
    REFUSED,
    UNFINISHED_REVERTS,
    ActivityLevel,
    Message,
    Revert,
    RevertPlan,
    RevertRequest,
    RevertState,
    SessionRecord,
    Turn,
    conversation,
)
from turnback.records import record
from turnback.store import Store, Tx


class ConversationRollback(Protocol):
    """The agent's side of a conversation revert (the runtime provides it)."""

    def check(self, turns: int) -> None:
        """Raise a TurnbackError if the agent's context cannot be rolled back ``turns`` turns;
        called before any file moves."""

    def apply(self, turns: int, transcript: list[Message]) -> None:
        """Roll the agent's context back ``turns`` turns; ``transcript`` is the conversation
        that remains. Only :func:`revert` calls it, on its caller's thread, between the files and
        the commit; a caller on an event loop runs :func:`start_revert` and its steps instead."""


def _require_quiet(tx: Tx, session_id: str, workspace: str, then: str) -> None:
    """No turn runs on the workspace, and no revert of it is half done; ``then`` is what the
    caller does once they have ended (``"revert"``)."""
    running = tx.running_turns_in_workspace(workspace)
    if running:
        turn = running[0]
        where = "this session" if turn.session_id == session_id else f"session {turn.session_id}"
        raise TurnInProgress(
            f"turn {turn.number} of {where} is running in {workspace}; {then} once it has ended",
            turn.token,
            turn=turn.number,
        )
    require_no_revert(tx, workspace, then)


def revert(
    store: Store,
    checkpoints: WorkspaceCheckpoints | None,
    session_id: str,
    request: RevertRequest,
    rollback: ConversationRollback | None = None,
    *,
    lease: Lease,
) -> Revert:
    """Rewind the session as ``request`` says, the agent's rollback applied between the files
    and the commit; ``lease`` is this process's, which the revert's owner holds."""
    started = start_revert(store, checkpoints, session_id, request, rollback, lease=lease)
    if request.conversation and rollback is not None:
        try:
            rollback.apply(started.turns, started.transcript)
        except (TurnbackError, OSError) as error:
            started.abandon(f"the revert failed: {error}")
            raise
    return started.finish()


@record(frozen=False)
class StartedRevert:
    """A revert whose files have moved (steps 1 to 4), waiting for the agent's own rollback --
    which its caller does, on its own side -- and then :meth:`finish` (step 5), or
    :meth:`abandon` when that rollback failed (the files go back, as for any failed revert)."""

    store: Store
    checkpoints: WorkspaceCheckpoints | None
    record: Revert
    workspace: str
    later: list[Turn]
    to_turn: int
    #: the conversation that remains, for the agent
    transcript: list[Message]

    @property
    def turns(self) -> int:
        """How many turns the agent's conversation goes back."""
        return len(self.later)

    def abandon(self, why: str) -> None:
        _roll_back(self.store, self.checkpoints, self.record, self.workspace, why)

    def finish(self) -> Revert:
        """5. the conversation, in one transaction"""
        record, later, to_turn = self.record, self.later, self.to_turn
        files, conversation = record.files, record.conversation
        with self.store.atomic() as tx:
            tx.lock_sessions([record.session_id])
            _require_unfinished(tx, record)
            now = time.time()
            if conversation:
                tx.mark_reverted([t.token for t in later], record.id)
                tx.set_head(record.session_id, record.to_turn, now)
            tx.set_revert_state(record.id, RevertState.COMMITTED, now)
            what = " and ".join(
                w for w, on in (("files", files), ("conversation", conversation)) if on
            )
            tx.insert_activity(
                record.session_id,
                None,
                ActivityLevel.INFO,
                "turn.reverted",
                f"reverted the {what} to turn {to_turn}, undoing {len(later)} turn(s)"
                + (" and keeping hand edits" if record.keep_user_edits else "")
                + "; undoing the revert puts them back",
                {"revert": record.id, "to": to_turn, "turns": [t.token for t in later]},
                now,
            )
            faults.point("revert.commit.inside")
            done = tx.get_revert(record.id)
        faults.point("revert.done")
        assert done is not None
        return done


def _require_unfinished(tx: Tx, record: Revert) -> None:
    """Raise OwnershipLost unless the revert is still this process's and unfinished: a process
    judged dead while it moved the files may find its revert settled by recovery, and then
    writes nothing more."""
    current = tx.get_revert(record.id)
    if (
        current is None
        or current.state not in UNFINISHED_REVERTS
        or (current.owner_id != record.owner_id)
    ):
        state = current.state.value if current else "gone"
        raise OwnershipLost(
            f"revert {record.id} of session {record.session_id[:12]} was settled by another "
            f"process while this one ran it (it is {state}); nothing more was written",
            "",
        )


def start_revert(
    store: Store,
    checkpoints: WorkspaceCheckpoints | None,
    session_id: str,
    request: RevertRequest,
    rollback: ConversationRollback | None = None,
    *,
    lease: Lease,
) -> StartedRevert:
    """Steps 1 to 4 of the revert ``request`` asks for: validated (``rollback.check``
    included), captured, recorded and the files moved. The caller rolls the agent back, then
    finishes."""
    # 1. validate, writing nothing
    session, chain, later, target = _validate(store, checkpoints, session_id, request)
    to_turn, files, conversation = request.to_turn, request.files, request.conversation
    keep_user_edits = request.keep_user_edits
    with store.read() as tx:
        transcript = [m for m in tx.messages(session_id) if m.turn in {t.token for t in chain}]
    target_turn = chain[to_turn - 1] if to_turn else None
    workspace = session.workspace
    if conversation and rollback is not None:
        rollback.check(len(later))

    # 2. the undo checkpoint
    undo: str | None = None
    undo_ref = f"{session_id}/revert-{uuid.uuid4().hex}"
    if files:
        assert checkpoints is not None
        captured, notes = checkpoints.capture(workspace, undo_ref)
        if captured is None:
            reason = notes[-1].message if notes else "the capture failed"
            raise WorkspaceError(
                f"the workspace could not be captured, so the revert could not be undone; nothing "
                f"was changed ({reason})"
            )
        undo = captured.commit
    faults.point("revert.captured")

    # 3. the row
    owner = lease.owner()
    record = Revert(
        id=0,
        session_id=session_id,
        to_turn=target_turn.token if target_turn else None,
        from_head=later[-1].token,
        target=target if files else None,
        undo_checkpoint=undo,
        files=files,
        conversation=conversation,
        keep_user_edits=keep_user_edits,
        state=RevertState.STARTED,
        created_at=time.time(),
        owner_id=owner.id,
    )
    try:
        with store.atomic() as tx:
            tx.lock_workspace(session_id)
            # Validated before the capture, which may take long: check again where it counts.
            _require_quiet(tx, session_id, workspace, "revert")
            moved = tx.get_session(session_id)
            if moved is None or moved.head != session.head:
                raise TurnInProgress(
                    f"session {session_id[:12]} moved on while the revert was being prepared; "
                    "nothing was changed. Look at its turns and revert again",
                    "",
                )
            owner = lease.claim(tx)
            require_held_here(moved, owner.host, "revert it")
            record = replace(record, owner_id=owner.id)
            record = replace(record, id=tx.insert_revert(record))
    except TurnbackError:
        if undo is not None and checkpoints is not None:
            checkpoints.snapshots.delete_refs(Path(workspace), [undo_ref])
        raise
    faults.point("revert.started")

    # 4. files, then the agent's context
    try:
        if files:
            assert checkpoints is not None and target is not None and undo is not None
            snapshots, path = checkpoints.snapshots, Path(workspace)
            if keep_user_edits:
                pairs = [(t.begin_checkpoint or "", t.end_checkpoint or "") for t in later]
                snapshots.reverse_apply(path, turns=pairs, current=undo)
            else:
                snapshots.restore(path, target, current=undo, keep=later[0].begin_checkpoint)
        faults.point("revert.files")
    except RestoreIncomplete as error:
        # Files it could not write (a full disk): a revert is all or nothing, so roll it back
        # and name them. If the rollback cannot write either, _roll_back says so instead.
        _roll_back(
            store, checkpoints, record, workspace, f"the revert failed: {error}", error.paths
        )
        raise RestoreIncomplete(
            f"{error}; the revert was rolled back: files and conversation are as before it",
            error.paths,
        ) from error
    except RevertConflict as error:  # it wrote nothing: there is nothing to roll back
        with store.atomic() as tx:
            tx.lock_sessions([record.session_id])
            _require_unfinished(tx, record)
            now = time.time()
            tx.set_revert_state(record.id, RevertState.ROLLED_BACK, now, f"{REFUSED}{error}")
            tx.insert_activity(
                record.session_id,
                None,
                ActivityLevel.WARNING,
                "checkpoint.revert.refused",
                f"revert {record.id} was refused and changed nothing: {error}",
                {"revert": record.id, "paths": list(error.paths)},
                now,
            )
        raise
    except (TurnbackError, OSError) as error:
        _roll_back(store, checkpoints, record, workspace, f"the revert failed: {error}")
        raise
    kept = [m for m in transcript if m.turn in {t.token for t in chain[:to_turn]}]
    return StartedRevert(store, checkpoints, record, workspace, later, to_turn, kept)


def _validate(
    store: Store,
    checkpoints: WorkspaceCheckpoints | None,
    session_id: str,
    request: RevertRequest,
) -> tuple[SessionRecord, list[Turn], list[Turn], str | None]:
    """Everything a revert checks before it writes: the session, its conversation, the turns
    it would undo and the checkpoint the files go back to."""
    to_turn, files = request.to_turn, request.files
    if not files and not request.conversation:
        raise InvalidOption(
            "a revert moves the files, the conversation, or both; it was asked for neither "
            "(files and conversation both false)"
        )
    with store.read() as tx:
        session = tx.get_session(session_id)
        if session is None:
            raise SessionNotFound(f"no session {session_id}")
        _require_quiet(tx, session_id, session.workspace, "revert")
        chain = conversation(tx.session_turns(session_id))
    head = chain[-1].number if chain else 0
    if not 0 <= to_turn <= head:
        raise TurnNotFound(
            f"session {session_id[:12]} has turns 1 to {head}; revert to one of them, or to 0 "
            "for before the first"
        )
    later = [t for t in chain if t.number > to_turn]
    if not later:
        raise NothingToRevert(f"session {session_id[:12]} is already at turn {to_turn}")
    target = chain[to_turn - 1].end_checkpoint if to_turn else later[0].begin_checkpoint
    if files:
        target_turn = chain[to_turn - 1] if to_turn else None
        if checkpoints is not None:
            checkpoints.bring(
                session.workspace,
                [*later, *([target_turn] if target_turn else [])],
                "a revert of its files",
            )
        _require_checkpoints(
            checkpoints, session.workspace, to_turn, later, target, request.keep_user_edits
        )
    return session, chain, later, target


def plan(
    store: Store,
    checkpoints: WorkspaceCheckpoints | None,
    session_id: str,
    request: RevertRequest,
) -> RevertPlan:
    """What :func:`revert` of the same ``request`` would do to the files; writes nothing.

    It validates as the revert does (and raises what the revert would), then compares a capture
    of the workspace, named by no ref once this returns, with the target checkpoint."""
    session, _chain, later, target = _validate(store, checkpoints, session_id, request)
    if not request.files:
        return RevertPlan()
    assert checkpoints is not None and target is not None
    ref = f"{session_id}/plan-{uuid.uuid4().hex}"
    captured, notes = checkpoints.capture(session.workspace, ref, share=False)
    if captured is None:
        reason = notes[-1].message if notes else "the capture failed"
        raise WorkspaceError(f"the workspace could not be captured to plan the revert ({reason})")
    path = Path(session.workspace)
    try:
        return checkpoints.snapshots.revert_plan(
            path,
            target,
            current=captured.commit,
            keep=later[0].begin_checkpoint,
            turns=[(t.begin_checkpoint or "", t.end_checkpoint or "") for t in later],
            keep_user_edits=request.keep_user_edits,
        )
    finally:
        checkpoints.snapshots.delete_refs(path, [ref])


def _require_checkpoints(
    checkpoints: WorkspaceCheckpoints | None,
    workspace: str,
    to_turn: int,
    later: list[Turn],
    target: str | None,
    keep_user_edits: bool,
) -> None:
    if checkpoints is None:
        raise CheckpointUnavailable(
            "workspace checkpoints are turned off, so files cannot be reverted; revert the "
            "conversation only"
        )
    needed = [target] + (
        [c for t in later for c in (t.begin_checkpoint, t.end_checkpoint)]
        if keep_user_edits
        else []
    )
    path = Path(workspace)
    for commit in needed:
        if not commit or not checkpoints.snapshots.exists(path, commit):
            raise CheckpointUnavailable(
                f"the workspace checkpoint needed to revert the files to turn {to_turn} is "
                "missing (its capture failed, which the session's activities say, or gc pruned "
                "it); nothing was changed. Revert the conversation only, or choose another turn"
            )


def _roll_back(
    store: Store,
    checkpoints: WorkspaceCheckpoints | None,
    record: Revert,
    workspace: str,
    why: str,
    paths: tuple[str, ...] = (),
) -> None:
    """Put the files back as they were before ``record`` began, and mark it rolled back.

    When some files cannot be put back either, the revert stays unfinished -- holding its
    workspace, for recovery to finish once they can be written -- and an activity names them."""
    if record.files and record.undo_checkpoint and checkpoints is not None:
        snapshots, path = checkpoints.snapshots, Path(workspace)
        current, _notes = checkpoints.capture(
            workspace, f"{record.session_id}/rollback-{record.id}"
        )
        if current is None:
            raise WorkspaceError(
                f"revert {record.id} must be rolled back but the workspace cannot be captured; "
                "recovery rolls it back once it can",
                remedy=RECOVER,
            )
        try:
            snapshots.restore(path, record.undo_checkpoint, current=current.commit)
        except RestoreIncomplete as error:
            with store.atomic() as tx:
                tx.lock_sessions([record.session_id])
                _require_unfinished(tx, record)
                tx.insert_activity(
                    record.session_id,
                    None,
                    ActivityLevel.ERROR,
                    "checkpoint.revert.incomplete",
                    f"revert {record.id} failed and could not be rolled back yet: {error}. It "
                    "holds the workspace until recovery puts those files back",
                    {"revert": record.id, "paths": list(error.paths)},
                    time.time(),
                )
            raise RestoreIncomplete(
                f"{why}, and rolling it back failed too: {error}. Once they can be written "
                "(free space, say), recovery puts the files back",
                error.paths,
                remedy=RECOVER,
            ) from error
    faults.point("revert.rollback.files")
    with store.atomic() as tx:
        tx.lock_sessions([record.session_id])
        _require_unfinished(tx, record)
        now = time.time()
        tx.set_revert_state(record.id, RevertState.ROLLED_BACK, now, why)
        tx.insert_activity(
            record.session_id,
            None,
            ActivityLevel.ERROR,
            "checkpoint.revert.failed",
            f"revert {record.id} was rolled back, files and conversation are as before it: {why}",
            {"revert": record.id, **({"paths": list(paths)} if paths else {})},
            now,
        )


def undo_revert(
    store: Store, checkpoints: WorkspaceCheckpoints | None, session_id: str, *, lease: Lease
) -> Revert:
    """Undo the session's last revert: files, turns and head as they were just before it.

    It is checked and marked ``undoing`` in one transaction, so no turn can begin in between;
    its owner holds ``lease`` until it is done."""
    with store.atomic() as tx:
        tx.lock_workspace(session_id)
        session = tx.get_session(session_id)
        if session is None:
            raise SessionNotFound(f"no session {session_id}")
        _require_quiet(tx, session_id, session.workspace, "undo the revert")
        reverts = tx.reverts(session_id, (RevertState.COMMITTED,))
        record = reverts[-1] if reverts else None
        if record is None:
            raise NothingToRevert(f"session {session_id[:12]} has no revert to undo")
        newer = [
            t
            for t in conversation(tx.session_turns(session_id))
            if t.started_at > record.created_at
        ]
        if newer:
            first = newer[0]
            prompt = " ".join(first.prompt_text.split())
            prompt = prompt if len(prompt) <= 40 else prompt[:39] + "…"
            raise NothingToRevert(
                f"the last revert can no longer be undone: turn {first.number} ({prompt!r}) "
                "began after it, and undoing the revert would drop the work done since; to go "
                "further back, revert to an earlier turn"
            ).settled_by(TURNS, session=session_id, turn=first.number)
        if record.files and checkpoints is None:
            raise CheckpointUnavailable(
                "workspace checkpoints are turned off; cannot undo a files revert"
            )
        owner = lease.claim(tx)
        require_held_here(session, owner.host, "undo its revert")
        tx.set_revert_state(record.id, RevertState.UNDOING, time.time(), owner_id=owner.id)
    record = replace(record, state=RevertState.UNDOING, owner_id=owner.id)
    faults.point("undo.started")
    return _finish_undo(store, checkpoints, record, session.workspace)


def _finish_undo(
    store: Store, checkpoints: WorkspaceCheckpoints | None, record: Revert, workspace: str
) -> Revert:
    if record.files and record.undo_checkpoint and checkpoints is not None:
        current, notes = checkpoints.capture(workspace, f"{record.session_id}/undo-{record.id}")
        if current is None:
            reason = notes[-1].message if notes else "the capture failed"
            raise WorkspaceError(f"cannot undo revert {record.id} now: {reason}")
        checkpoints.snapshots.restore(
            Path(workspace), record.undo_checkpoint, current=current.commit
        )
    faults.point("undo.files")
    with store.atomic() as tx:
        tx.lock_sessions([record.session_id])
        _require_unfinished(tx, record)  # another process's recovery may have taken it over
        now = time.time()
        tokens = tx.unmark_reverted(record.id)
        if record.conversation:
            tx.set_head(record.session_id, record.from_head, now)
        tx.set_revert_state(record.id, RevertState.UNDONE, now)
        tx.insert_activity(
            record.session_id,
            None,
            ActivityLevel.INFO,
            "turn.revert.undone",
            f"undid revert {record.id}: "
            + (
                f"{len(tokens)} turn(s) and their files are back"
                if record.files and record.conversation
                else f"{len(tokens)} turn(s) are back in the conversation"
                if record.conversation
                else "the files are back"
            ),
            {"revert": record.id, "turns": tokens},
            now,
        )
        faults.point("undo.commit.inside")
        done = tx.get_revert(record.id)
    faults.point("undo.done")
    assert done is not None
    return done


def recover_reverts(
    store: Store,
    checkpoints: WorkspaceCheckpoints | None,
    session_id: str | None = None,
    *,
    lease: Lease,
) -> list[Revert]:
    """Settle reverts a dead process left half done: roll back a revert, finish an undo. Each
    is taken over first (its row moved to this process, which then holds ``lease``), so the
    process that left it, were it only stopped, can write nothing more of it."""
    here = host_identity()[0]
    with store.read() as tx:
        unfinished = [
            (r, tx.get_owner(r.owner_id) if r.owner_id else None, tx.get_session(r.session_id))
            for r in tx.reverts(session_id, UNFINISHED_REVERTS)
        ]
        # a revert whose owner is not known (its row swept before reverts held leases) ran
        # where its session's head turn ran
        heads = {
            r.id: tx.get_turn(r.from_head) if r.from_head else None
            for r, owner, _ in unfinished
            if owner is None and r.files
        }
        now = tx.now()
    settled = []
    for revert, owner, session in unfinished:
        if is_alive(owner, now) or session is None:
            continue
        head = heads.get(revert.id)
        host = owner.host if owner is not None else head.host if head is not None else None
        if revert.files and host is not None and host != here:
            continue  # its files and checkpoints are on that host: it is settled there
        taken = _take_over(store, revert, lease)
        if taken is None:
            continue  # settled, or taken over, by another process since it was read
        why = "the process running it stopped before it finished"
        try:
            settled.append(_settle(store, checkpoints, taken, session.workspace, why))
        except TurnbackError as error:  # restore incomplete, a capture or the store failing
            # still unfinished, holding the workspace: given back to the dead owner, so the next
            # recovery (here or on another machine) takes it over again, not skips it as this
            # live process's; the turns' recovery goes on
            _give_back(store, taken, revert.owner_id, error)
    return settled


def _give_back(store: Store, taken: Revert, owner_id: str | None, error: TurnbackError) -> None:
    """Hand the revert ``taken`` (whose settling failed with ``error``) back to the dead owner
    it was taken from, saying why it is still unfinished (a restore left incomplete says so
    itself). A store that fails again leaves it with this process, from which recovery takes
    it over once this process has exited."""
    with contextlib.suppress(TurnbackError), store.atomic() as tx:
        tx.lock_sessions([taken.session_id])
        if tx.take_revert(taken.id, taken.owner_id, owner_id or "") and not isinstance(
            error, RestoreIncomplete
        ):
            tx.insert_activity(
                taken.session_id,
                None,
                ActivityLevel.ERROR,
                "checkpoint.revert.unsettled",
                f"revert {taken.id}, left unfinished by a process that stopped, could not be "
                f"settled yet ({error}); the next recovery tries again",
                {"revert": taken.id},
                time.time(),
            )


def _take_over(store: Store, record: Revert, lease: Lease) -> Revert | None:
    """Move a dead owner's unfinished revert to this process, in one transaction: only while
    its row still names that owner and the owner is still dead in the database's clock. The
    revert as now owned, or None when another process settled or took it first."""
    with store.atomic() as tx:
        tx.lock_sessions([record.session_id])
        current = tx.get_revert(record.id)
        if (
            current is None
            or current.state not in UNFINISHED_REVERTS
            or current.owner_id != record.owner_id
        ):
            return None
        if current.owner_id and is_alive(tx.get_owner(current.owner_id), tx.now()):
            return None
        owner = lease.claim(tx)
        if not tx.take_revert(record.id, record.owner_id, owner.id):
            return None
    faults.point("revert.takeover")
    return replace(current, owner_id=owner.id)


def settle_interrupted(
    store: Store, checkpoints: WorkspaceCheckpoints | None, session_id: str
) -> Revert | None:
    """Settle the revert or undo of the session that this process left unfinished when it was
    interrupted (KeyboardInterrupt), as recovery settles one whose process died: a revert is
    rolled back, an undo finished. Returns it settled; None if this process left none.

    Interrupting this too is safe: the revert stays unfinished, holding its workspace, and
    recovery settles it once this process has exited."""
    owner = current_owner()
    with store.read() as tx:
        session = tx.get_session(session_id)
        mine = [r for r in tx.reverts(session_id, UNFINISHED_REVERTS) if r.owner_id == owner.id]
    if session is None or not mine:
        return None
    return _settle(store, checkpoints, mine[-1], session.workspace, "it was interrupted")


def _settle(
    store: Store, checkpoints: WorkspaceCheckpoints | None, record: Revert, workspace: str, why: str
) -> Revert:
    if record.state is RevertState.UNDOING:
        return _finish_undo(store, checkpoints, record, workspace)
    _roll_back(store, checkpoints, record, workspace, why)
    with store.read() as tx:
        done = tx.get_revert(record.id)
    assert done is not None
    return done
