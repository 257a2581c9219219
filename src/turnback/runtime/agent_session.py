"""The agent's side of one turnback session: the agent session that serves it.

A turnback session outlives agent processes; the agent's own session does not always. Each time
a process is started (the first time, after a crash, in a later run of turnback) the agent
session is opened in it again, in this order of preference:

1. ``session/load`` or ``session/resume`` of the agent session used last, where the agent
   advertises them and the same command runs it (its id is kept in the turnback session's
   ``agent_state``, an :class:`~turnback.runtime.policy.AgentState`);
2. else ``session/new``, given the conversation so far: in ``_meta.turnback.transcript`` for
   agents that read it, and as a context block ahead of the next prompt for every agent. That
   the context is still to be given is saved (``contextPending``), so a restart before the next
   prompt still delivers it.

Then the settings the user chose (a mode, config options) are given again, in the order they were
made. Each opening is an ``agent.session`` activity, posted to the reactor and not waited for;
the state is written through the handle's service before anything relies on it. That is what lets
a revert's rollback open a fresh session (:meth:`AgentSession.fresh`) from inside the reactor's
revert event, between its engine steps: the service lets go of the engine then, and the reactor
does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from turnback.errors import AgentDied, AgentError, AgentUnavailable
from turnback.model import ActivityLevel, Message, MessageKind
from turnback.runtime.parts import SessionParts
from turnback.runtime.policy import AgentState
from turnback.runtime.reactor import Notice
from turnback.runtime.rpc import RequestError
from turnback.runtime.wire import Frame, Rejected
from turnback.service import SetAgentState


class SessionLost(AgentError):
    """The agent, still running, answered that it no longer has the session this one uses
    (claude-agent-acp, once the Claude Code process behind a session has died): like a crash,
    the session is opened again and the turn goes on."""


#: How agents say a session named in a request is gone from their side. Only in words:
#: claude-agent-acp answers "Internal error" with ``data.details`` "Session not found" (and,
#: the first time, "...process exited unexpectedly. Please start a new session."); gemini-cli
#: likewise; ACP's own code for it is "Resource not found".
_LOST_SAID = ("session not found", "start a new session")
RESOURCE_NOT_FOUND = -32002


def lost_session(error: RequestError) -> bool:
    """Whether ``error``, the answer to a request naming the session, says it is gone."""
    said = error.described.lower()
    return error.code == RESOURCE_NOT_FOUND or any(words in said for words in _LOST_SAID)


#: Requests that change how the agent's session behaves from then on: the latest of each (of
#: each config option) is sent again to an agent process started after the one that took it.
SETTINGS = frozenset({"session/set_mode", "session/set_config_option"})


class AgentSession:
    """The agent session serving one turnback session (see the module docstring).

    It owns which agent session that is and the agent process it was opened in, opening and
    reopening it, the settings given again to a new process, the saved ``AgentState`` and the
    conversation pending ahead of the next prompt. It is the connection's
    :class:`~turnback.runtime.connection.Host` for that session: the session's frames go to the
    recorder, then to the relay; the agent's requests to the pending requests."""

    def __init__(self, parts: SessionParts) -> None:
        self._parts = parts
        self._opened_in = 0  # the agent process generation the session was opened in
        self._opening = asyncio.Lock()  # one opening at a time
        self._reopens: set[asyncio.Task[None]] = set()
        self._reopening = False  # the agent replays its session's history: not news to a relay
        self._reply = parts.agent.replier(0)  # answers to the current agent process
        self._state = AgentState(command=parts.command)
        self._state_read = False
        self._context: list[Message] | None = None  # the transcript a rollback left, if given
        #: the agent's answer when its session was last opened (new, loaded or resumed)
        self.response: dict[str, Any] | None = None
        #: an agent session opened for this one before it ran (:meth:`given`)
        self._given: tuple[str, dict[str, Any]] | None = None

    def given(self, agent_session: str, response: dict[str, Any]) -> None:
        """``agent_session`` was opened for this session already, with ``response``, in the
        agent's first process (by ``turnback acp``'s start, before the proxy had loaded): the
        first opening takes it on in that process rather than asking for another."""
        self._given = (agent_session, dict(response))

    @property
    def id(self) -> str | None:
        """The agent's session id, once opened."""
        return self._parts.recorder.agent_session

    @property
    def open(self) -> bool:
        """Whether the session is open in the agent process that runs now."""
        return (
            self._parts.agent.alive
            and self.id is not None
            and self._opened_in == self._parts.agent.generation
        )

    async def cancel(self) -> None:
        """Ask the agent to stop the session's running prompt (``session/cancel``), if it runs."""
        if self.id is not None:
            await self._parts.agent.notify("session/cancel", {"sessionId": self.id})

    def close(self) -> None:
        """Stop routing the session's frames here; give up reopening it."""
        self._parts.agent.detach(self.id, self)
        for task in list(self._reopens):
            task.cancel()

    # -- opening -----------------------------------------------------------------------------

    async def ensure(self, *, between_turns: bool) -> None:
        """Have a live, initialized agent with this session open in it; start the agent if it
        exited (reopening the session there). ``between_turns``: no turn is being driven, so
        an exit found here is news worth an activity."""
        if (
            self._opened_in
            and self._opened_in == self._parts.agent.generation
            and self._parts.agent.alive
        ):
            return
        exited_between_turns = self._opened_in and between_turns
        generation = await self._parts.agent.ensure()
        async with self._opening:
            if generation == self._opened_in:
                return
            if exited_between_turns:
                await self._notice(
                    ActivityLevel.WARNING,
                    "agent.exited",
                    f"agent {self._parts.agent.described!r} had exited between turns; "
                    "started it again",
                )
            await self._open_in(generation)

    def forget(self) -> None:
        """The agent answered that it no longer has this session (:class:`SessionLost`): it is
        opened again, by the next :meth:`ensure`, in the agent process that runs now."""
        self._parts.agent.detach(self.id, self)
        self._opened_in = 0

    async def lost(self) -> None:
        """The process the session was opened in died: have the connection close it (unless
        another session already started the next one), which cancels handlers still waiting on
        it (a permission being asked)."""
        if self._opened_in:
            await self._parts.agent.lost(self._opened_in)

    def agent_restarted(self, generation: int) -> None:
        """The connection's host: a new agent process runs; reopen this session in it now."""
        if self._opened_in and self._opened_in != generation:
            task = asyncio.ensure_future(self._reopen(generation))
            self._reopens.add(task)
            task.add_done_callback(self._reopens.discard)

    async def _reopen(self, generation: int) -> None:
        async with self._opening:
            if self._opened_in == generation or self._parts.agent.generation != generation:
                return  # opened already, or that process has gone too
            try:
                await self._open_in(generation)
            except AgentError as error:
                await self._notice(
                    ActivityLevel.WARNING,
                    "agent.session.reopen.failed",
                    f"agent session could not be reopened after the agent restarted: {error}; "
                    "the next prompt tries again",
                )

    async def _open_in(self, generation: int) -> None:
        """Open this session in the agent process of ``generation``."""
        self._reply = self._parts.agent.replier(generation)
        self._parts.recorder.new_process(generation)
        try:
            await self._open(generation)
            await self._restore_settings()
        except (AgentDied, RequestError) as error:
            raise AgentUnavailable(
                f"agent {self._parts.agent.described!r} could not open a session: "
                # a death says how the process ended; a refusal, what the agent answered
                f"{error.described if isinstance(error, RequestError) else error}"
            ) from error
        self._opened_in = generation

    async def _open(self, generation: int) -> None:
        """Load (or resume) the agent session this turnback session used last; else open a new
        one, and give it the conversation so far ahead of the next prompt."""
        if not self._state_read:
            self._state = await self._parts.service.acall(self._last_state)
            self._state_read = True
        given, self._given = self._given, None
        if given is not None and generation == 1:  # the process the start opened it in
            self._attach(given[0])
            self.response = given[1]
            await self._remember("new", context_pending=False)
            return
        previous = self._state.agent_session_id
        features = self._parts.agent.features
        if previous is not None and (features.load_session or features.resume_session):
            method, how = (
                ("session/load", "loaded")
                if features.load_session
                else ("session/resume", "resumed")
            )
            self._reopening = True
            self._attach(previous)
            try:
                params = {"cwd": str(self._parts.session.workspace), "sessionId": previous}
                opened = await self._parts.agent.request(
                    method, {**params, "mcpServers": self._mcp_servers()}
                )
            except RequestError as error:
                self._parts.agent.detach(previous, self)
                await self._notice(
                    ActivityLevel.WARNING,
                    "agent.session.load.failed",
                    f"agent session {previous} could not be reopened ({error.described}); "
                    "opening a new one with the conversation so far",
                    {"agentSessionId": previous},
                )
            else:
                self.response = opened if isinstance(opened, dict) else {}
                await self._remember(how, context_pending=self._state.context_pending)
                return
            finally:
                self._reopening = False
        messages = await self._parts.service.acall(self._parts.session.messages)
        await self._new(messages, context=None)

    async def fresh(self, transcript: list[Message]) -> str:
        """Replace the agent's session by a new one that gets ``transcript``, ahead of the next
        prompt (a revert's rollback, or its undo). Returns the new session's id."""
        return await self._new(transcript, context=transcript)

    async def _new(self, transcript: list[Message], *, context: list[Message] | None) -> str:
        """Open a new agent session for this one, given ``transcript`` (in
        ``_meta.turnback.transcript``, and ahead of the next prompt: persisted, so a restart
        before that prompt still delivers it). ``context`` is that transcript when it is not
        the session's conversation as stored (a revert not committed yet); else the next
        prompt reads the conversation then."""
        params: dict[str, Any] = {
            "cwd": str(self._parts.session.workspace),
            "mcpServers": self._mcp_servers(),
        }
        if transcript or context is not None:
            params["_meta"] = {"turnback": {"transcript": transcript_json(transcript)}}
        replaced = self.id if self.open else None  # a session this agent process still holds
        response = await self._parts.agent.request("session/new", params)
        response = response if isinstance(response, dict) else {}
        session_id = response.get("sessionId")
        if not isinstance(session_id, str):
            raise RequestError.internal_error(
                {"details": f"the agent answered session/new without a sessionId: {response}"}
            )
        self.response = response
        self._parts.agent.detach(self.id, self)
        self._attach(session_id)
        self._context = list(context) if context is not None else None
        await self._remember("new", context_pending=bool(transcript))
        if replaced is not None:
            await self._close(replaced)
        return session_id

    async def _close(self, replaced: str) -> None:
        """Have the agent let go of a session this one no longer uses (a rollback's or an
        undo's fresh session replaced it), where it advertises ``session/close``: else each
        would hold its memory (claude-agent-acp: a Claude Code process) until the agent exits."""
        if not self._parts.agent.features.close_session:
            return
        try:
            await self._parts.agent.request("session/close", {"sessionId": replaced})
        except (RequestError, AgentDied) as error:  # dead: the next prompt starts it again
            self._parts.reactor.post(
                Notice(
                    ActivityLevel.WARNING,
                    "agent.session.close.failed",
                    f"the agent did not close its replaced session {replaced} ("
                    f"{error.described if isinstance(error, RequestError) else error}); it may "
                    "hold on to it until the agent exits",
                    {"agentSessionId": replaced},
                )
            )

    def _attach(self, agent_session: str) -> None:
        self._parts.recorder.agent_session = agent_session
        self._state = AgentState(
            agent_session, self._parts.command, self._state.context_pending, self._state.settings
        )
        self._parts.agent.attach(agent_session, self)

    def _mcp_servers(self) -> list[Any]:
        return list(self._parts.relay.mcp_servers) if self._parts.relay is not None else []

    # -- settings ----------------------------------------------------------------------------

    async def setting_taken(self, method: str, params: Any) -> None:
        """The agent accepted ``method`` (``params`` as sent): a setting is kept, to be given
        again to every later agent process."""
        if method not in SETTINGS or not isinstance(params, dict):
            return
        key = f"{method} {params.get('configId', '')}".rstrip()
        settings = {**self._state.settings}
        settings.pop(key, None)  # the latest last: settings are given again in order
        settings[key] = {k: v for k, v in params.items() if k != "sessionId"}
        await self._save_state(settings=settings)

    async def _restore_settings(self) -> None:
        """Give a newly started agent process the settings the user chose for the previous one
        (a restart after a crash, or a later run of turnback), in the order they were made."""
        for key, params in self._state.settings.items():
            method = key.split(" ")[0]
            try:
                await self._parts.agent.request(
                    method, {**params, "sessionId": self._state.agent_session_id}
                )
            except RequestError as error:
                await self._notice(
                    ActivityLevel.WARNING,
                    "agent.setting.lost",
                    f"the agent, started again, refused {method} {params} "
                    f"({error.described}); choose that setting again",
                    {"method": method, "params": params},
                )

    # -- the saved state ---------------------------------------------------------------------

    def _last_state(self) -> AgentState:
        """What this turnback session kept about its agent session, if it ran the same
        command (another agent cannot reopen it)."""
        state = AgentState.from_json(self._parts.session.record.agent_state)
        return (
            state
            if state.command == self._parts.command
            else AgentState(command=self._parts.command)
        )

    async def _remember(self, how: str, *, context_pending: bool) -> None:
        await self._save_state(context_pending=context_pending)
        # a line for people, recorded in order with what follows; the opener does not wait
        self._parts.reactor.post(self._opened_notice(how, context_pending))

    async def _save_state(
        self, *, context_pending: bool | None = None, settings: dict[str, Any] | None = None
    ) -> None:
        self._state = AgentState(
            self.id,
            self._parts.command,
            self._state.context_pending if context_pending is None else context_pending,
            self._state.settings if settings is None else settings,
        )
        await self._parts.service.arun(SetAgentState(self._parts.session.id, self._state.to_json()))

    def _opened_notice(self, how: str, context_pending: bool) -> Notice:
        """A line for people saying which agent session serves this one (the runtime reads it
        back from the session's ``agent_state``, not from here)."""
        features = self._parts.agent.features
        return Notice(
            ActivityLevel.INFO,
            "agent.session",
            f"agent session {self.id} {how}",
            {
                "agentSessionId": self.id,
                "command": list(self._parts.command),
                "opened": how,
                "contextPending": context_pending,
                "features": {
                    "loadSession": features.load_session,
                    "resumeSession": features.resume_session,
                    "checkpoints": features.checkpoints,
                    "rollback": features.rollback,
                },
            },
        )

    # -- the conversation pending ahead of the next prompt -----------------------------------

    async def prompt_blocks(self, prompt: str | list[dict[str, Any]]) -> list[Any]:
        """The prompt's content blocks, after the conversation so far when the agent session
        was opened without it."""
        blocks: list[Any] = [text_block(prompt)] if isinstance(prompt, str) else list(prompt)
        if not self._state.context_pending:
            return blocks
        if self._context is not None:
            messages: list[Message] = self._context
        else:
            messages = await self._parts.service.acall(self._parts.session.messages)
        if not messages:
            return blocks
        text = render_transcript(messages)
        context: list[dict[str, Any]]
        if self._parts.agent.features.embedded_context:
            resource = {
                "uri": f"turnback://session/{self._parts.session.id}/transcript",
                "text": text,
                "mimeType": "text/plain",
            }
            # An agent that writes a resource into its prompt's text as a mention (gemini-cli:
            # "@uri") would glue the user's first word to it: a line break of its own follows.
            context = [{"type": "resource", "resource": resource}, text_block("\n")]
        else:
            context = [text_block(text)]  # the transcript's text ends its own last line
        # Marked, so an agent that reads its prompt as instructions (the scripted agent) can
        # tell turnback's context from what the user asked.
        for block in context:
            block["_meta"] = {"turnback": {"context": "transcript"}}
        return [*context, *blocks]

    async def prompt_answered(self) -> None:
        """The agent answered a prompt: the conversation it was given is its own now."""
        if self._state.context_pending:
            self._context = None
            await self._remember("continued", context_pending=False)

    # -- the connection's host: this session's frames, in wire order -------------------------

    def agent_frame(self, frame: Frame, line: bytes) -> bool:
        """Called for every frame naming this session, in wire order, before the connection
        handles it. Returns whether it was taken (the connection then never sees it)."""
        if self._parts.recorder.frame(frame):
            return True
        if self._parts.relay is None or frame.get("method") is None:
            return False
        return self._parts.relay.agent_frame(frame, self._reopening, self._reply, line)

    async def agent_request(self, method: str, params: dict[str, Any]) -> Any:
        if method in ("session/request_permission", "elicitation/create"):
            return await self._parts.requests.answer(method, params)
        raise RequestError.method_not_found(method)

    def agent_rejected(self, rejected: Rejected) -> None:
        self._parts.recorder.rejected(rejected)

    def pending_input(self) -> bool:
        return self._parts.requests.waiting_input

    async def _notice(
        self, level: ActivityLevel, code: str, message: str, data: dict[str, Any] | None = None
    ) -> None:
        await self._parts.reactor.submit(Notice(level, code, message, data or {}))


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def render_transcript(messages: Sequence[Message]) -> str:
    """The conversation as plain text, for an agent that starts over without it."""
    lines = ["The conversation so far (restored by turnback):", ""]
    for message in messages:
        if message.kind is MessageKind.USER:
            lines.append(f"User: {message.text}")
        elif message.kind is MessageKind.AGENT:
            lines.append(f"Agent: {message.text}")
        elif message.kind is MessageKind.TOOL_CALL:
            status = message.data.get("status") or "no status"
            lines.append(f"Tool call: {message.text or '(untitled)'} ({status})")
            lines += (f"  {line}" for line in _clipped(message.result).splitlines())
        elif message.kind is MessageKind.PLAN:
            lines.append("Plan: " + "; ".join(_plan_entries(message.data)))
        elif message.kind in (MessageKind.ERROR, MessageKind.NOTICE):
            lines.append(f"Note: {message.text}")
    return "\n".join(lines).rstrip() + "\n"


#: The most of a tool call's result a transcript repeats: a command's whole output is the
#: workspace's to show, not the conversation's.
RESULT_CHARS = 2000


def _clipped(text: str) -> str:
    if len(text) <= RESULT_CHARS:
        return text
    return f"{text[:RESULT_CHARS]}\n[… {len(text) - RESULT_CHARS} more characters]"


def transcript_json(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [{"kind": m.kind.value, "turn": m.turn, "data": m.data} for m in messages]


def _plan_entries(data: dict[str, Any]) -> list[str]:
    entries = data.get("entries")
    if not isinstance(entries, list):
        return []
    return [str(e.get("content", "")) for e in entries if isinstance(e, dict)]


__all__ = [
    "SETTINGS",
    "AgentSession",
    "SessionLost",
    "lost_session",
    "render_transcript",
    "text_block",
    "transcript_json",
]
