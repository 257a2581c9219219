"""Captures fed by a file watcher: the checkpoint is the last one with the paths that changed,
and the workspace is not scanned."""

from __future__ import annotations

import os
from pathlib import Path

from turnback.workspace.fastimport import Blob, FastImport
from turnback.workspace.plan import Captured, FileReader, Other, Plan, below
from turnback.workspace.shadow import ShadowRepo, find_user_repository
from turnback.workspace.watcher import AVAILABLE as WATCHER_AVAILABLE
from turnback.workspace.watcher import LIMIT, Changes, Watcher


class Watching:
    """The file watchers of workspaces (by real path), and the checkpoints made from what they
    saw change. ``home`` is turnback's home, which no watcher looks into."""

    def __init__(self, reader: FileReader, *, home: Path) -> None:
        self.reader = reader
        self.home = home
        self._watchers: dict[Path, Watcher] = {}
        self._watching: dict[Path, int] = {}

    def watch(self, root: Path, *, limit: int = LIMIT) -> bool:
        """Watch the files of the workspace at ``root`` (its real path) until :meth:`unwatch`;
        calls nest. Returns whether a watcher runs (``False`` where the platform has none)."""
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

    def watcher(self, root: Path) -> Watcher | None:
        """The watcher that feeds the captures of the workspace at ``root``, if one runs."""
        return self._watchers.get(root)

    def unwatch(self, root: Path) -> None:
        """Stop what one :meth:`watch` started; the last one stops the watcher."""
        count = self._watching.get(root, 0) - 1
        if count > 0:
            self._watching[root] = count
            return
        self._watching.pop(root, None)
        watcher = self._watchers.pop(root, None)
        if watcher is not None:
            watcher.close()

    def plan(
        self,
        shadow: ShadowRepo,
        writer: FastImport,
        changes: Changes,
        last: Captured,
        deadline: float,
    ) -> Plan | str:
        """The checkpoint made of the last one and the paths the watcher saw change, or why the
        workspace must be scanned instead.

        It records what a scan would: a path in the last checkpoint is tracked and kept whatever
        the ignore rules say; a new one is added unless ignored; a file too large or unreadable
        is skipped; a new directory is listed whole (without ``.git``)."""
        root = os.fsencode(shadow.workspace)
        limit = self._watchers[shadow.workspace].limit
        tops: list[bytes] = []
        for directory in sorted(changes.directories):
            if not any(below(directory, top) for top in tops):
                tops.append(directory)
        found: dict[bytes, Blob | Other] = {}
        for path in sorted(changes.paths):
            if any(below(path, top) for top in tops):
                continue
            state = self.reader.read(os.path.join(root, path))
            if state is Other.DIRECTORY:
                tops.append(path)
            else:
                found[path] = state
        for top in tops:
            listing = _list_files(root, top)
            if isinstance(listing, str):
                return listing
            for path in listing:
                state = self.reader.read(os.path.join(root, path))
                found[path] = Other.ABSENT if state is Other.DIRECTORY else state
            if len(found) > limit:
                return f"more than {limit:,} paths changed"
        asked = sorted({*found, *tops})
        entries = dict(zip(asked, writer.entries(last.tree, asked), strict=True))
        if any(entry is not None and entry.gitlink for entry in entries.values()):
            return "a nested repository changed"
        new = [p for p, state in found.items() if entries[p] is None and state is not Other.ABSENT]
        ignored = shadow.ignored(new, deadline)
        changed = [*tops, *found]
        skipped = {
            path
            for path in last.skipped
            if not any(
                os.fsencode(path.rstrip("/")) == p or below(os.fsencode(path), p) for p in changed
            )
        }
        edits: dict[bytes, Blob | None] = {top: None for top in tops if entries[top] is not None}
        for path, state in found.items():
            tracked = entries[path] is not None
            if not tracked and path in ignored:
                continue
            if isinstance(state, Blob):
                edits[path] = state  # over a directory, it replaces all below
            elif state is Other.SKIPPED:
                skipped.add(os.fsdecode(path))
                if tracked:
                    edits[path] = None
            elif tracked:
                edits[path] = None
        return Plan(base=last.tree, edits=edits, skipped=skipped, watched=True)


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
