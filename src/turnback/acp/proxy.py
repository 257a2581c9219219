"""``turnback acp -- AGENT_COMMAND…``: an ACP agent towards the editor, an ACP client towards the
real agent, with turnback's turns in between.

How it is put together:

* Towards the editor, turnback's JSON-RPC :class:`~turnback.runtime.rpc.Connection` runs over
  :class:`EditorWire`, with :meth:`Proxy.handle` as its one handler. Messages stay JSON: what
  the proxy does not handle itself is forwarded as it came, so fields and ``_meta`` an SDK model
  does not know survive.
* Towards the agent, one agent process (:attr:`Proxy.agent`, an
  :class:`~turnback.runtime.connection.AgentConnection`) hosts every session; each editor
  session is one turnback session run by one :class:`~turnback.runtime.AgentRuntime` on it:
  every ``session/prompt`` is a durable turn with workspace checkpoints, the turn goes on when
  the agent dies mid-turn, and permission requests are journaled before the editor is asked.
  The runtime's relay seam (:class:`_SessionRelay`) forwards the agent's notifications and
  requests to the editor in wire order, and tells the editor about a crash and the resume.
* The editor-facing session id is the turnback session id, so ``session/list``, ``session/load``,
  ``session/resume`` and ``session/fork`` are served from turnback's store whatever the agent
  supports; ``initialize`` is the agent's own answer with these capabilities added, and
  ``authenticate`` and methods that name no session go to the agent process as they are. An
  accepted ``authenticate`` is sent again to each agent process started later.
* ``/checkpoints``, ``/diff``, ``/rewind`` and ``/undo-rewind`` are answered here
  (:mod:`turnback.acp.commands`).

The proxy never leaves the editor waiting: every request gets an answer or an error that says
what went wrong; stdin at end of file, SIGTERM or a closed stdout ends running turns as
cancelled (their workspace captured) and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import turnback
from turnback.acp import commands, offered, transcript
from turnback.acp.launch import DEFAULT_MAX_FRAME, INITIALIZE_ID, Launched, initialized
from turnback.acp.wire import REQUEST_ID, EditorWire, open_stdio
from turnback.engine.handle import Session, Turnback
from turnback.engine.turns import validate_prompt
from turnback.errors import (
    SESSIONS,
    AmbiguousId,
    InvalidEvent,
    InvalidId,
    OwnershipLost,
    SessionNotFound,
    TurnbackError,
    TurnNotFound,
)
from turnback.model import (
    Activity,
    ActivityLevel,
    Message,
    SessionRecord,
    Turn,
    TurnStatus,
    prompt_text,
)
from turnback.runtime import (
    AgentError,
    AgentRuntime,
    InputRequest,
    PermissionRequest,
    ResumePolicy,
)
from turnback.runtime.connection import AgentConnection
from turnback.runtime.reactor import Notice
from turnback.runtime.relay import Reply
from turnback.runtime.rpc import AGENT_METHODS, Connection, RequestError
from turnback.runtime.sidecar import Started
from turnback.runtime.wire import (
    CANCEL_REQUEST,
    SENT_REQUESTS,
    Frame,
    SentRequests,
    with_session_id,
)
from turnback.service import AddActivity, CreateSession, DeleteSession, ForkSession, Service

log = logging.getLogger("turnback.acp")

#: turnback's own errors use JSON-RPC's codes as an agent would: ACP keeps -32000 for
#: "authentication required", which an editor may answer with a login prompt.
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
_INVALID_PARAMS = (SessionNotFound, AmbiguousId, InvalidId, TurnNotFound, InvalidEvent)
#: Seconds a running turn gets to end after the editor went away; all agents stop within 4.
_SHUTDOWN_GRACE = 2.5
_TAKEN_BY_RUNTIME = frozenset({"session/request_permission", "elicitation/create"})
#: The runtime's activities the editor is told of as they happen, as one ``[turnback]`` line
#: each: one per recovery (its first restart, or the turn stopped), and the failure when it
#: could not recover.
_SHOWN_ACTIVITIES = frozenset(
    {"turn.resuming", "turn.interrupted", "turn.resume.failed", "turn.resume.unavailable"}
)
_SESSION_METHODS = frozenset({"session/new", "session/load", "session/resume", "session/fork"})
#: Cancels kept for requests of the agent's that its runtime has not asked the editor yet.
_ASKING_LIMIT = 100
#: Sessions per session/list page.
LIST_PAGE = 50
_COMMANDS = "available_commands_update"


def _list_key(record: SessionRecord) -> tuple[float, str]:
    return (-record.updated_at, record.id)


def _read_cursor(cursor: Any) -> tuple[float, str]:
    try:
        newest, session_id = json.loads(cursor)
        return (float(newest), str(session_id))
    except (TypeError, ValueError) as error:
        raise RequestError.invalid_params(
            {"cursor": cursor, "details": f"not a cursor this proxy gave ({error}); list again"}
        ) from None


def _error(message: str, code: int = INTERNAL_ERROR, **data: Any) -> RequestError:
    """turnback's own error, with the code an agent would answer for the same situation."""
    return RequestError(code, message, {"details": message, **data} if data else None)


def _supports(initialize: Any, feature: str) -> bool:
    """Whether an agent's ``initialize`` result advertises ``sessionCapabilities.feature``."""
    capabilities = initialize.get("agentCapabilities") if isinstance(initialize, dict) else None
    sessions = capabilities.get("sessionCapabilities") if isinstance(capabilities, dict) else None
    return isinstance(sessions, dict) and isinstance(sessions.get(feature), dict)


def _title(record: SessionRecord, turns: Sequence[Turn]) -> str | None:
    """A session's title: the one it was given, else its first prompt's first 80 characters."""
    if record.title is not None or not turns:
        return record.title
    first = min(turns, key=lambda t: t.number)
    return " ".join(first.prompt_text.split())[:80] or None


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _cancel(rpc_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": CANCEL_REQUEST, "params": {"requestId": rpc_id}}


@dataclass(slots=True)
class _Forwarded:
    """An agent's request passed to the editor: the id(s) it went out with, and whether the
    agent has cancelled it."""

    notes: SentRequests = field(default_factory=SentRequests)
    cancelled: bool = False


@dataclass(slots=True)
class _EditorSession:
    """One editor-facing session: a turnback session and the runtime running its agent."""

    session: Session
    relay: _SessionRelay
    runtime: AgentRuntime | None = None
    prompting: asyncio.Task[Any] | None = None
    agent_commands: list[Any] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.session.id


class _SessionRelay:
    """The runtime's :class:`~turnback.runtime.relay.Relay` for one editor session."""

    def __init__(self, proxy: Proxy, session_id: str | None, mcp_servers: Sequence[Any]) -> None:
        self._proxy = proxy
        self._session_id = session_id  # None: the agent-wide relay, for frames of no session
        self._servers = list(mcp_servers)
        self.editor: _EditorSession | None = None
        #: the agent's updates held until the editor has been answered and knows the session
        #: (an agent may send them as soon as it has answered; the proxy answers later)
        self._held: list[bytes] | None = [] if session_id is not None else None

    @property
    def initialize(self) -> Mapping[str, Any]:
        return self._proxy.initialize_params

    @property
    def mcp_servers(self) -> Sequence[Any]:
        return self._servers

    @property
    def authenticate(self) -> Mapping[str, Any] | None:
        return self._proxy.authenticated

    def agent_frame(self, frame: Frame, replay: bool, reply: Reply, line: bytes) -> bool:
        method = frame.get("method")
        if method in _TAKEN_BY_RUNTIME:
            return False
        params = frame.get("params")
        if method == "session/update" and isinstance(params, dict):
            update = params.get("update")
            if isinstance(update, dict) and update.get("sessionUpdate") == _COMMANDS:
                # turnback's commands are added to the agent's; after a load or a restart too
                forward = not replay and self._held is None  # else they go with the answer
                self._proxy.agent_commands(self.editor, update, forward=forward)
            elif not replay and "id" not in frame and self._session_id is not None:
                line = with_session_id(frame, line, self._session_id)
                if self._held is None:
                    self._proxy.wire.post_line(line)
                else:
                    self._held.append(line)
            return True
        if method == "_turnback/checkpoint":
            return True  # addressed to turnback, which has recorded it
        if method == CANCEL_REQUEST and "id" not in frame:
            self._proxy.cancel_from_agent(reply, params)
            return True
        if isinstance(params, dict) and "sessionId" in params and self._session_id is not None:
            params = {**params, "sessionId": self._session_id}
        if "id" in frame:
            forwarded = _Forwarded()
            self._proxy.from_agent[(reply, frame["id"])] = forwarded
            self._proxy.spawn(self._proxy.forward_request(frame, params, reply, forwarded))
        else:
            self._proxy.forward_notification(str(method), params)
        return True

    def answered(self) -> None:
        """The editor has been answered for the session (new, load, resume, fork): send it the
        agent's updates held till then, then the commands, the agent's with turnback's."""
        held, self._held = self._held or [], None
        for line in held:
            self._proxy.wire.post_line(line)
        if self.editor is not None:
            self._proxy.announce_commands(self.editor)

    def backlog(self) -> Awaitable[None] | None:
        return self._proxy.wire.backlog()

    def activity(self, notice: Notice) -> None:
        """One line for the editor's user when the agent stopped mid-turn, in its words (the
        runtime's activity says the same for the CLI): one per recovery, at its first restart."""
        if self._session_id is None or notice.code not in _SHOWN_ACTIVITIES or notice.turn is None:
            return
        data = notice.data
        if notice.code == "turn.resuming":
            if data.get("attempt") != 1:
                return  # the recovery was announced at its first restart
            step = data.get("step")
            where = f"from step {step}" if step is not None else "where it had got to"
            text = (
                "The agent stopped unexpectedly; it is being restarted and this turn goes on "
                f"{where} (attempt {data.get('attempt')})."
            )
        elif notice.code == "turn.interrupted":
            text = (
                "The agent stopped unexpectedly before saving a point to go on from, so this "
                "turn has ended with what it did so far; send a prompt to go on."
            )
        elif notice.code == "turn.resume.failed":
            text = (
                "The agent kept stopping, so this turn has ended; send the prompt again to "
                "try once more."
            )
        else:
            text = (
                "The agent stopped before saving a point to go on from, so this turn has "
                "ended; send the prompt again to start it over."
            )
        self._proxy.update(self._session_id, transcript.notice_chunk(text))

    async def permission(self, request: PermissionRequest) -> str | None:
        assert self._session_id is not None, "asked only through a session's runtime"
        return await self._proxy.ask_permission(self._session_id, request)

    async def input(self, request: InputRequest) -> dict[str, Any] | None:
        assert self._session_id is not None, "asked only through a session's runtime"
        return await self._proxy.ask_input(self._session_id, request)


class Proxy:
    """The editor-facing agent (see the module docstring). :func:`serve` runs one."""

    def __init__(
        self,
        tb: Turnback | asyncio.Future[Turnback],
        command: Sequence[str],
        wire: EditorWire,
        *,
        env: Mapping[str, str] | None = None,
        policy: ResumePolicy | None = None,
        agent: AgentConnection | None = None,
    ) -> None:
        #: the store, or its opening (with recovery), which every method but initialize awaits
        self._tb: Turnback | None = None
        self._opening: asyncio.Future[Turnback] | None = None
        if isinstance(tb, asyncio.Future):
            self._opening = tb
        else:
            self._tb = tb
        self.command = tuple(command)
        self.wire = wire
        self.policy = policy or ResumePolicy()
        self.env = dict(os.environ if env is None else env)
        self.conn: Connection | None = None
        self.initialize_params: dict[str, Any] = {}
        #: The editor's last accepted ``authenticate``: every agent process started later gets
        #: it too (in memory only: credentials are the agent's to keep).
        self.authenticated: dict[str, Any] | None = None
        #: The one agent process every session of this proxy runs on.
        self.agent = agent or agent_connection(self.command, self.env, self.policy)
        self.agent.relay = _SessionRelay(self, None, ())
        self._initialized = False
        self._sessions: dict[str, _EditorSession] = {}
        #: the editor's requests being served: what each led to sending, for $/cancel_request
        self._serving: dict[Any, SentRequests] = {}
        #: the agents' requests passed to the editor, by (the agent process's reply, its id)
        self.from_agent: dict[tuple[Reply, Any], _Forwarded] = {}
        #: the agents' permission and input requests the runtimes ask the editor, by the
        #: runtime's request id ("process generation.agent's id")
        self._asking: dict[str, _Forwarded] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def tb(self) -> Turnback:
        assert self._tb is not None, "the store is opened before any session is"
        return self._tb

    @property
    def service(self) -> Service:
        """The handle's service: every engine call of the proxy goes through it."""
        return Service.of(self.tb)

    def initialized_by(self, params: dict[str, Any]) -> None:
        """The editor's ``initialize`` (``params``) was answered before this proxy ran."""
        self.initialize_params = dict(params)
        self._initialized = True

    # -- the editor's methods ----------------------------------------------------------------

    async def handle(self, method: str, params: Any, is_notification: bool) -> Any:
        """The editor-side connection's handler: every method and notification comes here."""
        params = params if isinstance(params, dict) else {}
        rpc_id = None if is_notification else REQUEST_ID.get(None)
        notes = SentRequests()
        if rpc_id is not None:  # what it leads to sending is noted, for $/cancel_request
            self._serving[rpc_id] = notes
            SENT_REQUESTS.set(notes)
        try:
            if self._tb is None and self._opening is not None and method != "initialize":
                self._tb = await asyncio.shield(self._opening)
            if is_notification:
                await self._notification(method, params)
                return None
            return await self._request(method, params)
        except RequestError:
            raise
        except AgentError as error:
            if isinstance(error.__cause__, RequestError):
                raise error.__cause__ from None  # the agent's own answer, unchanged
            raise _error(commands.worded(error), error=type(error).__name__) from error
        except TurnbackError as error:
            data: dict[str, Any] = {"error": type(error).__name__}
            if isinstance(error, InvalidEvent) and error.field is not None:
                data["field"] = error.field
            for name in ("turn", "state", "remedy"):
                if getattr(error, name) is not None:
                    data[name] = getattr(error, name)
            code = INVALID_PARAMS if isinstance(error, _INVALID_PARAMS) else INTERNAL_ERROR
            raise _error(commands.worded(error), code, **data) from error
        except (ConnectionError, OSError) as error:
            raise _error(f"the agent {self._described} went away: {error}") from error
        finally:
            notes.open = False
            if self._serving.get(rpc_id) is notes:
                del self._serving[rpc_id]

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            return await self._initialize(params)
        if method == "session/list":
            return await self.service.acall(self._list, params)
        if method == "authenticate":
            result = await (await self._agent()).request(method, params)
            self.authenticated = dict(params)
            return result
        if method in _SESSION_METHODS:
            return await self._open(method, params)
        if method == "session/prompt":
            return await self._prompt(params)
        if method == "session/close":
            # ACP: closing a session that is not open here (or never was) succeeds as well
            closing = self._sessions.get(str(params.get("sessionId")))
            if closing is None:
                return {}
            runtime = closing.runtime
            if runtime is not None and _supports(runtime.initialize_response, "close"):
                await runtime.request(method, self._to_agent(closing, params))
            await self._close_session(closing)  # turnback's record is kept: load opens it again
            return {}
        if method == "session/delete":
            await self._delete(params)
            return {}
        editor = self._sessions.get(str(params.get("sessionId")))
        if editor is not None and editor.runtime is not None:
            return await editor.runtime.request(method, self._to_agent(editor, params))
        if "sessionId" in params and not method.startswith("_"):
            self._editor_session(params)  # raises: the session is not open here
        if method.startswith("_") or method in AGENT_METHODS:
            return await (await self._agent()).request(method, params)
        raise RequestError(
            -32601,
            f"Method not found: {method!r} is not an ACP method; turnback acp forwards ACP "
            "methods and '_'-prefixed extensions to the agent",
            {"method": method},
        )

    async def _notification(self, method: str, params: dict[str, Any]) -> None:
        if method == CANCEL_REQUEST:
            # Hop by hop: each request the editor's one led to is cancelled by its own id.
            request = params.get("requestId")
            notes = self._serving.get(request) if isinstance(request, int | str) else None
            for send, rpc_id in list(notes.sent if notes is not None else ()):
                with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                    await send(_cancel(rpc_id))
            return
        editor = self._sessions.get(str(params.get("sessionId")))
        if method == "session/cancel":
            if editor is not None and editor.runtime is not None:
                await editor.runtime.cancel()
            return
        if editor is not None and editor.runtime is not None:
            await editor.runtime.notify(method, self._to_agent(editor, params))
        else:
            await self.agent.notify(method, params)

    async def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        self.initialize_params = dict(params)
        self.authenticated = None  # a new initialize is followed by its own authenticate
        await self._agent(restart=self._initialized)
        self._initialized = True
        return initialized(self.agent.initialize_response or {})

    async def _agent(self, *, restart: bool = False) -> AgentConnection:
        """The agent process, started (again, with ``restart``: a new ``initialize``)."""
        try:
            if restart:
                await self.agent.restart()
            else:
                await self.agent.ensure()
        except AgentError as error:
            if isinstance(error.__cause__, RequestError):
                raise error.__cause__ from None  # the agent refused initialize: its answer
            said = f"turnback could not start the agent: {commands.worded(error)}"
            extra: dict[str, Any] = {"remedy": error.remedy} if error.remedy else {}
            raise _error(said, command=list(self.command), **extra) from error
        return self.agent

    def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        """session/list from turnback's store, newest first, ``LIST_PAGE`` at a time. The cursor
        names the last session listed, so a page follows on from it even if sessions were
        added meanwhile."""
        cwd = params.get("cwd")
        records = sorted(
            (r for r in self.tb.sessions() if not cwd or Path(r.workspace) == Path(str(cwd))),
            key=_list_key,
        )
        start = 0
        if params.get("cursor") is not None:
            after = _read_cursor(params["cursor"])
            start = next((i for i, r in enumerate(records) if _list_key(r) > after), len(records))
        page = records[start : start + LIST_PAGE]
        overview = self.tb.conversations() if page else {}
        result: dict[str, Any] = {
            "sessions": [
                self._listed(record, *overview.get(record.id, (0, None))) for record in page
            ]
        }
        if start + LIST_PAGE < len(records):
            result["nextCursor"] = json.dumps(_list_key(page[-1]))
        return result

    def _listed(self, record: SessionRecord, turns: int, prompt: Any) -> dict[str, Any]:
        title = record.title
        if title is None and prompt is not None:
            title = " ".join(prompt_text(prompt).split())[:80] or None
        info: dict[str, Any] = {
            "sessionId": record.id,
            "cwd": record.workspace,
            "updatedAt": _iso(record.updated_at),
            "_meta": {
                "turnback": {
                    "turns": turns,
                    "agent": record.agent,
                }
            },
        }
        if title:
            info["title"] = title
        return info

    async def _open(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """session/new, load, resume and fork: a turnback session with its agent running."""
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not Path(cwd).is_absolute() or not Path(cwd).is_dir():
            raise RequestError.invalid_params(
                {"details": f"cwd {cwd!r} must be the absolute path of a directory"}
            )
        servers = params.get("mcpServers") or []
        agent = " ".join(self.command)
        if method == "session/new":
            session = await self.service.arun(CreateSession(cwd, None, agent))
        else:
            source = await self.service.acall(self._stored, params.get("sessionId"))
            if method == "session/fork":
                session = await self.service.arun(ForkSession(source.id, cwd, agent=agent))
            else:
                session = source
        editor = self._sessions.get(session.id)
        if editor is None or editor.runtime is None:
            editor = await self._start(session, servers)
        if method == "session/load":

            def read() -> tuple[list[Message], list[Turn], list[Activity]]:
                return session.messages(), session.turns(), session.activities()

            messages, turns, activities = await self.service.acall(read)
            for update in transcript.replay(messages, turns, activities):
                self.update(session.id, update)
        if method != "session/new":
            await self._session_info(session)
        runtime = editor.runtime
        assert runtime is not None
        response = dict(runtime.session_response or {})
        response.pop("sessionId", None)
        if method in ("session/new", "session/fork"):
            response["sessionId"] = session.id
        # After the response is written (it is written as soon as this returns, before the loop
        # runs anything else): the editor knows the session when its updates arrive.
        asyncio.get_running_loop().call_soon(editor.relay.answered)
        return response

    async def _delete(self, params: dict[str, Any]) -> None:
        """session/delete: the session leaves turnback's store (refused while a turn runs or
        one is set aside), then the agent deletes its own session when it says it can, and the
        session leaves the agent process."""
        try:
            session = await self.service.acall(self._stored, params.get("sessionId"))
        except (SessionNotFound, InvalidId):
            return  # ACP: deleting a session that is gone, or never was, succeeds silently
        record = await self.service.acall(lambda: session.record)
        await self.service.arun(DeleteSession(session.id))
        editor = self._sessions.get(session.id)
        agent_session = record.agent_state.get("agentSessionId")
        if editor is not None and editor.runtime is not None:
            agent_session = editor.runtime.agent_session_id
        try:
            if isinstance(agent_session, str) and record.agent_state.get("command") == list(
                self.command
            ):
                agent = await self._agent()
                if _supports(agent.initialize_response, "delete"):
                    await agent.request("session/delete", {**params, "sessionId": agent_session})
        except (RequestError, ConnectionError, OSError, AgentError) as error:
            log.warning("the agent did not delete its session %s: %s", agent_session, error)
        finally:
            if editor is not None:
                await self._close_session(editor)

    def _stored(self, session_id: Any) -> Session:
        """The stored session whose id is exactly ``session_id``: an ACP session id is opaque,
        so a prefix names none (a session/delete must not remove a session it only begins)."""
        if not isinstance(session_id, str) or not session_id:
            raise RequestError.invalid_params({"details": "sessionId is required"})
        with contextlib.suppress(AmbiguousId):
            session = self.tb.session(session_id)
            if session.id == session_id:
                return session
        raise SessionNotFound(f"no session {session_id!r} in {self.tb.home}").settled_by(SESSIONS)

    async def _start(self, session: Session, servers: Sequence[Any]) -> _EditorSession:
        relay = _SessionRelay(self, session.id, servers)
        editor = _EditorSession(session, relay)
        relay.editor = editor
        self._sessions[session.id] = editor
        try:
            editor.runtime = await AgentRuntime.start(
                self.tb,
                session,
                self.command,
                env=self.env,
                on_permission=relay.permission,
                on_input=relay.input,
                policy=self.policy,
                stderr=None,
                relay=relay,
                connection=self.agent,
            )
        except BaseException:
            del self._sessions[session.id]
            raise
        return editor

    async def _prompt(self, params: dict[str, Any]) -> Any:
        editor = self._editor_session(params)
        runtime = editor.runtime
        assert runtime is not None
        blocks = params.get("prompt")
        if not isinstance(blocks, list):
            raise RequestError.invalid_params({"details": "prompt must be a list of blocks"})
        validate_prompt(blocks)  # before anything is written: InvalidEvent names the field
        command = commands.parse(blocks)
        if command is not None:
            said = await commands.run(command, runtime, self._confirmer(editor.id))
            self.update(editor.id, transcript.notice_chunk(said.text, "command"))
            if not said.recorded:  # kept, so a session/load shows it again where it was
                await self.service.arun(
                    AddActivity(
                        editor.id,
                        ActivityLevel.INFO,
                        transcript.COMMAND_ANSWERED,
                        said.text,
                        {"command": command.name, "args": list(command.args)},
                    )
                )
            return {"stopReason": "end_turn"}
        meta = params.get("_meta")
        editor.prompting = asyncio.current_task()
        try:
            turn = await runtime.prompt(blocks, meta=meta if isinstance(meta, dict) else None)
        except OwnershipLost as lost:
            message = (
                "this turn was taken over by another turnback process (this one's lease ran "
                "out); it was stopped here and nothing more of it was recorded. Reload the "
                "session to see it as the other process recovered it"
            )
            self.update(editor.id, transcript.notice_chunk(message, "error"))
            raise _error(message, error="OwnershipLost", turn=lost.token) from lost
        finally:
            editor.prompting = None
        await self._session_info(editor.session)
        answer = runtime.last_response
        if isinstance(answer, RequestError):
            raise answer
        if isinstance(answer, dict) and turn.status is not TurnStatus.CANCELLED:
            return answer
        if turn.status is TurnStatus.CANCELLED:
            return {"stopReason": "cancelled"}
        if turn.status is TurnStatus.INTERRUPTED:
            # --on-agent-crash stop: the editor was told; the turn ended, resumable later.
            return {"stopReason": "end_turn", "_meta": {"turnback": {"interrupted": True}}}
        message = f"turn {turn.number} failed: {turn.detail}"
        self.update(editor.id, transcript.notice_chunk(message, "error"))
        raise _error(message, turn=turn.token)

    async def _session_info(self, session: Session) -> None:
        """Tell the editor the session's title and when it was last active
        (``session_info_update``), as ``session/list`` shows them."""

        def read() -> tuple[SessionRecord, list[Turn]]:
            return session.record, session.turns()

        try:
            record, turns = await self.service.acall(read)
        except TurnbackError as error:
            log.warning("the session's title could not be read: %s", error)
            return
        update: dict[str, Any] = {
            "sessionUpdate": "session_info_update",
            "updatedAt": _iso(record.updated_at),
        }
        title = _title(record, turns)
        if title is not None:
            update["title"] = title
        self.update(session.id, update)

    def _editor_session(self, params: dict[str, Any]) -> _EditorSession:
        session_id = params.get("sessionId")
        editor = self._sessions.get(str(session_id))
        if editor is None or editor.runtime is None:
            raise RequestError.invalid_params(
                {
                    "details": f"session {session_id!r} is not open in this turnback acp; open it "
                    "with session/new, session/load or session/resume first",
                    "sessionId": session_id,
                }
            )
        return editor

    def _to_agent(self, editor: _EditorSession, params: dict[str, Any]) -> dict[str, Any]:
        runtime = editor.runtime
        if "sessionId" in params and runtime is not None and runtime.agent_session_id:
            return {**params, "sessionId": runtime.agent_session_id}
        return params

    async def _close_session(self, editor: _EditorSession) -> None:
        self._sessions.pop(editor.id, None)
        if editor.prompting is not None:
            editor.prompting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(editor.prompting), _SHUTDOWN_GRACE)
        if editor.runtime is not None:
            await editor.runtime.close()

    # -- towards the editor ------------------------------------------------------------------

    def update(self, session_id: str, update: dict[str, Any]) -> None:
        """Send the editor one ``session/update`` now, in order with everything else."""
        params = {"sessionId": session_id, "update": update}
        self.wire.post({"jsonrpc": "2.0", "method": "session/update", "params": params})

    def agent_commands(
        self, editor: _EditorSession | None, update: dict[str, Any], *, forward: bool
    ) -> None:
        """The agent offered its commands: keep them, and (unless it was replaying a session)
        send the editor them with turnback's."""
        if editor is None:
            return
        offered = update.get("availableCommands")
        editor.agent_commands = list(offered) if isinstance(offered, list) else []
        if forward:
            self.announce_commands(editor)

    def forward_notification(self, method: str, params: Any) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.wire.post(message)

    async def forward_request(
        self, frame: Frame, params: Any, reply: Reply, forwarded: _Forwarded
    ) -> None:
        """An agent's request the runtime does not answer (files, terminals, extensions): ask
        the editor and give the agent its answer."""
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": frame["id"]}
        SENT_REQUESTS.set(forwarded.notes)
        try:
            if forwarded.cancelled:  # the agent cancelled it before it could be sent
                answer["error"] = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
            else:
                assert self.conn is not None
                answer["result"] = await self.conn.send_request(str(frame["method"]), params)
        except RequestError as error:
            answer["error"] = error.to_error_obj()
        except (ConnectionError, OSError) as error:
            answer["error"] = {"code": -32603, "message": f"the editor went away: {error}"}
        finally:
            self.from_agent.pop((reply, frame["id"]), None)
            forwarded.notes.open = False
        await reply(answer)

    def cancel_from_agent(self, reply: Reply, params: Any) -> None:
        """The agent's ``$/cancel_request`` for a request it sent: passed to the editor with the
        id the editor saw, or, not sent yet, answered as cancelled."""
        request = params.get("requestId") if isinstance(params, dict) else None
        try:
            forwarded = self.from_agent.get((reply, request))
        except TypeError:  # an id no request can have
            return
        if forwarded is None and isinstance(request, (str, int)):
            # One the runtime asks the editor itself (a permission, an input), maybe not yet.
            forwarded = self._asking.setdefault(f"{self.agent.generation}.{request}", _Forwarded())
            while len(self._asking) > _ASKING_LIMIT:  # cancels of requests long answered
                del self._asking[next(iter(self._asking))]
        if forwarded is not None:
            forwarded.cancelled = True
            for _, rpc_id in forwarded.notes.sent:
                self.wire.post(_cancel(rpc_id))

    async def _ask_editor(self, request_id: str, method: str, params: dict[str, Any]) -> Any:
        """Ask the editor for the runtime; None if it did not answer. The editor's request is
        cancelled (``$/cancel_request``) when the agent cancels its own, or the turn ends."""
        asking = self._asking.setdefault(request_id, _Forwarded())
        noting = SENT_REQUESTS.set(asking.notes)
        try:
            if asking.cancelled or self.conn is None:
                return None
            return await self.conn.send_request(method, params)
        except (RequestError, ConnectionError, OSError) as error:
            log.warning("the editor did not answer %s: %s", method, error)
            return None
        except asyncio.CancelledError:
            if not asking.cancelled:  # else the editor was told when the agent cancelled it
                for _, rpc_id in asking.notes.sent:
                    self.wire.post(_cancel(rpc_id))
            raise
        finally:
            SENT_REQUESTS.reset(noting)
            asking.notes.open = False
            if self._asking.get(request_id) is asking:
                del self._asking[request_id]

    async def ask_permission(self, session_id: str, request: PermissionRequest) -> str | None:
        """The runtime's permission callback: the request is journaled; ask the editor."""
        params = {
            "sessionId": session_id,
            "toolCall": request.tool_call,
            "options": request.options,
        }
        result = await self._ask_editor(request.request_id, "session/request_permission", params)
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
            choice = outcome.get("optionId")
            return choice if isinstance(choice, str) else None
        return None

    async def ask_input(self, session_id: str, request: InputRequest) -> dict[str, Any] | None:
        """The runtime's input callback: the request is journaled; ask the editor (ACP
        elicitation), in the editor's session. Declined unless the editor accepts."""
        params = {**request.mode, "message": request.message}
        params.setdefault("mode", "url" if "url" in params else "form")
        if "sessionId" in params:
            params["sessionId"] = session_id
        result = await self._ask_editor(request.request_id, "elicitation/create", params)
        if isinstance(result, dict) and result.get("action") == "accept":
            content = result.get("content")
            return content if isinstance(content, dict) else {}
        return None

    def _confirmer(self, session_id: str) -> commands.Confirm | None:
        """How a slash command asks the editor's user to confirm: an ``elicitation/create``
        form with nothing to fill in (accept is yes), where the editor's ``initialize``
        advertises form elicitation; ``None`` where it does not."""
        capabilities = self.initialize_params.get("clientCapabilities")
        elicits = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
        if not (isinstance(elicits, dict) and isinstance(elicits.get("form"), dict)):
            return None

        async def confirm(message: str) -> bool | None:
            if self.conn is None:
                return None
            params = {
                "sessionId": session_id,
                "mode": "form",
                "message": message,
                "requestedSchema": {"type": "object", "properties": {}},
            }
            try:
                result = await self.conn.send_request("elicitation/create", params)
            except (RequestError, ConnectionError, OSError) as error:
                log.warning("the editor did not answer a confirmation: %s", error)
                return None
            return isinstance(result, dict) and result.get("action") == "accept"

        return confirm

    def _commands(self, editor: _EditorSession) -> list[Any]:
        ours = [dict(command) for command in offered.COMMANDS]
        theirs = [
            c
            for c in editor.agent_commands
            if not (isinstance(c, dict) and c.get("name") in offered.NAMES)
        ]
        return ours + theirs

    def announce_commands(self, editor: _EditorSession) -> None:
        update = {
            "sessionUpdate": "available_commands_update",
            "availableCommands": self._commands(editor),
        }
        self.update(editor.id, update)

    def spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def _described(self) -> str:
        return repr(" ".join(self.command))

    # -- the end -----------------------------------------------------------------------------

    async def close(self) -> None:
        """End running turns as cancelled (captured by the engine), stop every agent."""
        editors = list(self._sessions.values())
        await asyncio.gather(
            *(self._close_session(editor) for editor in editors), return_exceptions=True
        )
        for task in list(self._tasks):
            task.cancel()
        await self.agent.close()


def agent_connection(
    command: Sequence[str], env: Mapping[str, str], policy: ResumePolicy
) -> AgentConnection:
    """The agent process a proxy runs every session on: in the proxy's directory, with its
    environment, its standard error the proxy's."""
    return AgentConnection(
        command,
        cwd=Path.cwd(),
        env=env,
        stderr=None,
        initialize_timeout=policy.initialize_timeout,
    )


async def serve(
    command: Sequence[str],
    *,
    home: str | os.PathLike[str] | None = None,
    max_frame: int = DEFAULT_MAX_FRAME,
    policy: ResumePolicy | None = None,
    early: Launched | None = None,
) -> int:
    """Run the proxy on this process's stdin and stdout until the editor goes away or SIGTERM;
    returns the exit status. ``early``: how :mod:`turnback.acp.launch` started."""
    if not command:
        print("turnback acp: give the agent command after --", file=sys.stderr)
        return 2
    if shutil.which(command[0]) is None:
        print(
            f"turnback acp: the agent command {command[0]!r} was not found; every request will "
            "be answered with an error",
            file=sys.stderr,
        )
    early = early or Launched(None)
    # Opened and recovered (turns a killed proxy left running) while initialize is answered;
    # every other method waits for it.
    opening = asyncio.ensure_future(asyncio.to_thread(_open_store, home))
    await asyncio.to_thread(early.settled)  # the start's relay of initialize is done
    env = dict(os.environ)
    agent = agent_connection(command, env, policy or ResumePolicy())
    if early.process is not None:
        handed = (early.agent, early.sent, INITIALIZE_ID, early.answer, early.sent_at)
        agent.spawn(Started(early.process, *handed))
    else:
        agent.spawn()
    reader, writer = await open_stdio(max_frame, early.editor, ended=early.ended)
    wire = EditorWire(reader, writer, max_frame)
    proxy = Proxy(opening, command, wire, env=env, policy=policy, agent=agent)
    if early.params is not None:
        proxy.initialized_by(early.params)
    conn = Connection(proxy.handle, wire)
    proxy.conn = conn
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    gone = asyncio.ensure_future(wire.gone.wait())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({gone, stopped, opening}, return_when=asyncio.FIRST_COMPLETED)
    if opening.done() and opening.exception() is None:  # open: serve on
        await asyncio.wait({gone, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if gone.done():
        print(
            "turnback acp: the editor has gone (end of its input, or our output closed); "
            "stopping the agent and exiting",
            file=sys.stderr,
        )
    gone.cancel()
    stopped.cancel()
    try:
        try:
            await asyncio.wait_for(proxy.close(), 4.0)
        except TimeoutError:
            log.warning("turnback acp: stopping the agents took too long; exiting anyway")
        await conn.close()
        await wire.close()
    finally:
        tb = await opening  # its error, if it could not open, is the proxy's
        await asyncio.to_thread(tb.close)
    return 0


def _open_store(home: str | os.PathLike[str] | None) -> Turnback:
    tb = turnback.open(home)
    try:
        tb.recover()
    except BaseException:
        tb.close()
        raise
    return tb


def main(
    command: Sequence[str],
    *,
    home: str | None = None,
    max_frame: int = DEFAULT_MAX_FRAME,
    policy: ResumePolicy | None = None,
    early: Launched | None = None,
) -> int:
    """:func:`serve`; ``early``: how :mod:`turnback.acp.launch` started."""
    return asyncio.run(serve(command, home=home, max_frame=max_frame, policy=policy, early=early))
