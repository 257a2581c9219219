"""A file-system watcher that tells a capture which paths changed, so it skips the scan.

Some facts about inotify (Linux) that this module depends on:

- An event is queued on the inotify descriptor inside the system call that made the change.
  Reading the descriptor until it is empty, at the start of a capture, therefore sees every change
  whose call returned before: there is no delivery delay to wait out. The watcher reads only
  then, on the capture's thread; it runs no thread of its own.
- A watch covers one directory, not the tree below it. A directory created (or moved in) is
  watched only once the watcher adds a watch, and files made in it before that have no events:
  so a new directory is listed whole by the next capture, after its watch is in place.
- A watch follows its directory's inode. When a directory moves, events below it would still
  carry its old path, so its watches are dropped and it is watched anew where it now is, and
  listed whole.
- The queue is bounded (``fs.inotify.max_queued_events``). When it overflows, the kernel drops
  events and queues ``IN_Q_OVERFLOW``; the watcher then cannot say what changed.
- Writes through a shared memory mapping (``mmap``) raise no event. Editors and agents write
  files with ``write(2)``; a tool that only writes through a mapping is not seen.

Whenever the watcher cannot vouch for the set of changed paths — the queue overflowed, more paths
changed than :attr:`Watcher.limit`, ignore rules may have changed (a ``.gitignore`` or the
repository's exclude file), a nested repository whose commits it cannot see, a watch that could
not be added — :meth:`Watcher.take` gives the reason, and the capture scans everything instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from turnback.records import record

try:
    import inotify_simple  # type: ignore[import-untyped]
except ImportError:  # not Linux: no watcher, every capture scans
    inotify_simple = None

AVAILABLE = inotify_simple is not None

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x1000000
_IN_DONT_FOLLOW = 0x2000000
_IN_EXCL_UNLINK = 0x4000000
_IN_ISDIR = 0x40000000

MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
    | _IN_EXCL_UNLINK
)

#: Paths changed between two captures above which the watcher gives up: a scan is then as cheap.
LIMIT = 10_000


@record
class Changes:
    """What changed since the last capture: paths (relative, bytes) to look at again, and
    directories to list whole. ``reason`` says why the set cannot be trusted, if it cannot."""

    paths: frozenset[bytes]
    directories: frozenset[bytes]
    reason: str | None = None


class Watcher:
    """Watches every directory of a workspace except ``.git``, nested repositories and
    ``skip`` (absolute paths, such as turnback's own home inside the workspace)."""

    def __init__(
        self,
        root: Path,
        *,
        limit: int = LIMIT,
        skip: Collection[Path] = (),
        excludes: Path | None = None,
    ) -> None:
        if inotify_simple is None:
            raise OSError(errno.ENOSYS, "no file-system watcher on this platform")
        self.root = root
        self.limit = limit
        self._root = os.fsencode(root)
        self._skip = {os.fsencode(path) for path in skip}
        self._inotify: Any = inotify_simple.INotify(nonblocking=True)
        self._dirs: dict[int, bytes] = {}  # watch descriptor -> directory, relative (b"": root)
        self._paths: set[bytes] = set()
        self._directories: set[bytes] = set()
        self._doubt: str | None = None  # until the next take()
        self._broken: str | None = None  # for good
        #: the tree of the last capture that took this watcher's changes at its start
        self.baseline: str | None = None
        self._excludes = -1
        if excludes is not None and excludes.parent.is_dir():
            with contextlib.suppress(OSError):
                self._excludes = self._inotify.add_watch(excludes.parent, MASK)
        self._watch_tree(b"")

    def close(self) -> None:
        self._inotify.close()

    # -- watching ---------------------------------------------------------------------------

    def _watch_tree(self, top: bytes) -> None:
        """Watch ``top`` and every directory below it: each watch is added before its directory
        is listed, so nothing made in it afterwards goes unseen."""
        pending = [top]
        while pending and self._broken is None:
            relative = pending.pop()
            full = os.path.join(self._root, relative) if relative else self._root
            try:
                wd = self._inotify.add_watch(full, MASK)
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone already; its parent's event says so
            except OSError as error:
                self._broken = f"a directory could not be watched ({error})"
                return
            self._dirs[wd] = relative
            try:
                with os.scandir(full) as entries:
                    children = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for name in children:
                child = os.path.join(relative, name) if relative else name
                if name == b".git":
                    if relative:
                        self._broken = "a repository is nested inside the workspace"
                    continue
                if os.path.join(self._root, child) in self._skip:
                    continue
                if os.path.lexists(os.path.join(self._root, child, b".git")):
                    self._broken = "a repository is nested inside the workspace"
                    return
                pending.append(child)

    def _unwatch_tree(self, top: bytes) -> None:
        prefix = top + b"/"
        for wd, relative in list(self._dirs.items()):
            if relative == top or relative.startswith(prefix):
                del self._dirs[wd]
                with contextlib.suppress(OSError):
                    self._inotify.rm_watch(wd)

    # -- events -----------------------------------------------------------------------------

    def _drain(self) -> None:
        while True:
            try:
                events = self._inotify.read(timeout=0)
            except OSError as error:
                self._broken = f"the watcher failed ({error})"
                return
            if not events:
                return
            for event in events:
                self._event(event.wd, event.mask, os.fsencode(event.name))

    def _event(self, wd: int, mask: int, name: bytes) -> None:
        if mask & _IN_Q_OVERFLOW:
            self._doubt = "the watcher's event queue overflowed"
            return
        if wd == self._excludes:
            if name == b"exclude":
                self._doubt = "the repository's exclude rules changed"
            return
        if mask & _IN_IGNORED:
            self._dirs.pop(wd, None)
            return
        directory = self._dirs.get(wd)
        if directory is None:
            return
        if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
            if directory == b"":
                self._broken = "the workspace directory itself was moved or deleted"
            return  # any other directory: its parent's event says so
        path = os.path.join(directory, name) if directory else name
        if name == b".git":
            self._doubt = f"a repository appeared or went at {os.fsdecode(path)}"
            return
        if name == b".gitignore":
            self._doubt = f"ignore rules changed ({os.fsdecode(path)})"
        if mask & _IN_ISDIR:
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                if os.path.join(self._root, path) not in self._skip:
                    self._directories.add(path)
                    self._watch_tree(path)
            elif mask & (_IN_DELETE | _IN_MOVED_FROM):
                self._paths.add(path)
                self._unwatch_tree(path)
        else:
            self._paths.add(path)
        if len(self._paths) + len(self._directories) > self.limit:
            self._doubt = f"more than {self.limit:,} paths changed"
            self._paths.clear()
            self._directories.clear()

    def take(self) -> Changes:
        """Every change made since the last call (or since the watcher started), and forget
        them: the capture calling this accounts for them, by using them or by scanning."""
        self._drain()
        reason = self._broken or self._doubt
        changes = Changes(frozenset(self._paths), frozenset(self._directories), reason)
        self._paths.clear()
        self._directories.clear()
        self._doubt = None
        return changes
