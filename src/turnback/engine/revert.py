"""Reverts and their undo (DESIGN.md invariant 9: reverts are undoable and ordered).

A revert's write order, each step a fault point of the crash suite:

1. Validate everything while nothing is written: the target turn is in the conversation, no turn
   runs in this session or in another session on the same workspace, the checkpoints the files
   need exist, and the agent's conversation can be rolled back (``rollback.check``).
2. Capture the workspace as it is now: the *undo checkpoint* (``revert.captured``). Its objects
   and ref are on disk before step 3 names it (invariant 4).
3. One transaction: a revert row in state ``started``, naming the undo checkpoint and its owner
   (``revert.started``).
4. Move the files: restore checkpoint N, or with ``keep_user_edits`` undo only the agent's changes
   (the ``restore.*`` points). Then the agent's own rollback, if there is one (``revert.files``).
5. One transaction: later turns marked reverted (kept as history), head moved back, the row
   ``committed`` (``revert.commit.inside``, ``revert.done``).

A crash after 3 and before 5 commits leaves a ``started`` revert whose owner is dead, and
``recover()`` rolls it back: it restores the undo checkpoint -- exactly the files as they were
before the revert -- and marks the row ``rolled_back``. Rolling back is always possible (it needs
no agent and no other checkpoint) and idempotent (restoring an exact checkpoint twice changes
nothing the second time). A revert that fails or conflicts rolls back the same way, at once.

``undo_revert`` runs the same order in reverse -- capture, row ``undoing``, restore the undo
checkpoint, then one transaction that puts the turns and head back and marks the row ``undone`` --
and recovery *finishes* an interrupted undo, since its files step is the same exact restore.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from turnback import faults
from turnback.engine.checkpoints import WorkspaceCheckpoints
from turnback.engine.owners import current_owner, is_alive, require_here
from turnback.errors import (
    RECOVER,
    CheckpointUnavailable,
    NothingToRevert,
    SessionNotFound,
    TurnbackError,
    TurnInProgress,
    TurnNotFound,
    WorkspaceError,
)
from turnback.model import ActivityLevel, Message, Revert, RevertState, Turn
from turnback.store import Store, Tx


class ConversationRollback(Protocol):
    """The agent's side of a conversation revert (the runtime provides it)."""

    def check(self, turns: int) -> None:
        """Raise a TurnbackError if the agent's context cannot be rolled back ``turns`` turns;
        called before any file moves."""

    def apply(self, turns: int, transcript: list[Message]) -> None:
        """Roll the agent's context back ``turns`` turns; ``transcript`` is the conversation
        that remains."""


_UNFINISHED = (RevertState.STARTED, RevertState.FILES_RESTORED, RevertState.UNDOING)


def _conversation(tx: Tx, session_id: str) -> list[Turn]:
    return sorted(
        (t for t in tx.session_turns(session_id) if t.in_conversation), key=lambda t: t.number
    )


def _require_quiet(tx: Tx, session_id: str, workspace: str) -> None:
    """No turn runs on the workspace, and no revert of this session is half done."""
    running = tx.running_turns_in_workspace(workspace)
    if running:
        turn = running[0]
        where = "this session" if turn.session_id == session_id else f"session {turn.session_id}"
        raise TurnInProgress(
            f"turn {turn.number} of {where} is running in {workspace}; revert once it has ended",
            turn.token,
            turn=turn.number,
        )
    unfinished = tx.reverts(session_id, _UNFINISHED)
    if unfinished:
        raise TurnInProgress(
            f"revert {unfinished[0].id} of this session is not finished; recovery finishes or "
            "rolls it back",
            "",
            state=unfinished[0].state.value,
            remedy=RECOVER,
        )


def revert(
    store: Store,
    checkpoints: WorkspaceCheckpoints | None,
    session_id: str,
    to_turn: int,
    *,
    files: bool = True,
    conversation: bool = True,
    keep_user_edits: bool = False,
    rollback: ConversationRollback | None = None,
) -> Revert:
    """Rewind the session to turn ``to_turn`` (0: before its first turn)."""
    if not files and not conversation:
        raise ValueError("a revert moves files, the conversation, or both")
    # 1. validate, writing nothing
    with store.read() as tx:
        session = tx.get_session(session_id)
        if session is None:
            raise SessionNotFound(f"no session {session_id}")
        _require_quiet(tx, session_id, session.workspace)
        chain = _conversation(tx, session_id)
        transcript = [m for m in tx.messages(session_id) if m.turn in {t.token for t in chain}]
    head = chain[-1].number if chain else 0
    if not 0 <= to_turn <= head:
        raise TurnNotFound(
            f"session {session_id[:12]} has turns 1 to {head}; revert to one of them, or to 0 "
            "for before the first"
        )
    later = [t for t in chain if t.number > to_turn]
    if not later:
        raise NothingToRevert(f"session {session_id[:12]} is already at turn {to_turn}")
    target_turn = chain[to_turn - 1] if to_turn else None
    target = target_turn.end_checkpoint if target_turn else later[0].begin_checkpoint
    workspace = session.workspace
    if files:
        require_here([*later, *([target_turn] if target_turn else [])], "a revert of its files")
        _require_checkpoints(checkpoints, workspace, to_turn, later, target, keep_user_edits)
    if conversation and rollback is not None:
        rollback.check(len(later))

    # 2. the undo checkpoint
    undo: str | None = None
    if files:
        assert checkpoints is not None
        captured, notes = checkpoints.capture(workspace, f"{session_id}/revert-{uuid.uuid4().hex}")
        if captured is None:
            reason = notes[-1].message if notes else "the capture failed"
            raise WorkspaceError(
                f"the workspace could not be captured, so the revert could not be undone; nothing "
                f"was changed ({reason})"
            )
        undo = captured.commit
    faults.point("revert.captured")

    # 3. the row
    owner = current_owner()
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
    with store.atomic() as tx:
        tx.lock_sessions([session_id])
        _require_quiet(tx, session_id, workspace)  # again, now that no begin can slip in
        tx.upsert_owner(owner)
        record = replace(record, id=tx.insert_revert(record))
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
        if conversation and rollback is not None:
            kept = [m for m in transcript if m.turn in {t.token for t in chain[:to_turn]}]
            rollback.apply(len(later), kept)
    except (TurnbackError, OSError) as error:
        _roll_back(store, checkpoints, record, workspace, f"the revert failed: {error}")
        raise

    # 5. the conversation, in one transaction, unless a turn began meanwhile (the check of
    # step 3 cannot stop a begin during step 4): then the revert is rolled back, as when a step
    # above fails
    with store.atomic() as tx:
        tx.lock_sessions([session_id])
        busy = tx.running_turn(session_id)
        now_head = (tx.get_session(session_id) or session).head
        if busy is None and now_head == record.from_head:
            now = time.time()
            if conversation:
                tx.mark_reverted([t.token for t in later], record.id)
                tx.set_head(session_id, record.to_turn, now)
            tx.set_revert_state(record.id, RevertState.COMMITTED, now)
            what = " and ".join(
                w for w, on in (("files", files), ("conversation", conversation)) if on
            )
            tx.insert_activity(
                session_id,
                None,
                ActivityLevel.INFO,
                "turn.reverted",
                f"reverted the {what} to turn {to_turn}, undoing {len(later)} turn(s)"
                + (" and keeping hand edits" if keep_user_edits else "")
                + "; `turnback revert --undo` puts them back",
                {"revert": record.id, "to": to_turn, "turns": [t.token for t in later]},
                now,
            )
            faults.point("revert.commit.inside")
        done = tx.get_revert(record.id)
    if done is None or done.state is not RevertState.COMMITTED:
        why = "a turn began while it ran" if busy else "the session moved on while it ran"
        _roll_back(store, checkpoints, record, workspace, f"the revert was refused: {why}")
        raise TurnInProgress(
            f"session {session_id[:12]} changed while the revert ran ({why}); nothing was "
            "reverted. Revert again once its turn has ended",
            busy.token if busy else "",
        )
    faults.point("revert.done")
    assert done is not None
    return done


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
                "missing (its capture failed, or gc pruned it; see `turnback activities`); "
                "nothing was changed. Revert the conversation only, or choose another turn"
            )


def _roll_back(
    store: Store,
    checkpoints: WorkspaceCheckpoints | None,
    record: Revert,
    workspace: str,
    why: str,
) -> None:
    """Put the files back as they were before ``record`` began, and mark it rolled back."""
    if record.files and record.undo_checkpoint and checkpoints is not None:
        snapshots, path = checkpoints.snapshots, Path(workspace)
        current, _notes = checkpoints.capture(
            workspace, f"{record.session_id}/rollback-{record.id}"
        )
        if current is None:
            raise WorkspaceError(
                f"revert {record.id} must be rolled back but the workspace cannot be captured; "
                "run `turnback recover` again once it can"
            )
        snapshots.restore(path, record.undo_checkpoint, current=current.commit)
    faults.point("revert.rollback.files")
    with store.atomic() as tx:
        tx.lock_sessions([record.session_id])
        now = time.time()
        tx.set_revert_state(record.id, RevertState.ROLLED_BACK, now, why)
        tx.insert_activity(
            record.session_id,
            None,
            ActivityLevel.ERROR,
            "checkpoint.revert.failed",
            f"revert {record.id} was rolled back, files and conversation are as before it: {why}",
            {"revert": record.id},
            now,
        )


def undo_revert(store: Store, checkpoints: WorkspaceCheckpoints | None, session_id: str) -> Revert:
    """Undo the session's last revert: files, turns and head as they were just before it."""
    with store.read() as tx:
        session = tx.get_session(session_id)
        if session is None:
            raise SessionNotFound(f"no session {session_id}")
        _require_quiet(tx, session_id, session.workspace)
        reverts = tx.reverts(session_id, (RevertState.COMMITTED,))
        record = reverts[-1] if reverts else None
        if record is None:
            raise NothingToRevert(f"session {session_id[:12]} has no revert to undo")
        newer = [
            t
            for t in tx.session_turns(session_id)
            if t.in_conversation and t.started_at > record.created_at
        ]
    if newer:
        raise NothingToRevert(
            f"turn {newer[0].number} was made after revert {record.id}; undoing it would drop "
            "that work. Revert to an earlier turn instead"
        )
    if record.files and checkpoints is None:
        raise CheckpointUnavailable(
            "workspace checkpoints are turned off; cannot undo a files revert"
        )
    owner = current_owner()
    with store.atomic() as tx:
        tx.lock_sessions([session_id])
        tx.upsert_owner(owner)
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
            f"undid revert {record.id}: {len(tokens)} turn(s) and their files are back",
            {"revert": record.id, "turns": tokens},
            now,
        )
        faults.point("undo.commit.inside")
        done = tx.get_revert(record.id)
    faults.point("undo.done")
    assert done is not None
    return done


def recover_reverts(
    store: Store, checkpoints: WorkspaceCheckpoints | None, session_id: str | None = None
) -> list[Revert]:
    """Settle reverts a dead process left half done: roll back a revert, finish an undo."""
    with store.read() as tx:
        unfinished = [
            (r, tx.get_owner(r.owner_id) if r.owner_id else None, tx.get_session(r.session_id))
            for r in tx.reverts(session_id, _UNFINISHED)
        ]
        now = tx.now()
    settled = []
    for record, owner, session in unfinished:
        if is_alive(owner, now) or session is None:
            continue
        if record.state is RevertState.UNDOING:
            settled.append(_finish_undo(store, checkpoints, record, session.workspace))
        else:
            _roll_back(
                store,
                checkpoints,
                record,
                session.workspace,
                "the process running it stopped before it finished",
            )
            with store.read() as tx:
                done = tx.get_revert(record.id)
            if done is not None:
                settled.append(done)
    return settled
