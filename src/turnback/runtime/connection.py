"""One agent process at a time, and the sessions it hosts.

Agents are built to serve many sessions from one process: the process that answers
``initialize`` also hosts every session a client opens, and ``authenticate`` and extensions
that name no session are agent-wide. :class:`AgentConnection` is that process for turnback: it
spawns and initializes the agent, repeats an accepted ``authenticate`` to each process it starts,
and routes what the agent sends, in wire order, to the :class:`Host` of the session it names (an
:class:`~turnback.runtime.agent_session.AgentSession`). What names no hosted session goes to the
relay (the proxy), or to the only host when there is no relay.

When the process dies, the connection does not decide what happens next: each host sees its own
requests fail (``AgentDied``), and the next :meth:`AgentConnection.ensure` starts a new process
(one, however many hosts ask at once) and tells every host (:meth:`Host.agent_restarted`).
:attr:`AgentConnection.generation` counts processes: a host whose session was opened in an
earlier generation reopens it in the new one (``session/load`` or ``session/resume`` where the
agent advertises them, else a new session given the transcript) -- at once, and in any case
before it uses the new process. A host never starts a process to reopen a session in: an agent
that keeps dying is restarted only for turns, whose attempts are bounded.

A session's frames can arrive before the host knows the session's id: an agent may send updates
for a new session right after answering ``session/new``, before the opener has run again. Such
notifications are held (in order, a bounded number) and given to the host when it is attached.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from turnback.errors import AgentDied
from turnback.runtime.relay import Relay, Reply
from turnback.runtime.rpc import RequestError
from turnback.runtime.sidecar import AgentFeatures, Link, Sidecar, Started, ended_text
from turnback.runtime.wire import Frame, Rejected

log = logging.getLogger("turnback.runtime")

#: Notifications held for a session id no host has claimed yet.
_EARLY_LIMIT = 1000


class Host(Protocol):
    """What a session hosted on the connection gives it (an ``AgentSession``)."""

    def agent_frame(self, frame: Frame, line: bytes) -> bool:
        """A frame naming this session, in wire order; true if it was taken."""
        ...

    async def agent_request(self, method: str, params: dict[str, Any]) -> Any:
        """A request naming this session, dispatched to a handler (permission, elicitation)."""
        ...

    def agent_rejected(self, rejected: Rejected) -> None:
        """A line from the agent that is not a JSON-RPC message."""
        ...

    def pending_input(self) -> bool:
        """Whether an input request of this session waits for its answer."""
        ...

    def agent_restarted(self, generation: int) -> None:
        """A new agent process (of ``generation``) runs: reopen this session in it."""
        ...


class AgentConnection:
    """The agent process shared by every session of one client (see the module docstring)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        stderr: int | None = asyncio.subprocess.DEVNULL,
        initialize_timeout: float = 60.0,
        relay: Relay | None = None,
    ) -> None:
        self.command = tuple(command)
        self._cwd = cwd
        self._env = dict(env or {})
        self._stderr = stderr
        self.initialize_timeout = initialize_timeout
        #: where frames that name no hosted session go (a proxy), if anywhere
        self.relay = relay
        self._sidecar: Sidecar | None = None
        self._spawning: asyncio.Future[None] | None = None  # started ahead of initialize
        self._ready = False  # the current process answered initialize
        self._lock = asyncio.Lock()
        self._hosts: dict[str, Host] = {}
        self._early: dict[str, deque[tuple[Frame, bytes]]] = {}
        #: the number of agent processes started so far; the current one's
        self.generation = 0
        self.features = AgentFeatures()
        self._repliers: dict[int, Reply] = {}
        #: where the agent is reached instead of a process of ``command`` (see :meth:`chain`)
        self._link: Link | None = None

    # -- the process -------------------------------------------------------------------------

    @property
    def described(self) -> str:
        return self._link.described if self._link is not None else " ".join(self.command)

    @property
    def alive(self) -> bool:
        """Whether a process runs and has answered ``initialize``: one still being started (its
        generation not counted yet) is not, so a host does not take it for the one its session
        was opened in."""
        return self._ready and self._sidecar is not None and self._sidecar.alive

    @property
    def pid(self) -> int | None:
        return self._sidecar.pid if self._sidecar is not None and self._sidecar.alive else None

    @property
    def returncode(self) -> int | None:
        return self._sidecar.returncode if self._sidecar is not None else None

    @property
    def exited(self) -> asyncio.Future[int]:
        """Done when the current process exits."""
        if self._sidecar is None or self._sidecar.exited is None:
            raise AgentDied(f"agent {self.described!r} is not running", None)
        return self._sidecar.exited

    @property
    def initialize_response(self) -> dict[str, Any] | None:
        """The agent's answer to ``initialize`` as it wrote it, while it runs."""
        return self._sidecar.initialize_response if self._sidecar is not None else None

    def spawn(self, early: Started | None = None) -> None:
        """Start the agent process now (or take ``early``, started already), ahead of
        ``initialize`` (which :meth:`ensure` sends), so its start-up overlaps the caller's.
        Errors surface at :meth:`ensure`."""
        if self._sidecar is None:
            self._sidecar = self._new_sidecar()
            self._spawning = asyncio.ensure_future(self._sidecar.spawn(early))
            self._spawning.add_done_callback(lambda t: t.cancelled() or t.exception())

    def _new_sidecar(self) -> Sidecar:
        return Sidecar(
            self.command,
            cwd=self._cwd,
            env=self._env,
            handler=self._handle,
            watch=self._watch,
            rejected=self._rejected,
            stderr=self._stderr,
            pace=self._pace,
            link=self._link,
        )

    def _pace(self) -> Awaitable[None] | None:
        return self.relay.backlog() if self.relay is not None else None

    async def ensure(self) -> int:
        """Have a live, initialized agent process; start one if none runs. Returns its
        generation. Raises AgentUnavailable if it cannot start."""
        async with self._lock:
            sidecar, spawning = self._sidecar, self._spawning
            if self._ready and sidecar is not None and sidecar.alive:
                return self.generation
            self._spawning, self._ready = None, False
            if sidecar is not None and spawning is None:
                await sidecar.close()  # the previous process, gone
                sidecar = None
            if sidecar is None:
                sidecar = self._sidecar = self._new_sidecar()
            initialize = self.relay.initialize if self.relay is not None else None
            try:
                if spawning is not None:
                    await spawning
                self.features = await sidecar.open(self.initialize_timeout, initialize)
            except BaseException:
                await sidecar.close()
                self._sidecar = None
                raise
            self.generation += 1
            self._ready = True
            authenticate = self.relay.authenticate if self.relay is not None else None
            if authenticate is not None:
                try:
                    await sidecar.request("authenticate", dict(authenticate))
                except (RequestError, ConnectionError, OSError) as error:
                    log.warning("the restarted agent refused authenticate: %s", error)
        if self.generation > 1:
            for host in self.hosts:  # every open session, reopened in the new process
                host.agent_restarted(self.generation)
        return self.generation

    async def chain(self, link: Link) -> None:
        """Reach the agent through ``link`` from now on, not as a process of ``command``: a
        process started already (ahead of ``initialize``) is stopped; the next :meth:`ensure`
        opens the link."""
        await self.close()
        self._link = link

    async def restart(self) -> int:
        """Stop the current process (if any) and start a new one, initialized afresh."""
        async with self._lock:
            if self._sidecar is not None and self._spawning is None:
                await self._sidecar.close()
                self._sidecar = None
            self._ready = False
        return await self.ensure()

    async def lost(self, generation: int) -> None:
        """The process of ``generation`` is gone (a host saw it die): close it, unless a newer
        one already runs. Cancels handlers still waiting on it (a permission being asked)."""
        async with self._lock:
            if generation == self.generation and self._ready and self._sidecar is not None:
                await self._sidecar.close()
                self._sidecar, self._ready = None, False

    async def close(self) -> None:
        async with self._lock:
            spawning, self._spawning = self._spawning, None
            if spawning is not None:
                # A start still under way hands its process's shutdown to the sidecar only
                # when done: closed before that, the agent would be left running.
                await asyncio.wait({spawning})
            if self._sidecar is not None:
                await self._sidecar.close()
                self._sidecar, self._ready = None, False

    def kill(self) -> None:
        """SIGKILL the agent (tests and hung agents)."""
        if self._sidecar is not None:
            self._sidecar.kill()

    # -- talking to it -----------------------------------------------------------------------

    def current(self) -> Sidecar:
        if self._sidecar is None or not self._sidecar.alive:
            raise AgentDied(f"agent {self.described!r} is not running", self.returncode)
        return self._sidecar

    async def request(self, method: str, params: Any) -> Any:
        """Send a request to the current process as it is: the raw result; ``RequestError`` on
        an error answer; ``AgentDied`` when the process is gone (or goes while it waits)."""
        sidecar = self.current()
        try:
            return await sidecar.request(method, params)
        except (ConnectionError, OSError) as error:
            status = await sidecar.exit_status()
            raise AgentDied(
                f"agent {self.described!r} {ended_text(status)}: {error}", status
            ) from error

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification to the current process, if one runs."""
        if self._sidecar is not None and self._sidecar.alive:
            with contextlib.suppress(ConnectionError, OSError, AgentDied):
                await self._sidecar.notify(method, params)

    def replier(self, generation: int) -> Reply:
        """Answers to the process of ``generation``; dropped once it has been replaced. One
        object per process, so it can key what was asked of it (the agent's request ids are
        its own)."""
        known = self._repliers.get(generation)
        if known is not None:
            return known

        async def reply(frame: Frame) -> None:
            sidecar = self._sidecar
            if generation != self.generation or sidecar is None or not sidecar.alive:
                return
            with contextlib.suppress(ConnectionError, OSError, AgentDied):
                sidecar.send_frame(frame)

        self._repliers = {g: r for g, r in self._repliers.items() if g >= self.generation}
        self._repliers[generation] = reply
        return reply

    # -- sessions ----------------------------------------------------------------------------

    def attach(self, agent_session_id: str, host: Host) -> None:
        """Route the frames naming ``agent_session_id`` to ``host`` from now on, after the
        notifications that arrived for it before (in their order)."""
        self._hosts[agent_session_id] = host
        for frame, line in self._early.pop(agent_session_id, ()):
            host.agent_frame(frame, line)

    def detach(self, agent_session_id: str | None, host: Host) -> None:
        if agent_session_id is not None and self._hosts.get(agent_session_id) is host:
            del self._hosts[agent_session_id]

    @property
    def hosts(self) -> list[Host]:
        return list(dict.fromkeys(self._hosts.values()))

    def _watch(self, frame: Frame, line: bytes) -> bool:
        method = frame.get("method")
        if method is None:
            return False  # a response to one of our requests
        params = frame.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        host = self._hosts.get(session_id) if isinstance(session_id, str) else None
        if host is not None:
            return host.agent_frame(frame, line)
        if isinstance(session_id, str) and "id" not in frame:
            # For a session being opened: its opener attaches it in a moment.
            early = self._early.setdefault(session_id, deque(maxlen=_EARLY_LIMIT))
            early.append((frame, line))
            if len(self._early) > 100:  # ids nobody claimed: keep the newest only
                self._early.pop(next(iter(self._early)))
            return True
        if self.relay is not None:
            return self.relay.agent_frame(frame, False, self.replier(self.generation), line)
        hosts = self.hosts
        return hosts[0].agent_frame(frame, line) if len(hosts) == 1 else False

    async def _handle(self, method: str, params: Any, is_notification: bool) -> Any:
        """The connection's handler for what no watch took: requests a host answers itself."""
        params = params if isinstance(params, dict) else {}
        if is_notification:
            return None
        session_id = params.get("sessionId")
        host = self._hosts.get(session_id) if isinstance(session_id, str) else None
        if host is None and method == "elicitation/create":
            host = next((h for h in self.hosts if h.pending_input()), None)
        if host is None and len(self.hosts) == 1:
            host = self.hosts[0]
        if host is None:
            raise RequestError.method_not_found(method)
        return await host.agent_request(method, params)

    def _rejected(self, rejected: Rejected) -> None:
        for host in self.hosts or ():
            host.agent_rejected(rejected)
            return
        log.warning("the agent wrote a line that is not JSON-RPC: %s", rejected.message)


__all__ = ["AgentConnection", "Host"]
