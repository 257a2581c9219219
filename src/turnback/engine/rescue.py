"""Rescues: files brought back as they were before a tool of a turn ran.

A turn of a terminal agent has a workspace checkpoint before each shell or write tool
(``RunningTurn.checkpoint_tool``), besides its begin and end. A rescue writes the paths a person
names from one of them, untracked files included, and nothing else. Its order is a revert's
(invariant 9), on those paths only:

1. Validate while nothing is written: the checkpoint exists and the paths are inside the
   workspace.
2. Capture the workspace as it is now: the *undo checkpoint*, on disk before a row names it
   (invariant 4). From it, the paths to write (those that differ from the checkpoint) and --
   unless forced -- none of them changed since the turn ended (a hand edit is kept:
   ``RevertConflict``, nothing written; a path already as it was is no conflict).
3. One transaction: the ``rescues`` row, naming the paths, the checkpoint written from and the
   undo checkpoint.
4. Write the paths (``Snapshots.restore`` limited to them). A crash here leaves the row: ``undo``
   puts the paths back from the undo checkpoint whether or not they were written.

``undo`` restores the same paths from the undo checkpoint and marks the row undone.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from turnback import faults
from turnback.engine.checkpoints import WorkspaceCheckpoints
from turnback.errors import (
    CheckpointUnavailable,
    InvalidOption,
    NothingToRevert,
    RevertConflict,
    WorkspaceError,
)
from turnback.model import Rescue, Turn, TurnStatus
from turnback.store import Store


def source(store: Store, turn: Turn, before_tool: int) -> str:
    """The checkpoint a rescue writes from: the turn's begin (``before_tool`` 0), or the one
    taken before its ``before_tool``-th tool."""
    if before_tool == 0:
        if not turn.begin_checkpoint:
            raise CheckpointUnavailable(f"turn {turn.number} has no begin checkpoint")
        return turn.begin_checkpoint
    with store.read() as tx:
        tools = tx.tool_checkpoints(turn.token)
    found = [t for t in tools if t.number == before_tool]
    if not found:
        raise InvalidOption(
            f"turn {turn.number} has {len(tools)} tool checkpoint(s), so --before-tool is "
            f"0 (its begin) to {len(tools)}, not {before_tool}"
        )
    if not found[0].commit:
        raise CheckpointUnavailable(
            f"the checkpoint before tool {before_tool} of turn {turn.number} could not be "
            "taken (its activities say why)"
        )
    return found[0].commit


def relative_paths(workspace: str, paths: Sequence[str]) -> list[str]:
    """``paths`` (relative to the current directory, or absolute) as paths of the workspace;
    InvalidOption for one outside it."""
    root = Path(workspace).resolve()
    out = []
    for path in paths:
        full = Path(os.path.abspath(path))
        try:
            relative = full.relative_to(root)
        except ValueError:
            try:  # a path given relative to the workspace from elsewhere
                relative = Path(os.path.abspath(root / path)).relative_to(root)
            except ValueError:
                raise InvalidOption(f"{path} is outside the workspace {root}") from None
        if relative.parts and relative.parts[0] == ".git":
            raise InvalidOption(f"{path} is inside .git, which turnback never writes")
        out.append(relative.as_posix() if relative.parts else ".")
    return out


def _capture(checkpoints: WorkspaceCheckpoints, workspace: Path, ref: str) -> str:
    """The workspace captured into ``ref``; WorkspaceError, nothing written, if it cannot be."""
    captured, notes = checkpoints.capture(str(workspace), ref)
    if captured is None:
        reason = notes[-1].message if notes else "the capture failed"
        raise WorkspaceError(
            f"the workspace could not be captured, so nothing was written ({reason})"
        )
    return captured.commit


def _under(path: str, wanted: Sequence[str]) -> bool:
    return "." in wanted or any(path == w or path.startswith(w.rstrip("/") + "/") for w in wanted)


def rescue(
    store: Store,
    checkpoints: WorkspaceCheckpoints,
    session_id: str,
    turn: Turn,
    before_tool: int,
    paths: Sequence[str],
    *,
    force: bool = False,
) -> Rescue:
    """Write ``paths`` (of the workspace) as they were before tool ``before_tool`` of ``turn``
    (0: at its begin); see the module's docstring for the order."""
    if not paths:
        raise InvalidOption("name the PATH(s) to bring back")
    with store.read() as tx:
        session = tx.get_session(session_id)
    assert session is not None
    workspace = Path(session.workspace)
    commit = source(store, turn, before_tool)
    snapshots = checkpoints.snapshots
    if not snapshots.exists(workspace, commit):
        raise CheckpointUnavailable(f"checkpoint {commit[:12]} of turn {turn.number} is gone")
    undo_ref = f"{session_id}/rescue-{uuid.uuid4().hex}"
    undo = _capture(checkpoints, workspace, undo_ref)
    try:
        written = sorted(
            {
                path
                for c in snapshots.changes(workspace, undo, commit)
                for path in (c.path, c.old_path)
                if path and _under(path, paths)
            }
        )
        if not written:
            raise NothingToRevert(
                f"{', '.join(paths)} already are as they were "
                + (f"before tool {before_tool}" if before_tool else "when the turn began")
                + f" of turn {turn.number}; nothing was written"
            )
        if turn.end_checkpoint and not force:
            # a path it would write that is no longer as the turn left it: a hand edit
            edited = sorted(
                {
                    path
                    for c in snapshots.changes(workspace, turn.end_checkpoint, undo)
                    for path in (c.path, c.old_path)
                    if path in written
                }
            )
            if edited:
                raise RevertConflict(
                    f"{len(edited)} path(s) changed since turn {turn.number} ended, by hand or "
                    f"by a later turn: {', '.join(edited[:10])}; nothing was written. Rescue "
                    "other paths, or force it (the rescue can be undone)",
                    tuple(edited),
                )
    except Exception:
        snapshots.delete_refs(workspace, [undo_ref])
        raise
    record = Rescue(
        id=0,
        session_id=session_id,
        turn=turn.token,
        before_tool=before_tool,
        paths=tuple(paths),
        source=commit,
        undo_checkpoint=undo,
        written=tuple(written),
        at=time.time(),
    )
    with store.atomic() as tx:
        tx.lock_sessions([session_id])
        record = dataclasses.replace(record, id=tx.insert_rescue(record))
    faults.point("rescue.recorded")  # the row names the undo capture; no file is written yet
    snapshots.restore(workspace, commit, current=undo, paths=paths)
    faults.point("rescue.done")
    return record


def undo(
    store: Store, checkpoints: WorkspaceCheckpoints, session_id: str, *, force: bool = False
) -> Rescue:
    """Put the paths of the session's last rescue back as they were just before it. A path
    changed since the rescue wrote it is a conflict, and nothing is written, unless ``force``."""
    with store.read() as tx:
        session = tx.get_session(session_id)
        done = [r for r in tx.rescues(session_id) if r.undone_at is None]
    if not done:
        raise NothingToRevert(f"session {session_id[:12]} has no rescue to undo")
    assert session is not None
    last = done[-1]
    workspace = Path(session.workspace)
    ref = f"{session_id}/rescue-undo-{uuid.uuid4().hex}"
    current = _capture(checkpoints, workspace, ref)
    try:
        if not force:
            edited = sorted(
                {
                    path
                    for c in checkpoints.snapshots.changes(workspace, last.source, current)
                    for path in (c.path, c.old_path)
                    if path in last.written
                }
            )
            if edited:
                raise RevertConflict(
                    f"{len(edited)} path(s) changed since rescue {last.id} wrote them: "
                    f"{', '.join(edited[:10])}; nothing was written. Keep a copy of those "
                    "edits, or force the undo",
                    tuple(edited),
                )
        checkpoints.snapshots.restore(
            workspace, last.undo_checkpoint, current=current, paths=last.paths
        )
    finally:
        checkpoints.snapshots.delete_refs(workspace, [ref])
    now = time.time()
    with store.atomic() as tx:
        tx.lock_sessions([session_id])
        tx.set_rescue_undone(last.id, now)
    return dataclasses.replace(last, undone_at=now)


def running_or_head(turns: Sequence[Turn]) -> Turn:
    """The turn a rescue is about when none is named: the running one, else the last."""
    running = [t for t in turns if t.status is TurnStatus.RUNNING]
    if running:
        return running[-1]
    if not turns:
        raise NothingToRevert("the session has no turn yet")
    return turns[-1]
