"""Rolling the agent's own conversation back when a revert rolls back turnback's.

``check(turns)`` is called by the engine before any file moves and raises if the rollback cannot
be done. The runtime's own reverts (``AgentRuntime.revert``) run the engine's steps on its engine
thread and the agent's rollback on the event loop between them (``Session.start_revert``, then
:meth:`AgentRollback.roll_back`, then ``finish``): no thread waits on another. For a caller of
the engine's one-call ``Session.revert(..., rollback=...)`` from a thread of its own, ``apply``
hands the work to the loop and waits for it there.

Two ways, in order of preference:

* the agent advertises ``_meta.turnback.rollback``: ``_turnback/rollback {sessionId, turns}``;
* otherwise (or if that fails) a fresh agent session, given the transcript that remains: in
  ``_meta.turnback.transcript`` of ``session/new`` for agents that read it, and as a context block
  ahead of the next prompt for every agent (persisted, so a restart before that prompt still
  delivers it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from turnback.errors import RollbackUnavailable
from turnback.model import Message, MessageKind

if TYPE_CHECKING:
    from turnback.runtime.runtime import AgentRuntime


class AgentRollback:
    """The runtime's :class:`ConversationRollback` (see the module docstring)."""

    def __init__(
        self, runtime: AgentRuntime, loop: asyncio.AbstractEventLoop, timeout: float
    ) -> None:
        self._runtime = runtime
        self._loop = loop
        self._timeout = timeout

    def check(self, turns: int) -> None:
        if turns < 0:
            raise RollbackUnavailable(f"cannot roll the agent's conversation back {turns} turns")
        self._runtime.check_rollback(turns)

    async def roll_back(self, turns: int, transcript: list[Message]) -> None:
        """The agent's side of a revert, on the event loop, between the engine's steps."""
        await self._runtime.roll_back(turns, transcript)

    def apply(self, turns: int, transcript: list[Message]) -> None:
        if turns == 0:
            return
        work = self._runtime.roll_back(turns, transcript)
        asyncio.run_coroutine_threadsafe(work, self._loop).result(self._timeout)


def render_transcript(messages: Sequence[Message]) -> str:
    """The conversation as plain text, for an agent that starts over without it."""
    lines = ["The conversation so far (restored by turnback):", ""]
    for message in messages:
        if message.kind is MessageKind.USER:
            lines.append(f"User: {message.text}")
        elif message.kind is MessageKind.AGENT:
            lines.append(f"Agent: {message.text}")
        elif message.kind is MessageKind.TOOL_CALL:
            status = message.data.get("status", "")
            lines.append(f"Tool call: {message.text} ({status})")
        elif message.kind is MessageKind.PLAN:
            lines.append("Plan: " + "; ".join(_plan_entries(message.data)))
        elif message.kind in (MessageKind.ERROR, MessageKind.NOTICE):
            lines.append(f"Note: {message.text}")
    return "\n".join(lines).rstrip() + "\n"


def transcript_json(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [{"kind": m.kind.value, "turn": m.turn, "data": m.data} for m in messages]


def _plan_entries(data: dict[str, Any]) -> list[str]:
    entries = data.get("entries")
    if not isinstance(entries, list):
        return []
    return [str(e.get("content", "")) for e in entries if isinstance(e, dict)]
