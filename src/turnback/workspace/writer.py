"""Writing checkpoint contents into a workspace, and nowhere else (docs/design.md, invariant 10).

Restores write files themselves, from blobs git reads out, instead of asking git to check them out,
because the guarantees below need control of every system call:

- Every path is reached one directory at a time from a descriptor of the workspace root, opening
  each directory with ``O_NOFOLLOW``. A symbolic link is never followed, even one that appears
  between a check and a write: a path below a symlinked directory is refused, whatever it points
  at. (``git checkout-index`` would instead replace such a link with a directory.)
- A checkpoint's symbolic link is restored as a link (``symlinkat``), never written through.
- No path component may be ``.git``, ``.`` or ``..``; a directory holding a ``.git`` entry is a
  nested repository or submodule and is never entered.
- A file is written to a temporary name in its directory and renamed over the old one, so a crash
  leaves either the old or the new content, never half a file. Deletion is ``unlink``, of exactly
  the paths the caller computed from two trees; directories are only removed when a deletion left
  them empty (as ``git checkout`` does), never recursively.
- A path the caller marks ``absent`` (not in the checkpoint of the workspace taken just before)
  that exists on disk is an ignored, too large or brand-new file: it is left alone.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from turnback.workspace.shadow import SYMLINK, Entry

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_counter = itertools.count()
_UNTRACKED = "{} is on disk but not in the workspace's current checkpoint"


class Refused(Exception):
    """A path this writer will not touch; ``str()`` says why."""


def components(path: str) -> list[str]:
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", "..") or part.lower() == ".git" or "\0" in part:
            raise Refused(f"{path!r} is not a plain relative path inside the workspace")
    return parts


class WorkspaceWriter:
    """Deletes and writes files below one workspace root without following symbolic links."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._root = os.open(workspace, _DIRECTORY)

    def close(self) -> None:
        os.close(self._root)

    def __enter__(self) -> WorkspaceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _parent(self, path: str, *, create: bool) -> Iterator[int | None]:
        """A descriptor of the directory holding ``path`` (``None``: it does not exist).

        Going down, ``fd`` names the child before its parent is closed: a Ctrl-C between the two
        then leaves a descriptor open, where the other order would have ``finally`` close the
        parent twice and turn the KeyboardInterrupt into an OSError (EBADF)."""
        parts = components(path)
        fd = os.dup(self._root)
        try:
            for depth, name in enumerate(parts[:-1]):
                where = "/".join(parts[: depth + 1])
                try:
                    child = os.open(name, _DIRECTORY, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        yield None
                        return
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=fd)
                    try:
                        child = os.open(name, _DIRECTORY, dir_fd=fd)
                    except OSError as error:
                        raise Refused(f"{where} cannot be created ({error.strerror})") from None
                except OSError:
                    raise Refused(f"{where} is a symbolic link or not a directory") from None
                fd, parent = child, fd
                os.close(parent)
                if _exists(".git", fd):
                    raise Refused(f"{where} is a nested repository or submodule")
            yield fd
        finally:
            os.close(fd)

    def check(self, path: str, *, absent: bool, delete: bool) -> None:
        """Raise :class:`Refused` if ``path`` could not be written or deleted; changes nothing."""
        parts = components(path)
        fd = os.dup(self._root)
        try:
            for depth, name in enumerate(parts[:-1]):
                where = "/".join(parts[: depth + 1])
                try:
                    info = os.lstat(name, dir_fd=fd)
                except FileNotFoundError:
                    if delete:
                        return
                    break  # the rest would be created
                if not stat.S_ISDIR(info.st_mode):
                    raise Refused(f"{where} is a symbolic link or not a directory")
                fd, parent = os.open(name, _DIRECTORY, dir_fd=fd), fd
                os.close(parent)
                if _exists(".git", fd):
                    raise Refused(f"{where} is a nested repository or submodule")
            else:
                try:
                    info = os.lstat(parts[-1], dir_fd=fd)
                except FileNotFoundError:
                    return
                if absent and not delete:
                    raise Refused(_UNTRACKED.format(path))
                if stat.S_ISDIR(info.st_mode):
                    raise Refused(f"{path} is a directory on disk")
        finally:
            os.close(fd)

    def delete(self, path: str) -> bool:
        """Unlink a file or symbolic link; whether something was removed."""
        with self._parent(path, create=False) as fd:
            if fd is None:
                return False
            name = components(path)[-1]
            try:
                info = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                return False
            if stat.S_ISDIR(info.st_mode):
                raise Refused(f"{path} is a directory on disk")
            os.unlink(name, dir_fd=fd)
            return True

    def write(self, path: str, entry: Entry, data: bytes, *, absent: bool) -> None:
        """Create or replace ``path`` with a blob (``100644``/``100755``) or a symlink."""
        with self._parent(path, create=True) as fd:
            assert fd is not None
            name = components(path)[-1]
            try:
                info = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            else:
                if absent:
                    raise Refused(_UNTRACKED.format(path))
                if stat.S_ISDIR(info.st_mode):
                    raise Refused(f"{path} is a directory on disk")
            temporary = f".turnback-{os.getpid()}-{next(_counter)}.tmp"
            try:
                if entry.mode == SYMLINK:
                    os.symlink(data, temporary, dir_fd=fd)
                else:
                    mode = 0o777 if entry.mode == "100755" else 0o666  # less the umask, as git does
                    out = os.open(
                        temporary,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                        mode,
                        dir_fd=fd,
                    )
                    try:
                        view = memoryview(data)
                        while view:
                            view = view[os.write(out, view) :]
                    finally:
                        os.close(out)
                os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=fd)
                raise

    def prune(self, path: str) -> None:
        """Remove the directories above ``path`` that are now empty, deepest first."""
        parts = components(path)
        for depth in range(len(parts) - 1, 0, -1):
            directory = "/".join(parts[:depth])
            try:
                with self._parent(directory, create=False) as fd:
                    if fd is None:
                        continue
                    os.rmdir(parts[depth - 1], dir_fd=fd)
            except (OSError, Refused):
                return


def _exists(name: str, fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    return True
