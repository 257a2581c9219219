"""Handing a session off to another machine of a fleet, which runs its next turns.

A handoff runs on the machine that takes the session over, in this order:

1. the session must be idle: a running turn whose owner lives refuses the handoff
   (TurnInProgress); one whose owner died is recovered first, as a new turn would;
2. the head turn's end checkpoint (or, when its machine died during it, the last it took) is
   made readable here (fetched from the checkpoint remote when another machine took it), and
   this machine's workspace is captured;
3. divergence: the workspace must be a state the session has been in -- a checkpoint of one of
   its turns (this machine ran those turns, or synced it so), or empty (a fresh machine).
   Anything else holds changes that are not the session's, which the handoff would overwrite:
   it is refused (WorkspaceDiverged, naming what differs from the head), nothing written;
4. the capture the divergence check accepted is kept under a ref of the session's
   (``handoff.accepted``), then the files are brought to the head (only what differs is
   written, as a revert does; ``restore.file``, ``restore.done``);
5. one transaction, under the session's lock, moves the session to this machine with a new
   fencing token, if the head is still the one the files were brought to, no turn runs, and the
   token is still the one read in step 1 (two handoffs cannot both win), and records the
   activity ``session.handoff`` (``handoff.inside``); that ref is deleted after it
   (``handoff.after``).

From then on a turn of the session begins only here (SessionElsewhere elsewhere, checked in the
begin's own transaction). Files move before the transfer commits, and the session stays where
it was until a handoff commits. A crash while the files move leaves each path either as the
accepted capture had it or as the head has it -- a workspace the divergence check would refuse,
but for the ref it left: a workspace that differs from the accepted capture only
where it is already at the head is accepted, so running the handoff again goes on from there.
A path that differs from both is someone's own change, and is refused as any other.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from pathlib import Path

from turnback import faults
from turnback.engine import recovery
from turnback.engine.checkpoints import WorkspaceCheckpoints
from turnback.engine.owners import host_identity, is_alive
from turnback.engine.turns import quiet_session
from turnback.errors import (
    CheckpointUnavailable,
    InvalidOption,
    SessionElsewhere,
    SessionNotFound,
    TurnInProgress,
    WorkspaceDiverged,
)
from turnback.model import (
    ActivityLevel,
    FileChange,
    Handoff,
    Turn,
    WorkspaceCheckpoint,
    conversation,
)
from turnback.store import Store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from turnback.workspace import Snapshots

#: How many differing paths a divergence names in its message (all of them are in ``paths``).
SHOWN = 10
#: The ref, under the session's, of the capture a handoff accepted before moving files: one a
#: machine's (``handoff-accepted-<hash of its name>``), though a push may take it to the remote.
ACCEPTED = "handoff-accepted-"


def handoff(
    store: Store, checkpoints: WorkspaceCheckpoints | None, session_id: str, to_host: str
) -> Handoff:
    """Give session ``session_id`` to this machine, which ``to_host`` must name (see the
    module's doc for the order and what each step refuses)."""
    here = host_identity()[0]
    if to_host != here:
        raise InvalidOption(
            f"a handoff runs on the machine that takes the session over, since it brings that "
            f"machine's workspace to the session's head: this one is {here}, not {to_host}"
        )
    turns, fence, holder = _idle(store, checkpoints, session_id)
    chain = conversation(turns)
    head = chain[-1] if chain else None
    workspace = _workspace(store, session_id)
    written: tuple[str, ...] = ()
    moment = ""
    if head is not None:
        if checkpoints is None:
            raise CheckpointUnavailable(
                "workspace checkpoints are turned off, so this machine's workspace cannot be "
                "brought to the session's head"
            )
        target, moment = _target(store, session_id, head)
        written = _bring_files(checkpoints, workspace, session_id, head, turns, target)
    now = time.time()
    new_fence = uuid.uuid4().hex
    from_host = holder or (head.host if head else None)
    with store.atomic() as tx:
        record = quiet_session(tx, session_id, "handing it off", "hand it off")
        if record.head != (head.token if head else None):
            raise TurnInProgress(
                f"a turn of session {session_id[:12]} ended while it was being handed off, so "
                "the workspace here is at the turn before; nothing of the session changed: hand "
                "it off again",
                record.head or "",
                state="moved",
            )
        if not tx.hand_off(session_id, here, new_fence, fence, now):
            raise SessionElsewhere(
                f"another handoff of session {session_id[:12]} (to host {record.host}) won "
                "while this one ran; nothing of the session changed",
                record.host or "",
            )
        number = head.number if head else 0
        faults.point("handoff.inside")
        tx.insert_activity(
            session_id,
            None,
            ActivityLevel.INFO,
            "session.handoff",
            f"the session was handed off from host {from_host or '(none)'} to host {here} at "
            f"turn {number}; {len(written)} file(s) of its workspace there were brought to that "
            f"turn's {moment or 'start'}",
            {
                "from": from_host,
                "to": here,
                "turn": number,
                "moment": moment,
                "written": list(written),
            },
            now,
        )
    faults.point("handoff.after")
    if head is not None and checkpoints is not None:
        checkpoints.snapshots.delete_refs(Path(workspace), [_accepted(session_id)])
    return Handoff(session_id, from_host, here, number, moment, written, new_fence, now)


def _target(store: Store, session_id: str, head: Turn) -> tuple[str, str]:
    """The checkpoint the workspace is brought to, and which of the head's it is: its end;
    when that was never taken (its machine died during it: recovery elsewhere captures no end
    from another machine's workspace), the last taken before one of its tools, else its
    begin."""
    if head.end_checkpoint:
        return head.end_checkpoint, "end"
    with store.read() as tx:
        tools = [t for t in tx.tool_checkpoints(head.token) if t.commit]
    if tools:
        return tools[-1].commit or "", f"before tool {tools[-1].number}"
    if head.begin_checkpoint:
        return head.begin_checkpoint, "begin"
    raise CheckpointUnavailable(
        f"turn {head.number}, the head of session {session_id[:12]}, has no workspace "
        "checkpoint (its captures failed, which the session's activities say), so the "
        "workspace cannot be brought to it"
    )


def _idle(
    store: Store, checkpoints: WorkspaceCheckpoints | None, session_id: str
) -> tuple[list[Turn], str | None, str | None]:
    """The session's turns, fencing token and holder once no turn runs in it: a running turn
    whose owner died is recovered first; a live one raises TurnInProgress."""
    for _attempt in range(2):
        with store.read() as tx:
            record = tx.get_session(session_id)
            if record is None:
                raise SessionNotFound(f"session {session_id} no longer exists")
            running = tx.running_turn(session_id)
            owner = tx.get_owner(running.owner_id) if running and running.owner_id else None
            now = tx.now()
            turns = tx.session_turns(session_id)
        if running is None:
            return turns, record.host_fence, record.host
        if is_alive(owner, now):
            raise TurnInProgress(
                f"turn {running.number} of session {session_id[:12]} is running on host "
                f"{running.host or '(unknown)'}; a session is handed off between turns",
                running.token,
                turn=running.number,
            )
        recovery.recover_turn(store, running, checkpoints)
    raise TurnInProgress(f"session {session_id[:12]} has a running turn again", "", state="running")


def _workspace(store: Store, session_id: str) -> str:
    with store.read() as tx:
        record = tx.get_session(session_id)
    if record is None:
        raise SessionNotFound(f"session {session_id} no longer exists")
    Path(record.workspace).mkdir(parents=True, exist_ok=True)  # a fresh machine has none yet
    return record.workspace


def _bring_files(
    checkpoints: WorkspaceCheckpoints,
    workspace: str,
    session_id: str,
    head: Turn,
    turns: list[Turn],
    target: str,
) -> tuple[str, ...]:
    """Bring this machine's workspace to checkpoint ``target`` of ``head``, refusing a
    divergence; the paths written or deleted."""
    path = Path(workspace)
    checkpoints.bring(workspace, turns, "a handoff")
    snapshots = checkpoints.snapshots
    accepted = _accepted(session_id)
    left = snapshots.exists(path, accepted)  # by a handoff killed midway
    ref = f"{session_id}/handoff-{uuid.uuid4().hex}"
    current = _capture(checkpoints, workspace, ref)
    try:
        known = [c for t in turns for c in (t.begin_checkpoint, t.end_checkpoint) if c]
        known.append(target)
        trees = {tree for tree in snapshots.trees(path, known) if tree}
        trees.add(snapshots.empty_tree(path))
        if current.tree not in trees:
            changes = snapshots.changes(path, target, current.commit)
            if left:  # only what is neither as the handoff accepted nor at the head is foreign
                foreign = _foreign(snapshots, path, accepted, current.commit, changes)
                changes = [c for c in changes if {c.path, c.old_path} & foreign]
            if changes:
                _refuse(changes, head, path)
        if not left:  # what was accepted, kept before any file moves
            if _capture(checkpoints, workspace, accepted).tree != current.tree:
                snapshots.delete_refs(path, [accepted])
                raise WorkspaceDiverged(
                    f"the workspace {workspace} changed while the handoff checked it; nothing "
                    "was written and the session stays where it was: hand it off again",
                    (),
                )
            faults.point("handoff.accepted")
        if current.tree == snapshots.trees(path, [target])[0]:
            return ()
        return tuple(snapshots.restore(path, target, current=current.commit))
    finally:
        snapshots.delete_refs(path, [ref])


def _accepted(session_id: str) -> str:
    here = hashlib.sha256(host_identity()[0].encode()).hexdigest()[:16]
    return f"{session_id}/{ACCEPTED}{here}"


def _capture(checkpoints: WorkspaceCheckpoints, workspace: str, ref: str) -> WorkspaceCheckpoint:
    captured, notes = checkpoints.capture(workspace, ref, share=False)
    if captured is None:
        reason = notes[-1].message if notes else "the capture failed"
        raise CheckpointUnavailable(
            f"the workspace {workspace} on this machine cannot be captured ({reason}), so it "
            "cannot be checked against the session's head; nothing was changed"
        )
    return captured


def _foreign(
    snapshots: Snapshots, path: Path, accepted: str, current: str, changes: list[FileChange]
) -> set[str]:
    """The paths of ``changes`` (from the head to the workspace, ``current``) that also differ
    from the capture a handoff killed while moving files ``accepted``: a killed handoff leaves
    every other path as it was or as the head has it."""
    moved = {p for c in snapshots.changes(path, accepted, current) for p in (c.path, c.old_path)}
    return {p for c in changes for p in (c.path, c.old_path) if p and p in moved}


def _refuse(changes: list[FileChange], head: Turn, workspace: Path) -> None:
    """Raise WorkspaceDiverged listing how the workspace differs from the head."""
    shown = [f"{c.kind} {c.path}" for c in changes[:SHOWN]]
    more = f" and {len(changes) - SHOWN} more" if len(changes) > SHOWN else ""
    raise WorkspaceDiverged(
        f"the workspace {workspace} on this machine holds changes that are not the session's: "
        f"it is no state the session has been in, and differs from its head (turn "
        f"{head.number}) in {len(changes)} path(s): {', '.join(shown)}{more}. Nothing was "
        "written and the session stays where it was; commit or move those changes away, "
        "then hand it off again",
        tuple(c.path for c in changes),
    )
