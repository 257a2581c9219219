"""The agent runtime: an ACP agent as a sidecar process whose prompts are turnback turns.

Write order, and why (docs/design.md, invariants 1 and 3):

1. A turn is begun -- durable, baseline captured -- before the prompt is sent to the agent.
2. Every ``session/update``, step checkpoint and permission request is recorded as its frame comes
   off the pipe, on the event loop, in wire order (``record(sync=False)``: an in-memory ordered
   append). Only the journal's flusher and the engine thread touch the disk.
3. Nothing is acknowledged to anyone before it is durable: a permission request is synced before
   the user is asked; the answer is synced before the agent receives it. Step checkpoints are
   synced promptly by the reactor (they are boundary events).
4. The turn ends with the prompt's stop reason: ``end_turn`` completes it, ``max_tokens``,
   ``max_turn_requests`` and ``refusal`` complete it with a detail naming the reason,
   ``cancelled`` cancels it, an error fails it.

:class:`AgentRuntime` drives turns; what it coordinates is its collaborators' (the package
docstring lists them), each given what it needs and nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from turnback.engine.handle import Session, Turnback
from turnback.engine.turns import RunningTurn
from turnback.errors import (
    AgentDied,
    AgentUnavailable,
    OwnershipLost,
    ResumeUnavailable,
    TurnNotRunning,
)
from turnback.model import (
    Message,
    Revert,
    RevertOptions,
    RevertRequest,
    StepCheckpoint,
    Turn,
    TurnStatus,
)
from turnback.runtime.agent_session import AgentSession, SessionLost, lost_session
from turnback.runtime.connection import AgentConnection
from turnback.runtime.parts import SessionParts
from turnback.runtime.policy import AgentState, OnCrash, ResumePolicy
from turnback.runtime.reactor import (
    Reactor,
    RevertRequested,
    TurnEnded,
    TurnRequested,
)
from turnback.runtime.recording import Recorder
from turnback.runtime.relay import Relay
from turnback.runtime.requests import (
    InputCallback,
    InputRequest,
    PendingRequests,
    PermissionCallback,
    PermissionRequest,
)
from turnback.runtime.resume import CrashResume, resume_prompt
from turnback.runtime.rollback import AgentRollback
from turnback.runtime.rpc import RequestError
from turnback.runtime.sidecar import AgentFeatures, ended_text
from turnback.service import Service


class AgentRuntime:
    """Runs one turnback session on an agent: drives its turns, and coordinates the pieces that
    open its agent session, resume a turn after a crash and roll the conversation back for a
    revert. Create it with :meth:`start`; close it when done.

    The agent process is an :class:`~turnback.runtime.connection.AgentConnection`, which may host
    other sessions too (``connection=``); without one the runtime starts its own."""

    def __init__(
        self,
        tb: Turnback,
        session: Session,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        on_permission: PermissionCallback | None = None,
        on_input: InputCallback | None = None,
        policy: ResumePolicy | None = None,
        stderr: int | None = asyncio.subprocess.DEVNULL,
        relay: Relay | None = None,
        connection: AgentConnection | None = None,
    ) -> None:
        self.tb = tb
        self.session = session
        self.command = tuple(command)
        self.policy = policy or ResumePolicy()
        self._owns_connection = connection is None
        self._agent = connection or AgentConnection(
            command,
            cwd=session.workspace,
            env=env,
            stderr=stderr,
            initialize_timeout=self.policy.initialize_timeout,
            relay=relay,
        )
        #: the handle's way to the engine, shared with every other runtime of the handle
        self._service = service = Service.of(tb)
        self._reactor = reactor = Reactor(
            session, service, on_notice=relay.activity if relay is not None else None
        )
        #: the workspace start() set a watcher on, once it has (on the engine thread)
        self._watched: asyncio.Future[str | None] | None = None
        self._requests = requests = PendingRequests(service, reactor, on_permission, on_input)
        self._recorder = recorder = Recorder(reactor, requests, relayed=relay is not None)
        recorder.on_lost = self._ownership_lost
        parts = SessionParts(
            session,
            self.command,
            self.policy,
            self._agent,
            service,
            reactor,
            recorder,
            requests,
            relay,
        )
        self._agent_session = AgentSession(parts)
        self._crash = CrashResume(parts, self._agent_session)
        self._rollback = AgentRollback(
            parts,
            self._agent_session,
            running=lambda: self._current,
            loop=asyncio.get_running_loop(),
        )
        self._stopping: asyncio.Task[None] | None = None  # the cancel after OwnershipLost
        self._current: RunningTurn | None = None  # the turn being driven (also while restarting)
        self._cancelling = False
        self._cancelled_by = ""  # who asked the running turn to stop, for its detail
        self._prompt_meta: dict[str, Any] = {}
        #: how the agent answered the last prompt sent to it: its response, or its error
        self.last_response: dict[str, Any] | RequestError | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    async def start(
        cls,
        tb: Turnback,
        session: Session,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        on_permission: PermissionCallback | None = None,
        on_input: InputCallback | None = None,
        policy: ResumePolicy | None = None,
        stderr: int | None = asyncio.subprocess.DEVNULL,
        relay: Relay | None = None,
        connection: AgentConnection | None = None,
        opened: tuple[str, dict[str, Any]] | None = None,
    ) -> AgentRuntime:
        """Start the agent (or use ``connection``'s), and open (or load) its session for
        ``session`` -- or take on ``opened`` (the agent's session id and its answer), opened
        for it already in the connection's first process.

        Raises AgentUnavailable, naming the command, if it cannot start or does not answer
        ``initialize`` within ``policy.initialize_timeout``."""
        runtime = cls(
            tb,
            session,
            command,
            env=env,
            on_permission=on_permission,
            on_input=on_input,
            policy=policy,
            stderr=stderr,
            relay=relay,
            connection=connection,
        )
        runtime._reactor.start()
        if opened is not None:
            runtime._agent_session.given(*opened)
        try:
            await runtime._ensure_agent()
        except BaseException:
            await runtime.close()
            raise
        checkpoints = tb.checkpoints
        if checkpoints is not None:
            # A file watcher spares each capture the scan. Nobody waits for it to be set up:
            # it runs in the service's order, so it is in place before any capture runs there.
            runtime._watched = asyncio.ensure_future(
                runtime._service.acall(checkpoints.watch, session.workspace)
            )
        return runtime

    async def close(self) -> None:
        """Leave the agent (stopping it when this runtime started it) and stop the reactor. A
        turn still running is left to recovery."""
        self._agent_session.close()
        if self._owns_connection:
            await self._agent.close()
        await self._reactor.close()
        watched, self._watched = self._watched, None
        if watched is not None and self.tb.checkpoints is not None:
            workspace = await watched
            if workspace is not None:
                await self._service.acall(self.tb.checkpoints.unwatch, workspace)

    async def __aenter__(self) -> AgentRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def service(self) -> Service:
        """The handle's service, through which this runtime reaches the engine."""
        return self._service

    @property
    def features(self) -> AgentFeatures:
        """What the agent advertised in ``initialize``."""
        return self._agent.features

    @property
    def agent_pid(self) -> int | None:
        """The agent process's pid, while it runs."""
        return self._agent.pid

    @property
    def agent_session_id(self) -> str | None:
        return self._agent_session.id

    @property
    def session_response(self) -> dict[str, Any] | None:
        """The agent's answer when its session was last opened (new, loaded or resumed)."""
        return self._agent_session.response

    @property
    def initialize_response(self) -> dict[str, Any] | None:
        """The agent's answer to ``initialize`` as it wrote it, while it runs."""
        return self._agent.initialize_response

    async def request(self, method: str, params: Any) -> Any:
        """Send any request to the agent as it is (a relay forwarding its client's methods);
        starts the agent if it had exited. Returns the raw result; an error answer raises
        ``RequestError``."""
        await self._ensure_agent()
        result = await self._agent.request(method, params)
        await self._agent_session.setting_taken(method, params)
        return result

    async def notify(self, method: str, params: Any) -> None:
        """Send any notification to the agent as it is, if it runs."""
        await self._agent.notify(method, params)

    @property
    def rollback(self) -> AgentRollback:
        """The agent's side of this session's reverts (a ConversationRollback)."""
        return self._rollback

    # -- turns -------------------------------------------------------------------------------

    async def prompt(
        self, prompt: str | list[dict[str, Any]], *, meta: Mapping[str, Any] | None = None
    ) -> Turn:
        """Run one turn: begin it, send the prompt, record what the agent does, end it.

        ``meta`` goes to the agent as the prompt's ``_meta`` (with turnback's own key added on a
        resume); how the agent answered is in :attr:`last_response`."""
        await self._ensure_agent()
        turn: RunningTurn = await self._reactor.submit(TurnRequested(prompt))
        self._prompt_meta = dict(meta or {})
        return await self._drive(turn, prompt, None, set())

    async def cancel(self, by: str = "the caller") -> None:
        """Ask the agent to stop the running turn (``session/cancel``); it ends cancelled, its
        detail saying it was cancelled ``by`` whom (the editor, the user)."""
        if self._current is None:
            return
        self._cancelling, self._cancelled_by = True, by
        # One that is dying anyway fails this; the drive loop then ends the turn cancelled.
        await self._agent_session.cancel()

    def _ownership_lost(self, turn: RunningTurn) -> None:
        """Another process took ``turn`` over: nothing more of it is written here. Stop the
        agent now rather than at its own end, whose OwnershipLost then tells the caller."""
        if self._current is turn and not self._cancelling and self._stopping is None:
            self._stopping = asyncio.ensure_future(
                self.cancel("turnback: another process took it over")
            )
            self._stopping.add_done_callback(lambda _: setattr(self, "_stopping", None))

    async def resume(self) -> Turn:
        """Continue the session's interrupted turn (``tb.recover()`` marked it so after the
        orchestrating process died) from its last step checkpoint, as after an agent crash.

        The turn runs again in its own place (``Session.reopen``): what it recorded after that
        checkpoint, recovery's notice included, leaves the conversation and stays in the run
        timeline; a notice says where it went on from; the agent, resumed there, does the rest
        again, and its file effects are not repeated (the agent's resume contract). It ends
        like any other turn, once."""
        reopened = await self._crash.reopen(self._ensure_agent)
        self._prompt_meta = {}
        return await self._drive(
            reopened.turn,
            reopened.prompt,
            reopened.checkpoint,
            reopened.store_paths,
            reopened.reported,
        )

    async def revert(
        self, target: int | RevertRequest, /, **options: Unpack[RevertOptions]
    ) -> Revert:
        """Revert the session to turn ``target`` (or as a whole :class:`RevertRequest` says)
        through the engine, rolling the agent's own conversation back with it. Refused (before
        any file moves) while a turn runs, or when the agent's conversation cannot be rolled
        back; the refusal is also a ``checkpoint.revert.failed`` activity. Returns the engine's
        ``Revert``."""
        request = RevertRequest.of(target, **options)
        if request.conversation:
            # The rollback runs while the reactor handles the revert, so it cannot start an
            # agent then (opening a session waits on the reactor): have one now.
            await self._ensure_agent()
        rollback = self._rollback if request.conversation else None
        revert: Revert = await self._reactor.submit(RevertRequested(request, rollback))
        return revert

    async def undo_revert(self) -> Revert:
        """Undo the session's last revert through the engine. An agent cannot roll its own
        conversation forward again, so when the revert had rolled the conversation back, a
        fresh agent session is given the whole restored transcript ahead of the next prompt."""
        return await self._rollback.undo(self._ensure_agent)

    # -- driving one turn --------------------------------------------------------------------

    async def _drive(
        self,
        turn: RunningTurn,
        prompt: str | list[dict[str, Any]],
        resume: StepCheckpoint | None,
        store_paths: set[str],
        reported: list[Message] | None = None,
    ) -> Turn:
        """Send the prompt, and again after each crash of the agent: from ``resume`` (a step
        checkpoint), or with ``reported`` (what the turn had reported before a crash that left
        no checkpoint) as a continuation."""
        self._current, self._cancelling = turn, False
        self._recorder.store_paths = store_paths
        self.last_response = None
        attempt = 0
        try:
            while True:
                try:
                    if attempt:
                        await self._ensure_agent()
                    stop = await self._send(turn, prompt, resume, reported, attempt)
                except (AgentDied, AgentUnavailable, SessionLost) as error:
                    then = await self._crash.after_crash(
                        turn, error, attempt, cancelling=self._cancelling
                    )
                    if then == "fail":
                        return await self._end(turn, TurnStatus.FAILED, str(error))
                    if then == "stop":
                        detail = (
                            f"interrupted: the agent stopped unexpectedly ({error}) before "
                            "saving a step checkpoint"
                        )
                        return await self._end(turn, TurnStatus.INTERRUPTED, detail)
                    attempt += 1
                    if self._cancelling:
                        return await self._end(
                            turn, TurnStatus.CANCELLED, f"cancelled by {self._cancelled_by}"
                        )
                    if then == "continue":
                        resume = None
                        reported = await self._service.acall(turn.messages_so_far)
                    else:
                        resume = then
                    await asyncio.sleep(self.policy.delay(attempt))
                    continue
                except RequestError as error:
                    self.last_response = error
                    detail = f"the agent failed the prompt: {error.described}"
                    return await self._end(turn, TurnStatus.FAILED, detail)
                if attempt:
                    await self._crash.finished(turn, attempt, stop)
                if stop == "end_turn":
                    return await self._end(turn, TurnStatus.COMPLETED, None)
                if stop == "cancelled":
                    # the answer to our session/cancel, or the agent stopping of its own accord
                    by = self._cancelled_by if self._cancelling else "the agent"
                    return await self._end(turn, TurnStatus.CANCELLED, f"cancelled by {by}")
                # max_tokens, max_turn_requests, refusal: the agent answered, and said why it
                # stopped where it did; what it did is the turn's, as with end_turn.
                detail = f"the agent stopped early ({stop}); what it did is kept"
                return await self._end(turn, TurnStatus.COMPLETED, detail)
        except asyncio.CancelledError:
            # The caller gave up on the turn: tell the agent, end the turn cancelled, propagate.
            await asyncio.shield(self._abandon(turn))
            raise
        except OwnershipLost:
            raise  # the turn is another process's now: nothing more of it is written here
        except Exception as error:
            # Whatever went wrong, the turn ends: a turn left running refuses every later one.
            with contextlib.suppress(Exception):
                await self._end(turn, TurnStatus.FAILED, f"turnback failed the turn: {error}")
            raise
        finally:
            self._current, self._recorder.live = None, None

    async def _send(
        self,
        turn: RunningTurn,
        prompt: str | list[dict[str, Any]],
        resume: StepCheckpoint | None,
        reported: list[Message] | None,
        attempt: int,
    ) -> str:
        """Send the prompt and wait for its stop reason; AgentDied if the agent goes away."""
        agent_session = self._agent_session.id
        if not self._agent_session.open or agent_session is None:
            raise AgentDied(f"agent {self._agent.described!r} is not running", None)
        exited = self._agent.exited
        blocks = await self._agent_session.prompt_blocks(prompt)
        meta: dict[str, Any] = dict(self._prompt_meta)
        resuming = resume_prompt(blocks, prompt, resume, reported, attempt)
        if resuming is not None:
            meta["turnback"] = resuming
        params: dict[str, Any] = {"sessionId": agent_session, "prompt": blocks}
        if meta:
            params["_meta"] = meta
        self._recorder.live = turn
        request = asyncio.ensure_future(self._agent.request("session/prompt", params))
        try:
            waiting: set[asyncio.Future[Any]] = {request, exited}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if request not in done:
                # It exited: what it wrote before dying is still draining from the pipe, and
                # the request fails once the connection reads EOF.
                try:
                    await asyncio.wait_for(asyncio.shield(request), self.policy.exit_grace)
                except TimeoutError:
                    request.cancel()
                    returncode = self._agent.returncode
                    raise AgentDied(
                        f"agent {self._agent.described!r} {ended_text(returncode)}", returncode
                    ) from None
            response = request.result()
        except RequestError as error:
            if lost_session(error):
                raise SessionLost(
                    f"agent {self._agent.described!r} no longer has session {agent_session} "
                    f"({error.described})"
                ) from error
            raise
        except BaseException:
            request.cancel()
            raise
        finally:
            self._recorder.live = None
        response = response if isinstance(response, dict) else {}
        self.last_response = response
        await self._agent_session.prompt_answered()
        return str(response.get("stopReason"))

    async def _end(self, turn: RunningTurn, status: TurnStatus, detail: str | None) -> Turn:
        self._recorder.live = None
        self._requests.withdraw(turn.token)  # what it still asks its user is asked no more
        paths = frozenset(self._recorder.store_paths)
        ended: Turn = await self._reactor.submit(TurnEnded(turn, status, detail, paths))
        return ended

    async def _abandon(self, turn: RunningTurn) -> None:
        self._recorder.live = None
        await self._agent_session.cancel()
        # Bounded: a runtime being torn down must not hang its caller's cancellation.
        with contextlib.suppress(TurnNotRunning, RuntimeError, TimeoutError):
            await asyncio.wait_for(
                self._end(turn, TurnStatus.CANCELLED, "cancelled: the caller stopped waiting"), 10
            )

    async def _ensure_agent(self) -> None:
        """Have a live agent with this session open in it (started again if it had exited)."""
        await self._agent_session.ensure(between_turns=self._current is None)


__all__ = [
    "AgentRuntime",
    "AgentState",
    "InputRequest",
    "OnCrash",
    "PermissionRequest",
    "ResumePolicy",
    "ResumeUnavailable",
]
