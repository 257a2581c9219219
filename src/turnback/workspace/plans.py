"""What a restore or a reverse-apply would write, computed from checkpoints' trees; nothing here
writes a file of the workspace.

A restore writes what differs between the current capture and the target, except nested
repositories, and keeps files that existed before the turns it undoes. A reverse-apply undoes
each turn as a three-way merge of the current files (ours), the turn's end (base) and its begin
(theirs); a path where that does not merge cleanly is a conflict.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path

from turnback.errors import CheckpointUnavailable
from turnback.model import ChangeKind, FileChange, RevertPlan
from turnback.workspace.compare import file_change
from turnback.workspace.plan import skipped_paths
from turnback.workspace.shadow import GITLINK, REGULAR, Entry, ShadowRepo, operation_deadline
from turnback.workspace.writer import Refused, WorkspaceWriter


class Conflict(Exception):
    """A path whose three-way merge does not resolve by itself."""


def restore_plan(
    shadow: ShadowRepo, now: str, goal: str, before: str | None, deadline: float
) -> tuple[dict[str, Entry | None], dict[str, Entry | None], set[str]]:
    """What a restore writes (path: entry, ``None`` to delete), what is there now, and
    the paths it keeps because they existed before the turns being undone."""
    plan: dict[str, Entry | None] = {}
    present: dict[str, Entry | None] = {}
    for change in shadow.diff(now, goal, deadline):
        plan[change.path] = change.new
        present[change.path] = change.old
    kept_paths: set[str] = set()
    if before is not None:
        kept = {
            change.path: change.new
            for change in shadow.diff(goal, before, deadline)
            if change.old is None
        }
        if kept:
            differs = {c.path: c.old for c in shadow.diff(now, before, deadline)}
            for path, entry in kept.items():
                if path in differs:
                    plan[path], present[path] = entry, differs[path]
                elif path in plan:  # a restore would delete it: it is kept as it is
                    kept_paths.add(path)
                    del plan[path]
    plan = {
        path: entry
        for path, entry in plan.items()
        if not gitlink(entry) and not gitlink(present[path])
    }
    return plan, present, kept_paths


def revert_plan(
    shadow: ShadowRepo,
    target: str,
    *,
    current: str,
    keep: str | None = None,
    turns: Sequence[tuple[str, str]] = (),
    keep_user_edits: bool = False,
) -> RevertPlan:
    """What a restore of ``target`` (or, with ``keep_user_edits``, a reverse-apply of ``turns``)
    would do to the workspace captured as ``current``; writes no file (see
    :meth:`Snapshots.revert_plan`)."""
    deadline = operation_deadline()
    with shadow.locked(deadline):
        now, goal, *rest = shadow.resolve_all(
            [current, target] if keep is None else [current, target, keep], deadline
        )
        plain, present, pre_existing = restore_plan(
            shadow, now, goal, rest[0] if rest else None, deadline
        )
        skipped = skipped_paths(shadow, [now], deadline)[0]
        leave_unreadable(plain, skipped)
        specs = [spec for pair in turns for spec in pair]
        try:
            ends = shadow.resolve_all(specs, deadline) if specs else []
        except CheckpointUnavailable:
            ends = []  # the hand edits cannot be told apart; a plain restore needs no more
        edited: set[str] = set()
        for start, stop in zip(ends[1::2], [*ends[2::2], now], strict=True):
            edited.update(change.path for change in shadow.diff(start, stop, deadline))
        why = {path: "pre-existing" for path in pre_existing}
        if keep_user_edits:
            plan, on_disk, clashes = reverse_plan(shadow, now, ends, deadline, skipped)
            for path, entry in plain.items():
                result = on_disk.get(path, present[path])
                if result != entry and path not in clashes and path not in plan:
                    why.setdefault(path, "user edit")
        else:
            plan, clashes = plain, edited & plain.keys()
        with tempfile.TemporaryDirectory(dir=shadow.dir, prefix="plan-") as scratch:
            index = Path(scratch) / "index"
            shadow.run("read-tree", now, deadline=deadline, index=index)
            zero = "0" * len(now)
            info = b"".join(
                (f"0 {zero}" if entry is None else f"{entry.mode} {entry.oid}").encode()
                + b"\t"
                + os.fsencode(path)
                + b"\0"
                for path, entry in plan.items()
            )
            shadow.run(
                "update-index", "-z", "--index-info", deadline=deadline, index=index, input=info
            )
            after = shadow.run("write-tree", deadline=deadline, index=index).stdout
        moved = [
            file_change(c) for c in shadow.diff(now, after.decode().strip(), deadline, numstat=True)
        ]
        since = {c.path: file_change(c) for c in shadow.diff(goal, now, deadline, numstat=True)}
        ignored = shadow.run(
            *("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"),
            deadline=deadline,
        ).stdout
        why.update((os.fsdecode(raw), "ignored") for raw in ignored.split(b"\0") if raw)
        for path in skipped:
            why[path] = "unreadable" if path.endswith("/") else "not captured"
    kept = [since.get(path, FileChange(path, ChangeKind.MODIFIED)) for path in sorted(why)]
    return RevertPlan(
        restore=tuple(c for c in moved if c.kind is not ChangeKind.DELETED),
        delete=tuple(c for c in moved if c.kind is ChangeKind.DELETED),
        keep=tuple(kept),
        conflicts=tuple(
            since.get(path, FileChange(path, ChangeKind.MODIFIED)) for path in sorted(clashes)
        ),
        kept_because=why,
    )


def reverse_plan(
    shadow: ShadowRepo,
    now: str,
    ends: Sequence[str],
    deadline: float,
    skipped: Collection[str] = (),
) -> tuple[dict[str, Entry | None], dict[str, Entry | None], set[str]]:
    """What a reverse-apply writes, what is there now, and the conflicting paths.
    ``ends`` holds each turn's begin and end commits, oldest turn first; nothing below a
    directory ``now`` could not read (in ``skipped``) is written."""
    pairs = list(zip(ends[::2], ends[1::2], strict=True))
    result: dict[str, Entry | None] = {}
    present: dict[str, Entry | None] = {}
    conflicts: set[str] = set()
    with tempfile.TemporaryDirectory(dir=shadow.dir, prefix="merge-") as scratch:
        for first, last in reversed(pairs):
            since = {c.path: c.new for c in shadow.diff(last, now, deadline)}
            for change in shadow.diff(first, last, deadline):
                path = change.path
                on_disk = since.get(path, change.new)
                present.setdefault(path, on_disk)
                ours = result.get(path, on_disk)
                try:
                    result[path] = merge(
                        shadow, ours, change.new, change.old, Path(scratch), deadline
                    )
                except Conflict:
                    conflicts.add(path)
    plan = {path: entry for path, entry in result.items() if entry != present[path]}
    leave_unreadable(plan, skipped)
    if not conflicts:
        with WorkspaceWriter(shadow.workspace) as writer:
            for path, entry in plan.items():
                try:
                    writer.check(path, absent=present[path] is None, delete=entry is None)
                except Refused:
                    conflicts.add(path)
    return plan, present, conflicts


def merge(
    shadow: ShadowRepo,
    ours: Entry | None,
    base: Entry | None,
    theirs: Entry | None,
    scratch: Path,
    deadline: float,
) -> Entry | None:
    """Three-way merge of one path: ``ours`` with the change from ``base`` to ``theirs``."""
    if ours == base:
        return theirs
    if ours == theirs:
        return ours
    if gitlink(ours) or gitlink(base) or gitlink(theirs):
        return ours  # nested repositories are left alone
    if ours is None or base is None or theirs is None:
        raise Conflict
    if not all(entry.mode in REGULAR for entry in (ours, base, theirs)):
        raise Conflict
    if ours.mode == base.mode:
        mode = theirs.mode
    elif theirs.mode == base.mode:
        mode = ours.mode
    else:
        raise Conflict
    if ours.oid == base.oid:
        return Entry(mode, theirs.oid)
    if theirs.oid == base.oid or ours.oid == theirs.oid:
        return Entry(mode, ours.oid)
    contents = shadow.blobs((ours.oid, base.oid, theirs.oid), deadline)
    files = []
    for name, entry in (("ours", ours), ("base", base), ("theirs", theirs)):
        data = contents[entry.oid]
        if b"\0" in data[:8000]:
            raise Conflict  # binary
        file = scratch / name
        file.write_bytes(data)
        files.append(str(file))
    merged = shadow.run("merge-file", "-p", "-q", *files, deadline=deadline, check=False)
    if merged.returncode != 0:
        raise Conflict
    return Entry(mode, shadow.write_blob(merged.stdout, deadline))


def leave_unreadable(plan: dict[str, Entry | None], skipped: Collection[str]) -> list[str]:
    """Take out of a restore's ``plan`` every path below a directory the capture could not read
    (a skipped path ending in ``/``); returns those directories that held one."""
    unreadable = tuple(path for path in skipped if path.endswith("/"))
    left: set[str] = set()
    for path in [p for p in plan if p.startswith(unreadable)]:
        del plan[path]
        left.update(d for d in unreadable if path.startswith(d))
    return sorted(left)


def gitlink(entry: Entry | None) -> bool:
    return entry is not None and entry.mode == GITLINK
