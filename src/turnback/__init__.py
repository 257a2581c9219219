"""turnback: durable, resumable, reviewable and reversible turns for AI coding agents.

import turnback
tb = turnback.open()
session = tb.create_session(workspace=".")
with session.turn("fix the failing test") as turn:
    turn.record({"sessionUpdate": "agent_message_chunk",
                 "content": {"type": "text", "text": "Looking…"}})
"""

from __future__ import annotations

import os

from turnback.engine.handle import Session, Turnback
from turnback.engine.turns import RunningTurn
from turnback.errors import (
    AmbiguousId,
    CheckpointUnavailable,
    GitFailed,
    GitUnavailable,
    InvalidEvent,
    InvalidId,
    NotSetAside,
    RevertConflict,
    SchemaTooNew,
    SessionNotFound,
    StoreCorrupt,
    StoreError,
    StoreLocked,
    StoreNotFound,
    StoreUnavailable,
    TurnbackError,
    TurnInProgress,
    TurnNotFound,
    TurnNotRunning,
    WorkspaceError,
)
from turnback.model import (
    Activity,
    ActivityLevel,
    ChangeKind,
    Durability,
    EventKind,
    FileChange,
    Message,
    MessageKind,
    RecoveryReport,
    RunEvent,
    SessionRecord,
    StepCheckpoint,
    SweepReport,
    Turn,
    TurnStatus,
    UnrecoveredTurn,
    WorkspaceCheckpoint,
)

__version__ = "0.1.0"


def open(
    home: str | os.PathLike[str] | None = None,
    durability: Durability | str = Durability.BATCHED,
    *,
    create: bool = True,
    busy_timeout: float = 5.0,
    batch_window: float = 0.01,
) -> Turnback:
    """Open turnback on ``home`` ($TURNBACK_HOME, else the platform data directory).

    ``create=False`` refuses a home with no database yet (StoreNotFound) instead of making one."""
    return Turnback(
        home,
        durability=durability,
        create=create,
        busy_timeout=busy_timeout,
        batch_window=batch_window,
    )


__all__ = [
    "Activity",
    "ActivityLevel",
    "AmbiguousId",
    "ChangeKind",
    "CheckpointUnavailable",
    "Durability",
    "EventKind",
    "FileChange",
    "GitFailed",
    "GitUnavailable",
    "InvalidEvent",
    "InvalidId",
    "Message",
    "MessageKind",
    "NotSetAside",
    "RecoveryReport",
    "RevertConflict",
    "RunEvent",
    "RunningTurn",
    "SchemaTooNew",
    "Session",
    "SessionNotFound",
    "SessionRecord",
    "StepCheckpoint",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "StoreNotFound",
    "StoreUnavailable",
    "SweepReport",
    "Turn",
    "TurnInProgress",
    "TurnNotFound",
    "TurnNotRunning",
    "TurnStatus",
    "Turnback",
    "TurnbackError",
    "UnrecoveredTurn",
    "WorkspaceCheckpoint",
    "WorkspaceError",
    "__version__",
    "open",
]
