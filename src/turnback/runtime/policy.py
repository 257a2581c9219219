"""What a runtime does when its agent dies (:class:`ResumePolicy`, :class:`OnCrash`), and what
a turnback session keeps about the agent session that serves it (:class:`AgentState`, its
``agent_state``), so that a later agent process reopens it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from enum import StrEnum
from typing import Any

from turnback.records import record


class OnCrash(StrEnum):
    """What a turn does when the agent dies in it before saving any step checkpoint (an agent
    with a step checkpoint always resumes from it)."""

    #: restart the agent, reopen its session and tell it to go on from where things now stand
    CONTINUE = "continue"
    #: end the turn interrupted with what it did so far (``AgentRuntime.resume`` continues it)
    STOP = "stop"


@record
class ResumePolicy:
    """How the runtime treats an agent that dies, hangs or cannot roll back."""

    attempts: int = 2  # restarts per turn before giving up
    backoff: float = 0.25  # seconds before the first restart; doubles each attempt
    max_backoff: float = 5.0
    on_crash: OnCrash = OnCrash.CONTINUE  # a death before any step checkpoint
    initialize_timeout: float = 60.0  # real agents take seconds to start
    exit_grace: float = 2.0  # after the process exits, how long its last output may take to drain
    fresh_session_rollback: bool = True  # roll back by a fresh session when the agent cannot
    rollback_timeout: float = 30.0

    def delay(self, attempt: int) -> float:
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, attempt - 1)))


@record
class AgentState:
    """What a turnback session keeps about the agent session that serves it (its
    ``agent_state``), so a later agent process -- after a crash, or a later run -- reopens it."""

    agent_session_id: str | None = None
    command: tuple[str, ...] = ()
    #: the agent session was opened without the conversation: the next prompt carries it
    context_pending: bool = False
    #: the latest of each settings request the agent accepted (a mode, each config option),
    #: without its sessionId, in the order they were made
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "agentSessionId": self.agent_session_id,
            "command": list(self.command),
            "contextPending": self.context_pending,
            "settings": self.settings,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentState:
        session_id = data.get("agentSessionId")
        command = data.get("command")
        settings = data.get("settings")
        return cls(
            agent_session_id=session_id if isinstance(session_id, str) else None,
            command=tuple(str(p) for p in command) if isinstance(command, list) else (),
            context_pending=data.get("contextPending") is True,
            settings={str(k): v for k, v in settings.items() if isinstance(v, dict)}
            if isinstance(settings, dict)
            else {},
        )


__all__ = ["AgentState", "OnCrash", "ResumePolicy"]
