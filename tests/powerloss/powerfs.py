"""A FUSE file system over a backing directory that can lose power: every write not yet synced
is dropped, data, renames and directory entries alike.

    python powerfs.py BACKING MOUNTPOINT

serves BACKING at MOUNTPOINT until it is unmounted (``fusermount3 -u -z MOUNTPOINT``); then it
*loses power*: BACKING is rebuilt from what was durable, and the process exits. Mounting it
again (a new process) is the machine coming back up.

What is durable, as a strict POSIX file system promises and no more (LazyFS's semantics):

* A file's content is what it held at its last ``fsync`` or ``fdatasync`` (through any of its
  names or descriptors); one never synced is empty.
* A directory's entries are what they were at its own last ``fsync``: creating, renaming or
  removing a name is durable only once the directory holding it is synced (a rename that two
  directories saw, once each is). Syncing a file makes no directory entry durable.
* What BACKING held when it was mounted is durable.

File modes and times are not modelled: a file comes back with the mode it had last. Each inode
is known by an id of this process's own (the backing file system reuses inode numbers), and a
synced file's content is kept in a blob beside BACKING, written incrementally: only the pages
written since the last sync are copied. The process runs single-threaded, so operations are
applied one at a time, in the order the kernel sends them; file locks are left to the kernel.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import mfusepy  # type: ignore[import-untyped]

PAGE = 4096
FILE, DIRECTORY, LINK = "file", "dir", "link"


@dataclass
class Inode:
    kind: str
    mode: int
    target: str = ""  # a symbolic link's
    dirty: set[int] = field(default_factory=set)  # pages written since the last sync
    shortest: int | None = None  # the smallest size it was truncated to since then
    synced: bool = False  # has a blob


class PowerFS(mfusepy.Operations):  # type: ignore[misc]
    use_ns = True

    def __init__(self, backing: str) -> None:
        self.backing = os.path.realpath(backing)
        self.blobs = tempfile.mkdtemp(prefix="powerfs-blobs-", dir=os.path.dirname(self.backing))
        self.ids: dict[int, int] = {}  # backing inode number -> id
        self.inodes: dict[int, Inode] = {}
        self.durable: dict[int, dict[str, int]] = {}  # a directory's entries at its last sync
        self.handles: dict[int, int] = {}  # open file descriptor -> id
        self._next = 0
        self.root = self._snapshot("/")

    # -- identity -------------------------------------------------------------------------

    def real(self, path: str) -> str:
        return self.backing + path if path != "/" else self.backing

    def _new_id(self, st: os.stat_result, target: str = "") -> int:
        self._next += 1
        kind = DIRECTORY if stat.S_ISDIR(st.st_mode) else LINK if stat.S_ISLNK(st.st_mode) else FILE
        self.ids[st.st_ino] = self._next
        self.inodes[self._next] = Inode(kind, stat.S_IMODE(st.st_mode), target)
        return self._next

    def id_of(self, path: str) -> int:
        st = os.lstat(self.real(path))
        known = self.ids.get(st.st_ino)
        if known is not None:
            return known
        target = os.readlink(self.real(path)) if stat.S_ISLNK(st.st_mode) else ""
        return self._new_id(st, target)

    def _snapshot(self, path: str) -> int:
        """Take what BACKING holds under ``path`` as durable; its id."""
        ident = self.id_of(path)
        inode = self.inodes[ident]
        if inode.kind == DIRECTORY:
            self.durable[ident] = {
                name: self._snapshot(f"{path.rstrip('/')}/{name}")
                for name in os.listdir(self.real(path))
            }
        elif inode.kind == FILE:
            shutil.copyfile(self.real(path), self._blob(ident))
            inode.synced = True
        return ident

    def _blob(self, ident: int) -> str:
        return os.path.join(self.blobs, str(ident))

    # -- making things durable ------------------------------------------------------------

    def _sync_file(self, ident: int, handle: int) -> None:
        inode = self.inodes[ident]
        # the handle may be write-only; this reads the same file, even once it has no name
        fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY)
        try:
            self._copy_dirty(inode, ident, fd)
        finally:
            os.close(fd)
        inode.synced = True
        inode.dirty.clear()
        inode.shortest = None

    def _copy_dirty(self, inode: Inode, ident: int, fd: int) -> None:
        size = os.fstat(fd).st_size
        with open(self._blob(ident), "r+b" if inode.synced else "w+b") as blob:
            if inode.shortest is not None:
                blob.truncate(inode.shortest)
            blob.truncate(size)
            for page in sorted(inode.dirty):
                start = page * PAGE
                if start >= size:
                    continue
                blob.seek(start)
                blob.write(os.pread(fd, min(PAGE, size - start), start))

    def _sync_directory(self, path: str) -> None:
        ident = self.id_of(path)
        base = path.rstrip("/")
        self.durable[ident] = {
            name: self.id_of(f"{base}/{name}") for name in os.listdir(self.real(path))
        }

    def _written(self, ident: int, offset: int, length: int) -> None:
        if length:
            self.inodes[ident].dirty.update(
                range(offset // PAGE, (offset + length - 1) // PAGE + 1)
            )

    def _truncated(self, ident: int, size: int) -> None:
        inode = self.inodes[ident]
        inode.shortest = size if inode.shortest is None else min(inode.shortest, size)
        inode.dirty = {p for p in inode.dirty if p * PAGE < size}

    # -- losing power ---------------------------------------------------------------------

    def lose_power(self) -> None:
        """Rebuild BACKING from what was durable."""
        rebuilt = self.backing + ".rebuilt"
        shutil.rmtree(rebuilt, ignore_errors=True)
        os.mkdir(rebuilt, self.inodes[self.root].mode)
        made: dict[int, str] = {}
        self._rebuild(self.root, rebuilt, made, {self.root})
        lost = self.backing + ".lost"
        os.rename(self.backing, lost)
        os.rename(rebuilt, self.backing)
        shutil.rmtree(lost)
        shutil.rmtree(self.blobs)

    def _rebuild(self, ident: int, into: str, made: dict[int, str], above: set[int]) -> None:
        for name, child in sorted(self.durable.get(ident, {}).items()):
            inode = self.inodes[child]
            where = os.path.join(into, name)
            if inode.kind == DIRECTORY:
                if child in above:  # renames synced in one directory and not another: a loop
                    continue
                os.mkdir(where, inode.mode)
                self._rebuild(child, where, made, above | {child})
            elif inode.kind == LINK:
                os.symlink(inode.target, where)
            elif child in made:  # one file under two names
                os.link(made[child], where)
            else:
                if inode.synced:
                    shutil.copyfile(self._blob(child), where)
                else:
                    open(where, "wb").close()
                os.chmod(where, inode.mode)
                made[child] = where

    # -- operations -----------------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None else os.lstat(self.real(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks", "st_ino")
        attrs = {key: getattr(st, key) for key in keys}
        for key in ("st_atime_ns", "st_mtime_ns", "st_ctime_ns"):
            attrs[key.removesuffix("_ns")] = getattr(st, key)
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self.real(path))]

    def readlink(self, path: str) -> str:
        return os.readlink(self.real(path))

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self.real(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files")
        return {key: getattr(sv, key) for key in (*keys, "f_flag", "f_frsize", "f_namemax")}

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self.real(path), mode)
        self.id_of(path)
        return 0

    def rmdir(self, path: str) -> int:
        st = os.lstat(self.real(path))
        os.rmdir(self.real(path))
        self.ids.pop(st.st_ino, None)
        return 0

    def unlink(self, path: str) -> int:
        st = os.lstat(self.real(path))
        os.unlink(self.real(path))
        self._gone(st)
        return 0

    def _gone(self, st: os.stat_result) -> None:
        """A name of ``st`` is gone: with none left and nothing open, its number is free."""
        ident = self.ids.get(st.st_ino)
        if ident is not None and st.st_nlink <= 1 and ident not in self.handles.values():
            del self.ids[st.st_ino]

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self.real(target))
        self.id_of(target)
        return 0

    def link(self, target: str, source: str) -> int:
        os.link(self.real(source), self.real(target))
        return 0

    def rename(self, old: str, new: str) -> int:
        try:
            replaced: os.stat_result | None = os.lstat(self.real(new))
        except FileNotFoundError:
            replaced = None
        self.id_of(old)
        os.rename(self.real(old), self.real(new))
        if replaced is not None and not stat.S_ISDIR(replaced.st_mode):
            self._gone(replaced)
        elif replaced is not None:
            self.ids.pop(replaced.st_ino, None)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self.real(path), mode)
        self.inodes[self.id_of(path)].mode = stat.S_IMODE(mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.lchown(self.real(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        os.utime(self.real(path), ns=times, follow_symlinks=False)
        return 0

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if fh is not None:
            os.ftruncate(fh, length)
            self._truncated(self.handles[fh], length)
        else:
            os.truncate(self.real(path), length)
            self._truncated(self.id_of(path), length)
        return 0

    def open(self, path: str, flags: int) -> int:
        # the kernel gives each write its offset, O_APPEND included
        fd = os.open(self.real(path), flags & ~(os.O_CREAT | os.O_APPEND))
        self.handles[fd] = self.id_of(path)
        if flags & os.O_TRUNC:
            self._truncated(self.handles[fd], 0)
        return fd

    def create(self, path: str, mode: int, flags: int) -> int:
        fd = os.open(self.real(path), (flags | os.O_CREAT) & ~os.O_APPEND, mode)
        self.handles[fd] = self.id_of(path)
        if flags & os.O_TRUNC:
            self._truncated(self.handles[fd], 0)
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        written = os.pwrite(fh, data, offset)
        self._written(self.handles[fh], offset, written)
        return written

    def release(self, path: str, fh: int) -> int:
        ident = self.handles.pop(fh)
        st = os.fstat(fh)
        os.close(fh)
        if st.st_nlink == 0 and ident not in self.handles.values():
            self.ids.pop(st.st_ino, None)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._sync_file(self.handles[fh], fh)
        return 0

    def opendir(self, path: str) -> int:
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        self._sync_directory(path)
        return 0


class _FUSE(mfusepy.FUSE):  # type: ignore[misc]
    """mfusepy drops rename's flags; a file system that ignores RENAME_NOREPLACE would replace
    what the caller meant to keep, so any flag is refused instead."""

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        if flags:
            return -errno.EINVAL
        return int(self.rename_fuse_2(old, new))


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="powerfs: %(message)s")
    backing, mountpoint = sys.argv[1], sys.argv[2]
    filesystem = PowerFS(backing)
    _FUSE(filesystem, mountpoint, foreground=True, nothreads=True, fsname="powerfs")
    filesystem.lose_power()


if __name__ == "__main__":
    main()
