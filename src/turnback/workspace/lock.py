"""The lock of a shadow repository: one writer at a time, across threads and processes.

Some facts it relies on:

- A ``flock`` belongs to an open file description. Two ``open`` calls of the lock file, in one
  process or in two, exclude each other; a child process that inherits the descriptor holds the
  lock with it until the child exits, even when its parent was killed.
- git creates its own lock files (``index.lock``, ``HEAD.lock`` …) in the process that holds
  them and removes them when it finishes; one left by a git that was killed stays for ever, and
  every later git command that needs it fails.
- What one thread holds, the other threads of its process can use: a descriptor, or an object
  that remembers it holds the lock.

So every git process a holder starts inherits the ``flock``'s descriptor, and whoever takes the
``flock`` next knows that no git process of any turnback runs in the repository: any lock file
of git's found there is stale, and is removed. That is only true if nobody runs git there
without holding the lock. Within a process, threads therefore take a lock of their own first,
one per repository for the whole process: a second thread waits for the first to finish, and is
never let in on the first thread's hold (its git processes would run beside the first's, and the
next holder would remove their live lock files as stale). The thread that holds the lock may
take it again (an operation that holds it calls another that takes it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

from turnback.durable import make_directories
from turnback.errors import GitFailed

#: How often a holder waiting for another process looks again.
POLL = 0.01


class ShadowLock:
    """The lock file of one shadow repository, as this process holds it. One object per lock
    file per process (:meth:`of`), whichever handles use it."""

    _all: ClassVar[weakref.WeakValueDictionary[str, ShadowLock]] = weakref.WeakValueDictionary()
    _registry: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: Path) -> None:
        self.path = path
        self._threads = threading.Lock()  # held by the thread that holds the file's lock
        self._owner: int | None = None  # that thread; only it sets and clears this
        self._fd: int | None = None

    @classmethod
    def of(cls, path: Path) -> ShadowLock:
        """The one object of this process for the lock file at ``path``."""
        key = os.path.abspath(path)
        with cls._registry:
            lock = cls._all.get(key)
            if lock is None:
                lock = cls._all[key] = cls(Path(key))
            return lock

    @property
    def fds(self) -> tuple[int, ...]:
        """The descriptor a git process started by the calling thread inherits: the lock's,
        when this thread holds it (the owner is set after the descriptor, and cleared before)."""
        fd = self._fd
        return (fd,) if fd is not None and self._owner == threading.get_ident() else ()

    @contextlib.contextmanager
    def hold(self, deadline: float, *, what: str, taken: Callable[[], None]) -> Iterator[None]:
        """Hold the lock until the block ends; ``taken`` runs each time it is newly taken.
        Past ``deadline``, :class:`GitFailed` says that ``what`` stayed locked."""
        me = threading.get_ident()
        if self._owner == me:
            yield
            return
        if not self._threads.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            raise GitFailed(
                f"{what} stayed locked by another operation of this process; try again when it "
                "has finished"
            )
        try:
            make_directories(self.path.parent)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise GitFailed(
                                f"{what} stayed locked by another turnback process; try again "
                                "when it has finished"
                            ) from None
                        time.sleep(POLL)
                self._fd = fd
                self._owner = me
                try:
                    taken()
                    yield
                finally:
                    self._owner = None
                    self._fd = None
            finally:
                os.close(fd)
        finally:
            self._threads.release()
