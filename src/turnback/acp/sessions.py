"""The editor's sessions, served from turnback's store: each one a turnback session whose agent
runs under an :class:`~turnback.runtime.AgentRuntime` on the proxy's one agent process.

The editor-facing session id is the turnback session id, so ``session/list``, ``session/load``,
``session/resume`` and ``session/fork`` are served from turnback's store whatever the agent
supports; every ``session/prompt`` is a durable turn, and the slash commands are answered here
(:mod:`turnback.acp.commands`). The runtime's relay seam (:class:`SessionRelay`) forwards the
agent's notifications and requests to the editor in wire order, and tells the editor about a
crash and the resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from turnback.acp import commands, offered, rewind, transcript
from turnback.acp.editor import Editor
from turnback.acp.launch import keep_session
from turnback.engine.handle import Session, Turnback
from turnback.engine.turns import validate_prompt
from turnback.errors import (
    SESSIONS,
    AmbiguousId,
    InvalidId,
    OwnershipLost,
    RevertConflict,
    SessionNotFound,
    TurnbackError,
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
from turnback.records import record
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
from turnback.runtime.rpc import RequestError
from turnback.runtime.wire import CANCEL_REQUEST, Frame, with_session_id
from turnback.service import AddActivity, CreateSession, DeleteSession, ForkSession, Service

log = logging.getLogger("turnback.acp")

#: Seconds a running turn gets to end after the editor went away; all agents stop within 4.
SHUTDOWN_GRACE = 2.5
_TAKEN_BY_RUNTIME = frozenset({"session/request_permission", "elicitation/create"})
#: The runtime's activities the editor is told of as they happen, as one ``[turnback]`` line
#: each: one per recovery (its first restart, or the turn stopped), and the failure when it
#: could not recover.
_SHOWN_ACTIVITIES = frozenset(
    {"turn.resuming", "turn.interrupted", "turn.resume.failed", "turn.resume.unavailable"}
)
#: Sessions per session/list page.
LIST_PAGE = 50
_COMMANDS = "available_commands_update"


def internal_error(message: str, code: int = -32603, **data: Any) -> RequestError:
    """turnback's own error, with the code an agent would answer for the same situation."""
    return RequestError(code, message, {"details": message, **data} if data else None)


def supports(initialize: Any, feature: str) -> bool:
    """Whether an agent's ``initialize`` result advertises ``sessionCapabilities.feature``."""
    capabilities = initialize.get("agentCapabilities") if isinstance(initialize, dict) else None
    sessions = capabilities.get("sessionCapabilities") if isinstance(capabilities, dict) else None
    return isinstance(sessions, dict) and isinstance(sessions.get(feature), dict)


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


def _title(record: SessionRecord, turns: Sequence[Turn]) -> str | None:
    """A session's title: the one it was given, else its first prompt's first 80 characters."""
    if record.title is not None or not turns:
        return record.title
    first = min(turns, key=lambda t: t.number)
    return " ".join(first.prompt_text.split())[:80] or None


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


@record(frozen=False)
class EditorSession:
    """One editor-facing session: a turnback session and the runtime running its agent."""

    session: Session
    relay: SessionRelay
    runtime: AgentRuntime | None = None
    prompting: asyncio.Task[Any] | None = None
    agent_commands: list[Any] = field(default_factory=list)
    #: the ids the editor gave its prompts (ACP's draft ``messageId`` of ``session/prompt``),
    #: to the ones turnback keeps them under, while the session is open here
    prompt_ids: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.session.id


class SessionRelay:
    """The runtime's :class:`~turnback.runtime.relay.Relay` for one editor session (or, with no
    session id, for the agent's frames that name no session)."""

    def __init__(
        self,
        editor: Editor,
        sessions: Sessions | None,
        session_id: str | None,
        mcp_servers: Sequence[Any],
    ) -> None:
        self._editor = editor
        self._sessions = sessions
        self._session_id = session_id  # None: the agent-wide relay, for frames of no session
        self._servers = list(mcp_servers)
        self.editor_session: EditorSession | None = None
        #: the agent's updates held until the editor has been answered and knows the session
        #: (an agent may send them as soon as it has answered; the proxy answers later)
        self._held: list[bytes] | None = [] if session_id is not None else None

    @property
    def initialize(self) -> Mapping[str, Any]:
        return self._editor.initialize_params

    @property
    def mcp_servers(self) -> Sequence[Any]:
        return self._servers

    @property
    def authenticate(self) -> Mapping[str, Any] | None:
        return self._editor.authenticated

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
                if self._sessions is not None and self.editor_session is not None:
                    self._sessions.agent_commands(self.editor_session, update, forward=forward)
            elif not replay and "id" not in frame and self._session_id is not None:
                line = with_session_id(frame, line, self._session_id)
                if self._held is None:
                    self._editor.wire.post_line(line)
                else:
                    self._held.append(line)
            return True
        if method == "_turnback/checkpoint":
            return True  # addressed to turnback, which has recorded it
        if method == CANCEL_REQUEST and "id" not in frame:
            self._editor.cancel_from_agent(reply, params)
            return True
        if isinstance(params, dict) and "sessionId" in params and self._session_id is not None:
            params = {**params, "sessionId": self._session_id}
        if "id" in frame:
            self._editor.forward_request(frame, params, reply)
        else:
            self._editor.forward_notification(str(method), params)
        return True

    def answered(self) -> None:
        """The editor has been answered for the session (new, load, resume, fork): send it the
        agent's updates held till then, then the commands, the agent's with turnback's."""
        held, self._held = self._held or [], None
        for line in held:
            self._editor.wire.post_line(line)
        if self._sessions is not None and self.editor_session is not None:
            self._sessions.announce_commands(self.editor_session)

    def backlog(self) -> Awaitable[None] | None:
        return self._editor.wire.backlog()

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
        self._editor.update(self._session_id, transcript.notice_chunk(text))

    async def permission(self, request: PermissionRequest) -> str | None:
        assert self._session_id is not None, "asked only through a session's runtime"
        return await self._editor.ask_permission(self._session_id, request)

    async def input(self, request: InputRequest) -> dict[str, Any] | None:
        assert self._session_id is not None, "asked only through a session's runtime"
        return await self._editor.ask_input(self._session_id, request)


class Sessions:
    """The editor's sessions (see the module docstring)."""

    def __init__(
        self,
        editor: Editor,
        agent: AgentConnection,
        command: Sequence[str],
        env: Mapping[str, str],
        policy: ResumePolicy,
        *,
        handle: Callable[[], Turnback],
        started: Callable[[], Awaitable[AgentConnection]],
    ) -> None:
        self._editor = editor
        self._agent = agent
        self.command = tuple(command)
        self._env = env
        self._policy = policy
        self._handle = handle  # the store, opened (every method but initialize waits for it)
        self._started = started  # the agent process, started, its errors in the editor's terms
        self._open: dict[str, EditorSession] = {}

    @property
    def tb(self) -> Turnback:
        return self._handle()

    @property
    def service(self) -> Service:
        """The handle's service: every engine call of the proxy goes through it."""
        return Service.of(self.tb)

    def get(self, session_id: Any) -> EditorSession | None:
        """The session open here under ``session_id``, if any."""
        return self._open.get(str(session_id))

    def running(self, params: dict[str, Any]) -> EditorSession:
        """The session ``params`` name, open here with its agent running; else an error."""
        session_id = params.get("sessionId")
        editor = self._open.get(str(session_id))
        if editor is None or editor.runtime is None:
            raise RequestError.invalid_params(
                {
                    "details": f"session {session_id!r} is not open in this turnback acp; open it "
                    "with session/new, session/load or session/resume first",
                    "sessionId": session_id,
                }
            )
        return editor

    @staticmethod
    def to_agent(editor: EditorSession, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with the editor's session id replaced by the agent's."""
        runtime = editor.runtime
        if "sessionId" in params and runtime is not None and runtime.agent_session_id:
            return {**params, "sessionId": runtime.agent_session_id}
        return params

    # -- listing and opening ------------------------------------------------------------------

    def list(self, params: dict[str, Any]) -> dict[str, Any]:
        """session/list from turnback's store, newest first, ``LIST_PAGE`` at a time. The cursor
        names the last session listed, so a page follows on from it even if sessions were
        added meanwhile. An engine read: run it through the service."""
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
            "sessions": [_listed(record, *overview.get(record.id, (0, None))) for record in page]
        }
        if start + LIST_PAGE < len(records):
            result["nextCursor"] = json.dumps(_list_key(page[-1]))
        return result

    async def open(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
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
        editor = self._open.get(session.id)
        if editor is None or editor.runtime is None:
            editor = await self._start(session, servers)
        if method == "session/load":

            def read() -> tuple[list[Message], list[Turn], list[Activity]]:
                return session.messages(), session.turns(), session.activities()

            messages, turns, activities = await self.service.acall(read)
            for update in transcript.replay(messages, turns, activities):
                self._editor.update(session.id, update)
        if method != "session/new":
            await self.session_info(session)
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

    async def adopt(self, answered: dict[str, Any]) -> None:
        """A ``session/new`` that ``turnback acp``'s start answered before this proxy was
        ready (:func:`~turnback.acp.launch.early_session`): the session it kept made a row of
        the store, unless the store's opening made it one already, and the agent session the
        start opened taken on as its agent session."""
        session = await asyncio.to_thread(keep_session, self.tb, answered["marker"], answered)
        opened = (answered["agentSession"], answered["response"])
        try:
            editor = await self._start(session, answered["mcpServers"], opened)
        except AgentError as error:  # the agent went: the session is opened in the next one
            log.warning("the agent session opened for %s was lost: %s", session.id, error)
            editor = await self._start(session, answered["mcpServers"])
        editor.relay.answered()

    async def _start(
        self,
        session: Session,
        servers: Sequence[Any],
        opened: tuple[str, dict[str, Any]] | None = None,
    ) -> EditorSession:
        relay = SessionRelay(self._editor, self, session.id, servers)
        editor = EditorSession(session, relay)
        relay.editor_session = editor
        self._open[session.id] = editor
        try:
            editor.runtime = await AgentRuntime.start(
                self.tb,
                session,
                self.command,
                env=self._env,
                on_permission=relay.permission,
                on_input=relay.input,
                policy=self._policy,
                stderr=None,
                relay=relay,
                connection=self._agent,
                opened=opened,
            )
        except BaseException:
            self._open.pop(session.id, None)  # closed already, when the editor left meanwhile
            raise
        return editor

    async def session_info(self, session: Session) -> None:
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
        self._editor.update(session.id, update)

    # -- prompts -----------------------------------------------------------------------------

    async def prompt(self, params: dict[str, Any]) -> Any:
        """session/prompt: a slash command answered here, or a durable turn on the agent."""
        editor = self.running(params)
        runtime = editor.runtime
        assert runtime is not None
        blocks = params.get("prompt")
        if not isinstance(blocks, list):
            raise RequestError.invalid_params({"details": "prompt must be a list of blocks"})
        validate_prompt(blocks)  # before anything is written: InvalidEvent names the field
        command = commands.parse(blocks)
        if command is not None:
            said = await commands.run(command, runtime, self._editor.confirmer(editor.id))
            self._editor.update(editor.id, transcript.notice_chunk(said.text, "command"))
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
            self._editor.update(editor.id, transcript.notice_chunk(message, "error"))
            raise internal_error(message, error="OwnershipLost", turn=lost.token) from lost
        finally:
            editor.prompting = None
        await self.session_info(editor.session)
        answer = runtime.last_response
        if isinstance(answer, RequestError):
            raise answer
        # The prompt's id (the draft's userMessageId), in place of any the agent gave its own
        # copy: the editor's own where it named the prompt, which session/rewind then takes
        # while the session is open here; else the one turnback keeps it under, which
        # session/load shows.
        kept = transcript.assigned_id(turn.token, 0)
        named = params.get("messageId")
        if isinstance(named, str) and named:
            editor.prompt_ids[named] = kept
        user = {"userMessageId": named if isinstance(named, str) and named else kept}
        if isinstance(answer, dict) and turn.status is not TurnStatus.CANCELLED:
            return {**answer, **user}
        if turn.status is TurnStatus.CANCELLED:
            return {"stopReason": "cancelled", **user}
        if turn.status is TurnStatus.INTERRUPTED:
            # --on-agent-crash stop: the editor was told; the turn ended, resumable later.
            meta = {"turnback": {"interrupted": True}}
            return {"stopReason": "end_turn", "_meta": meta, **user}
        message = f"turn {turn.number} failed: {turn.detail}"
        self._editor.update(editor.id, transcript.notice_chunk(message, "error"))
        raise internal_error(message, turn=turn.token)

    # -- rewinding ---------------------------------------------------------------------------

    async def rewind(self, params: dict[str, Any], *, extension: bool) -> dict[str, Any]:
        """session/rewind (``extension``: ``_session/rewind``, with ``mode`` and ``dryRun``):
        back to before the turn of a user message, or to the end of the turn of another
        message, as :mod:`turnback.acp.rewind` says. Refused, with nothing changed, while a
        turn runs, for an id the conversation does not hold, and when the user's own edits are
        in the way."""
        editor = self.running(params)
        given, files, conversation, dry = rewind.read(params, extension=extension)
        given = editor.prompt_ids.get(given, given)
        return await self._rewind(editor, given, files, conversation, dry=dry, extension=extension)

    async def edit_prompt(self, params: dict[str, Any]) -> Any:
        """session/edit_prompt: back to before the turn of a user message (files and
        conversation, keeping the user's edits), then that turn again with the new content,
        answered as session/prompt is; the edited prompt keeps the id the editor gave."""
        editor = self.running(params)
        given = params.get("messageId")
        if not isinstance(given, str) or not given:
            raise rewind.refuse("messageId is required: the id of a prompt of this session")
        given = editor.prompt_ids.get(given, given)
        content = params.get("content", params.get("newContent"))
        if not isinstance(content, list):
            raise rewind.refuse("content must be a list of content blocks: the new prompt")
        validate_prompt(content)  # before anything is rewound: InvalidEvent names the field
        await self._rewind(editor, given, True, True, dry=False, extension=False, prompt=True)
        return await self.prompt({**params, "prompt": content})

    async def _rewind(
        self,
        editor: EditorSession,
        given: str,
        files: bool,
        conversation: bool,
        *,
        dry: bool,
        extension: bool,
        prompt: bool = False,
    ) -> dict[str, Any]:
        """Rewind ``editor``'s session to where message ``given`` says (``prompt``: it must be
        a user message); the answer of session/rewind."""
        runtime = editor.runtime
        assert runtime is not None
        session = editor.session

        def look() -> tuple[rewind.Target, Any]:
            refusal = rewind.running(session.running(), editor.prompting is not None)
            if refusal is not None:
                raise refusal
            aim = rewind.target(session, given, files, conversation, prompt=prompt)
            return aim, rewind.plan(session, aim)

        aim, plan = await self.service.acall(look)
        result = rewind.answer(aim, plan, dry=dry, extension=extension)
        refusal = rewind.conflicts(aim, plan)
        if refusal is not None:
            raise refusal
        if dry or aim.later == 0:
            return result
        try:
            await runtime.revert(aim.request)
        except RevertConflict as error:  # a hand edit made since the plan was read
            raise rewind.refuse(
                f"the rewind was refused and nothing was changed: {error}",
                rewind.REFUSED,
                error="UserEditsInTheWay",
                paths=list(error.paths),
            ) from error
        if conversation:
            self._editor.update(editor.id, rewind.truncated(result, aim.request.to_turn))
        return result

    # -- the agent's commands, with turnback's ------------------------------------------------

    def agent_commands(
        self, editor: EditorSession, update: dict[str, Any], *, forward: bool
    ) -> None:
        """The agent offered its commands: keep them, and (unless it was replaying a session)
        send the editor them with turnback's."""
        offered_now = update.get("availableCommands")
        editor.agent_commands = list(offered_now) if isinstance(offered_now, list) else []
        if forward:
            self.announce_commands(editor)

    def announce_commands(self, editor: EditorSession) -> None:
        ours = [dict(command) for command in offered.COMMANDS]
        theirs = [
            c
            for c in editor.agent_commands
            if not (isinstance(c, dict) and c.get("name") in offered.NAMES)
        ]
        update = {"sessionUpdate": "available_commands_update", "availableCommands": ours + theirs}
        self._editor.update(editor.id, update)

    # -- closing and deleting ----------------------------------------------------------------

    async def close(self, session_id: Any, params: dict[str, Any]) -> None:
        """session/close: the agent closes its session where it can; turnback's record is
        kept, so a load opens it again. Closing one not open here succeeds as well (ACP)."""
        closing = self._open.get(str(session_id))
        if closing is None:
            return
        runtime = closing.runtime
        if runtime is not None and supports(runtime.initialize_response, "close"):
            await runtime.request("session/close", self.to_agent(closing, params))
        await self._close(closing)

    async def _close(self, editor: EditorSession) -> None:
        self._open.pop(editor.id, None)
        if editor.prompting is not None:
            editor.prompting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(editor.prompting), SHUTDOWN_GRACE)
        if editor.runtime is not None:
            await editor.runtime.close()

    async def close_all(self) -> None:
        """End running turns as cancelled (captured by the engine), leave every session."""
        editors = list(self._open.values())
        await asyncio.gather(*(self._close(editor) for editor in editors), return_exceptions=True)

    async def delete(self, params: dict[str, Any]) -> None:
        """session/delete: the session leaves turnback's store (refused while a turn runs or
        one is set aside), then the agent deletes its own session when it says it can, and the
        session leaves the agent process."""
        try:
            session = await self.service.acall(self._stored, params.get("sessionId"))
        except (SessionNotFound, InvalidId):
            return  # ACP: deleting a session that is gone, or never was, succeeds silently
        record = await self.service.acall(lambda: session.record)
        await self.service.arun(DeleteSession(session.id))
        editor = self._open.get(session.id)
        agent_session = record.agent_state.get("agentSessionId")
        if editor is not None and editor.runtime is not None:
            agent_session = editor.runtime.agent_session_id
        try:
            if isinstance(agent_session, str) and record.agent_state.get("command") == list(
                self.command
            ):
                agent = await self._started()
                if supports(agent.initialize_response, "delete"):
                    await agent.request("session/delete", {**params, "sessionId": agent_session})
        except (RequestError, ConnectionError, OSError, AgentError) as error:
            log.warning("the agent did not delete its session %s: %s", agent_session, error)
        finally:
            if editor is not None:
                await self._close(editor)


def _listed(record: SessionRecord, turns: int, prompt: Any) -> dict[str, Any]:
    """A session as session/list shows it."""
    title = record.title
    if title is None and prompt is not None:
        title = " ".join(prompt_text(prompt).split())[:80] or None
    info: dict[str, Any] = {
        "sessionId": record.id,
        "cwd": record.workspace,
        "updatedAt": _iso(record.updated_at),
        "_meta": {"turnback": {"turns": turns, "agent": record.agent}},
    }
    if title:
        info["title"] = title
    return info
