"""The service: a handle's engine work, one piece at a time, in order, off the event loop.

Some facts the front-ends rely on:

* **One at a time.** Every command and call of one handle holds the service's *order* (a
  re-entrant lock) while it runs, so no two run at once, whoever asked: engine calls commit to
  the store and capture the workspace, and the engine's rules assume they do not interleave (a
  turn is begun before its checkpoints are saved, a revert never runs in the middle of a begin).
* **Async callers never block their loop.** ``arun``/``acall`` run the work on the handle's one
  engine thread (a single worker, so work keeps the order it was submitted in) and await it.
* **Sync callers stay on their thread.** ``run``/``call`` run the work inline, under the order:
  a command line keeps its Ctrl-C (KeyboardInterrupt reaches the main thread, in the middle of
  the work, where the engine settles it), and work that calls back into the service from inside
  the order (the engine thread included) runs at once instead of waiting on itself. On a thread
  whose event loop is running they refuse: waiting there could wait on the loop itself.
* **A revert is steps.** The engine's revert validates, captures and moves the files (its first
  steps), then the agent rolls its own conversation back, then the engine commits. The service
  holds the order for each engine step and lets go of it while the agent rolls back -- on the
  caller's loop for an async caller -- so the agent's side may use the service meanwhile (it
  saves its state through it) and no thread ever waits on another. If the agent's side fails,
  or the caller stops waiting, the files go back (the engine's abandon), in the order too.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

from turnback.engine import revert
from turnback.engine.handle import Turnback
from turnback.errors import TurnbackError
from turnback.model import Revert
from turnback.service.commands import AgentRollback, Command, RevertSession

T = TypeVar("T")


class Service:
    """One handle's way to the engine (see the module docstring). ``Service.of(tb)``."""

    _services: ClassVar[weakref.WeakKeyDictionary[Turnback, Service]] = weakref.WeakKeyDictionary()
    _made: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, tb: Turnback) -> None:
        self.tb = tb
        self._order = threading.RLock()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="turnback-engine")
        self._engine_thread: int | None = None
        self._closed = False
        tb.on_close(self.close)

    @classmethod
    def of(cls, tb: Turnback) -> Service:
        """The handle's one service, made the first time it is asked for."""
        with cls._made:
            service = cls._services.get(tb)
            if service is None:
                service = cls._services[tb] = cls(tb)
            return service

    # -- the sync façade ---------------------------------------------------------------------

    def run(self, command: Command[T]) -> T:
        """Carry ``command`` out on this thread, in order; its answer, or its error."""
        if isinstance(command, RevertSession):
            return self._revert(command)  # type: ignore[return-value]
        return self.call(command.apply, self.tb)

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` -- any engine call, a read say -- on this thread, in order."""
        self._refuse_on_a_loop()
        with self._order:
            return function(*args)

    # -- the async façade --------------------------------------------------------------------

    async def arun(self, command: Command[T]) -> T:
        """Carry ``command`` out on the engine thread, in order, and await it."""
        if isinstance(command, RevertSession):
            return await self._arevert(command)  # type: ignore[return-value]
        return await self.acall(command.apply, self.tb)

    async def acall(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on the engine thread, in order, awaited."""
        if self._closed:
            raise RuntimeError("the service of this turnback handle is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._ordered, function, args)

    def _ordered(self, function: Callable[..., T], args: tuple[Any, ...]) -> T:
        self._engine_thread = threading.get_ident()
        with self._order:
            return function(*args)

    # -- reverts, in steps -------------------------------------------------------------------

    def _started(self, command: RevertSession) -> revert.StartedRevert:
        """Steps 1 to 4 of the engine's revert, once the journal is on disk (they read turns)."""
        self.tb.journal.flush()
        return revert.start_revert(
            self.tb.store,
            self.tb.checkpoints,
            command.session,
            command.request,
            command.rollback,
            lease=self.tb.lease,
        )

    def _revert(self, command: RevertSession) -> Revert:
        started = self.call(self._started, command)
        rollback = command.rollback
        if command.request.conversation and rollback is not None and started.turns:
            try:
                rollback.apply(started.turns, started.transcript)
            except BaseException as error:
                self.call(started.abandon, _why(error))
                raise
        return self.call(started.finish)

    async def _arevert(self, command: RevertSession) -> Revert:
        started = await self.acall(self._started, command)
        rollback = command.rollback
        try:
            if command.request.conversation and rollback is not None and started.turns:
                await rollback.roll_back(started.turns, started.transcript)
        except BaseException as error:
            # Shielded: a caller that stopped waiting still gets its files back.
            await asyncio.shield(self.acall(started.abandon, _why(error)))
            raise
        return await asyncio.shield(self.acall(started.finish))

    # -- the end -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the engine thread once the work submitted so far is done (the handle's close
        calls this first)."""
        if self._closed:
            return
        self._closed = True
        on_it = threading.get_ident() == self._engine_thread
        self._thread.shutdown(wait=not on_it)

    def _refuse_on_a_loop(self) -> None:
        if threading.get_ident() == self._engine_thread:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise RuntimeError(
            "a sync service call on a thread whose event loop is running would block the loop "
            "(and could wait on it); await Service.arun or Service.acall there instead"
        )


def _why(error: BaseException) -> str:
    if isinstance(error, TurnbackError | OSError):
        return f"the revert failed: {error}"
    if isinstance(error, asyncio.CancelledError | KeyboardInterrupt):
        return "the revert was stopped before the agent's conversation was rolled back"
    return f"the revert failed: {type(error).__name__}: {error}"


__all__ = ["AgentRollback", "Service"]
