"""One run of an agent process: spawned, spoken to over ACP, watched.

Some facts about the connection that the runtime depends on:

* turnback speaks JSON-RPC itself (:class:`~turnback.runtime.rpc.Connection`) over its own
  :class:`~turnback.runtime.wire.Wire`: requests and answers stay JSON as the agent wrote them,
  so fields an SDK model does not know survive, and serving a session imports no ACP SDK.
* A line that is not a usable JSON-RPC message -- not JSON, not an object, nested too deeply to
  parse, a response whose ``id`` is an object, an ``error`` that is not an object -- is caught
  by the :class:`~turnback.runtime.wire.Wire` with :mod:`turnback.jsontext`, reported to the
  runtime, and a request among them is answered with an error, so the agent is not left
  waiting.
* Each incoming message is handled in its own task, so handlers that ``await`` can observe
  messages out of wire order. The runtime therefore records nothing in handlers: it records in
  the wire's watch, which sees every frame as it comes off the pipe, in order, before the
  connection dispatches it. Handlers do only what must be asynchronous (asking the user,
  answering).
* When the agent dies, requests in flight fail with ``ConnectionError`` once its stdout reaches
  EOF; with no request in flight nothing signals it, so :attr:`Sidecar.exited` watches the process.
* The agent starts with a trimmed environment (:data:`INHERITED_ENV`, as the ACP SDKs start
  theirs) plus what the caller passes; its shutdown closes its stdin, then terminates it after a
  second, then kills it.
* The agent is the leader of a process group of its own, and is stopped as a group: an agent
  started through a launcher (an npm shim runs the real binary with ``spawnSync``; Node agents
  run a CLI as a child) would otherwise leave what it started running once the launcher dies.
  What is left of the group after its leader has gone is terminated, then killed, too. A Ctrl-C
  at a terminal reaches turnback, not the agent: turnback's shutdown stops it.
* An agent need not be a process of turnback's: over a :class:`Link` (a conductor's successor,
  reached through the conductor) the same connection runs on the streams the link gives. Such
  an agent has no pid; closing the sidecar ends the link's run, and killing it only marks the
  run gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from turnback.errors import INITIALIZE_TIMEOUT, AgentDied, AgentUnavailable
from turnback.handshake import agent_initialize
from turnback.records import record
from turnback.runtime.rpc import PROTOCOL_VERSION, Connection, Handler, RequestError
from turnback.runtime.wire import Frame, Output, Pace, Rejected, Watch, Wire

#: The largest line accepted from an agent.
MAX_FRAME = 64 * 2**20
#: What an agent inherits of turnback's environment before what the caller passes.
INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


@record
class AgentFeatures:
    """What an agent advertised in ``initialize``."""

    name: str | None = None
    load_session: bool = False  # session/load
    resume_session: bool = False  # session/resume
    close_session: bool = False  # session/close
    checkpoints: bool = False  # _meta.turnback.checkpoints: sends _turnback/checkpoint
    rollback: bool = False  # _meta.turnback.rollback: answers _turnback/rollback
    embedded_context: bool = False  # accepts resource blocks in prompts

    @classmethod
    def from_initialize(cls, response: Mapping[str, Any]) -> AgentFeatures:
        capabilities = _object(response.get("agentCapabilities"))
        extension: dict[str, Any] = {}
        for meta in (capabilities.get("_meta"), response.get("_meta")):
            if isinstance(meta, dict) and isinstance(meta.get("turnback"), dict):
                extension.update(meta["turnback"])
        sessions = _object(capabilities.get("sessionCapabilities"))
        prompts = _object(capabilities.get("promptCapabilities"))
        name = _object(response.get("agentInfo")).get("name")
        return cls(
            name=name if isinstance(name, str) else None,
            load_session=capabilities.get("loadSession") is True,
            resume_session=sessions.get("resume") is not None,
            close_session=sessions.get("close") is not None,
            checkpoints=extension.get("checkpoints") is True,
            rollback=extension.get("rollback") is True,
            embedded_context=prompts.get("embeddedContext") is True,
        )


class StartedProcess(Protocol):
    """A process someone else started: as much of ``subprocess.Popen``'s interface as a sidecar
    uses (``turnback acp``'s start has one of its own, without importing subprocess)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdin(self) -> IO[bytes] | None: ...
    @property
    def stdout(self) -> IO[bytes] | None: ...
    def wait(self, timeout: float | None = None) -> int: ...


@record
class Started:
    """An agent process started by someone else, with pipes for stdin and stdout, for a sidecar
    to take over: what was read from it and not handled, and the ``initialize`` it was already
    sent (``sent``, under ``initialize_id``) and its answer, if that came."""

    process: StartedProcess
    output: bytes = b""
    sent: Mapping[str, Any] | None = None
    initialize_id: Any = None
    answer: dict[str, Any] | None = None
    sent_at: float | None = None  # time.monotonic() when it was sent: its timeout runs from then


class Link(Protocol):
    """An agent reached through another program rather than started as a process: a conductor's
    successor in an ACP proxy chain. Each :meth:`open` is one run of it, as a process would be."""

    @property
    def described(self) -> str:
        """What to call it in messages."""
        ...

    async def open(self) -> tuple[asyncio.StreamReader, Output, asyncio.Future[int]]:
        """Its output to read, its input to write, and what is done when it has gone."""
        ...

    async def close(self) -> None:
        """End this run (the reader sees its end; ``exited`` is done)."""
        ...


def signal_agent(pid: int, signum: int) -> None:
    """Send ``signum`` to a running (not yet reaped) agent's process group -- or to the process
    alone when it leads none (started by someone else)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to process group ``pgid``; whether it still has a member. (Its leader's
    pid is not reused while the group lives.)"""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def stop_agent(pid: int, exited: Callable[[float], Awaitable[bool]]) -> None:
    """Stop an agent whose stdin was just closed: give it a second to leave, then terminate,
    then kill its process group; then whatever is left of the group (a child outliving its
    launcher) gets the same. ``exited(wait)`` says whether the agent process has ended (and
    was reaped), waiting up to ``wait`` seconds for it."""
    for signum in (None, signal.SIGTERM, signal.SIGKILL):
        if signum is not None and not await exited(0):
            signal_agent(pid, signum)
        if await exited(1.0):
            break
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if not _signal_group(pid, signum):
            return
        for _ in range(20):  # a second for the rest of the group to go
            await asyncio.sleep(0.05)
            if not _signal_group(pid, 0):
                return


def ended_text(returncode: int | None) -> str:
    """How an agent process stopped serving, for messages (after "agent X"): it exited with its
    status, a signal killed it, or -- no exit status yet -- it closed its output and runs on."""
    if returncode is None:
        return "closed its output (the process still runs)"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited (exit status {returncode})"


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class Sidecar:
    """The agent as a subprocess with an ACP connection. One instance per process run: after
    the agent dies, its owner closes this one and opens another."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str] | None,
        handler: Handler,
        watch: Watch,
        rejected: Callable[[Rejected], None],
        stderr: int | None = asyncio.subprocess.DEVNULL,
        initialize: Mapping[str, Any] | None = None,
        pace: Pace | None = None,
        link: Link | None = None,
    ) -> None:
        if not command and link is None:
            raise AgentUnavailable("the agent command is empty; give the program and its arguments")
        #: the agent reached through another program instead of a process started here
        self._link = link
        self.command = tuple(str(part) for part in command)
        self._cwd = cwd
        self._env = dict(env or {})
        self._handler = handler
        self._watch = watch
        self._rejected = rejected
        self._pace = pace
        self._stderr = stderr
        self._initialize = dict(initialize or {})
        self._started: Started | None = None
        self._answer: asyncio.Future[Frame] | None = None  # to an initialize sent before us
        self._answer_id: Any = None
        self._wire: Wire | None = None
        self._stack = contextlib.AsyncExitStack()
        self._process: asyncio.subprocess.Process | StartedProcess | None = None
        self._rpc: Connection | None = None
        self.exited: asyncio.Future[int] | None = None
        self.features = AgentFeatures()
        #: the agent's answer to ``initialize`` as it wrote it, once open
        self.initialize_response: dict[str, Any] | None = None

    @property
    def described(self) -> str:
        return self._link.described if self._link is not None else " ".join(self.command)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def alive(self) -> bool:
        return self.exited is not None and not self.exited.done()

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process else None

    async def exit_status(self, wait: float = 1.0) -> int | None:
        """The exit status, waiting up to ``wait`` seconds for the process to be reaped (its
        pipes close a moment before); None while it still runs."""
        if self.exited is not None and not self.exited.done():
            await asyncio.wait({self.exited}, timeout=wait)
        return self.returncode

    async def spawn(self, early: Started | None = None) -> None:
        """Start the agent process -- or take ``early``, the agent command already started --
        and connect to it; raises AgentUnavailable naming the command. Over a :class:`Link`:
        open a run of it."""
        source: asyncio.ReadTransport | None = None
        writer: Output
        if self._link is not None:
            reader, writer, self.exited = await self._link.open()
            self._stack.push_async_callback(self._link.close)
        elif early is not None:
            reader, writer, source = await self._adopt(early.process, early.output)
            self._process = early.process
            self.exited = asyncio.ensure_future(asyncio.to_thread(early.process.wait))
            self._started = early
            if early.sent is not None and early.answer is None:
                self._answer = asyncio.get_running_loop().create_future()
                self._answer_id = early.initialize_id
        else:
            process = await self._start()
            assert process.stdout is not None and process.stdin is not None
            reader, writer, source = process.stdout, process.stdin, None
            self._process = process
            self.exited = asyncio.ensure_future(process.wait())
        wire = Wire(
            reader,
            writer,
            MAX_FRAME,
            rejected=self._refuse,
            watch=self._see,
            pace=self._pace,
            source=source,
        )
        self._wire = wire
        self._rpc = Connection(self._handler, wire)
        self._stack.push_async_callback(self._rpc.close)

    async def _start(self) -> asyncio.subprocess.Process:
        """The agent process, with pipes, and its shutdown on the stack."""
        env = {k: v for k in INHERITED_ENV if (v := os.environ.get(k)) and not v.startswith("()")}
        env.update(self._env)
        try:
            process = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=self._stderr,
                env=env,
                cwd=self._cwd,
                limit=MAX_FRAME,
                process_group=0,
            )
        except OSError as error:
            raise AgentUnavailable(
                f"cannot start agent {self.described!r} in {self._cwd}: {error}; check the "
                "command and that it is installed"
            ) from error

        async def exited(wait: float) -> bool:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.wait()), wait)
            return process.returncode is not None

        async def stop() -> None:
            assert process.stdin is not None
            with contextlib.suppress(OSError, RuntimeError):
                process.stdin.close()
            await stop_agent(process.pid, exited)

        self._stack.push_async_callback(stop)
        return process

    def _refuse(self, rejected: Rejected) -> None:
        """Report a line the wire rejected, and answer it when it is a request, so the agent
        is not left waiting."""
        self._rejected(rejected)
        if rejected.request and rejected.rpc_id is not None and self._wire is not None:
            error = {"code": rejected.code, "message": rejected.message}
            self._wire.post({"jsonrpc": "2.0", "id": rejected.rpc_id, "error": error})

    async def _adopt(
        self, process: StartedProcess, output: bytes
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.ReadTransport]:
        """Streams over a process started without asyncio (``output``: what was read from it
        already) and the transport its output is read through, and its shutdown as for one it
        starts: stdin closed, then terminated, then killed."""
        assert process.stdin is not None and process.stdout is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_FRAME)
        if output:
            reader.feed_data(output)
        source, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), process.stdout
        )
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, process.stdin
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)

        async def exited(wait: float) -> bool:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(process.wait, wait)
            return process.returncode is not None

        async def stop() -> None:
            writer.close()
            await stop_agent(process.pid, exited)

        self._stack.push_async_callback(stop)
        return reader, writer, source

    async def open(
        self, initialize_timeout: float, initialize: Mapping[str, Any] | None = None
    ) -> AgentFeatures:
        """Spawn the agent (unless :meth:`spawn` did) and ``initialize`` it, with the editor's
        parameters when given; raises AgentUnavailable naming the command."""
        if initialize is not None:
            self._initialize = dict(initialize)
        if self._rpc is None:
            await self.spawn()
        started = self._started
        wait: float | None = initialize_timeout
        if started is not None and started.answer is not None:
            wait = None  # answered already, however long the start went on after it
        elif started is not None and started.sent_at is not None:
            wait = max(0.0, started.sent_at + initialize_timeout - time.monotonic())
        try:
            response = await asyncio.wait_for(self._initialized(), wait)
        except TimeoutError:
            self.kill()
            await self.close()
            raise AgentUnavailable(
                f"agent {self.described!r} did not answer initialize within "
                f"{initialize_timeout:g} s; check that it speaks ACP on stdin/stdout, or give "
                "it longer"
            ).settled_by(INITIALIZE_TIMEOUT) from None
        except (ConnectionError, OSError, AgentDied) as error:
            await self.close()
            raise AgentUnavailable(
                f"agent {self.described!r} {ended_text(await self.exit_status())} during "
                f"initialize: {error}"
            ) from error
        except RequestError as error:
            await self.close()
            raise AgentUnavailable(
                f"agent {self.described!r} refused initialize: {error}"
            ) from error
        self.initialize_response = response if isinstance(response, dict) else {}
        self.features = AgentFeatures.from_initialize(self.initialize_response)
        return self.features

    async def _initialized(self) -> Any:
        """The agent's answer to ``initialize``: sent now, or already sent by whoever started
        the process (:class:`Started`)."""
        started, self._started = self._started, None
        if started is None or started.sent is None:
            params = agent_initialize(self._initialize, PROTOCOL_VERSION)
            return await self.request("initialize", params)
        if started.answer is not None:
            return started.answer
        answer, exited = self._answer, self.exited
        assert answer is not None and exited is not None, "taken from a started process"
        either: list[asyncio.Future[Any]] = [answer, exited]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not answer.done():
            raise ConnectionError("the agent exited before answering initialize")
        frame = answer.result()
        error = frame.get("error")
        if error is not None:
            error = error if isinstance(error, dict) else {}
            raise RequestError.answered(error)
        return frame.get("result")

    def _see(self, frame: Frame, line: bytes) -> bool:
        """The wire's watch: the answer to an ``initialize`` sent before this connection was
        made is taken here; everything else goes to the owner's watch."""
        answer = self._answer
        if answer is None or answer.done() or "method" in frame:
            return self._watch(frame, line)
        if frame.get("id") != self._answer_id:
            return self._watch(frame, line)
        answer.set_result(frame)
        return True

    def _connection(self) -> Connection:
        if self._rpc is None:
            raise AgentDied(f"agent {self.described!r} is not running", None)
        return self._rpc

    async def request(self, method: str, params: Any) -> Any:
        """Send any request to the agent as it is; returns the raw result (RequestError on an
        error answer, ConnectionError once the agent has gone)."""
        return await self._connection().send_request(method, params)

    async def notify(self, method: str, params: Any) -> None:
        """Send any notification to the agent as it is."""
        await self._connection().send_notification(method, params)

    def send_frame(self, frame: Frame) -> None:
        """Write one frame to the agent: the answer to a request a watch took."""
        if self._wire is None or self._rpc is None:
            raise AgentDied(f"agent {self.described!r} is not running", None)
        self._wire.post(frame)

    async def close(self) -> None:
        """Stop the agent (if it still runs) and its connection. Idempotent."""
        # Closing stdin asks the agent to leave; one that lingers is terminated, then killed.
        try:
            with contextlib.suppress(ProcessLookupError):
                await self._stack.aclose()
        finally:
            self._rpc = None
            if self.exited is not None and not self.exited.done():
                self.exited.cancel()

    def kill(self) -> None:
        """SIGKILL the agent, its process group with it (tests and hung agents)."""
        if self._link is not None and self.exited is not None and not self.exited.done():
            self.exited.set_result(-signal.SIGKILL)  # as good as gone: it is not ours to kill
        if self._process is not None and self._process.returncode is None:
            signal_agent(self._process.pid, signal.SIGKILL)
