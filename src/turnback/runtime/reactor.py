"""The reactor: one queue that puts the runtime's engine work in one order.

Why a queue. Domain events (a turn is requested, a revert is requested) and runtime events (a step
checkpoint arrived, a turn ended, something worth telling the user happened) come from different
tasks: the caller, the agent's connection, the crash handler. The engine's rules assume one order
-- a turn is begun before its checkpoints are saved, it ends after them, a revert never runs in
the middle of a turn -- so every such event goes through this queue and is handled one at a time,
in the order it was put there.

Why the service. Engine calls commit to the store (fsync) and take git captures, which must not
block the event loop; the handle's service (:class:`~turnback.service.Service`) runs them on its
one engine thread, never two at once, so their order is the queue's order.

Failures. Side work that fails (saving a step checkpoint, removing an agent's checkpoint store, a
revert) becomes an activity on the session and never stops the reactor; whoever asked for the work
also gets the error. Cancellation is not a failure: it propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import field
from pathlib import Path
from typing import Any

from turnback.engine.handle import Session
from turnback.engine.turns import RunningTurn
from turnback.errors import RECOVER, OwnershipLost, RevertConflict
from turnback.model import ActivityLevel, Revert, RevertRequest, Turn, TurnStatus
from turnback.records import record
from turnback.service import (
    AddActivity,
    AgentRollback,
    BeginTurn,
    EndTurn,
    ReopenTurn,
    RevertSession,
    Service,
    SyncTurn,
)

log = logging.getLogger("turnback.runtime")


# -- events ------------------------------------------------------------------------------------


@record
class TurnRequested:
    """Domain: begin a turn (the engine makes it durable and captures the baseline)."""

    prompt: Any


@record
class ResumeRequested:
    """Domain: run an interrupted turn again from its last step checkpoint (the engine reopens
    it; its baseline is the one it began with)."""

    token: str


@record
class CheckpointSaved:
    """Runtime: a step checkpoint was recorded (in wire order); make it durable."""

    turn: RunningTurn
    step: int


@record
class TurnEnded:
    """Runtime: the agent's prompt ended; settle the turn and remove the agent's stores."""

    turn: RunningTurn
    status: TurnStatus
    detail: str | None = None
    store_paths: frozenset[str] = frozenset()


@record
class RevertRequested:
    """Domain: revert the session as ``request`` says, the agent's ``rollback`` with it."""

    request: RevertRequest
    rollback: AgentRollback | None


@record
class Notice:
    """Runtime: something the user should see, as an activity."""

    level: ActivityLevel
    code: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    turn: str | None = None


Event = TurnRequested | ResumeRequested | CheckpointSaved | TurnEnded | RevertRequested | Notice


class Reactor:
    """Handles :data:`Event` values one at a time, in order (see the module docstring)."""

    def __init__(
        self,
        session: Session,
        service: Service,
        on_notice: Callable[[Notice], None] | None = None,
    ) -> None:
        self.session = session
        self.service = service
        self._on_notice = on_notice  # told of every activity after it is added (a relay)
        self._queue: asyncio.Queue[tuple[Event, asyncio.Future[Any] | None]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="turnback-reactor")

    def post(self, event: Event) -> None:
        """Queue ``event`` without waiting for it (safe from synchronous code on the loop)."""
        self._queue.put_nowait((event, None))

    async def submit(self, event: Event) -> Any:
        """Queue ``event`` and wait for its result (or its error)."""
        if self._task is None or self._task.done():
            raise RuntimeError("the runtime's reactor has stopped; start a new AgentRuntime")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((event, future))
        return await future

    async def drain(self) -> None:
        """Wait until everything queued so far has been handled."""
        await self.submit(Notice(ActivityLevel.INFO, "", ""))

    async def close(self) -> None:
        if self._task is None:
            return
        with contextlib.suppress(Exception):
            await self.drain()
        task, self._task = self._task, None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        while not self._queue.empty():  # nobody will handle these now
            _, future = self._queue.get_nowait()
            if future is not None and not future.done():
                future.set_exception(RuntimeError("the runtime's reactor has stopped"))

    async def _run(self) -> None:
        while True:
            event, future = await self._queue.get()
            try:
                result = await self._handle(event)
            except asyncio.CancelledError:
                if future is not None and not future.done():
                    future.cancel()
                raise
            except Exception as error:
                await self._failed(event, error)
                if future is not None and not future.done():
                    future.set_exception(error)
            else:
                if future is not None and not future.done():
                    future.set_result(result)

    async def _handle(self, event: Event) -> Any:
        session = self.session.id
        if isinstance(event, TurnRequested):
            return await self.service.arun(BeginTurn(session, event.prompt))
        if isinstance(event, ResumeRequested):
            return await self.service.arun(ReopenTurn(session, event.token))
        if isinstance(event, CheckpointSaved):
            return await self.service.arun(SyncTurn(event.turn))
        if isinstance(event, TurnEnded):
            return await self._end(event)
        if isinstance(event, RevertRequested):
            revert: Revert = await self.service.arun(
                RevertSession(session, event.request, event.rollback)
            )
            return revert
        if event.code:
            await self.activity(event.level, event.code, event.message, event.data, event.turn)
            if self._on_notice is not None:
                try:
                    self._on_notice(event)
                except Exception as error:  # a relay's failure is not the runtime's
                    log.warning("the relay failed on activity %s: %s", event.code, error)
        return None

    async def _end(self, event: TurnEnded) -> Turn:
        turn = event.turn
        ended = await self.service.arun(EndTurn(turn, event.status, event.detail))
        for path, problem in await self.service.acall(
            remove_stores, event.store_paths, self.session
        ):
            await self.activity(
                ActivityLevel.WARNING,
                "checkpoint.store.remove.failed",
                f"could not remove the agent's checkpoint store {path}: {problem}; "
                "remove it by hand if it is no longer needed",
                {"storePath": path, "error": problem},
                turn.token,
            )
        return ended

    async def _failed(self, event: Event, error: Exception) -> None:
        """Turn a failure of side work into an activity; requests only the caller can act on
        (a turn that cannot begin) are just raised to it."""
        if isinstance(event, TurnEnded | CheckpointSaved) and isinstance(error, OwnershipLost):
            code, message, turn = (
                "turn.ownership.lost",
                f"turn {event.turn.number} was taken over by another process (this one's lease "
                "ran out, or it was judged dead) and was stopped here; nothing this process "
                "recorded after the takeover was kept, and the turn is as the other process "
                "recovered it",
                event.turn.token,
            )
        elif isinstance(event, CheckpointSaved):
            code, message, turn = (
                "checkpoint.capture.failed",
                f"step checkpoint {event.step} could not be saved: {error}",
                event.turn.token,
            )
        elif isinstance(event, TurnEnded):
            code, message, turn = (
                "turn.end.failed",
                f"turn {event.turn.number} could not be ended as {event.status.value}: {error}; "
                "recovery settles it once this process has gone",
                event.turn.token,
            )
        elif isinstance(event, RevertRequested) and isinstance(error, RevertConflict):
            return  # refused before it wrote anything: the engine's activity says so
        elif isinstance(event, RevertRequested):
            code, message, turn = (
                "checkpoint.revert.failed",
                f"revert to turn {event.request.to_turn} failed: {error}",
                None,
            )
        elif isinstance(event, Notice):
            log.warning("could not record activity %s (%s): %s", event.code, event.message, error)
            return
        else:
            return
        data = {"error": f"{type(error).__name__}: {error}"}
        if code == "turn.end.failed":
            data["remedy"] = RECOVER
        await self.activity(ActivityLevel.ERROR, code, message, data, turn)

    async def activity(
        self,
        level: ActivityLevel,
        code: str,
        message: str,
        data: dict[str, Any] | None = None,
        turn: str | None = None,
    ) -> None:
        """Add an activity; a store that cannot take it is logged, never raised."""
        try:
            command = AddActivity(self.session.id, level, code, message, data or {}, turn)
            await self.service.arun(command)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("could not record activity %s (%s): %s", code, message, error)


def remove_stores(paths: Iterable[str], session: Session) -> list[tuple[str, str]]:
    """Remove agents' checkpoint stores; returns the ones that could not be removed, and why.

    A store path comes from the agent, so it is only removed when it cannot be a place the user
    cares about: absolute, and neither the workspace, the home directory, the root nor any of
    their ancestors."""
    problems: list[tuple[str, str]] = []
    workspace = session.workspace.resolve()
    protected = {Path("/"), Path.home().resolve(), workspace}
    for text in sorted(set(paths)):
        path = Path(text)
        try:
            if not path.is_absolute():
                raise ValueError("the path is not absolute")
            resolved = path.resolve()
            if any(resolved == p or p.is_relative_to(resolved) for p in protected):
                raise ValueError("it is (or contains) the workspace, the home directory or /")
            if resolved.is_dir() and not path.is_symlink():
                shutil.rmtree(resolved)
            elif os.path.lexists(path):
                path.unlink()
        except (OSError, ValueError) as error:
            problems.append((text, str(error)))
    return problems
