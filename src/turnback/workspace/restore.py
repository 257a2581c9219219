"""Restoring files: a workspace moved to a checkpoint, or the agent's changes of some turns
undone.

The order (invariants 9 and 10): the engine has captured the current workspace (so the restore
can be undone) before calling :func:`restore` or :func:`reverse_apply`. Both compute the complete
plan from trees first (``restore.plan``), then delete and write one path at a time
(``restore.file`` after each), then finish (``restore.done``). Running a restore again after a
crash is safe: it recomputes the plan from a fresh capture and writes what still differs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from turnback.errors import RestoreIncomplete, RevertConflict
from turnback.faults import point
from turnback.workspace.plan import skipped_paths
from turnback.workspace.plans import leave_unreadable, restore_plan, reverse_plan
from turnback.workspace.shadow import Entry, ShadowRepo, operation_deadline
from turnback.workspace.writer import Refused, WorkspaceWriter

#: Blobs read from the shadow in one ``cat-file`` process while files are written.
BATCH = 1000


def restore(
    shadow: ShadowRepo,
    target: str,
    *,
    current: str,
    keep: str | None = None,
    paths: Collection[str] | None = None,
) -> list[str]:
    """Make the workspace equal to ``target``, writing only what differs from ``current``
    (see :meth:`Snapshots.restore`); with ``paths``, only those paths and what lies under
    them."""
    deadline = operation_deadline()
    with shadow.locked(deadline):
        now, goal, *rest = shadow.resolve_all(
            [current, target] if keep is None else [current, target, keep], deadline
        )
        before = rest[0] if rest else None
        plan, present, _kept = restore_plan(shadow, now, goal, before, deadline)
        if paths is not None and "." not in paths:  # "." is the whole workspace
            wanted = [p.rstrip("/") for p in paths]
            plan = {
                p: e
                for p, e in plan.items()
                if any(p == w or p.startswith(w + "/") for w in wanted)
            }
        left = leave_unreadable(plan, skipped_paths(shadow, [now], deadline)[0])
        point("restore.plan")
        done, refused = apply(shadow, plan, present, deadline)
        refused += [(directory, "it cannot be read") for directory in left]
        for path, reason in refused:
            shadow.report(f"restore left {path} alone: {reason}")
        point("restore.done")
    return done


def reverse_apply(
    shadow: ShadowRepo, *, turns: Sequence[tuple[str, str]], current: str
) -> list[str]:
    """Undo only what ``turns`` changed, as three-way merges, or write nothing and raise
    :class:`RevertConflict` (see :meth:`Snapshots.reverse_apply`)."""
    deadline = operation_deadline()
    with shadow.locked(deadline):
        now, *ends = shadow.resolve_all(
            [current, *(spec for pair in turns for spec in pair)], deadline
        )
        skipped = skipped_paths(shadow, [now], deadline)[0]
        plan, present, conflicts = reverse_plan(shadow, now, ends, deadline, skipped)
        if conflicts:
            paths = tuple(sorted(conflicts))
            raise RevertConflict(
                f"cannot undo the agent's changes in {shadow.workspace} without overwriting "
                f"other changes to {len(paths)} path(s): {', '.join(paths[:10])}"
                + (" …" if len(paths) > 10 else "")
                + "; nothing was written. Resolve them by hand, or revert without keeping "
                "your edits",
                paths,
            )
        point("restore.plan")
        done, refused = apply(shadow, plan, present, deadline)
        if refused:  # the files changed after the check above; report what was left
            for path, reason in refused:
                shadow.report(f"revert left {path} alone: {reason}")
        point("restore.done")
    return done


def apply(
    shadow: ShadowRepo,
    plan: Mapping[str, Entry | None],
    present: Mapping[str, Entry | None],
    deadline: float,
) -> tuple[list[str], list[tuple[str, str]]]:
    """Delete, prune, then write: the paths done and the paths refused (with why).

    A path that could not be written or deleted (a full disk, a read-only file system) does
    not stop the others; once all were tried, :class:`RestoreIncomplete` names them."""
    done: list[str] = []
    refused: list[tuple[str, str]] = []
    failed: list[tuple[str, OSError]] = []
    with WorkspaceWriter(shadow.workspace) as writer:
        deleted = []
        for path in sorted(p for p, e in plan.items() if e is None):
            try:
                if writer.delete(path):
                    done.append(path)
                    deleted.append(path)
            except Refused as error:
                refused.append((path, str(error)))
            except OSError as error:
                failed.append((path, error))
            point("restore.file")
        for path in sorted(deleted, key=lambda p: -p.count("/")):
            writer.prune(path)
        writes = sorted((p, e) for p, e in plan.items() if e is not None)
        for start in range(0, len(writes), BATCH):
            chunk = writes[start : start + BATCH]
            blobs = shadow.blobs((entry.oid for _path, entry in chunk), deadline)
            for path, entry in chunk:
                try:
                    writer.write(path, entry, blobs[entry.oid], absent=present[path] is None)
                    done.append(path)
                except Refused as error:
                    refused.append((path, str(error)))
                except OSError as error:
                    failed.append((path, error))
                point("restore.file")
    if failed:
        paths = tuple(path for path, _error in failed)
        raise RestoreIncomplete(
            f"{len(paths)} path(s) of {shadow.workspace} could not be written "
            f"({failed[0][1].strerror or failed[0][1]}): {', '.join(paths[:10])}"
            + (" …" if len(paths) > 10 else ""),
            paths,
        )
    return sorted(done), refused
