"""What turns changed in the workspace: a turn's diff, a range of turns, and what changed since
the head, read from the stored file changes and, for patches and the workspace as it is now,
from workspace checkpoints."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from turnback.engine.checkpoints import Note, WorkspaceCheckpoints
from turnback.engine.owners import host_identity
from turnback.errors import ACTIVITIES, CheckpointUnavailable, TurnbackError
from turnback.model import FileChange, RangeDiff, Turn, TurnDiff, TurnStatus
from turnback.store import Store


def turn_diff(
    store: Store,
    checkpoints: WorkspaceCheckpoints | None,
    workspace: str,
    turn: Turn,
    *,
    patch: bool,
    paths: Sequence[str] | None = None,
) -> TurnDiff:
    """What ``turn`` changed in the workspace (from its stored file changes; no git call
    unless ``patch`` asks for the unified patch too, of every file or only of ``paths``). A
    running turn's is its begin checkpoint against the workspace now."""
    with store.read() as tx:
        files = tx.file_changes(turn.token, "turn")
        outside = tuple(tx.file_changes(turn.token, "before"))
    if turn.status is TurnStatus.RUNNING and turn.begin_checkpoint and checkpoints:
        return _running(checkpoints, workspace, turn, outside, patch)
    available = bool(turn.begin_checkpoint and turn.end_checkpoint)
    text = None
    if patch:
        if not available or checkpoints is None:
            moment = "begin" if not turn.begin_checkpoint else "end"
            raise CheckpointUnavailable(
                f"turn {turn.number} has no workspace checkpoint at its {moment} (the capture "
                "failed, was skipped or pruned, or the turn is still running), so its diff "
                "is unavailable"
            ).settled_by(ACTIVITIES, session=turn.session_id)
        assert turn.begin_checkpoint and turn.end_checkpoint
        checkpoints.bring(workspace, [turn], "its patch")
        text = checkpoints.snapshots.patch(
            Path(workspace), turn.begin_checkpoint, turn.end_checkpoint, paths
        )
    return TurnDiff(turn, tuple(files), outside, available, text)


def checkpoint_after(
    checkpoints: WorkspaceCheckpoints | None, workspace: str, turn: Turn, number: int
) -> str:
    """The workspace checkpoint at the end of turn ``number`` (0: ``turn``, the first turn's,
    at its beginning)."""
    commit = turn.begin_checkpoint if number == 0 else turn.end_checkpoint
    if commit is None or checkpoints is None:
        moment = "beginning" if number == 0 else "end"
        raise CheckpointUnavailable(
            f"turn {turn.number} has no workspace checkpoint at its {moment} (the capture "
            "failed, was skipped or pruned, or checkpoints are off), so no range can start "
            "or end there"
        )
    checkpoints.bring(workspace, [turn], "a diff from or to it")
    return commit


def range_diff(
    checkpoints: WorkspaceCheckpoints,
    workspace: str,
    span: tuple[int, int],
    commits: tuple[str, str],
    *,
    patch: bool,
) -> RangeDiff:
    """What the workspace changed between two checkpoints, the ends of the turns ``span``."""
    snapshots, path = checkpoints.snapshots, Path(workspace)
    files = snapshots.changes(path, *commits)
    text = snapshots.patch(path, *commits) if patch else None
    return RangeDiff(span[0], span[1], tuple(files), text)


def since_head(
    checkpoints: WorkspaceCheckpoints | None, workspace: str, head: Turn | None
) -> list[FileChange] | None:
    """What changed in the workspace since the head turn ended (by hand, or a ``git pull``):
    its end checkpoint against the workspace now. ``None`` when that cannot be known
    (checkpoints off, no head, or no capture possible, as on a read-only home)."""
    if checkpoints is None or head is None or not head.end_checkpoint:
        return None
    if head.host and head.host != host_identity()[0]:
        return None  # the workspace that head saw is that host's, not this one's
    with _now(checkpoints, workspace, head.session_id) as (commit, _notes):
        if commit is None:
            return None
        try:
            return checkpoints.snapshots.changes(Path(workspace), head.end_checkpoint, commit)
        except TurnbackError:
            return None


def _running(
    checkpoints: WorkspaceCheckpoints,
    workspace: str,
    turn: Turn,
    outside: tuple[FileChange, ...],
    patch: bool,
) -> TurnDiff:
    """A running turn's diff so far: its begin checkpoint against the workspace now."""
    assert turn.begin_checkpoint
    checkpoints.bring(workspace, [turn], "its diff while it runs")
    with _now(checkpoints, workspace, turn.session_id) as (commit, notes):
        if commit is None:
            if patch:
                reason = notes[-1].message if notes else "the capture failed"
                raise CheckpointUnavailable(
                    f"turn {turn.number} is running and the workspace cannot be captured now "
                    f"({reason}), so its diff so far is unavailable"
                )
            return TurnDiff(turn, (), outside, False)
        snapshots, path = checkpoints.snapshots, Path(workspace)
        files = snapshots.changes(path, turn.begin_checkpoint, commit)
        text = snapshots.patch(path, turn.begin_checkpoint, commit) if patch else None
    return TurnDiff(turn, tuple(files), outside, True, text)


@contextmanager
def _now(
    checkpoints: WorkspaceCheckpoints, workspace: str, session_id: str
) -> Iterator[tuple[str | None, list[Note]]]:
    """The workspace as it is now, captured under a ref of its own that is gone once the block
    ends: its commit (None when it cannot be captured) and what the capture noted."""
    ref = f"{session_id}/now-{uuid.uuid4().hex}"
    captured, notes = checkpoints.capture(workspace, ref, share=False)
    try:
        yield (captured.commit if captured is not None else None), notes
    finally:
        if captured is not None:
            checkpoints.snapshots.delete_refs(Path(workspace), [ref])
