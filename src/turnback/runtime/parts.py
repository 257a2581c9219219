"""What the parts of one runtime session share: :class:`SessionParts`.

:class:`~turnback.runtime.runtime.AgentRuntime` builds its collaborators once and hands this one
record to each part that works for the session (the agent session, the crash resume, the
rollback), so a new collaborator is added here and reaches every part that needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnback.records import record

if TYPE_CHECKING:
    from turnback.engine.handle import Session
    from turnback.runtime.connection import AgentConnection
    from turnback.runtime.policy import ResumePolicy
    from turnback.runtime.reactor import Reactor
    from turnback.runtime.recording import Recorder
    from turnback.runtime.relay import Relay
    from turnback.runtime.requests import PendingRequests
    from turnback.service import Service


@record
class SessionParts:
    """The collaborators of one turnback session run on an agent."""

    session: Session
    command: tuple[str, ...]  # the agent's command, as the session's agent state names it
    policy: ResumePolicy
    agent: AgentConnection  # the agent process, which may host other sessions too
    service: Service  # the handle's way to the engine
    reactor: Reactor
    recorder: Recorder
    requests: PendingRequests
    relay: Relay | None  # the proxy in front of the agent, if any


__all__ = ["SessionParts"]
