"""Workspace checkpoints: capture, diff, restore, reverse-apply and prune.

Capture write order (docs/design.md, invariant 4, "snapshots before references"). Each step is a
fault point the crash suite kills the process at:

1. ``capture.shadow`` – the shadow repository exists. It is built in a temporary directory and
   renamed into place, so it exists whole or not at all.
2. ``capture.index`` – what changed is known: from a watcher, or from one ``git status`` against
   the shadow's index. A capture that finds more than tracked files modified in place brings the
   index up to date first; the note naming the index's tree is removed before and written after,
   so a crash here leaves an index that is merely ahead, never a note that lies about it.
3. ``capture.commit`` – the whole checkpoint (blobs, trees, commit, and the ref and HEAD to move)
   has been handed to one ``git fast-import`` started with ``--done``; nothing is durable yet,
   and if turnback dies now fast-import stops without moving a ref.
4. ``capture.ref`` – fast-import has written the objects as one pack with its index, and only
   then moved the checkpoint ref and the shadow's HEAD (each atomically, a lock file renamed
   over the ref, never a partial write).
5. :meth:`Snapshots.capture` returns; only now may the engine commit a row naming the commit.

A crash before step 4 leaves unreferenced objects, which :meth:`Snapshots.gc` prunes after a grace
period; it never leaves a ref pointing at a missing object.

Restore order (invariants 9 and 10): the engine has captured the current workspace (so the
restore can be undone) before calling :meth:`Snapshots.restore` or :meth:`Snapshots.reverse_apply`.
Both compute the complete plan from trees first (``restore.plan``), then delete and write one path
at a time (``restore.file`` after each), then finish (``restore.done``). Running a restore again
after a crash is safe: it recomputes the plan from a fresh capture and writes what still differs.
"""

from __future__ import annotations

import enum
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from turnback.errors import (
    CheckpointUnavailable,
    GitFailed,
    RestoreIncomplete,
    RevertConflict,
)
from turnback.faults import point
from turnback.model import ChangeKind, FileChange, RevertPlan, WorkspaceCheckpoint
from turnback.workspace.git import Git, failure
from turnback.workspace.shadow import (
    GITLINK,
    INDEX_NEXT,
    INDEX_TREE,
    OID,
    REGULAR,
    SYMLINK,
    Blob,
    Change,
    Entry,
    FastImport,
    ShadowRepo,
    ensure_workspace,
    find_user_repository,
    ref_name,
)
from turnback.workspace.watcher import AVAILABLE as WATCHER_AVAILABLE
from turnback.workspace.watcher import LIMIT, Changes, Watcher
from turnback.workspace.writer import Refused, WorkspaceWriter

#: Longest any operation other than a capture may take.
OPERATION_TIMEOUT = 600.0
#: Paths handed to one ``update-index`` process; progress is reported between batches.
BATCH = 1000
#: A capture that finds at most this many tracked files modified, and nothing else, leaves the
#: shadow's index as it is (see :meth:`Snapshots._scanned`); more, and it updates the index.
SYNC_AFTER = 256
#: ... or files of more than this many bytes in all.
SYNC_BYTES = 16 * 2**20
#: A file whose status data was last changed less than this long before a capture read it may
#: change again without its status data changing: a file's times come from a clock that ticks
#: every few milliseconds, and a rewrite in the same tick to the same size looks the same. The
#: next capture reads such a file again rather than trust that it holds what the last one read
#: (git's "racily clean" entries). The file's clock is taken to keep to this machine's.
RACY_NS = 100_000_000
#: ... and this long when its times are whole seconds: a filesystem that keeps only seconds
#: (two for FAT) may stamp a later rewrite with the same time.
RACY_WHOLE_SECONDS_NS = 3_000_000_000
#: Objects younger than this survive :meth:`Snapshots.gc` even when unreferenced, so a capture
#: running in another process cannot lose its objects before its ref is written.
OBJECT_GRACE = 3600.0

_KINDS = {
    "A": ChangeKind.ADDED,
    "D": ChangeKind.DELETED,
    "M": ChangeKind.MODIFIED,
    "T": ChangeKind.TYPE_CHANGED,
    "R": ChangeKind.RENAMED,
}

Progress = Callable[[str, int, int], None]
Problem = Callable[[Path, str], None]


def holds_checkpoints(home: Path) -> bool:
    """Whether ``home`` holds shadow repositories: the checkpoints of some session."""
    return any((Path(home) / "shadow").glob("*.git"))


class Snapshots:
    """Workspace checkpoints in shadow repositories under ``home / "shadow"``.

    ``git`` names the git executable (default: ``git`` on PATH). Files larger than
    ``max_file_bytes`` are left out of checkpoints (and so left alone by restores). A capture
    taking longer than ``time_budget`` seconds fails with :class:`GitFailed`. ``progress`` is
    called as ``progress(stage, done, total)`` during long captures and gc. ``problems`` is
    called as ``problems(workspace, message)`` for every damaged thing found and repaired on the
    way (a damaged ref, a stale copy of the user's index); the engine turns them into activities.

    Checkpoints are named by commit id or by the ref name given to :meth:`capture` (a name under
    the shadow's ``refs/turnback/``, e.g. ``s/<session>/<turn>/begin``); every method that takes
    a checkpoint accepts either.

    Refs are always synced to disk. Objects are synced too with ``fsync=True``; by default they
    are left to the page cache, which survives ``kill -9`` of any process but not a power cut.
    After a power cut a checkpoint whose objects were lost reads as unavailable (``exists`` is
    false, diffs and restores raise :class:`CheckpointUnavailable`) and :meth:`check` drops its
    ref: it is a missing checkpoint, as after a failed capture, never a corrupt workspace.
    """

    def __init__(
        self,
        home: Path,
        *,
        git: str | None = None,
        max_file_bytes: int = 50 * 2**20,
        time_budget: float = 60.0,
        progress: Progress | None = None,
        problems: Problem | None = None,
        fsync: bool = False,
    ) -> None:
        self.home = Path(home)
        self.fsync = fsync
        self.git = Git(git, home=self.home / "shadow" / "home")
        self.max_file_bytes = max_file_bytes
        self.time_budget = time_budget
        self.progress = progress
        self.problems = problems
        self._shadows: dict[Path, ShadowRepo] = {}
        # Per workspace, the last checkpoint this object wrote, and what it was written from:
        # a capture that finds the same again names the same commit.
        self._last: dict[Path, _Captured] = {}
        self._watchers: dict[Path, Watcher] = {}
        self._watching: dict[Path, int] = {}

    # -- plumbing -------------------------------------------------------------------------

    def _shadow(self, workspace: Path) -> ShadowRepo:
        root = ensure_workspace(workspace)
        shadow = self._shadows.get(root)
        if shadow is None:

            def report(message: str, root: Path = root) -> None:
                if self.problems is not None:
                    self.problems(root, message)

            shadow = ShadowRepo(self.git, self.home, root, report=report, fsync=self.fsync)
            self._shadows[root] = shadow
        return shadow

    def shadow_dir(self, workspace: Path) -> Path:
        """Where the workspace's shadow repository lives."""
        return self._shadow(workspace).dir

    def _progress(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)

    @staticmethod
    def _deadline(seconds: float = OPERATION_TIMEOUT) -> float:
        return time.monotonic() + seconds

    # -- capture --------------------------------------------------------------------------

    def capture(self, workspace: Path, ref: str) -> WorkspaceCheckpoint:
        """Snapshot the workspace's files as a commit and point ``refs/turnback/<ref>`` at it.

        Objects and ref are written (and synced) before this returns. Raises
        :class:`GitFailed` (the time budget ran out, or git failed) or :class:`GitUnavailable`.
        """
        started = time.monotonic()
        deadline = started + self.time_budget
        full = ref_name(ref)
        shadow = self._shadow(workspace)
        watcher = self._watchers.get(shadow.workspace)
        last = self._last.pop(shadow.workspace, None)
        try:
            with shadow.locked(deadline):
                shadow.ensure(deadline)
                point("capture.shadow")
                fallback: str | None = None
                usable = False
                if watcher is not None:
                    changes = watcher.take()
                    usable = last is not None and watcher.baseline == last.tree
                    watcher.baseline = None  # until this capture succeeds
                with FastImport(shadow, deadline) as writer:
                    plan: _Plan | None = None
                    if usable and last is not None:
                        found = changes.reason or self._watched(
                            shadow, writer, changes, last, deadline
                        )
                        if isinstance(found, _Plan):
                            plan = found
                        else:
                            fallback = found
                    if plan is None:
                        plan = self._scanned_or_rebuilt(shadow, deadline, last)
                        plan.fallback = fallback
                    if not plan.synced:
                        point("capture.index")  # a synced plan passed it before its write-tree
                    if last is not None and not last.skipped and plan.same_as(last):
                        commit, tree = last.commit, last.tree  # the same commit, a new ref
                        shadow.repair_ref(full)
                        writer.reset([full, "HEAD"], commit)
                    else:
                        shadow.repair_ref(full)
                        commit, tree = writer.commit(
                            [full, "HEAD"], plan.base, plan.edits, plan.message()
                        )
                    point("capture.commit")
                    writer.finish()
                point("capture.ref")
                if plan.watched:
                    shadow.note_tree(INDEX_NEXT, tree)
                self._last[shadow.workspace] = _Captured(
                    commit,
                    tree,
                    frozenset(plan.skipped),
                    plan.key(shadow.sha256),
                    shadow.sha256,
                    plan.drift,
                )
                if watcher is not None:
                    watcher.baseline = tree
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

    def _watched(
        self,
        shadow: ShadowRepo,
        writer: FastImport,
        changes: Changes,
        last: _Captured,
        deadline: float,
    ) -> _Plan | str:
        """The checkpoint made of the last one and the paths the watcher saw change, or why the
        workspace must be scanned instead.

        It records what a scan would: a path in the last checkpoint is tracked and kept whatever
        the ignore rules say; a new one is added unless ignored; a file too large or unreadable
        is skipped; a new directory is listed whole (without ``.git``)."""
        root = os.fsencode(shadow.workspace)
        limit = self._watchers[shadow.workspace].limit
        tops: list[bytes] = []
        for directory in sorted(changes.directories):
            if not any(_below(directory, top) for top in tops):
                tops.append(directory)
        found: dict[bytes, Blob | _Other] = {}
        for path in sorted(changes.paths):
            if any(_below(path, top) for top in tops):
                continue
            state = self._read(os.path.join(root, path))
            if state is _Other.DIRECTORY:
                tops.append(path)
            else:
                found[path] = state
        for top in tops:
            listing = _list_files(root, top)
            if isinstance(listing, str):
                return listing
            for path in listing:
                state = self._read(os.path.join(root, path))
                found[path] = _Other.ABSENT if state is _Other.DIRECTORY else state
            if len(found) > limit:
                return f"more than {limit:,} paths changed"
        asked = sorted({*found, *tops})
        entries = dict(zip(asked, writer.entries(last.tree, asked), strict=True))
        if any(entry is not None and entry.gitlink for entry in entries.values()):
            return "a nested repository changed"
        new = [p for p, state in found.items() if entries[p] is None and state is not _Other.ABSENT]
        ignored = self._ignored(shadow, new, deadline)
        changed = [*tops, *found]
        skipped = {
            path
            for path in last.skipped
            if not any(
                os.fsencode(path.rstrip("/")) == p or _below(os.fsencode(path), p) for p in changed
            )
        }
        edits: dict[bytes, Blob | None] = {top: None for top in tops if entries[top] is not None}
        for path, state in found.items():
            tracked = entries[path] is not None
            if not tracked and path in ignored:
                continue
            if isinstance(state, Blob):
                edits[path] = state  # over a directory, it replaces all below
            elif state is _Other.SKIPPED:
                skipped.add(os.fsdecode(path))
                if tracked:
                    edits[path] = None
            elif tracked:
                edits[path] = None
        return _Plan(base=last.tree, edits=edits, skipped=skipped, watched=True)

    @staticmethod
    def _ignored(shadow: ShadowRepo, paths: list[bytes], deadline: float) -> set[bytes]:
        """Which of these untracked paths the ignore rules exclude from checkpoints."""
        if not paths:
            return set()
        # check-ignore refuses literal pathspecs; "./" keeps a leading ":" from reading as magic
        result = shadow.git.run(
            ["check-ignore", "--no-index", "-z", "--stdin"],
            env={**shadow.env(), "GIT_LITERAL_PATHSPECS": "0"},
            input=b"".join(b"./" + path + b"\0" for path in paths),
            timeout=deadline - time.monotonic(),
            check=False,
            cwd=shadow.workspace,
        )
        if result.returncode not in (0, 1):
            raise failure(["check-ignore"], result)
        return {path[2:] for path in result.stdout.split(b"\0") if path}

    # -- watching ---------------------------------------------------------------------------

    def watch(self, workspace: Path, *, limit: int = LIMIT) -> bool:
        """Watch the workspace's files until :meth:`unwatch`, so that captures look only at the
        paths that changed instead of scanning the workspace. The first capture after this scans
        and sets the baseline. Calls nest (one :meth:`unwatch` each). Returns whether a watcher
        runs: ``False`` where the platform has none (captures scan, as without this)."""
        root = ensure_workspace(workspace)
        if root in self._watchers:
            self._watching[root] += 1
            return True
        if not WATCHER_AVAILABLE:
            return False
        user = find_user_repository(root)
        self._watchers[root] = Watcher(
            root,
            limit=limit,
            skip=[self.home.resolve()],
            excludes=user.exclude if user is not None else None,
        )
        self._watching[root] = 1
        return True

    def watching(self, workspace: Path) -> bool:
        """Whether a watcher feeds this workspace's captures."""
        return ensure_workspace(workspace) in self._watchers

    def unwatch(self, workspace: Path) -> None:
        """Stop what one :meth:`watch` started; the last one stops the watcher."""
        root = ensure_workspace(workspace)
        count = self._watching.get(root, 0) - 1
        if count > 0:
            self._watching[root] = count
            return
        self._watching.pop(root, None)
        watcher = self._watchers.pop(root, None)
        if watcher is not None:
            watcher.close()

    def _scanned_or_rebuilt(
        self, shadow: ShadowRepo, deadline: float, last: _Captured | None
    ) -> _Plan:
        try:
            return self._scanned(shadow, deadline, last)
        except GitFailed as error:
            stale = shadow.seeded or "index" in str(error)
            if time.monotonic() >= deadline or not stale:
                raise
            # A stale copy of the user's index, or a damaged index: start afresh once.
            shadow.report(
                f"the checkpoint index of {shadow.workspace} could not be used ({error}); "
                "it was rebuilt by hashing the workspace"
            )
            shadow.unseed()
            return self._scanned(shadow, deadline, None)

    def _scanned(self, shadow: ShadowRepo, deadline: float, last: _Captured | None) -> _Plan:
        """Find what changed with one ``git status`` against the shadow's index.

        When it finds only tracked files modified in place (the common warm capture), the
        checkpoint is the index's tree with those files: nothing rewrites the index, and they
        are found again by the next status until a capture that adds or deletes updates it. Any
        other change brings the index up to date and writes its tree.

        Those files are not read again by every capture: when the last capture of this process
        was made the same way from the same index, and each file it read still has the status
        data (inode, size, times, mode) it had then, the last checkpoint's tree already holds it,
        and the new checkpoint is that tree with the files that did change. A file whose times
        were too recent when it was read (``RACY_NS``) is read again."""
        index_tree = shadow.noted_tree(INDEX_TREE)
        behind = shadow.noted_tree(INDEX_NEXT)
        if behind is not None:
            if index_tree is not None and behind != index_tree:
                # Watched captures moved on without the index: move it to the last one, keeping
                # the stat data of every entry that did not change.
                shadow.note_tree(INDEX_TREE, None)
                shadow.run("read-tree", "-m", "-i", index_tree, behind, deadline=deadline)
                shadow.note_tree(INDEX_TREE, behind)
                index_tree = behind
            shadow.note_tree(INDEX_NEXT, None)
        status = shadow.run(
            "status",
            "--porcelain=v2",
            "-z",
            "--untracked-files=normal",  # served by the untracked cache; "all" is not
            "--ignore-submodules=dirty",
            "--no-renames",
            deadline=deadline,
        )
        # git skips a directory it cannot list with no more than a warning: once it has warned,
        # find them, so the checkpoint names them as left out instead of passing over them.
        unreadable = self._unreadable(shadow, deadline) if status.stderr else set()
        reported = [t for t in status.stdout.split(b"\0") if t]
        if index_tree is not None and len(reported) <= SYNC_AFTER:
            root = os.fsencode(shadow.workspace)
            paths: list[bytes] = []
            for token in reported:
                fields = token.split(b" ", 8)
                # "1 XY N... ": a tracked file (not a gitlink) changed on disk, not deleted
                if fields[0] != b"1" or fields[1][1:2] not in b".MT" or fields[2][:1] != b"N":
                    break
                if fields[1][1:2] != b".":  # staged only: the index already holds it
                    paths.append(fields[8])
            else:
                known = last.drift if last is not None and not last.skipped else None
                base = index_tree
                if (
                    known is not None
                    and not unreadable
                    and known.index_tree == index_tree
                    and known.files.keys() <= set(paths)
                ):
                    base = last.tree if last is not None else index_tree
                else:
                    known = None
                drift = _Drift(index_tree, {})
                edits: dict[bytes, Blob | None] = {}
                size = 0
                for path in paths:
                    full = os.path.join(root, path)
                    read_at = time.time_ns()
                    try:
                        info = os.lstat(full)
                    except OSError:
                        break
                    seen = _Seen.of(info, read_at)
                    was = known.files.get(path) if known is not None else None
                    if was is not None and was.trusted and was.status == seen.status:
                        drift.files[path] = was  # the last checkpoint holds it as it is
                        size += was.size
                        continue
                    found = self._read(full, info)
                    if not isinstance(found, Blob):
                        break
                    edits[path] = found
                    drift.files[path] = seen
                    size += seen.size
                    if size > SYNC_BYTES:
                        break  # cheaper to hash them once into the index than again each time
                else:
                    return _Plan(base=base, edits=edits, skipped=unreadable, drift=drift)
        shadow.note_tree(INDEX_TREE, None)
        tree, skipped = self._write_tree(shadow, reported, deadline)
        shadow.note_tree(INDEX_TREE, tree)
        return _Plan(base=tree, skipped={*skipped, *unreadable}, synced=True)

    def _unreadable(self, shadow: ShadowRepo, deadline: float) -> set[str]:
        """The directories of the workspace that cannot be listed, named with a trailing
        ``/``; those the ignore rules exclude, nested repositories and turnback's home are not
        looked into. What is in them stays as the last checkpoint had it, and restores leave
        them alone."""
        root = os.fsencode(shadow.workspace)
        home = os.fsencode(self.home.resolve())
        found: list[bytes] = []
        pending = [b""]
        while pending:
            directory = pending.pop()
            full = os.path.join(root, directory) if directory else root
            if full == home:
                continue
            try:
                with os.scandir(full) as entries:
                    children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
            except PermissionError:
                found.append(directory + b"/")
                continue
            except (FileNotFoundError, NotADirectoryError):
                continue
            if directory and any(name == b".git" for name, _is_dir in children):
                continue  # a nested repository: recorded as a gitlink, never entered
            pending.extend(
                os.path.join(directory, name)
                for name, is_dir in children
                if is_dir and name != b".git"
            )
        ignored = self._ignored(shadow, found, deadline)
        return {os.fsdecode(path) for path in found if path not in ignored}

    def _read(self, full: bytes, info: os.stat_result | None = None) -> Blob | _Other:
        """What a capture records at ``full`` now: its content, or why it records none. ``info``
        is its ``lstat`` when the caller took it (before the read, never after)."""
        try:
            info = info or os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                return Blob(SYMLINK, os.readlink(full))
            if stat.S_ISDIR(info.st_mode):
                return _Other.DIRECTORY
            if not stat.S_ISREG(info.st_mode):
                return _Other.ABSENT  # a socket or fifo: git records none
            if info.st_size > self.max_file_bytes or not os.access(full, os.R_OK):
                return _Other.SKIPPED
            with open(full, "rb", buffering=0) as file:
                data = file.read()
        except (FileNotFoundError, NotADirectoryError):
            return _Other.ABSENT
        except PermissionError:
            return _Other.SKIPPED
        return Blob(REGULAR[1] if info.st_mode & stat.S_IXUSR else REGULAR[0], data)

    def _write_tree(
        self, shadow: ShadowRepo, reported: list[bytes], deadline: float
    ) -> tuple[str, list[str]]:
        """Bring the shadow's index up to date with what status ``reported`` and write its
        tree."""
        root = os.fsencode(shadow.workspace)
        update: list[bytes] = []
        directories: list[bytes] = []
        nested: list[bytes] = []
        remove: list[bytes] = []  # deleted (possibly now beyond a symlink), or too large
        tracked: set[bytes] = set()
        tokens = iter(reported)
        for token in tokens:
            if token.startswith(b"1 "):
                fields = token.split(b" ", 8)
                if fields[1][1:2] == b"D":
                    remove.append(fields[8])
                    if _is_directory(os.path.join(root, fields[8])):
                        directories.append(fields[8] + b"/")  # status does not look inside
                elif fields[1][1:2] != b".":
                    update.append(fields[8])
                    tracked.add(fields[8])
            elif token.startswith(b"2 "):
                fields = token.split(b" ", 9)
                next(tokens, None)  # the original path
                update.append(fields[9])
                tracked.add(fields[9])
            elif token.startswith(b"u "):
                fields = token.split(b" ", 10)
                update.append(fields[10])
                tracked.add(fields[10])
            elif token.startswith(b"? "):
                path = token[2:]
                if path.endswith(b"/"):
                    directories.append(path)
                else:
                    update.append(path)
        while directories:  # new directories: list their files, find repositories inside
            inside: list[bytes] = []
            for directory in directories:
                if os.path.lexists(os.path.join(root, directory, b".git")):
                    nested.append(directory[:-1])  # a repository inside the workspace
                else:
                    inside.append(directory)
            directories = []
            if inside:
                listed = shadow.run(
                    "ls-files",
                    "-z",
                    "--others",
                    "--exclude-standard",
                    "--",
                    *(os.fsdecode(d) for d in inside),
                    deadline=deadline,
                ).stdout
                for path in filter(None, listed.split(b"\0")):
                    (directories if path.endswith(b"/") else update).append(path)
        skipped: list[str] = []
        add: list[bytes] = []
        for path in update:
            full = os.path.join(root, path)
            try:
                info = os.lstat(full)
            except (FileNotFoundError, NotADirectoryError):
                add.append(path)  # --remove drops it from the index
                continue
            if stat.S_ISREG(info.st_mode) and (
                info.st_size > self.max_file_bytes or not os.access(full, os.R_OK)
            ):
                skipped.append(os.fsdecode(path))
                if path in tracked:
                    remove.append(path)
                continue
            add.append(path)
        if remove:
            shadow.run(
                "update-index",
                "--force-remove",
                "-z",
                "--stdin",
                deadline=deadline,
                input=b"\0".join(remove) + b"\0",
            )
        for start in range(0, len(add), BATCH):
            self._progress("capture", start, len(add))
            shadow.run(
                "update-index",
                "--add",
                "--remove",
                "--replace",
                "-z",
                "--stdin",
                deadline=deadline,
                input=b"\0".join(add[start : start + BATCH]) + b"\0",
            )
        if add:
            self._progress("capture", len(add), len(add))
        skipped += self._add_nested(shadow, nested, deadline)
        point("capture.index")
        tree = shadow.run("write-tree", deadline=deadline).stdout.decode().strip()
        return tree, sorted(skipped)

    @staticmethod
    def _add_nested(shadow: ShadowRepo, nested: list[bytes], deadline: float) -> list[str]:
        """Record nested repositories as gitlinks; those without a commit are left out."""
        if not nested:
            return []
        args = ("update-index", "--add", "--replace", "-z", "--stdin")
        everything = b"\0".join(nested) + b"\0"
        if shadow.run(*args, deadline=deadline, input=everything, check=False).returncode == 0:
            return []
        skipped = []
        for path in nested:
            result = shadow.run(*args, deadline=deadline, input=path + b"\0", check=False)
            if result.returncode != 0:
                skipped.append(os.fsdecode(path))
        return skipped

    # -- reading checkpoints --------------------------------------------------------------

    def exists(self, workspace: Path, commit: str) -> bool:
        """Whether the checkpoint (commit id or ref name) and its tree can be read.

        A damaged ref found on the way is dropped and reported."""
        shadow = self._shadow(workspace)
        if not shadow.created:
            return False
        deadline = self._deadline()
        try:
            oid = shadow.resolve(commit, deadline)
        except CheckpointUnavailable:
            return False
        return shadow.object_info([f"{oid}^{{tree}}"], deadline)[0] is not None

    def changes(self, workspace: Path, old: str, new: str) -> list[FileChange]:
        """What changed from checkpoint ``old`` to ``new``: one :class:`FileChange` per path,
        with renames detected, additions and deletions counted and binary files flagged."""
        shadow = self._shadow(workspace)
        deadline = self._deadline()
        old_commit, new_commit = shadow.resolve_all([old, new], deadline)
        skipped_old, skipped_new = self._skipped(shadow, (old_commit, new_commit), deadline)
        result = []
        for change in shadow.diff(old_commit, new_commit, deadline, renames=True, numstat=True):
            kind = _KINDS[change.status]
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

    def patch(self, workspace: Path, old: str, new: str, paths: Sequence[str] | None = None) -> str:
        """The unified patch from checkpoint ``old`` to ``new``, optionally for some paths."""
        shadow = self._shadow(workspace)
        deadline = self._deadline()
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
        ).stdout
        return out.decode("utf-8", "replace")

    @staticmethod
    def _skipped(shadow: ShadowRepo, commits: Sequence[str], deadline: float) -> list[set[str]]:
        out = shadow.run(
            "cat-file",
            "--batch",
            deadline=deadline,
            input="".join(c + "\n" for c in commits).encode(),
        ).stdout.decode("utf-8", "surrogateescape")
        result: list[set[str]] = [set() for _ in commits]
        index = -1
        for line in out.splitlines():
            fields = line.split(" ")
            if len(fields) == 3 and fields[1] == "commit" and OID.fullmatch(fields[0]):
                index += 1
            elif line.startswith("Skipped: ") and index >= 0:
                result[index].add(json.loads(line[len("Skipped: ") :]))
        return result

    # -- restoring files ------------------------------------------------------------------

    def restore(
        self, workspace: Path, target: str, *, current: str, keep: str | None = None
    ) -> list[str]:
        """Make the workspace's files equal to checkpoint ``target``; returns the paths written
        or deleted.

        ``current`` must be a capture of the workspace taken just before: only paths that
        differ between ``current`` and ``target`` are written or deleted, so ignored files,
        files too large to capture and anything else outside the checkpoints are never touched.
        ``keep`` is the checkpoint taken when the turns being undone began: a path in ``keep``
        but not in ``target`` (a file the user created before those turns) is never deleted;
        it is set back to its content in ``keep``. Nested repositories and submodules are left
        alone, and so is any path the writer refuses (below a symbolic link, inside a nested
        repository, or on disk while absent from ``current``); each refusal is reported through
        ``problems``.
        """
        shadow = self._shadow(workspace)
        deadline = self._deadline()
        with shadow.locked(deadline):
            now, goal, *rest = shadow.resolve_all(
                [current, target] if keep is None else [current, target, keep], deadline
            )
            before = rest[0] if rest else None
            plan, present, _kept = self._restore_plan(shadow, now, goal, before, deadline)
            left = _leave_unreadable(plan, self._skipped(shadow, [now], deadline)[0])
            point("restore.plan")
            done, refused = self._apply(shadow, plan, present, deadline)
            refused += [(directory, "it cannot be read") for directory in left]
            for path, reason in refused:
                shadow.report(f"restore left {path} alone: {reason}")
            point("restore.done")
        return done

    @staticmethod
    def _restore_plan(
        shadow: ShadowRepo, now: str, goal: str, before: str | None, deadline: float
    ) -> tuple[dict[str, Entry | None], dict[str, Entry | None], set[str]]:
        """What :meth:`restore` writes (path: entry, ``None`` to delete), what is there now, and
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
            if not _gitlink(entry) and not _gitlink(present[path])
        }
        return plan, present, kept_paths

    def revert_plan(
        self,
        workspace: Path,
        target: str,
        *,
        current: str,
        keep: str | None = None,
        turns: Sequence[tuple[str, str]] = (),
        keep_user_edits: bool = False,
    ) -> RevertPlan:
        """What :meth:`restore` (or, with ``keep_user_edits``, :meth:`reverse_apply` of
        ``turns``) would do to the workspace captured as ``current``; writes no file.

        ``turns`` holds the ``(begin, end)`` checkpoints of the turns being undone, oldest first:
        what changed between them and after the last one are the hand edits, which a plain
        restore overwrites (``conflicts``) and ``keep_user_edits`` keeps, or refuses where they
        clash with the agent's changes (``conflicts`` too)."""
        shadow = self._shadow(workspace)
        deadline = self._deadline()
        with shadow.locked(deadline):
            now, goal, *rest = shadow.resolve_all(
                [current, target] if keep is None else [current, target, keep], deadline
            )
            plain, present, pre_existing = self._restore_plan(
                shadow, now, goal, rest[0] if rest else None, deadline
            )
            skipped = self._skipped(shadow, [now], deadline)[0]
            _leave_unreadable(plain, skipped)
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
                plan, on_disk, clashes = self._reverse_plan(shadow, now, ends, deadline, skipped)
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
                _file_change(c)
                for c in shadow.diff(now, after.decode().strip(), deadline, numstat=True)
            ]
            since = {
                c.path: _file_change(c) for c in shadow.diff(goal, now, deadline, numstat=True)
            }
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

    def reverse_apply(
        self, workspace: Path, *, turns: Sequence[tuple[str, str]], current: str
    ) -> list[str]:
        """Undo only what the given turns changed, keeping every other change on disk.

        ``turns`` holds one ``(begin, end)`` checkpoint pair per turn to undo, oldest first;
        they are undone newest first, each as a three-way merge of the current files (ours),
        the turn's end (base) and its begin (theirs). Hand edits made between or after those
        turns, to other files or to other lines of the same files, survive. ``current`` must be
        a capture taken just before. If any path conflicts (the same lines changed by hand,
        binary or symlink changes on both sides, a file the user edited that the turn created,
        or a path the writer refuses) nothing is written and :class:`RevertConflict` lists the
        paths. Returns the paths written or deleted.
        """
        shadow = self._shadow(workspace)
        deadline = self._deadline()
        with shadow.locked(deadline):
            now, *ends = shadow.resolve_all(
                [current, *(spec for pair in turns for spec in pair)], deadline
            )
            skipped = self._skipped(shadow, [now], deadline)[0]
            plan, present, conflicts = self._reverse_plan(shadow, now, ends, deadline, skipped)
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
            done, refused = self._apply(shadow, plan, present, deadline)
            if refused:  # the files changed after the check above; report what was left
                for path, reason in refused:
                    shadow.report(f"revert left {path} alone: {reason}")
            point("restore.done")
        return done

    def _reverse_plan(
        self,
        shadow: ShadowRepo,
        now: str,
        ends: Sequence[str],
        deadline: float,
        skipped: Collection[str] = (),
    ) -> tuple[dict[str, Entry | None], dict[str, Entry | None], set[str]]:
        """What :meth:`reverse_apply` writes, what is there now, and the conflicting paths.
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
                        result[path] = self._merge(
                            shadow, ours, change.new, change.old, Path(scratch), deadline
                        )
                    except _Conflict:
                        conflicts.add(path)
        plan = {path: entry for path, entry in result.items() if entry != present[path]}
        _leave_unreadable(plan, skipped)
        if not conflicts:
            with WorkspaceWriter(shadow.workspace) as writer:
                for path, entry in plan.items():
                    try:
                        writer.check(path, absent=present[path] is None, delete=entry is None)
                    except Refused:
                        conflicts.add(path)
        return plan, present, conflicts

    def _merge(
        self,
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
        if _gitlink(ours) or _gitlink(base) or _gitlink(theirs):
            return ours  # nested repositories are left alone
        if ours is None or base is None or theirs is None:
            raise _Conflict
        if not all(entry.mode in REGULAR for entry in (ours, base, theirs)):
            raise _Conflict
        if ours.mode == base.mode:
            mode = theirs.mode
        elif theirs.mode == base.mode:
            mode = ours.mode
        else:
            raise _Conflict
        if ours.oid == base.oid:
            return Entry(mode, theirs.oid)
        if theirs.oid == base.oid or ours.oid == theirs.oid:
            return Entry(mode, ours.oid)
        contents = shadow.blobs((ours.oid, base.oid, theirs.oid), deadline)
        files = []
        for name, entry in (("ours", ours), ("base", base), ("theirs", theirs)):
            data = contents[entry.oid]
            if b"\0" in data[:8000]:
                raise _Conflict  # binary
            file = scratch / name
            file.write_bytes(data)
            files.append(str(file))
        merged = shadow.run("merge-file", "-p", "-q", *files, deadline=deadline, check=False)
        if merged.returncode != 0:
            raise _Conflict
        return Entry(mode, shadow.write_blob(merged.stdout, deadline))

    def _apply(
        self,
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

    # -- refs and pruning -----------------------------------------------------------------

    def delete_refs(self, workspace: Path, refs: Sequence[str]) -> None:
        """Delete checkpoint refs (missing ones are ignored); their objects go at the next gc."""
        shadow = self._shadow(workspace)
        if not shadow.created or not refs:
            return
        deadline = self._deadline()
        names = [ref_name(ref) for ref in refs]
        with shadow.locked(deadline):
            for name in names:
                shadow.repair_ref(name)
            shadow.update_refs(((name, None) for name in names), deadline)

    def gc(
        self,
        workspace: Path,
        *,
        keep: Collection[str] | None = None,
        older_than: float | None = None,
        object_grace: float = OBJECT_GRACE,
    ) -> tuple[int, int]:
        """Prune checkpoint refs and the objects only they kept; returns (refs removed, bytes
        freed).

        With ``keep`` (ref names or commit ids still named by the store), every other ref whose
        checkpoint is older than ``older_than`` seconds (any age if ``None``) is deleted. Without
        ``keep`` no ref is deleted and only the object store is repacked. Unreferenced objects
        younger than ``object_grace`` seconds are kept (they may belong to a capture in flight).
        """
        shadow = self._shadow(workspace)
        if not shadow.created:
            return 0, 0
        deadline = self._deadline()
        self.check(workspace)
        with shadow.locked(deadline):
            removed: list[str] = []
            if keep is not None:
                kept = {ref_name(k) if not OID.fullmatch(k) else k for k in keep}
                now = time.time()
                for ref, oid, when in shadow.list_refs(deadline):
                    if ref in kept or oid in kept:
                        continue
                    if older_than is not None and now - when < older_than:
                        continue
                    removed.append(ref)
                shadow.update_refs(((ref, None) for ref in removed), deadline)
            self._progress("gc", 1, 3)
            before = shadow.size()
            expiry = "now" if object_grace <= 0 else f"{int(object_grace)}.seconds.ago"
            shadow.run(
                "repack",
                "-A",
                "-d",
                "-l",
                "-q",
                f"--unpack-unreachable={expiry}",
                deadline=deadline,
            )
            self._progress("gc", 2, 3)
            shadow.run("prune", f"--expire={expiry}", deadline=deadline)
            self._progress("gc", 3, 3)
            freed = max(0, before - shadow.size())
        return len(removed), freed

    def check(self, workspace: Path) -> list[str]:
        """Find and repair damage in the workspace's shadow repository; returns the problems.

        Damaged refs (empty, truncated or garbage files) and refs whose commit is missing are
        dropped, stale lock files removed, a damaged HEAD reset. Every problem is also passed to
        ``problems``. The user's own repository is only ever read and so is never damaged."""
        shadow = self._shadow(workspace)
        if not shadow.created:
            return []
        found: list[str] = []
        deadline = self._deadline()
        original = shadow.report

        def collect(message: str) -> None:
            found.append(message)
            original(message)

        shadow.report = collect
        try:
            with shadow.locked(deadline):
                shadow.ensure(deadline)
                # the report fast-import leaves when a capture was killed (or failed) under it
                for report in shadow.dir.glob("fast_import_crash_*"):
                    report.unlink()
                for ref, path in list(shadow.loose_ref_files()):
                    if path.name.endswith(".lock"):
                        path.unlink()
                        continue
                    shadow.repair_ref(ref)
                packed = shadow.dir / "packed-refs"
                if packed.exists() and not _packed_refs_ok(packed.read_bytes()):
                    packed.unlink()
                    collect(f"the packed refs of {shadow.workspace}'s checkpoints were damaged")
                refs = shadow.list_refs(deadline)
                infos = shadow.object_info([f"{oid}^{{tree}}" for _r, oid, _w in refs], deadline)
                missing = [ref for (ref, _o, _w), info in zip(refs, infos, strict=True) if not info]
                for ref in missing:
                    collect(
                        f"checkpoint ref {ref} of {shadow.workspace} names a missing commit or "
                        "tree and has been dropped"
                    )
                shadow.update_refs(((ref, None) for ref in missing), deadline)
                alternates = shadow.dir / "objects" / "info" / "alternates"
                if alternates.exists():
                    for line in alternates.read_text(encoding="utf-8").splitlines():
                        if line and not Path(line).is_dir():
                            collect(
                                f"the object store {line} that checkpoints of "
                                f"{shadow.workspace} borrow from is gone; older checkpoints may "
                                "be unavailable"
                            )
        finally:
            shadow.report = original
        return found


class _Conflict(Exception):
    pass


class _Other(enum.Enum):
    """What a capture finds at a path instead of a file's content."""

    ABSENT = "absent"
    DIRECTORY = "directory"
    SKIPPED = "skipped"  # too large, or unreadable


@dataclass(slots=True)
class _Plan:
    """A checkpoint to write: a tree and the paths to change in it."""

    base: str | None
    edits: dict[bytes, Blob | None] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    synced: bool = False  # the shadow's index holds exactly ``base``
    watched: bool = False  # the paths came from a watcher, not a scan
    fallback: str | None = None  # why a watched workspace was scanned
    drift: _Drift | None = None  # the files read over the index's tree (see Snapshots._scanned)

    def message(self) -> str:
        return "turnback checkpoint\n\n" + "".join(
            f"Skipped: {json.dumps(path)}\n" for path in sorted(self.skipped)
        )

    def key(self, sha256: bool) -> tuple[str | None, frozenset[tuple[bytes, str, str]]]:
        """What the tree is made of: the same key, the same tree."""
        return self.base, frozenset(
            (path, blob.mode, blob.oid(sha256)) if blob else (path, "", "")
            for path, blob in self.edits.items()
        )

    def same_as(self, last: _Captured) -> bool:
        if self.skipped:
            return False
        if not self.edits and self.base == last.tree:
            return True
        return (
            last.key is not None
            and last.key[0] == self.base
            and self.edits.keys() == {path for path, _mode, _oid in last.key[1]}
            and self.key(last.sha256) == last.key
        )


@dataclass(frozen=True, slots=True)
class _Captured:
    """The last checkpoint a :class:`Snapshots` wrote for a workspace."""

    commit: str
    tree: str
    skipped: frozenset[str]
    key: tuple[str | None, frozenset[tuple[bytes, str, str]]] | None
    sha256: bool = False
    drift: _Drift | None = None


@dataclass(frozen=True, slots=True)
class _Seen:
    """A file a capture read: its status data then, and whether a later capture may trust
    that the same status data means the same content."""

    status: tuple[int, int, int, int, int, int]
    size: int
    trusted: bool

    @staticmethod
    def of(info: os.stat_result, read_at: int) -> _Seen:
        changed = max(info.st_mtime_ns, info.st_ctime_ns)
        fine = info.st_mtime_ns % 10**9 and info.st_ctime_ns % 10**9
        return _Seen(
            (
                info.st_dev,
                info.st_ino,
                info.st_mode,
                info.st_size,
                info.st_mtime_ns,
                info.st_ctime_ns,
            ),
            info.st_size,
            changed < read_at - (RACY_NS if fine else RACY_WHOLE_SECONDS_NS),
        )


@dataclass(frozen=True, slots=True)
class _Drift:
    """The tracked files a capture found modified against the shadow's index (whose tree is
    ``index_tree``), each as it read it."""

    index_tree: str
    files: dict[bytes, _Seen]


def _below(path: bytes, directory: bytes) -> bool:
    return path.startswith(directory + b"/")


def _leave_unreadable(plan: dict[str, Entry | None], skipped: Collection[str]) -> list[str]:
    """Take out of a restore's ``plan`` every path below a directory the capture could not read
    (a skipped path ending in ``/``); returns those directories that held one."""
    unreadable = tuple(path for path in skipped if path.endswith("/"))
    left: set[str] = set()
    for path in [p for p in plan if p.startswith(unreadable)]:
        del plan[path]
        left.update(d for d in unreadable if path.startswith(d))
    return sorted(left)


def _list_files(root: bytes, top: bytes) -> list[bytes] | str:
    """Every file and symbolic link below ``top`` (relative paths), or why the workspace must be
    scanned instead: a nested repository, or a directory that cannot be listed, is among them.
    A ``.git`` directory is never entered."""
    files: list[bytes] = []
    pending = [top]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(os.path.join(root, directory)) as entries:
                children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            continue
        except PermissionError:
            return f"{os.fsdecode(directory)} cannot be read"
        if any(name == b".git" for name, _is_dir in children):
            return f"a repository is nested inside {os.fsdecode(top)}"
        for name, is_dir in children:
            path = os.path.join(directory, name)
            (pending if is_dir else files).append(path)
    return files


def _is_directory(path: bytes) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _file_change(change: Change) -> FileChange:
    return FileChange(
        path=change.path,
        kind=_KINDS[change.status],
        additions=change.additions,
        deletions=change.deletions,
        binary=change.binary,
        old_path=change.old_path,
    )


def _gitlink(entry: Entry | None) -> bool:
    return entry is not None and entry.mode == GITLINK


def _packed_refs_ok(data: bytes) -> bool:
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("^"):
            if not OID.fullmatch(line[1:]):
                return False
            continue
        oid, _, ref = line.partition(" ")
        if not OID.fullmatch(oid) or not ref.startswith("refs/"):
            return False
    return True
