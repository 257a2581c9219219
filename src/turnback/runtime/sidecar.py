"""One run of an agent process: spawned, spoken to over ACP (the official SDK), watched.

Some facts about the SDK (``agent-client-protocol`` 0.12) that the runtime depends on:

* Each incoming message is handled in its own task, so handlers that ``await`` can observe
  messages out of wire order. The runtime therefore records nothing in handlers: it records in
  :class:`_WatchedFrames`, which sees every frame as it comes off the pipe, in order, before the
  SDK dispatches it. Handlers do only what must be asynchronous (asking the user, answering).
* A line that is not JSON is logged and dropped by the SDK, and a JSON value that is not an
  object kills its receive loop (the connection then looks closed while the agent lives on), as
  do JSON nested too deeply to parse, a response whose ``id`` is an object and an ``error`` that
  is not an object. :class:`_WatchedFrames` checks every line with :mod:`turnback.jsontext`,
  reports what it cannot use to the runtime, answers a request among them with an error, and
  drops it before the SDK sees it.
* When the agent dies, requests in flight fail with ``ConnectionError`` once its stdout reaches
  EOF; with no request in flight nothing signals it, so :attr:`Sidecar.exited` watches the process.
* The SDK starts the agent with a trimmed environment; callers pass what the agent needs.
* ``ClientSideConnection`` only has typed methods; a relay forwarding arbitrary methods uses the
  SDK's JSON-RPC ``Connection`` underneath it (:meth:`Sidecar.request`, :meth:`Sidecar.notify`),
  and answers requests it took itself by writing the response frame (:meth:`Sidecar.send_frame`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import acp
from acp._transport import NdjsonTransport
from acp.connection import Connection
from acp.core import ClientSideConnection
from acp.schema import ClientCapabilities, Implementation, InitializeResponse
from acp.task import MessageSender, TaskSupervisor

from turnback import jsontext
from turnback.errors import AgentDied, AgentUnavailable

#: The methods an agent may call on a client; anything else (not ``_``-prefixed) is unknown.
CLIENT_METHODS = frozenset(acp.CLIENT_METHODS.values())

Frame = dict[str, Any]
_CLIENT_INFO = {"name": "turnback", "title": "turnback", "version": "1"}


@dataclass(frozen=True, slots=True)
class AgentFeatures:
    """What an agent advertised in ``initialize``."""

    name: str | None = None
    load_session: bool = False  # session/load
    resume_session: bool = False  # session/resume
    checkpoints: bool = False  # _meta.turnback.checkpoints: sends _turnback/checkpoint
    rollback: bool = False  # _meta.turnback.rollback: answers _turnback/rollback
    embedded_context: bool = False  # accepts resource blocks in prompts

    @classmethod
    def from_initialize(cls, response: InitializeResponse) -> AgentFeatures:
        capabilities = response.agent_capabilities
        extension: dict[str, Any] = {}
        for meta in (capabilities.field_meta if capabilities else None, response.field_meta):
            if isinstance(meta, dict) and isinstance(meta.get("turnback"), dict):
                extension.update(meta["turnback"])
        sessions = capabilities.session_capabilities if capabilities else None
        prompts = capabilities.prompt_capabilities if capabilities else None
        info = response.agent_info
        return cls(
            name=info.name if info else None,
            load_session=bool(capabilities and capabilities.load_session),
            resume_session=bool(sessions and sessions.resume is not None),
            checkpoints=extension.get("checkpoints") is True,
            rollback=extension.get("rollback") is True,
            embedded_context=bool(prompts and prompts.embedded_context),
        )


#: JSON-RPC's notification that a request is no longer wanted (``{"requestId"}``); ids are the
#: sender's own, so a relay passes it on hop by hop, naming the id the next hop saw.
CANCEL_REQUEST = "$/cancel_request"
Sender = Callable[[Frame], Awaitable[None]]


@dataclass(slots=True)
class SentRequests:
    """The requests one request of a relay's client led to sending on, each as (how to write
    to where it went, its id there), while ``open``."""

    sent: list[tuple[Sender, Any]] = field(default_factory=list)
    open: bool = True


#: Set by a relay while it handles one request of its client, so a ``$/cancel_request`` for
#: that request can follow it. Tasks started meanwhile inherit it; closing it stops the notes.
SENT_REQUESTS: contextvars.ContextVar[SentRequests | None] = contextvars.ContextVar(
    "turnback_sent_requests", default=None
)


def note_sent(send: Sender, frame: Frame) -> None:
    """Note ``frame`` in :data:`SENT_REQUESTS` if it is a request and a relay listens."""
    notes = SENT_REQUESTS.get()
    if notes is not None and notes.open and "method" in frame and "id" in frame:
        notes.sent.append((send, frame["id"]))


class _WatchedFrames(NdjsonTransport):
    """The SDK's newline-delimited JSON transport, with every incoming frame (parsed, and the line
    as written) shown to ``watch`` in wire order (synchronously, so nothing can reorder them), and
    bad frames shown to ``malformed`` instead of being dropped silently or killing the
    connection. A frame for which ``watch`` returns true has been taken by the watcher: the SDK
    never sees it."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        watch: Callable[[Frame, bytes], bool | None],
        malformed: Callable[[bytes, str], None],
        pace: Callable[[], Awaitable[None] | None] | None = None,
    ) -> None:
        self._supervisor = TaskSupervisor(source="turnback.runtime.sidecar")
        super().__init__(reader, MessageSender(writer, self._supervisor))
        self._watch = watch
        self._malformed = malformed
        self._pace = pace

    async def receive(self) -> Frame | None:
        while True:
            line = await self._read_line()
            if not line:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = jsontext.loads(line)
            except jsontext.TooDeep as error:
                self._malformed(line, str(error))
                await self._refuse(jsontext.request_id(line[:4096]), -32600, str(error))
                continue
            except ValueError as error:
                self._malformed(line, f"not JSON ({error})")
                continue
            problem = jsontext.rpc_problem(message)
            if problem is not None:
                self._malformed(line, problem[1])
                if isinstance(message, dict) and "method" in message:
                    await self._refuse(message.get("id"), *problem)
                continue
            message = cast(Frame, message)
            if self._watch(message, line):
                # The watcher passed it on: read no more while its reader has a backlog, so a
                # slow reader slows the agent down instead of filling this process's memory.
                if self._pace is not None and (backlog := self._pace()) is not None:
                    await backlog
                continue
            return message

    async def send(self, payload: Frame) -> None:
        await super().send(payload)
        note_sent(self.send, payload)

    async def _refuse(self, rpc_id: Any, code: int, message: str) -> None:
        """Answer a request that cannot be handled, so the agent is not left waiting."""
        if isinstance(rpc_id, bool) or not isinstance(rpc_id, int | str):
            return
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            error = {"code": code, "message": message}
            await self.send({"jsonrpc": "2.0", "id": rpc_id, "error": error})

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self._supervisor.shutdown()


class Sidecar:
    """The agent as a subprocess with an ACP connection. One instance per process run: after
    the agent dies, the runtime closes this one and opens another."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str] | None,
        client: object,
        watch: Callable[[Frame, bytes], bool | None],
        malformed: Callable[[bytes, str], None],
        stderr: int | None = asyncio.subprocess.DEVNULL,
        initialize: Mapping[str, Any] | None = None,
        pace: Callable[[], Awaitable[None] | None] | None = None,
    ) -> None:
        if not command:
            raise AgentUnavailable("the agent command is empty; give the program and its arguments")
        self.command = tuple(str(part) for part in command)
        self._cwd = cwd
        self._env = dict(env or {})
        self._client = client
        self._watch = watch
        self._malformed = malformed
        self._pace = pace
        self._stderr = stderr
        self._initialize = dict(initialize or {})
        self._transport: _WatchedFrames | None = None
        self._stack = contextlib.AsyncExitStack()
        self._process: asyncio.subprocess.Process | None = None
        self._conn: ClientSideConnection | None = None
        self.exited: asyncio.Future[int] | None = None
        self.features = AgentFeatures()
        #: the agent's answer to ``initialize``, once open
        self.initialize_response: InitializeResponse | None = None
        #: the same answer as the agent wrote it (the ``result`` object), fields the SDK's
        #: model does not know included and none added
        self.initialize_result: dict[str, Any] | None = None
        self._answered = False

    @property
    def described(self) -> str:
        return " ".join(self.command)

    @property
    def conn(self) -> ClientSideConnection:
        if self._conn is None:
            raise AgentDied(f"agent {self.described!r} is not running", None)
        return self._conn

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def alive(self) -> bool:
        return self.exited is not None and not self.exited.done()

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process else None

    async def open(self, initialize_timeout: float) -> AgentFeatures:
        """Spawn the agent and ``initialize`` it; raises AgentUnavailable naming the command."""
        try:
            reader, writer, process = await self._stack.enter_async_context(
                acp.spawn_stdio_transport(
                    self.command[0],
                    *self.command[1:],
                    env=self._env,
                    cwd=self._cwd,
                    stderr=self._stderr,
                    shutdown_timeout=1.0,
                )
            )
        except OSError as error:
            raise AgentUnavailable(
                f"cannot start agent {self.described!r} in {self._cwd}: {error}; check the "
                "command and that it is installed"
            ) from error
        self._process = process
        self.exited = asyncio.ensure_future(process.wait())
        transport = _WatchedFrames(reader, writer, self._first_answer, self._malformed, self._pace)
        self._transport = transport
        # The SDK's router calls only the methods the client has; the Client protocol lists all.
        # User-input requests (elicitation) are in the SDK's unstable part of the protocol.
        self._conn = ClientSideConnection(
            cast(acp.Client, self._client), transport, use_unstable_protocol=True
        )
        self._stack.push_async_callback(self._conn.close)
        params = self._initialize
        meta = params.get("_meta")
        initialize = self._conn.initialize(
            protocol_version=params.get("protocolVersion", acp.PROTOCOL_VERSION),
            client_capabilities=ClientCapabilities.model_validate(
                params.get("clientCapabilities") or {}
            ),
            client_info=Implementation.model_validate(params.get("clientInfo") or _CLIENT_INFO),
            **(meta if isinstance(meta, dict) else {}),
        )
        try:
            response = await asyncio.wait_for(initialize, initialize_timeout)
        except TimeoutError:
            self.kill()
            await self.close()
            raise AgentUnavailable(
                f"agent {self.described!r} did not answer initialize within "
                f"{initialize_timeout:g} s; check that it speaks ACP on stdin/stdout, or raise "
                "ResumePolicy.initialize_timeout"
            ) from None
        except (ConnectionError, OSError) as error:
            await self.close()
            raise AgentUnavailable(
                f"agent {self.described!r} exited during initialize "
                f"(status {self.returncode}): {error}"
            ) from error
        except acp.RequestError as error:
            await self.close()
            raise AgentUnavailable(
                f"agent {self.described!r} refused initialize: {error}"
            ) from error
        self.initialize_response = response
        self.features = AgentFeatures.from_initialize(response)
        return self.features

    def _first_answer(self, frame: Frame, line: bytes) -> bool | None:
        """The watch, keeping the first response as written: the answer to ``initialize``,
        the first request this connection sends."""
        if not self._answered and "method" not in frame:
            self._answered = True
            result = frame.get("result")
            self.initialize_result = result if isinstance(result, dict) else None
        return self._watch(frame, line)

    @property
    def _rpc(self) -> Connection:
        # The JSON-RPC connection under the typed one (see the module docstring).
        rpc: Connection = getattr(self.conn, "_conn")  # noqa: B009
        return rpc

    async def request(self, method: str, params: Any) -> Any:
        """Send any request to the agent as it is; returns the raw result (RequestError on an
        error answer, ConnectionError once the agent has gone)."""
        return await self._rpc.send_request(method, params)

    async def notify(self, method: str, params: Any) -> None:
        """Send any notification to the agent as it is."""
        await self._rpc.send_notification(method, params)

    async def send_frame(self, frame: Frame) -> None:
        """Write one frame to the agent: the answer to a request a watcher took."""
        if self._transport is None or self._conn is None:
            raise AgentDied(f"agent {self.described!r} is not running", None)
        await self._transport.send(frame)

    async def close(self) -> None:
        """Stop the agent (if it still runs) and its connection. Idempotent."""
        # Closing stdin asks the agent to leave; one that lingers is terminated, then killed, by
        # the SDK's shutdown.
        try:
            # The SDK terminates an agent still there after a second; one that exits in that
            # very moment makes the signal fail. It is gone either way.
            with contextlib.suppress(ProcessLookupError):
                await self._stack.aclose()
        finally:
            self._conn = None
            if self.exited is not None and not self.exited.done():
                self.exited.cancel()

    def kill(self) -> None:
        """SIGKILL the agent (tests and hung agents)."""
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
