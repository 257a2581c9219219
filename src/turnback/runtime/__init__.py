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

The modules, one job each:

* ``runtime`` -- :class:`AgentRuntime`: drives a turn and coordinates the others;
* ``connection`` -- the agent process, the sessions it hosts, restarts; ``sidecar`` -- one
  process and its pipes; ``rpc`` and ``wire`` -- turnback's own JSON-RPC over them;
* ``agent_session`` -- the agent session serving a turnback session: opening and reopening it
  (load, resume, or new with the transcript), its saved state and settings;
* ``recording`` and ``requests`` -- the session's frames into the running turn's journal, and
  the permission and input requests, durable before anyone is asked;
* ``resume`` -- what a turn does when the agent (or turnback) died in it;
* ``rollback`` -- the agent's side of reverts and their undo;
* ``reactor`` -- the engine's work, one event at a time, through the handle's service;
* ``parts`` -- what the runtime hands each of its parts for a session, in one record;
* ``policy`` and ``relay`` -- the options, and the seam for a proxy in front of the agent.
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
from turnback.runtime.reactor import Reactor
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
    "InputRequest",
    "OnCrash",
    "PermissionRequest",
    "Reactor",
    "ResumePolicy",
    "ResumeUnavailable",
    "RollbackUnavailable",
]
