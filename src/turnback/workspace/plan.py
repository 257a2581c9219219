"""What a capture records: the files it reads, the checkpoint it plans to write, and what it
remembers of the last one.

A scan (:mod:`turnback.workspace.scan`) or a watcher (:mod:`turnback.workspace.watched`) makes a
:class:`Plan`; :mod:`turnback.workspace.capture` writes it and keeps a :class:`Captured`. A
checkpoint's commit message names the paths it left out (``Skipped:`` lines), which
:func:`skipped_paths` reads back for diffs and restores.
"""

from __future__ import annotations

import enum
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import field

from turnback.records import record
from turnback.workspace.fastimport import Blob
from turnback.workspace.shadow import OID, REGULAR, SYMLINK, ShadowRepo

#: A file whose status data was last changed less than this long before a capture read it may
#: change again without its status data changing: a file's times come from a clock that ticks
#: every few milliseconds, and a rewrite in the same tick to the same size looks the same. The
#: next capture reads such a file again rather than trust that it holds what the last one read
#: (git's "racily clean" entries). The file's clock is taken to keep to this machine's.
RACY_NS = 100_000_000
#: ... and this long when its times are whole seconds: a filesystem that keeps only seconds
#: (two for FAT) may stamp a later rewrite with the same time.
RACY_WHOLE_SECONDS_NS = 3_000_000_000

SKIPPED = "Skipped: "


class Other(enum.Enum):
    """What a capture finds at a path instead of a file's content."""

    ABSENT = "absent"
    DIRECTORY = "directory"
    SKIPPED = "skipped"  # too large, or unreadable


class FileReader:
    """Reads files as a capture records them; files larger than ``max_file_bytes`` are left out."""

    def __init__(self, max_file_bytes: int) -> None:
        self.max_file_bytes = max_file_bytes

    def skips(self, full: bytes, info: os.stat_result) -> bool:
        """Whether the regular file at ``full`` (whose ``lstat`` is ``info``) is left out: too
        large, or unreadable."""
        return info.st_size > self.max_file_bytes or not os.access(full, os.R_OK)

    def read(self, full: bytes, info: os.stat_result | None = None) -> Blob | Other:
        """What a capture records at ``full`` now: its content, or why it records none. ``info``
        is its ``lstat`` when the caller took it (before the read, never after)."""
        try:
            info = info or os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                return Blob(SYMLINK, os.readlink(full))
            if stat.S_ISDIR(info.st_mode):
                return Other.DIRECTORY
            if not stat.S_ISREG(info.st_mode):
                return Other.ABSENT  # a socket or fifo: git records none
            if self.skips(full, info):
                return Other.SKIPPED
            with open(full, "rb", buffering=0) as file:
                data = file.read()
        except (FileNotFoundError, NotADirectoryError):
            return Other.ABSENT
        except PermissionError:
            return Other.SKIPPED
        return Blob(REGULAR[1] if info.st_mode & stat.S_IXUSR else REGULAR[0], data)


@record(frozen=False)
class Plan:
    """A checkpoint to write: a tree and the paths to change in it."""

    base: str | None
    edits: dict[bytes, Blob | None] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    synced: bool = False  # the shadow's index holds exactly ``base``
    watched: bool = False  # the paths came from a watcher, not a scan
    fallback: str | None = None  # why a watched workspace was scanned
    drift: Drift | None = None  # the files read over the index's tree (see Scan)

    def message(self) -> str:
        return "turnback checkpoint\n\n" + "".join(
            f"{SKIPPED}{json.dumps(path)}\n" for path in sorted(self.skipped)
        )

    def key(self, sha256: bool) -> tuple[str | None, frozenset[tuple[bytes, str, str]]]:
        """What the tree is made of: the same key, the same tree."""
        return self.base, frozenset(
            (path, blob.mode, blob.oid(sha256)) if blob else (path, "", "")
            for path, blob in self.edits.items()
        )

    def same_as(self, last: Captured) -> bool:
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


@record
class Captured:
    """The last checkpoint a capture wrote for a workspace."""

    commit: str
    tree: str
    skipped: frozenset[str]
    key: tuple[str | None, frozenset[tuple[bytes, str, str]]] | None
    sha256: bool = False
    drift: Drift | None = None


@record
class Seen:
    """A file a capture read: its status data then, and whether a later capture may trust
    that the same status data means the same content."""

    status: tuple[int, int, int, int, int, int]
    size: int
    trusted: bool

    @staticmethod
    def of(info: os.stat_result, read_at: int) -> Seen:
        changed = max(info.st_mtime_ns, info.st_ctime_ns)
        fine = info.st_mtime_ns % 10**9 and info.st_ctime_ns % 10**9
        return Seen(
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


@record
class Drift:
    """The tracked files a capture found modified against the shadow's index (whose tree is
    ``index_tree``), each as it read it."""

    index_tree: str
    files: dict[bytes, Seen]


def skipped_paths(shadow: ShadowRepo, commits: Sequence[str], deadline: float) -> list[set[str]]:
    """The paths each checkpoint left out, as its commit message names them."""
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
        elif line.startswith(SKIPPED) and index >= 0:
            result[index].add(json.loads(line[len(SKIPPED) :]))
    return result


def below(path: bytes, directory: bytes) -> bool:
    return path.startswith(directory + b"/")
