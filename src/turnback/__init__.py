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
    **options: float,
) -> Turnback:
    """Open turnback on ``home`` ($TURNBACK_HOME, else the platform data directory)."""
    return Turnback(home, durability=durability, **options)  # type: ignore[arg-type]


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
