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

:class:`AgentRuntime` runs the agent, records every update into the turn's journal in wire order,
asks the embedding application for permissions, resumes a turn from the agent's last step
checkpoint when the agent dies, continues an interrupted turn after the orchestrating process
died (:meth:`AgentRuntime.resume`), and rolls the agent's conversation back for reverts.
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
from turnback.runtime.reactor import EngineThread, Reactor
from turnback.runtime.rollback import AgentRollback
from turnback.runtime.runtime import (
    AgentRuntime,
    InputRequest,
    OnCrash,
    PermissionRequest,
    ResumePolicy,
)
from turnback.runtime.sidecar import AgentFeatures

__all__ = [
    "AgentDied",
    "AgentError",
    "AgentFeatures",
    "AgentRollback",
    "AgentRuntime",
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
