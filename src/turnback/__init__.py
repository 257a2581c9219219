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

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: ``turnback acp`` starts its agent before ``typing`` loads
    from collections.abc import Callable
    from typing import Any

    from turnback.engine.handle import Session, Turnback
    from turnback.engine.revert import ConversationRollback
    from turnback.engine.turns import RunningTurn
    from turnback.errors import (
        AgentDied,
        AgentError,
        AgentUnavailable,
        AmbiguousId,
        CheckpointUnavailable,
        ExtraMissing,
        GitFailed,
        GitUnavailable,
        InvalidEvent,
        InvalidId,
        InvalidOption,
        NothingToRevert,
        NotSetAside,
        OwnershipLost,
        RestoreIncomplete,
        ResumeUnavailable,
        RevertConflict,
        RevertInProgress,
        RollbackUnavailable,
        SchemaTooNew,
        SessionElsewhere,
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
        WorkspaceDiverged,
        WorkspaceError,
    )
    from turnback.model import (
        Activity,
        ActivityLevel,
        ChangeKind,
        Durability,
        EventKind,
        FileChange,
        GcReport,
        HealthCheck,
        Message,
        MessageKind,
        RangeDiff,
        RecoveryReport,
        Revert,
        RevertPlan,
        RevertState,
        RunEvent,
        SessionRecord,
        StepCheckpoint,
        SweepReport,
        Turn,
        TurnDiff,
        TurnStatus,
        UnrecoveredTurn,
        WorkspaceCheckpoint,
    )

__version__ = "0.1.0"

#: Where the public names live. They are imported when first used, so a command that needs
#: none of them (``turnback acp``, which starts its agent before anything else) does not wait.
_MODULES = (
    "turnback.errors",
    "turnback.model",
    "turnback.engine.handle",
    "turnback.engine.revert",
    "turnback.engine.turns",
)


def __getattr__(name: str) -> Any:
    if name in __all__:
        import importlib

        for module in _MODULES:
            value = getattr(importlib.import_module(module), name, _MODULES)
            if value is not _MODULES:
                globals()[name] = value
                return value
    raise AttributeError(f"module 'turnback' has no attribute {name!r}")


def open(
    home: str | os.PathLike[str] | None = None,
    durability: Durability | str = "batched",
    *,
    create: bool = True,
    busy_timeout: float = 5.0,
    batch_window: float = 0.01,
    checkpoints: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
    database_url: str | None = None,
    lease_seconds: float | None = None,
    checkpoint_remote: str | None = None,
) -> Turnback:
    """Open turnback on ``home`` ($TURNBACK_HOME, else the platform data directory).

    ``create=False`` refuses a home with no database yet (StoreNotFound) instead of making one.
    ``checkpoints=False`` turns workspace checkpoints off (no git needed; no diffs or file
    reverts). ``progress(stage, done, total)`` hears about long captures and gc.
    ``database_url`` (else ``TURNBACK_DATABASE_URL``) names the store, such as a fleet's
    ``postgresql://user@host:port/database``; ``lease_seconds`` (else ``TURNBACK_LEASE_SECONDS``,
    else 30) is how long this process's claim on its running turns outlives its last heartbeat.
    ``checkpoint_remote`` (else ``TURNBACK_CHECKPOINT_REMOTE``) is a git remote (any URL git
    accepts) that a fleet's machines share workspace checkpoints through: each capture is pushed
    there in the background and fetched from it where a diff or revert needs it."""
    from turnback.engine.handle import Turnback

    return Turnback(
        home,
        durability=durability,
        create=create,
        busy_timeout=busy_timeout,
        batch_window=batch_window,
        checkpoints=checkpoints,
        progress=progress,
        database_url=database_url,
        lease_seconds=lease_seconds,
        checkpoint_remote=checkpoint_remote,
    )


__all__ = [
    "Activity",
    "ActivityLevel",
    "AgentDied",
    "AgentError",
    "AgentUnavailable",
    "AmbiguousId",
    "ChangeKind",
    "CheckpointUnavailable",
    "ConversationRollback",
    "Durability",
    "EventKind",
    "ExtraMissing",
    "FileChange",
    "GcReport",
    "GitFailed",
    "GitUnavailable",
    "HealthCheck",
    "InvalidEvent",
    "InvalidId",
    "InvalidOption",
    "Message",
    "MessageKind",
    "NotSetAside",
    "NothingToRevert",
    "OwnershipLost",
    "RangeDiff",
    "RecoveryReport",
    "RestoreIncomplete",
    "ResumeUnavailable",
    "Revert",
    "RevertConflict",
    "RevertInProgress",
    "RevertPlan",
    "RevertState",
    "RollbackUnavailable",
    "RunEvent",
    "RunningTurn",
    "SchemaTooNew",
    "Session",
    "SessionElsewhere",
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
    "TurnDiff",
    "TurnInProgress",
    "TurnNotFound",
    "TurnNotRunning",
    "TurnStatus",
    "Turnback",
    "TurnbackError",
    "UnrecoveredTurn",
    "WorkspaceCheckpoint",
    "WorkspaceDiverged",
    "WorkspaceError",
    "__version__",
    "open",
]
