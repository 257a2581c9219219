"""Names on disk that survive a power cut.

Some facts about file systems that the store and the shadow repositories depend on:

* ``fsync`` (or ``fdatasync``) of a file makes its content durable, not its name. A name that
  was created, renamed or removed in a directory is durable only once that directory itself
  has been synced. ext4 and XFS often persist it sooner, as a side effect of their journals;
  POSIX does not promise it, and a power cut on a file system that keeps only what was synced
  loses a new directory, with everything under it, however well its files were synced.
* So a directory turnback creates is made durable by syncing its parent after the ``mkdir``,
  and a directory built aside and renamed into place (a new shadow repository) has every file
  and directory in it synced before the rename, and the parent after it.
* SQLite syncs what it writes itself, the directory of a new log included; git syncs the
  files it is told to (``core.fsync``), never a directory.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: ``turnback acp``'s start syncs with this before pathlib loads
    from pathlib import Path


def sync_directory(path: str | os.PathLike[str]) -> None:
    """Make the names created, renamed or removed in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_directories(path: str | os.PathLike[str]) -> None:
    """``mkdir -p path``, each directory it creates made durable (its parent synced)."""
    missing = []
    here = os.path.abspath(path)
    while not os.path.exists(here):
        missing.append(here)
        if os.path.dirname(here) == here:
            break
        here = os.path.dirname(here)
    os.makedirs(path, exist_ok=True)
    for created in reversed(missing):
        sync_directory(os.path.dirname(created))


def sync_tree(root: Path) -> None:
    """Sync every file and directory under ``root`` (itself included, deepest first): a
    directory built aside, before it is renamed into place."""
    for where, _directories, names in os.walk(root, topdown=False):
        for name in names:
            path = os.path.join(where, name)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        sync_directory(where)
