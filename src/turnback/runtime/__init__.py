"""turnback.runtime: agents as ACP sidecar processes whose prompts are durable turns.

    import asyncio, sys, turnback
    from turnback.runtime import AgentRuntime

    async def main() -> None:
        tb = turnback.open()
        session = tb.create_session(workspace=".")
        command = [sys.executable, "-m", "turnback.agents.scripted"]
        async with await AgentRuntime.start(tb, session, command) as runtime:
            turn = await runtime.prompt("write hello.txt hi")

    asyncio.run(main())

:class:`AgentRuntime` runs a session on the agent, records every update into the turn's journal
in wire order, asks the embedding application for permissions, resumes a turn from the agent's
last step checkpoint (or continues it without one) when the agent dies, continues an interrupted
turn after the orchestrating process died (:meth:`AgentRuntime.resume`), and rolls the agent's
conversation back for reverts. An :class:`AgentConnection` is one agent process that several
runtimes' sessions can share.
"""

from __future__ import annotations

from turnback.engine.revert import ConversationRollback
from turnback.errors import (
    AgentDied,
    AgentError,
    AgentUnavailable,
    ResumeUnavailable,
    RollbackUnavailable,
)
from turnback.runtime.connection import AgentConnection
from turnback.runtime.policy import AgentState, OnCrash, ResumePolicy
from turnback.runtime.reactor import EngineThread, Reactor
from turnback.runtime.requests import InputRequest, PermissionRequest
from turnback.runtime.rollback import AgentRollback
from turnback.runtime.runtime import AgentRuntime
from turnback.runtime.sidecar import AgentFeatures

__all__ = [
    "AgentConnection",
    "AgentDied",
    "AgentError",
    "AgentFeatures",
    "AgentRollback",
    "AgentRuntime",
    "AgentState",
    "AgentUnavailable",
    "ConversationRollback",
    "EngineThread",
    "InputRequest",
    "OnCrash",
    "PermissionRequest",
    "Reactor",
    "ResumePolicy",
    "ResumeUnavailable",
    "RollbackUnavailable",
]
