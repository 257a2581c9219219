"""``turnback acp -- AGENT_COMMAND…``: an ACP agent towards the editor, an ACP client towards the
real agent, with turnback's turns in between.

How it is put together:

* Towards the editor, turnback's JSON-RPC :class:`~turnback.runtime.rpc.Connection` runs over
  :class:`EditorWire`, with :meth:`Proxy.handle` as its one handler. Messages stay JSON: what
  the proxy does not handle itself is forwarded as it came, so fields and ``_meta`` an SDK model
  does not know survive. What goes to the editor, and the agent's requests passed to it, are
  :class:`~turnback.acp.editor.Editor`'s.
* Towards the agent, one agent process (:attr:`Proxy.agent`, an
  :class:`~turnback.runtime.connection.AgentConnection`) hosts every session; each editor
  session is one turnback session run by one :class:`~turnback.runtime.AgentRuntime` on it
  (:class:`~turnback.acp.sessions.Sessions`): every ``session/prompt`` is a durable turn with
  workspace checkpoints, the turn goes on when the agent dies mid-turn, and permission requests
  are journaled before the editor is asked.
* ``initialize`` is the agent's own answer with turnback's capabilities added, and
  ``authenticate`` and methods that name no session -- any method, known to turnback or not --
  go to the agent process as they are. An accepted ``authenticate`` is sent again to each agent
  process started later.
* Under a conductor (draft), ``_proxy/initialize`` comes instead of ``initialize``: the agent is
  then the conductor's successor, reached through :class:`~turnback.acp.chain.Successor` on the
  same stdin and stdout, and the agent command's process, if one was started, is stopped.

The proxy never leaves the editor waiting: every request gets an answer or an error that says
what went wrong; stdin at end of file, SIGTERM or a closed stdout ends running turns as
cancelled (their workspace captured) and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from turnback.acp import commands, rewind
from turnback.acp.chain import ENVELOPES, INITIALIZE, Successor
from turnback.acp.editor import Editor, cancel_notice
from turnback.acp.launch import (
    DEFAULT_MAX_FRAME,
    INITIALIZE_ID,
    Launched,
    Opening,
    initialized,
)
from turnback.acp.sessions import SessionRelay, Sessions, internal_error
from turnback.acp.wire import REQUEST_ID, EditorWire, open_stdio
from turnback.engine.handle import Turnback
from turnback.errors import (
    AmbiguousId,
    InvalidEvent,
    InvalidId,
    SessionNotFound,
    TurnbackError,
    TurnNotFound,
)
from turnback.runtime import AgentError, ResumePolicy
from turnback.runtime.connection import AgentConnection
from turnback.runtime.rpc import Connection, RequestError
from turnback.runtime.sidecar import Started
from turnback.runtime.wire import CANCEL_REQUEST, SENT_REQUESTS, SentRequests

log = logging.getLogger("turnback.acp")

#: turnback's own errors use JSON-RPC's codes as an agent would: ACP keeps -32000 for
#: "authentication required", which an editor may answer with a login prompt.
INVALID_PARAMS = -32602
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
_INVALID_PARAMS = (SessionNotFound, AmbiguousId, InvalidId, TurnNotFound, InvalidEvent)
_SESSION_METHODS = frozenset({"session/new", "session/load", "session/resume", "session/fork"})


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
        self.policy = policy or ResumePolicy()
        env = dict(os.environ if env is None else env)
        #: The one agent process every session of this proxy runs on.
        self.agent = agent or agent_connection(self.command, env, self.policy)
        self.editor = Editor(wire, self.agent)
        self.sessions = Sessions(
            self.editor,
            self.agent,
            self.command,
            env,
            self.policy,
            handle=lambda: self.tb,
            started=self._agent,
        )
        self.agent.relay = SessionRelay(self.editor, None, None, ())
        self._initialized = False
        #: the conductor's successor, once a conductor has sent ``_proxy/initialize``
        self._successor: Successor | None = None
        #: the editor's requests being served: what each led to sending, for $/cancel_request
        self._serving: dict[Any, SentRequests] = {}
        #: a session/new the start answered, being taken on: the editor's next methods wait
        self._adopting: asyncio.Future[None] | None = None

    @property
    def tb(self) -> Turnback:
        assert self._tb is not None, "the store is opened before any session is"
        return self._tb

    def initialized_by(self, params: dict[str, Any]) -> None:
        """The editor's ``initialize`` (``params``) was answered before this proxy ran."""
        self.editor.initialize_params = dict(params)
        self._initialized = True

    def adopt(self, answered: dict[str, Any]) -> None:
        """The editor's ``session/new`` was answered before this proxy ran (``answered``: what
        the start kept of it): take the session on before serving anything else."""
        self._adopting = asyncio.ensure_future(self._adopt(answered))

    async def _adopt(self, answered: dict[str, Any]) -> None:
        try:
            if self._tb is None and self._opening is not None:
                self._tb = await asyncio.shield(self._opening)
            await self.sessions.adopt(answered)
        except Exception as error:  # the session is in the store, or kept for the next proxy
            print(
                f"turnback acp: the session {answered['session']} was answered, but its agent "
                f"session could not be taken on ({error}); session/load opens it again",
                file=sys.stderr,
            )

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
            if self._adopting is not None and not _initializes(method):
                await asyncio.shield(self._adopting)
            if self._tb is None and self._opening is not None and not _initializes(method):
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
            raise internal_error(commands.worded(error), error=type(error).__name__) from error
        except TurnbackError as error:
            data: dict[str, Any] = {"error": type(error).__name__}
            if isinstance(error, InvalidEvent) and error.field is not None:
                data["field"] = error.field
            for name in ("turn", "state", "remedy"):
                if getattr(error, name) is not None:
                    data[name] = getattr(error, name)
            if isinstance(error, _INVALID_PARAMS):
                raise internal_error(commands.worded(error), INVALID_PARAMS, **data) from error
            raise internal_error(commands.worded(error), **data) from error
        except (ConnectionError, OSError) as error:
            raise internal_error(f"the agent {self._described} went away: {error}") from error
        finally:
            notes.open = False
            if self._serving.get(rpc_id) is notes:
                del self._serving[rpc_id]

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        sessions = self.sessions
        if _initializes(method):
            return await self._initialize(params, INITIALIZE.get(method))
        if method == "session/list":
            return await sessions.service.acall(sessions.list, params)
        if method == "authenticate":
            result = await (await self._agent()).request(method, params)
            self.editor.authenticated = dict(params)
            return result
        if method in _SESSION_METHODS:
            return await sessions.open(method, params)
        if method == "session/prompt":
            return await sessions.prompt(params)
        if method in rewind.METHODS:
            return await sessions.rewind(params, extension=method.startswith("_"))
        if method == rewind.EDIT_PROMPT:
            return await sessions.edit_prompt(params)
        if method == "session/close":
            await sessions.close(params.get("sessionId"), params)
            return {}
        if method == "session/delete":
            await sessions.delete(params)
            return {}
        editor = sessions.get(params.get("sessionId"))
        if editor is not None and editor.runtime is not None:
            return await editor.runtime.request(method, sessions.to_agent(editor, params))
        if "sessionId" in params and not method.startswith("_"):
            sessions.running(params)  # raises: the session is not open here
        if method in ENVELOPES:
            raise RequestError(
                METHOD_NOT_FOUND,
                f"Method not found: {method} is for a proxy component that a conductor "
                "initialized with _proxy/initialize, and turnback acp was initialized as the agent",
                {"method": method},
            )
        # Any other method -- an extension, or one newer than turnback -- is the agent's.
        return await (await self._agent()).request(method, params)

    async def _notification(self, method: str, params: dict[str, Any]) -> None:
        if method == CANCEL_REQUEST:
            # Hop by hop: each request the editor's one led to is cancelled by its own id.
            request = params.get("requestId")
            notes = self._serving.get(request) if isinstance(request, int | str) else None
            for send, rpc_id in list(notes.sent if notes is not None else ()):
                with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                    await send(cancel_notice(rpc_id))
            return
        editor = self.sessions.get(params.get("sessionId"))
        if method == "session/cancel":
            if editor is not None and editor.runtime is not None:
                await editor.runtime.cancel("the editor (session/cancel)")
            return
        if editor is not None and editor.runtime is not None:
            await editor.runtime.notify(method, self.sessions.to_agent(editor, params))
        else:
            await self.agent.notify(method, params)

    async def _initialize(self, params: dict[str, Any], envelope: str | None) -> dict[str, Any]:
        """``initialize``, or a conductor's ``_proxy/initialize`` (``envelope``: what the
        successor's messages are wrapped in)."""
        if envelope is not None and self._successor is None:
            self._successor = Successor(self.editor.wire, envelope)
            await self.agent.chain(self._successor)
        elif envelope is None and self._successor is None and not self.command:
            raise RequestError(
                INVALID_REQUEST,
                "turnback acp was started without an agent command: give it after `--` "
                "(turnback acp -- AGENT_COMMAND…), or run turnback acp as a proxy component "
                "under a conductor, which sends _proxy/initialize",
                {"method": "initialize"},
            )
        self.editor.initialize_params = dict(params)
        self.editor.authenticated = None  # a new initialize is followed by its own authenticate
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
            raise internal_error(said, command=list(self.command), **extra) from error
        return self.agent

    @property
    def _described(self) -> str:
        return repr(" ".join(self.command))

    # -- the end -----------------------------------------------------------------------------

    async def close(self) -> None:
        """End running turns as cancelled (captured by the engine), stop every agent."""
        if self._adopting is not None:  # a session being taken on is closed with the others
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._adopting), 2.0)
        await self.sessions.close_all()
        self.editor.stop()
        await self.agent.close()


def _initializes(method: str) -> bool:
    return method == "initialize" or method in INITIALIZE


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
    store: Opening | None = None,
) -> int:
    """Run the proxy on this process's stdin and stdout until the editor goes away or SIGTERM;
    returns the exit status. ``early``: how :mod:`turnback.acp.launch` started; ``store``: the
    store's opening it began (at ``home``), else it is opened here."""
    if command and shutil.which(command[0]) is None:
        print(
            f"turnback acp: the agent command {command[0]!r} was not found; every request will "
            "be answered with an error",
            file=sys.stderr,
        )
    early = early or Launched(None)
    # Opened and recovered (turns a killed proxy left running) while initialize is answered;
    # every other method waits for it.
    store = store or Opening(home)
    opening = asyncio.ensure_future(asyncio.to_thread(store.result))
    await asyncio.to_thread(early.settled)  # the start's relay is woken, and done
    env = dict(os.environ)
    agent = agent_connection(command, env, policy or ResumePolicy())
    if early.process is not None:
        handed = (early.agent, early.sent, INITIALIZE_ID, early.answer, early.sent_at)
        agent.spawn(Started(early.process, *handed))
    elif command:  # without one, turnback acp is a conductor's proxy component
        agent.spawn()
    reader, writer = await open_stdio(max_frame, early.editor, ended=early.ended)
    wire = EditorWire(reader, writer, max_frame)
    proxy = Proxy(opening, command, wire, env=env, policy=policy, agent=agent)
    if early.params is not None:
        proxy.initialized_by(early.params)
    if early.session is not None:
        proxy.adopt(early.session)
    conn = Connection(proxy.handle, wire)
    proxy.editor.conn = conn
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


def main(
    command: Sequence[str],
    *,
    home: str | None = None,
    max_frame: int = DEFAULT_MAX_FRAME,
    policy: ResumePolicy | None = None,
    early: Launched | None = None,
    store: Opening | None = None,
) -> int:
    """:func:`serve`; ``early`` and ``store``: what :mod:`turnback.acp.launch` began."""
    return asyncio.run(
        serve(command, home=home, max_frame=max_frame, policy=policy, early=early, store=store)
    )
