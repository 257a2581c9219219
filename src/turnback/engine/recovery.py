"""Recovery of turns whose owner died, set-aside, and the sweep.

Why recovery is exactly-once and idempotent: each interrupted turn is settled by one transaction
that first re-reads the turn and acts only if it is still ``running`` (``commit_turn``'s
``expected`` status). Inside it the turn is either applied -- journal folded into the session
(its rows then being the turn's run timeline), head moved, status ``interrupted`` -- or set
aside -- status ``set_aside``, journal kept. Killing recovery anywhere leaves each turn either
settled or untouched; running it again finds settled turns no longer ``running`` and leaves them
be. Two recoverers serialise on the write lock and the second finds nothing to do.

Invariant 5: a turn whose owner is alive is only read. Invariant 6: a turn is applied only if the
session's head is still its parent (fast-forward); anything else, including a journal that cannot
be read, sets it aside. Invariant 7: a set-aside turn is never deleted or overwritten except by an
explicit :func:`apply` or :func:`discard`, and every recovery reports all of them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from turnback import faults
from turnback.engine.fold import UnreadableEntry, notice
from turnback.engine.owners import current_owner, host_identity, is_alive
from turnback.engine.turns import (
    Ending,
    clear_requests,
    commit_turn,
    fold_ending,
    require_idle,
    write_endings,
)
from turnback.errors import DECIDE, NotSetAside
from turnback.model import (
    ActivityLevel,
    Owner,
    RecoveryReport,
    SweepReport,
    Turn,
    TurnStatus,
    UnrecoveredTurn,
    WorkspaceCheckpoint,
)
from turnback.store import Store, Tx
from turnback.store.tx import NewActivity

if TYPE_CHECKING:
    from turnback.engine.checkpoints import WorkspaceCheckpoints


def _interrupted_notice(count: int) -> str:
    return (
        f"This turn was interrupted: the process running it stopped. "
        f"{count} event{'s' if count != 1 else ''} recorded before that "
        f"{'were' if count != 1 else 'was'} recovered."
    )


#: How many turns one transaction of recovery settles at most: it holds their sessions' locks,
#: and their journals in memory, until it commits.
BATCH = 250

#: Why a turn is set aside when the session's head is no longer its parent.
_MOVED_ON = "the session moved on while it ran (its head is no longer the turn's parent)"


def recover(
    store: Store,
    session_id: str | None = None,
    checkpoints: WorkspaceCheckpoints | None = None,
) -> RecoveryReport:
    """Settle every running turn whose owner is dead (of one session, or all)."""
    with store.read() as tx:
        running = [
            turn
            for turn in tx.turns_with_status(TurnStatus.RUNNING)
            if session_id is None or turn.session_id == session_id
        ]
        owners = tx.get_owners({t.owner_id for t in running if t.owner_id})
        now = tx.now()
        workspaces = (
            {s.id: s.workspace for s in tx.list_sessions()} if checkpoints and running else {}
        )
    live: list[Turn] = []
    dead: list[Turn] = []
    for turn in running:
        (live if is_alive(owners.get(turn.owner_id or ""), now) else dead).append(turn)
    recovered: list[Turn] = []
    shared: dict[str, WorkspaceCheckpoint | None] = {}
    for first in range(0, len(dead), BATCH):
        batch = dead[first : first + BATCH]
        settled = _settle(store, batch, checkpoints, workspaces, shared)
        recovered += [t for t in settled if t.status is TurnStatus.INTERRUPTED]
    return RecoveryReport(
        recovered=tuple(recovered),
        set_aside=tuple(unrecovered(store, session_id)),
        live=tuple(live),
    )


def recover_turn(
    store: Store,
    turn: Turn,
    checkpoints: WorkspaceCheckpoints | None = None,
) -> Turn | None:
    """Apply one dead owner's turn fast-forward, or set it aside. None if it had already gone."""
    with store.read() as tx:
        session = tx.get_session(turn.session_id)
    workspaces = {session.id: session.workspace} if session else {}
    settled = _settle(store, [turn], checkpoints, workspaces, {})
    return settled[0] if settled else None


def _settle(
    store: Store,
    turns: list[Turn],
    checkpoints: WorkspaceCheckpoints | None,
    workspaces: dict[str, str],
    shared: dict[str, WorkspaceCheckpoint | None],
) -> list[Turn]:
    """Settle these turns of dead owners (one per session at most: invariant 8) in one
    transaction; returns those it settled, as they now are.

    The workspace as recovery finds it is captured first, as each turn's end checkpoint: it is
    the closest picture there is of what the turn left behind (one capture per workspace serves
    all the turns a recovery settles there, through ``shared``). Not for a turn another host
    ran: its workspace is on that machine, and this one's would give it a wrong end.

    Then, in the transaction, under the sessions' locks: each turn is read again, and settled
    only if it still runs and its owner is still dead in the database's clock (an owner whose
    heartbeat renewed its lease since the caller looked keeps its turn). The journals are read
    in one query, folded here, and every write sent at once: on PostgreSQL the transaction
    costs the same few round trips whatever the number of turns (eight)."""
    here = host_identity()[0]
    captures = {
        turn.token: checkpoints.for_turn(
            workspaces[turn.session_id],
            turn.session_id,
            turn.token,
            "end",
            turn.begin_checkpoint,
            shared=shared,
        )
        for turn in turns
        if checkpoints is not None and turn.session_id in workspaces and turn.host in (None, here)
    }
    faults.point("recover.turn.before")
    with store.atomic() as tx:
        tx.lock_sessions([turn.session_id for turn in turns])
        current = [
            t for t in tx.turns([turn.token for turn in turns]) if t.status is TurnStatus.RUNNING
        ]
        owners = tx.get_owners({t.owner_id for t in current if t.owner_id})
        heads = tx.session_heads({t.session_id for t in current})
        now = tx.now()
        dead = [t for t in current if not (t.owner_id and is_alive(owners.get(t.owner_id), now))]
        journals = tx.journals([t.token for t in dead])
        endings: list[Ending] = []
        activities: list[NewActivity] = []
        aside: list[tuple[Turn, str, int]] = []
        ended = time.time()
        for turn in dead:
            entries = journals[turn.token]
            count = len(entries)
            if turn.session_id not in heads or heads[turn.session_id] != turn.parent:
                aside.append((turn, _MOVED_ON, count))
                continue
            try:
                endings.append(
                    fold_ending(
                        turn,
                        entries,
                        TurnStatus.INTERRUPTED,
                        detail="interrupted: its process stopped",
                        extra=[notice(_interrupted_notice(count), recoveredEvents=count)],
                        now=ended,
                    )
                )
            except UnreadableEntry as error:
                aside.append((turn, str(error), count))
                continue
            faults.point("recover.apply.inside")
            activities.append(
                (
                    turn.session_id,
                    turn.token,
                    ActivityLevel.INFO,
                    "turn.recovered",
                    f"turn {turn.number} was interrupted and recovered with {count} "
                    f"event{'s' if count != 1 else ''}",
                    {"events": count, "number": turn.number},
                    ended,
                )
            )
        write_endings(tx, endings, expected=TurnStatus.RUNNING)
        _set_aside(tx, aside, ended)
        tx.insert_activities(activities)
        for turn in dead:
            if turn.token in captures:
                captures[turn.token].write(tx, turn.session_id, turn.token)
        settled = tx.turns([turn.token for turn in dead])
    faults.point("recover.turn.after")
    return settled


def _set_aside(tx: Tx, turns: list[tuple[Turn, str, int]], now: float) -> None:
    """Set these turns aside: each (turn, why, events in its journal)."""
    if not turns:
        return
    faults.point("recover.set_aside.inside")
    tx.end_turns(
        [(turn.token, TurnStatus.SET_ASIDE, now, reason, count) for turn, reason, count in turns],
        expected=TurnStatus.RUNNING,
    )
    tx.clear_pending_requests([turn.token for turn, _, _ in turns])
    tx.insert_activities(
        [
            (
                turn.session_id,
                turn.token,
                ActivityLevel.WARNING,
                "turn.set_aside",
                f"turn {turn.number} could not be recovered and was set aside: {reason}; it is "
                "kept until it is applied or discarded",
                {"events": count, "number": turn.number, "reason": reason, "remedy": DECIDE},
                now,
            )
            for turn, reason, count in turns
        ]
    )


def unrecovered(store: Store, session_id: str | None = None) -> list[UnrecoveredTurn]:
    with store.read() as tx:
        return [
            UnrecoveredTurn(turn, turn.detail or "set aside")
            for turn in tx.turns_with_status(TurnStatus.SET_ASIDE)
            if session_id is None or turn.session_id == session_id
        ]


def apply(store: Store, turn: Turn) -> Turn:
    """Apply a set-aside turn on top of the session's current head, as interrupted.

    Unreadable journal entries are kept in the run timeline as ``_turnback/unreadable``."""
    faults.point("apply.before")
    with store.atomic() as tx:
        tx.lock_sessions([turn.session_id])
        current = _require_set_aside(tx, turn)
        require_idle(tx, turn.session_id, "applying a set-aside turn")
        session = tx.get_session(turn.session_id)
        head = tx.get_turn(session.head) if session and session.head else None
        tx.reposition_turn(turn.token, head.number + 1 if head else 1, head.token if head else None)
        count, _ = tx.journal_size(turn.token)
        commit_turn(
            tx,
            current,
            TurnStatus.INTERRUPTED,
            detail=f"applied after being set aside: {current.detail}",
            extra=[
                notice(
                    f"This turn was set aside ({current.detail}) and applied by hand with "
                    f"{count} events.",
                    recoveredEvents=count,
                )
            ],
            keep_unreadable=True,
            expected=TurnStatus.SET_ASIDE,
        )
        tx.insert_activity(
            turn.session_id,
            turn.token,
            ActivityLevel.INFO,
            "turn.applied",
            f"set-aside turn {turn.token[:12]} was applied with {count} "
            f"event{'s' if count != 1 else ''}",
            {"events": count},
            time.time(),
        )
        faults.point("apply.inside")
        applied = tx.get_turn(turn.token)
    faults.point("apply.after")
    assert applied is not None
    return applied


def discard(store: Store, turn: Turn) -> int:
    """Delete a set-aside turn and its journal; returns how many events went with it."""
    faults.point("discard.before")
    with store.atomic() as tx:
        tx.lock_sessions([turn.session_id])
        current = _require_set_aside(tx, turn)
        count, _ = tx.journal_size(turn.token)
        clear_requests(tx, turn.token)
        tx.delete_turn(turn.token)
        tx.insert_activity(
            turn.session_id,
            None,
            ActivityLevel.WARNING,
            "turn.discarded",
            f"set-aside turn {turn.token[:12]} was discarded with {count} "
            f"event{'s' if count != 1 else ''}",
            {"events": count, "token": turn.token, "prompt": current.prompt},
            time.time(),
        )
        faults.point("discard.inside")
    faults.point("discard.after")
    return count


def _require_set_aside(tx: Tx, turn: Turn) -> Turn:
    current = tx.get_turn(turn.token)
    if current is None or current.status is not TurnStatus.SET_ASIDE:
        state = "gone" if current is None else current.status.value
        raise NotSetAside(
            f"turn {turn.token[:12]} is not set aside (it is {state}); only set-aside turns "
            "can be applied or discarded"
        )
    return current


def sweep(store: Store) -> SweepReport:
    """Remove what no turn can ever use: step checkpoints of turns that have ended or gone, and
    owners that are dead and named by no running turn."""
    me = current_owner().id
    with store.read() as tx:
        now = tx.now()
        stale: list[Owner] = [
            owner
            for owner in tx.unreferenced_owners()
            if owner.id != me and not is_alive(owner, now)
        ]
    with store.atomic() as tx:
        steps = tx.delete_orphan_step_checkpoints()
        # A process judged dead by its pid cannot begin a turn again, but one judged dead by an
        # expired lease can (it was only stopped): its begin renews the lease, so an owner is
        # deleted only while the lease it had when judged is still the one it has.
        removed = sum(tx.delete_owner(owner.id, lease=owner.lease_expires) for owner in stale)
    return SweepReport(step_checkpoints=steps, owners=removed)
