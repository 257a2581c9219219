"""Finding what changed in a workspace with one ``git status`` against its shadow's index, and
bringing that index up to date when a capture needs it (:meth:`Scan._scanned` says when).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from turnback.errors import GitFailed
from turnback.faults import point
from turnback.workspace.fastimport import Blob
from turnback.workspace.plan import Captured, Drift, FileReader, Plan, Seen
from turnback.workspace.shadow import INDEX_NEXT, INDEX_TREE, ShadowRepo

#: Paths handed to one ``update-index`` process; progress is reported between batches.
BATCH = 1000
#: A capture that finds at most this many tracked files modified, and nothing else, leaves the
#: shadow's index as it is (see :meth:`Scan._scanned`); more, and it updates the index.
SYNC_AFTER = 256
#: ... or files of more than this many bytes in all.
SYNC_BYTES = 16 * 2**20

Progress = Callable[[str, int, int], None]


class Scan:
    """Plans a workspace's checkpoint from a ``git status`` of it. ``home`` is turnback's home,
    never looked into; ``progress(stage, done, total)`` hears how a long update goes."""

    def __init__(self, reader: FileReader, *, home: Path, progress: Progress) -> None:
        self.reader = reader
        self.home = home
        self.progress = progress

    def plan(self, shadow: ShadowRepo, deadline: float, last: Captured | None) -> Plan:
        """The checkpoint of the workspace as it is now, found with one ``git status``; a shadow
        index that cannot be used (a stale copy of the user's, or damaged) is rebuilt once."""
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

    def _scanned(self, shadow: ShadowRepo, deadline: float, last: Captured | None) -> Plan:
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
                drift = Drift(index_tree, {})
                edits: dict[bytes, Blob | None] = {}
                size = 0
                for path in paths:
                    full = os.path.join(root, path)
                    read_at = time.time_ns()
                    try:
                        info = os.lstat(full)
                    except OSError:
                        break
                    seen = Seen.of(info, read_at)
                    was = known.files.get(path) if known is not None else None
                    if was is not None and was.trusted and was.status == seen.status:
                        drift.files[path] = was  # the last checkpoint holds it as it is
                        size += was.size
                        continue
                    found = self.reader.read(full, info)
                    if not isinstance(found, Blob):
                        break
                    edits[path] = found
                    drift.files[path] = seen
                    size += seen.size
                    if size > SYNC_BYTES:
                        break  # cheaper to hash them once into the index than again each time
                else:
                    return Plan(base=base, edits=edits, skipped=unreadable, drift=drift)
        shadow.note_tree(INDEX_TREE, None)
        tree, skipped = self._write_tree(shadow, reported, deadline)
        shadow.note_tree(INDEX_TREE, tree)
        return Plan(base=tree, skipped={*skipped, *unreadable}, synced=True)

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
        ignored = shadow.ignored(found, deadline)
        return {os.fsdecode(path) for path in found if path not in ignored}

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
            if stat.S_ISREG(info.st_mode) and self.reader.skips(full, info):
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
            self.progress("capture", start, len(add))
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
            self.progress("capture", len(add), len(add))
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


def _is_directory(path: bytes) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
