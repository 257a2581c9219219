"""Capturing a workspace: the checkpoint of its files as a commit in its shadow repository.

Capture write order (README, Design, invariant 4, "snapshots before references"). Each step is a
fault point the crash suite kills the process at:

1. ``capture.shadow`` – the shadow repository exists. It is built in a temporary directory and
   renamed into place, so it exists whole or not at all.
2. ``capture.index`` – what changed is known: from a watcher, or from one ``git status`` against
   the shadow's index. A capture that finds more than tracked files modified in place brings the
   index up to date first; the note naming the index's tree is removed before and written after,
   so a crash here leaves an index that is merely ahead, never a note that lies about it.
3. ``capture.commit`` – the whole checkpoint (blobs, trees, commit, and the ref and HEAD to move)
   has been handed to one ``git fast-import`` started with ``--done``; nothing is durable yet,
   and if turnback dies now fast-import stops without moving a ref. A checkpoint the same as
   the last one this process wrote starts no fast-import: its commit is whole already.
4. ``capture.ref`` – fast-import has written the objects as one pack with its index, and only
   then moved the checkpoint ref and the shadow's HEAD (each atomically, a lock file renamed
   over the ref, never a partial write); the same checkpoint again, turnback moves them so
   itself (:meth:`ShadowRepo.point_refs`).
5. :meth:`Capture.capture` returns; only now may the engine commit a row naming the commit.

A crash before step 4 leaves unreferenced objects, which gc prunes after a grace period
(:mod:`turnback.workspace.housekeeping`); it never leaves a ref pointing at a missing object.

Each capture that writes objects adds a pack, and every git command of a later capture looks
through all of them: a shadow of 500 packs made a turn twice as slow. So once a capture leaves
:data:`PACKS` packs, it starts ``git repack --geometric=2 -d`` in the background, which merges
the small packs into a few (git writes the new pack whole before it deletes the old ones, so a
crash at any point loses nothing). The repack inherits the shadow's lock and holds it until it
exits, as every git process of a holder does: the next capture, gc or restore waits for it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from turnback.errors import GitFailed, TurnbackError
from turnback.faults import point
from turnback.model import WorkspaceCheckpoint
from turnback.workspace import creation
from turnback.workspace.fastimport import FastImport
from turnback.workspace.plan import Captured, Plan
from turnback.workspace.scan import Scan
from turnback.workspace.shadow import INDEX_NEXT, ShadowRepo, ref_name
from turnback.workspace.watched import Watching

#: How many packs a capture may leave before it starts a repack in the background.
PACKS = 32
#: How many of its checkpoints a shadow remembers (:attr:`ShadowRepo.captured`).
CAPTURED = 4096


class Capture:
    """Takes workspace checkpoints: from what the workspace's watcher saw change (``watching``),
    else from a scan (``scan``), within ``time_budget`` seconds each. It remembers, per
    workspace, the last checkpoint it wrote and what it was written from: a capture that finds
    the same again names the same commit."""

    def __init__(self, scan: Scan, watching: Watching, *, time_budget: float) -> None:
        self.scan = scan
        self.watching = watching
        self.time_budget = time_budget
        self._last: dict[Path, Captured] = {}
        self._repacks: dict[Path, subprocess.Popen[bytes]] = {}

    def capture(self, shadow: ShadowRepo, ref: str) -> WorkspaceCheckpoint:
        """Snapshot the files of the shadow's workspace as a commit and point
        ``refs/turnback/<ref>`` at it, in the order above."""
        started = time.monotonic()
        deadline = started + self.time_budget
        full = ref_name(ref)
        watcher = self.watching.watcher(shadow.workspace)
        try:
            with shadow.locked(deadline):
                # taken under the lock: another thread's capture may have moved it on
                last = self._last.pop(shadow.workspace, None)
                creation.ensure(shadow, deadline)
                point("capture.shadow")
                fallback: str | None = None
                usable = False
                if watcher is not None:
                    changes = watcher.take()
                    usable = last is not None and watcher.baseline == last.tree
                    watcher.baseline = None  # until this capture succeeds
                with FastImport(shadow, deadline) as writer:
                    plan: Plan | None = None
                    if usable and last is not None:
                        found = changes.reason or self.watching.plan(
                            shadow, writer, changes, last, deadline
                        )
                        if isinstance(found, Plan):
                            plan = found
                        else:
                            fallback = found
                    if plan is None:
                        plan = self.scan.plan(shadow, deadline, last)
                        plan.fallback = fallback
                    if not plan.synced:
                        point("capture.index")  # a synced plan passed it before its write-tree
                    shadow.repair_ref(full)
                    same = last is not None and not last.skipped and plan.same_as(last)
                    if same and last is not None:
                        commit, tree = last.commit, last.tree  # the same commit, a new ref
                    else:
                        commit, tree = writer.commit(
                            [full, "HEAD"], plan.base, plan.edits, plan.message()
                        )
                    point("capture.commit")
                    writer.finish()
                if same and shadow.head() == commit:  # so it exists: no gc prunes what HEAD names
                    shadow.point_refs([full, "HEAD"], commit)
                elif same:  # another process moved HEAD since: git checks the commit is still there
                    shadow.update_refs([(full, commit), ("HEAD", commit)], deadline)
                point("capture.ref")
                if plan.watched:
                    shadow.note_tree(INDEX_NEXT, tree)
                self._last[shadow.workspace] = Captured(
                    commit,
                    tree,
                    frozenset(plan.skipped),
                    plan.key(shadow.sha256),
                    shadow.sha256,
                    plan.drift,
                )
                if watcher is not None:
                    watcher.baseline = tree
                if len(shadow.captured) >= CAPTURED:
                    shadow.captured.clear()
                shadow.captured[commit] = frozenset(plan.skipped)
                self._repack_when_due(shadow)  # last: the checkpoint is whole whatever it does
        except GitFailed as error:
            if time.monotonic() >= deadline:
                raise GitFailed(
                    f"capturing {shadow.workspace} took longer than its time budget of "
                    f"{self.time_budget:.0f}s; the checkpoint was not taken ({error})"
                ) from error
            raise
        return WorkspaceCheckpoint(
            commit=commit,
            tree=tree,
            ref=ref,
            skipped=tuple(sorted(plan.skipped)),
            seconds=time.monotonic() - started,
            watched=plan.watched,
            fallback=plan.fallback,
        )

    def _repack_when_due(self, shadow: ShadowRepo) -> None:
        """Start a repack of ``shadow`` in the background when it holds :data:`PACKS` packs or
        more and none of this process runs there (see the module's doc). Called holding the
        lock, which the repack inherits."""
        running = self._repacks.get(shadow.dir)
        if running is not None:
            if running.poll() is None:
                return
            del self._repacks[shadow.dir]
        try:
            with os.scandir(shadow.dir / "objects" / "pack") as entries:
                packs = sum(1 for e in entries if e.name.endswith(".pack"))
        except OSError:
            return
        if packs < PACKS:
            return
        try:
            self._repacks[shadow.dir] = shadow.git.start(
                ["repack", "--geometric=2", "-d", "-l", "-q"],
                env=shadow.env(),
                pass_fds=shadow.lock_fds,
                config=shadow.config,
                stdin=False,
                output=False,
            )
        except TurnbackError as error:  # git cannot be started now: a later capture tries again
            shadow.report(f"the background repack could not start: {error}")
