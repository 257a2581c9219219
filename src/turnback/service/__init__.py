"""turnback.service: the one way the front-ends reach the engine.

turnback's front-ends -- the command line, the ACP proxy, the agent runtime, the review page, and
whatever comes next -- each need the same things of the engine: begin and end turns, record
activities, revert and undo, read a session. :class:`Service` is where they get them:

* **Typed commands.** A write is a frozen record (:mod:`turnback.service.commands`), such as
  :class:`RevertSession` carrying a :class:`~turnback.model.RevertRequest`, not a list of
  keywords each front-end spells out again.
* **One engine at a time, in order.** A handle's engine work runs one piece at a time, in the
  order it was asked for: on the handle's one engine thread for an async caller (so an event loop
  never waits on a commit or a git capture), on the caller's own thread for a sync one (so a
  command line keeps its Ctrl-C). ``Service.of(tb)`` is the one service of a handle, whoever asks.
* **Sync and async façades.** ``run(command)`` and ``call(fn, ...)`` for synchronous callers,
  ``await arun(command)`` and ``await acall(fn, ...)`` for asynchronous ones.
* **No protocol at the call sites.** A revert whose agent must roll its own conversation back
  between the files and the commit is one command; the service runs its engine steps and the
  agent's rollback in their order, on their own sides, so no thread waits on another.
"""

from __future__ import annotations

from turnback.service.commands import (
    AddActivity,
    AgentRollback,
    ApplySetAside,
    BeginTurn,
    CollectGarbage,
    Command,
    CreateSession,
    DeleteSession,
    DiscardSetAside,
    EndTurn,
    ForkSession,
    HandOff,
    PlanRevert,
    Recover,
    ReopenTurn,
    RescueFiles,
    RevertSession,
    SetAgentState,
    Sweep,
    SyncTurn,
    UndoRescue,
    UndoRevert,
)
from turnback.service.service import Service

__all__ = [
    "AddActivity",
    "AgentRollback",
    "ApplySetAside",
    "BeginTurn",
    "CollectGarbage",
    "Command",
    "CreateSession",
    "DeleteSession",
    "DiscardSetAside",
    "EndTurn",
    "ForkSession",
    "HandOff",
    "PlanRevert",
    "Recover",
    "ReopenTurn",
    "RescueFiles",
    "RevertSession",
    "Service",
    "SetAgentState",
    "Sweep",
    "SyncTurn",
    "UndoRescue",
    "UndoRevert",
]
