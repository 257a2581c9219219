"""Reading checkpoints: whether one exists, what changed between two, and their patch."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence

from turnback.errors import CheckpointUnavailable, GitFailed
from turnback.model import ChangeKind, FileChange
from turnback.workspace.plan import skipped_paths
from turnback.workspace.shadow import NO_INDEX, Change, ShadowRepo, operation_deadline

KINDS = {
    "A": ChangeKind.ADDED,
    "D": ChangeKind.DELETED,
    "M": ChangeKind.MODIFIED,
    "T": ChangeKind.TYPE_CHANGED,
    "R": ChangeKind.RENAMED,
}


def exists(shadow: ShadowRepo, commit: str) -> bool:
    """Whether the checkpoint and its tree can be read (a damaged ref met is dropped)."""
    if not shadow.created:
        return False
    deadline = operation_deadline()
    try:
        oid = shadow.resolve(commit, deadline)
    except CheckpointUnavailable:
        return False
    return shadow.object_info([f"{oid}^{{tree}}"], deadline)[0] is not None


def changes(shadow: ShadowRepo, old: str, new: str) -> list[FileChange]:
    """One :class:`FileChange` per path that differs from ``old`` to ``new``. A path a
    checkpoint left out (too large) is not taken for deleted or added."""
    deadline = operation_deadline()
    found = None
    skipped_old: Collection[str]
    skipped_new: Collection[str]
    if old in shadow.captured and new in shadow.captured:  # written by this process: no lookups
        skipped_old, skipped_new = shadow.captured[old], shadow.captured[new]
        with contextlib.suppress(GitFailed):  # pruned by another process's gc since
            found = shadow.diff(old, new, deadline, renames=True, numstat=True)
    if found is None:
        old_commit, new_commit = shadow.resolve_all([old, new], deadline)
        skipped_old, skipped_new = skipped_paths(shadow, (old_commit, new_commit), deadline)
        found = shadow.diff(old_commit, new_commit, deadline, renames=True, numstat=True)
    result = []
    for change in found:
        kind = KINDS[change.status]
        if change.status == "D" and change.path in skipped_new:
            continue  # still there, but too large to capture now
        if change.status == "A" and change.path in skipped_old:
            kind = ChangeKind.MODIFIED
        gitlink = any(e is not None and e.gitlink for e in (change.old, change.new))
        result.append(
            FileChange(
                path=change.path,
                kind=kind,
                additions=0 if gitlink else change.additions,
                deletions=0 if gitlink else change.deletions,
                binary=change.binary,
                old_path=change.old_path,
            )
        )
    return result


def patch(shadow: ShadowRepo, old: str, new: str, paths: Sequence[str] | None = None) -> str:
    """The unified patch from ``old`` to ``new`` (renames detected), of ``paths`` or all."""
    deadline = operation_deadline()
    old_commit, new_commit = shadow.resolve_all([old, new], deadline)
    out = shadow.run(
        "diff-tree",
        "-p",
        "-M",
        "--no-commit-id",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        old_commit,
        new_commit,
        "--",
        *(paths or ()),
        deadline=deadline,
        index=shadow.dir / NO_INDEX,
    ).stdout
    return out.decode("utf-8", "replace")


def file_change(change: Change) -> FileChange:
    """A diff line as the :class:`FileChange` it describes."""
    return FileChange(
        path=change.path,
        kind=KINDS[change.status],
        additions=change.additions,
        deletions=change.deletions,
        binary=change.binary,
        old_path=change.old_path,
    )
