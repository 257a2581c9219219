"""Rolling the agent's own conversation back when a revert rolls back turnback's.

The engine calls ``check(turns)`` before any file moves; it raises if the rollback cannot be done
(a turn runs, the agent is down, or it cannot roll back and fresh sessions are off). The
runtime's reverts (``AgentRuntime.revert``) are one command to the handle's service
(:class:`~turnback.service.RevertSession`), which runs the engine's steps in its order and the
agent's side, :meth:`AgentRollback.roll_back`, on the event loop between them: no thread of the
runtime ever waits on another.

``apply`` is only the engine's one-call ``Session.revert(..., rollback=...)``'s way in, for an
application that calls it from a thread of its own: it hands the rollback to the runtime's loop
and waits for it there, which the loop's own thread must never do (it would wait on itself), so
from there it raises instead.

Two ways, in order of preference:

* the agent advertises ``_meta.turnback.rollback``: ``_turnback/rollback {sessionId, turns}``;
* otherwise (or if that fails) a fresh agent session, given the transcript that remains: in
  ``_meta.turnback.transcript`` of ``session/new`` for agents that read it, and as a context block
  ahead of the next prompt for every agent (persisted, so a restart before that prompt still
  delivers it).

An agent cannot roll its conversation forward again, so undoing a revert that rolled the
conversation back gives a fresh agent session the whole restored transcript (:meth:`undo`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from turnback.engine.turns import RunningTurn
from turnback.errors import WAIT, RollbackUnavailable
from turnback.model import ActivityLevel, Message, Revert
from turnback.runtime.agent_session import AgentSession
from turnback.runtime.parts import SessionParts
from turnback.runtime.reactor import Notice
from turnback.runtime.rpc import RequestError
from turnback.service import UndoRevert

ROLLBACK_METHOD = "_turnback/rollback"


class AgentRollback:
    """The runtime's :class:`~turnback.engine.revert.ConversationRollback`: it owns the agent's
    side of a revert and of its undo (see the module docstring)."""

    def __init__(
        self,
        parts: SessionParts,
        agent_session: AgentSession,
        *,
        running: Callable[[], RunningTurn | None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._parts = parts
        self._agent_session = agent_session
        self._running = running  # the turn being driven, if any
        self._loop = loop

    def check(self, turns: int) -> None:
        """Raise RollbackUnavailable unless the agent's conversation can be rolled back
        ``turns`` turns now (the engine calls it before any file moves)."""
        if turns < 0:
            raise RollbackUnavailable(f"cannot roll the agent's conversation back {turns} turns")
        if turns == 0:
            return
        self._refuse_while_running("back")
        if not self._parts.agent.alive:
            raise RollbackUnavailable(
                f"agent {self._parts.agent.described!r} is not running, so its conversation cannot "
                "be rolled back; AgentRuntime.revert starts it first"
            )
        if (
            not self._parts.agent.features.rollback
            and not self._parts.policy.fresh_session_rollback
        ):
            raise RollbackUnavailable(
                f"agent {self._parts.agent.described!r} cannot roll its conversation back (it does "
                "not advertise _meta.turnback.rollback) and fresh-session rollback is off; revert "
                "the files only (conversation=False), or allow ResumePolicy(fresh_session_rollback)"
            )

    async def roll_back(self, turns: int, transcript: list[Message]) -> None:
        """Roll the agent's conversation back ``turns`` turns; ``transcript`` is the
        conversation that remains.

        Runs while the reactor may be busy with the revert that called it (between its engine
        steps), so it only talks to the agent, writes the agent's state through the engine
        thread (free between those steps) and posts activities; it never waits on the reactor."""
        agent_session = self._agent_session.id
        if not self._parts.agent.alive or agent_session is None:
            raise RollbackUnavailable(
                f"agent {self._parts.agent.described!r} is not running, so its conversation cannot "
                "be rolled back; start it (AgentRuntime.revert does) and revert again"
            )
        if self._parts.agent.features.rollback:
            try:
                await self._parts.agent.request(
                    ROLLBACK_METHOD, {"sessionId": agent_session, "turns": turns}
                )
            except RequestError as error:
                self._parts.reactor.post(
                    Notice(
                        ActivityLevel.WARNING,
                        "agent.rollback.failed",
                        f"the agent refused to roll back {turns} turns ({error.described}); "
                        "starting a fresh agent session with the transcript instead",
                        {"turns": turns},
                    )
                )
            else:
                self._parts.reactor.post(
                    Notice(
                        ActivityLevel.INFO,
                        "agent.rolled_back",
                        f"the agent rolled its conversation back {turns} turns",
                        {"turns": turns, "how": "agent"},
                    )
                )
                return
        if not self._parts.policy.fresh_session_rollback:
            raise RollbackUnavailable("the agent could not roll back and fresh sessions are off")
        session_id = await self._agent_session.fresh(transcript)
        self._parts.reactor.post(
            Notice(
                ActivityLevel.INFO,
                "agent.rolled_back",
                f"a fresh agent session {session_id} replaces the rolled-back one; "
                f"the {len(transcript)} messages that remain go ahead of the next prompt",
                {"turns": turns, "how": "fresh-session", "messages": len(transcript)},
            )
        )

    def apply(self, turns: int, transcript: list[Message]) -> None:
        """:meth:`roll_back` for a caller on a thread other than the runtime's loop (the
        engine's one-call ``Session.revert``), which waits for it there. The runtime itself
        never calls this."""
        if turns == 0:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError(
                "AgentRollback.apply waits for the event loop, so it cannot run on the loop's "
                "own thread; await AgentRuntime.revert (or AgentRollback.roll_back) there"
            )
        work = self.roll_back(turns, transcript)
        asyncio.run_coroutine_threadsafe(work, self._loop).result(
            self._parts.policy.rollback_timeout
        )

    async def undo(self, ensure_agent: Callable[[], Awaitable[None]]) -> Revert:
        """Undo the session's last revert through the engine; when that revert had rolled the
        conversation back, a fresh agent session is given the whole restored transcript ahead
        of the next prompt (``ensure_agent`` has the agent running first)."""
        self._refuse_while_running("forward")
        undone: Revert = await self._parts.service.arun(UndoRevert(self._parts.session.id))
        if undone.conversation:
            await ensure_agent()
            transcript = await self._parts.service.acall(self._parts.session.messages)
            session_id = await self._agent_session.fresh(transcript)
            await self._parts.reactor.submit(
                Notice(
                    ActivityLevel.INFO,
                    "agent.rolled_forward",
                    f"the revert was undone: a fresh agent session {session_id} is given the "
                    f"{len(transcript)} messages of the restored conversation ahead of the next "
                    "prompt",
                    {"revert": undone.id, "messages": len(transcript)},
                )
            )
        return undone

    def _refuse_while_running(self, direction: str) -> None:
        turn = self._running()
        if turn is not None:
            raise RollbackUnavailable(
                f"turn {turn.number} is running, so the conversation cannot be rolled "
                f"{direction} now"
            ).settled_by(WAIT, turn=turn.number, state="running")


__all__ = ["ROLLBACK_METHOD", "AgentRollback"]
