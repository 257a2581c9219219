"""The agent runtime: an ACP agent as a sidecar process whose prompts are turnback turns.

Write order, and why (DESIGN.md invariants 1 and 3):

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

Resume after the agent dies mid-turn (the aryx seed, persisted): the latest step checkpoint is
read from the store (never from memory), the turn is rewound to it in one transaction (what came
after leaves the conversation, later checkpoints and the turn's pending requests go), the agent is
restarted, its session loaded (or resumed, or opened afresh), and the prompt is sent again with
``_meta.turnback.resume = {checkpointId, step, state}`` so the agent continues after that step.
The agent's updates after the checkpoint were voided, so when it repeats none of them, and repeats
none of its effects, every update shows once. Attempts are bounded; each is an activity.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import acp
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    CancelElicitationResponse,
    DeclineElicitationResponse,
    DeniedOutcome,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    RequestPermissionResponse,
    ResumeSessionResponse,
    ToolCallUpdate,
)

from turnback.engine.handle import Session, Turnback
from turnback.engine.turns import RunningTurn
from turnback.errors import (
    AgentDied,
    AgentError,
    AgentUnavailable,
    InvalidEvent,
    OwnershipLost,
    ResumeUnavailable,
    RollbackUnavailable,
    TurnNotRunning,
)
from turnback.model import (
    ActivityLevel,
    EventKind,
    Message,
    Revert,
    StepCheckpoint,
    Turn,
    TurnStatus,
)
from turnback.runtime.reactor import (
    CheckpointSaved,
    EngineThread,
    Notice,
    Reactor,
    ResumeRequested,
    RevertRequested,
    TurnEnded,
    TurnRequested,
)
from turnback.runtime.relay import Relay
from turnback.runtime.rollback import AgentRollback, render_transcript, transcript_json
from turnback.runtime.sidecar import CLIENT_METHODS, AgentFeatures, Frame, Sidecar

log = logging.getLogger("turnback.runtime")

CHECKPOINT_METHOD = "_turnback/checkpoint"
ROLLBACK_METHOD = "turnback/rollback"  # the SDK adds the leading underscore
_KNOWN_EXTENSIONS = frozenset({CHECKPOINT_METHOD})
#: Requests that change how the agent's session behaves from then on: the latest of each (of
#: each config option) is sent again to an agent process started after the one that took it.
_SETTINGS = frozenset({"session/set_mode", "session/set_config_option"})
_MAX_FRAME_REPORTS = 20


@dataclass(frozen=True, slots=True)
class ResumePolicy:
    """How the runtime treats an agent that dies, hangs or cannot roll back."""

    attempts: int = 2  # restarts per turn before giving up
    backoff: float = 0.25  # seconds before the first restart; doubles each attempt
    max_backoff: float = 5.0
    restart_without_checkpoint: bool = False  # the agent's work is safe to repeat from the start
    initialize_timeout: float = 10.0
    exit_grace: float = 2.0  # after the process exits, how long its last output may take to drain
    fresh_session_rollback: bool = True  # roll back by a fresh session when the agent cannot
    rollback_timeout: float = 30.0

    def delay(self, attempt: int) -> float:
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, attempt - 1)))


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """A permission the agent asks for; answer with one of ``options``' ``optionId`` or None."""

    request_id: str
    turn: str
    tool_call: dict[str, Any]
    options: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class InputRequest:
    """Input the agent asks for (ACP elicitation); answer with a dict of content, or None."""

    request_id: str
    turn: str
    message: str
    mode: dict[str, Any]


PermissionCallback = Callable[[PermissionRequest], Awaitable[str | None] | str | None]
InputCallback = Callable[[InputRequest], Awaitable[dict[str, Any] | None] | dict[str, Any] | None]


class AgentRuntime:
    """Runs one turnback session's agent. Create it with :meth:`start`; close it when done."""

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
    ) -> None:
        self.tb = tb
        self.session = session
        self.command = tuple(command)
        self.policy = policy or ResumePolicy()
        self._env = dict(env or {})
        self._on_permission = on_permission
        self._on_input = on_input
        self._stderr = stderr
        self._relay = relay
        self._engine = EngineThread()
        self._reactor = Reactor(
            session, self._engine, on_notice=relay.activity if relay is not None else None
        )
        self._sidecar: Sidecar | None = None
        self._watched: str | None = None  # the workspace start() set a watcher on
        self._reopening = False  # the agent replays its session's history: not news to a relay
        self._generation = 0
        self._reply = self._replier(0)  # answers to the current agent process
        self._agent_session: str | None = None
        self._context_pending = False
        # The latest of each settings request the agent accepted (a mode, each config option),
        # without its sessionId: sent again to every agent process opened after this one.
        self._settings: dict[str, dict[str, Any]] = {}
        self._context: list[Message] | None = None  # the transcript a rollback left, if given
        self._live: RunningTurn | None = None  # the turn frames are recorded into
        self._current: RunningTurn | None = None  # the turn being driven (also while restarting)
        self._store_paths: set[str] = set()
        self._permissions: dict[str, deque[tuple[str, RunningTurn]]] = {}
        self._inputs: deque[tuple[str, RunningTurn]] = deque()
        self._frame_reports = 0
        self._cancelling = False
        self._stopping: asyncio.Future[None] | None = None  # a cancel after OwnershipLost
        self._prompt_meta: dict[str, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.features = AgentFeatures()
        #: the agent's answer when its session was last opened (new, loaded or resumed)
        self.session_response: (
            NewSessionResponse | LoadSessionResponse | ResumeSessionResponse | None
        ) = None
        #: how the agent answered the last prompt sent to it: its response, or its error
        self.last_response: PromptResponse | acp.RequestError | None = None

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
    ) -> AgentRuntime:
        """Spawn the agent, initialize it and open (or load) its session for ``session``.

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
        )
        runtime._loop = asyncio.get_running_loop()
        runtime._reactor.start()
        checkpoints = tb.checkpoints
        if checkpoints is not None:  # a file watcher spares each capture the scan
            runtime._watched = await runtime._engine.run(
                lambda: checkpoints.watch(session.workspace)
            )
        try:
            await runtime._ensure_agent()
        except BaseException:
            await runtime.close()
            raise
        return runtime

    async def close(self) -> None:
        """Stop the agent and the reactor. A turn still running is left to recovery."""
        if self._sidecar is not None:
            await self._sidecar.close()
            self._sidecar = None
        await self._reactor.close()
        if self._watched is not None and self.tb.checkpoints is not None:
            await self._engine.run(self.tb.checkpoints.unwatch, self._watched)
            self._watched = None
        await asyncio.get_running_loop().run_in_executor(None, self._engine.close)

    async def __aenter__(self) -> AgentRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def agent_pid(self) -> int | None:
        """The agent process's pid, while it runs."""
        return self._sidecar.pid if self._sidecar is not None and self._sidecar.alive else None

    @property
    def agent_session_id(self) -> str | None:
        return self._agent_session

    @property
    def initialize_result(self) -> dict[str, Any] | None:
        """The agent's answer to ``initialize`` as it wrote it, while it runs."""
        return self._sidecar.initialize_result if self._sidecar is not None else None

    @property
    def initialize_response(self) -> Any:
        """The agent's answer to ``initialize`` (an ``InitializeResponse``), while it runs."""
        return self._sidecar.initialize_response if self._sidecar is not None else None

    async def request(self, method: str, params: Any) -> Any:
        """Send any request to the agent as it is (a relay forwarding its client's methods);
        starts the agent if it had exited. Returns the raw result; an error answer raises
        ``acp.RequestError``."""
        await self._ensure_agent()
        assert self._sidecar is not None
        try:
            result = await self._sidecar.request(method, params)
        except (ConnectionError, OSError) as error:
            raise AgentDied(f"{self._death(self._sidecar)}: {error}", None) from error
        if method in _SETTINGS and isinstance(params, dict):
            key = f"{method} {params.get('configId', '')}".rstrip()
            self._settings[key] = {k: v for k, v in params.items() if k != "sessionId"}
            await self._engine.run(
                self.session.set_agent_state, self._agent_state(self._context_pending)
            )
        return result

    async def notify(self, method: str, params: Any) -> None:
        """Send any notification to the agent as it is, if it runs."""
        sidecar = self._sidecar
        if sidecar is not None and sidecar.alive:
            with contextlib.suppress(ConnectionError, OSError, AgentDied):
                await sidecar.notify(method, params)

    @property
    def rollback(self) -> AgentRollback:
        """The ConversationRollback to give ``Session.revert``."""
        assert self._loop is not None
        return AgentRollback(self, self._loop, self.policy.rollback_timeout)

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

    async def cancel(self) -> None:
        """Ask the agent to stop the running turn (``session/cancel``); it ends cancelled."""
        if self._current is None:
            return
        self._cancelling = True
        sidecar = self._sidecar
        if sidecar is not None and sidecar.alive and self._agent_session is not None:
            # One that is dying anyway fails this; the drive loop then ends the turn cancelled.
            with contextlib.suppress(ConnectionError, OSError, AgentDied):
                await sidecar.conn.cancel(session_id=self._agent_session)

    async def resume(self) -> Turn:
        """Continue the session's interrupted turn (``tb.recover()`` marked it so after the
        orchestrating process died) from its last step checkpoint, as after an agent crash.

        The turn runs again in its own place (``Session.reopen``): what it recorded after that
        checkpoint, recovery's notice included, leaves the conversation and stays in the run
        timeline; a notice says where it went on from; the agent, resumed there, does the rest
        again, and its file effects are not repeated (the agent's resume contract). It ends
        like any other turn, once."""
        turns = await self._engine.run(self.session.turns)
        conversation = [t for t in turns if t.in_conversation]
        if not conversation or conversation[-1].status is not TurnStatus.INTERRUPTED:
            raise ResumeUnavailable(
                f"session {self.session.id[:12]} has no interrupted turn at its head to resume"
            )
        interrupted = conversation[-1]
        checkpoints = await self._engine.run(self.session.step_checkpoints, interrupted.token)
        checkpoint = checkpoints[-1] if checkpoints else None
        if checkpoint is None and not self.policy.restart_without_checkpoint:
            message = (
                f"turn {interrupted.number} cannot be resumed: the agent saved no step "
                "checkpoint before the process stopped. Prompt again, or allow "
                "ResumePolicy(restart_without_checkpoint=True) if its work is safe to repeat"
            )
            await self._notice(ActivityLevel.ERROR, "turn.resume.unavailable", message, {})
            raise ResumeUnavailable(message)
        await self._ensure_agent()
        turn: RunningTurn = await self._reactor.submit(ResumeRequested(interrupted.token))
        where = f"step {checkpoint.step}" if checkpoint else "its beginning"
        turn.record(
            {
                "sessionUpdate": EventKind.NOTICE.value,
                "text": f"Continued from {where} after the process running it stopped.",
                "step": checkpoint.step if checkpoint else None,
            },
            sync=False,
        )
        await self._engine.run(turn.sync)
        await self._notice(
            ActivityLevel.INFO,
            "turn.continued",
            f"interrupted turn {turn.number} continues from {where}",
            {"step": checkpoint.step if checkpoint else None},
            turn.token,
        )
        paths = {c.store_path for c in checkpoints if c.store_path}
        self._prompt_meta = {}
        return await self._drive(turn, interrupted.prompt, checkpoint, paths)

    async def revert(
        self,
        to_turn: int,
        *,
        files: bool = True,
        conversation: bool = True,
        keep_user_edits: bool = False,
    ) -> Revert:
        """Revert the session to turn ``to_turn`` through the engine, rolling the agent's own
        conversation back with it. Refused (before any file moves) while a turn runs, or when the
        agent's conversation cannot be rolled back; the refusal is also a
        ``checkpoint.revert.failed`` activity. Returns the engine's ``Revert``."""
        if conversation:
            # The rollback runs while the reactor and the engine thread wait on the revert, so
            # it cannot start an agent then: have one now.
            await self._ensure_agent()
        revert: Revert = await self._reactor.submit(
            RevertRequested(
                to_turn,
                files,
                conversation,
                keep_user_edits,
                self.rollback if conversation else None,
            )
        )
        return revert

    # -- driving one turn --------------------------------------------------------------------

    async def _drive(
        self,
        turn: RunningTurn,
        prompt: str | list[dict[str, Any]],
        resume: StepCheckpoint | None,
        store_paths: set[str],
    ) -> Turn:
        self._current, self._store_paths, self._cancelling = turn, store_paths, False
        self.last_response = None
        attempt = 0
        try:
            while True:
                try:
                    if attempt:
                        await self._ensure_agent()
                    stop = await self._send(turn, prompt, resume)
                except (AgentDied, AgentUnavailable) as error:
                    resume, retry = await self._after_crash(turn, error, attempt)
                    if not retry:
                        return await self._end(turn, TurnStatus.FAILED, str(error))
                    attempt += 1
                    if self._cancelling:
                        return await self._end(turn, TurnStatus.CANCELLED, "cancelled")
                    await asyncio.sleep(self.policy.delay(attempt))
                    continue
                except acp.RequestError as error:
                    self.last_response = error
                    detail = f"the agent failed the prompt: {_describe(error)}"
                    return await self._end(turn, TurnStatus.FAILED, detail)
                if attempt:
                    await self._notice(
                        ActivityLevel.INFO,
                        "turn.resumed",
                        f"turn {turn.number} finished after {attempt} restart"
                        f"{'s' if attempt != 1 else ''} of the agent",
                        {"attempts": attempt, "stopReason": stop},
                        turn.token,
                    )
                if stop == "end_turn":
                    return await self._end(turn, TurnStatus.COMPLETED, None)
                if stop == "cancelled":
                    return await self._end(turn, TurnStatus.CANCELLED, "cancelled by the agent")
                # max_tokens, max_turn_requests, refusal: the agent answered, and said why it
                # stopped where it did; what it did is the turn's, as with end_turn.
                detail = f"the agent stopped early ({stop}); what it did is kept"
                return await self._end(turn, TurnStatus.COMPLETED, detail)
        except asyncio.CancelledError:
            # The caller gave up on the turn: tell the agent, end the turn cancelled, propagate.
            await asyncio.shield(self._abandon(turn))
            raise
        except Exception as error:
            # Whatever went wrong, the turn ends: a turn left running refuses every later one.
            with contextlib.suppress(Exception):
                await self._end(turn, TurnStatus.FAILED, f"turnback failed the turn: {error}")
            raise
        finally:
            self._current, self._live = None, None

    async def _send(
        self,
        turn: RunningTurn,
        prompt: str | list[dict[str, Any]],
        resume: StepCheckpoint | None,
    ) -> str:
        """Send the prompt and wait for its stop reason; AgentDied if the agent goes away."""
        sidecar = self._sidecar
        if sidecar is None or not sidecar.alive or self._agent_session is None:
            raise AgentDied(f"agent {' '.join(self.command)!r} is not running", None)
        blocks = await self._prompt_blocks(prompt)
        meta: dict[str, Any] = dict(self._prompt_meta)
        if resume is not None:
            meta["turnback"] = {"resume": _resume_meta(resume)}
        self._live = turn
        request = asyncio.ensure_future(
            sidecar.conn.prompt(session_id=self._agent_session, prompt=blocks, **meta)
        )
        try:
            assert sidecar.exited is not None
            waiting: set[asyncio.Future[Any]] = {request, sidecar.exited}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if request not in done:
                # It exited: what it wrote before dying is still draining from the pipe, and
                # the request fails once the SDK reads EOF.
                try:
                    await asyncio.wait_for(asyncio.shield(request), self.policy.exit_grace)
                except TimeoutError:
                    request.cancel()
                    raise AgentDied(self._death(sidecar), sidecar.returncode) from None
            response = request.result()
        except (ConnectionError, OSError) as error:
            raise AgentDied(f"{self._death(sidecar)}: {error}", sidecar.returncode) from error
        except BaseException:
            request.cancel()
            raise
        finally:
            self._live = None
        self.last_response = response
        if self._context_pending:
            self._context_pending, self._context = False, None
            await self._remember_session("continued", context_pending=False)
        return str(response.stop_reason)

    async def _after_crash(
        self, turn: RunningTurn, error: AgentError, attempt: int
    ) -> tuple[StepCheckpoint | None, bool]:
        """Settle the journal after the agent went away; returns (resume point, whether to
        try again). Persisted before the agent is started again: the rewind commits."""
        self._live = None
        sidecar = self._sidecar
        returncode = sidecar.returncode if sidecar is not None else None
        if sidecar is not None:
            await sidecar.close()  # cancels handlers still waiting (a permission being asked)
        self._sidecar = None
        self._permissions.clear()
        self._inputs.clear()
        level = ActivityLevel.WARNING if isinstance(error, AgentDied) else ActivityLevel.ERROR
        code = "agent.crashed" if isinstance(error, AgentDied) else "agent.restart.failed"
        await self._notice(
            level,
            code,
            f"{error} during turn {turn.number}",
            {"returncode": returncode, "attempt": attempt, "command": list(self.command)},
            turn.token,
        )
        if self._cancelling:
            return None, True
        if attempt >= self.policy.attempts:
            await self._notice(
                ActivityLevel.ERROR,
                "turn.resume.failed",
                f"turn {turn.number} failed: the agent kept exiting; gave up after {attempt} "
                f"restart{'s' if attempt != 1 else ''} "
                f"(ResumePolicy.attempts={self.policy.attempts})",
                {"attempts": attempt},
                turn.token,
            )
            return None, False
        checkpoint = await self._engine.run(turn.last_checkpoint)
        if checkpoint is None and not self.policy.restart_without_checkpoint:
            await self._notice(
                ActivityLevel.ERROR,
                "turn.resume.unavailable",
                f"turn {turn.number} failed: the agent exited before saving any step "
                "checkpoint, so there is nothing to resume from. Allow "
                "ResumePolicy(restart_without_checkpoint=True) if its work is safe to repeat",
                {},
                turn.token,
            )
            return None, False
        await self._engine.run(turn.rewind, checkpoint)
        where = f"step {checkpoint.step}" if checkpoint else "its beginning"
        # In the turn, after the rewind: the conversation says where the turn went on from.
        self._record(
            turn,
            {
                "sessionUpdate": EventKind.NOTICE.value,
                "text": f"The agent stopped unexpectedly; the turn resumed from {where}.",
                "step": checkpoint.step if checkpoint else None,
                "attempt": attempt + 1,
            },
        )
        await self._notice(
            ActivityLevel.INFO,
            "turn.resuming",
            f"restarting the agent to resume turn {turn.number} from {where} "
            f"(attempt {attempt + 1} of {self.policy.attempts})",
            {
                "attempt": attempt + 1,
                "step": checkpoint.step if checkpoint else None,
                "checkpointId": checkpoint.checkpoint_id if checkpoint else None,
            },
            turn.token,
        )
        return checkpoint, True

    async def _end(self, turn: RunningTurn, status: TurnStatus, detail: str | None) -> Turn:
        self._live = None
        paths = frozenset(self._store_paths)
        ended: Turn = await self._reactor.submit(TurnEnded(turn, status, detail, paths))
        return ended

    async def _abandon(self, turn: RunningTurn) -> None:
        self._live = None
        sidecar = self._sidecar
        if sidecar is not None and sidecar.alive and self._agent_session is not None:
            with contextlib.suppress(ConnectionError, OSError, AgentDied):
                await sidecar.conn.cancel(session_id=self._agent_session)
        # Bounded: a runtime being torn down must not hang its caller's cancellation.
        with contextlib.suppress(TurnNotRunning, RuntimeError, TimeoutError):
            await asyncio.wait_for(
                self._end(turn, TurnStatus.CANCELLED, "cancelled: the caller stopped waiting"), 10
            )

    # -- the agent process and its session --------------------------------------------------

    async def _ensure_agent(self) -> None:
        """Have a live, initialized agent with its session open; restart it if it exited."""
        if self._sidecar is not None and self._sidecar.alive:
            return
        if self._sidecar is not None:
            returncode = self._sidecar.returncode
            await self._sidecar.close()
            self._sidecar = None
            await self._notice(
                ActivityLevel.WARNING,
                "agent.exited",
                f"agent {' '.join(self.command)!r} had exited (status {returncode}) between "
                "turns; starting it again",
                {"returncode": returncode},
            )
        self._generation += 1
        self._reply = self._replier(self._generation)
        self._frame_reports = 0
        sidecar = Sidecar(
            self.command,
            cwd=self.session.workspace,
            env=self._env,
            client=_Client(self),
            watch=self._watch,
            malformed=self._malformed,
            stderr=self._stderr,
            initialize=self._relay.initialize if self._relay is not None else None,
            pace=self._relay.backlog if self._relay is not None else None,
        )
        self.features = await sidecar.open(self.policy.initialize_timeout)
        self._sidecar = sidecar
        try:
            if self._relay is not None and self._relay.authenticate is not None:
                await sidecar.request("authenticate", dict(self._relay.authenticate))
            await self._open_session(sidecar)
            await self._restore_settings(sidecar)
        except (ConnectionError, OSError, acp.RequestError) as error:
            returncode = sidecar.returncode
            await sidecar.close()
            self._sidecar = None
            raise AgentUnavailable(
                f"agent {sidecar.described!r} could not open a session (status {returncode}): "
                f"{_describe(error) if isinstance(error, acp.RequestError) else error}"
            ) from error

    async def _open_session(self, sidecar: Sidecar) -> None:
        """Load (or resume) the agent session this turnback session used last; else open a new
        one, and give it the conversation so far ahead of the next prompt."""
        cwd = str(self.session.workspace)
        previous = self._agent_session or await self._engine.run(self._last_agent_session)
        conn = sidecar.conn
        servers = list(self._relay.mcp_servers) if self._relay is not None else []
        if previous is not None and (self.features.load_session or self.features.resume_session):
            self._reopening = True
            try:
                opened: LoadSessionResponse | ResumeSessionResponse | None
                if self.features.load_session:
                    opened = await conn.load_session(
                        cwd=cwd, session_id=previous, mcp_servers=servers
                    )
                    how = "loaded"
                else:
                    opened = await conn.resume_session(
                        cwd=cwd, session_id=previous, mcp_servers=servers
                    )
                    how = "resumed"
            except acp.RequestError as error:
                await self._notice(
                    ActivityLevel.WARNING,
                    "agent.session.load.failed",
                    f"agent session {previous} could not be reopened ({_describe(error)}); "
                    "opening a new one with the conversation so far",
                    {"agentSessionId": previous},
                )
            else:
                self._agent_session = previous
                self.session_response = opened
                await self._remember_session(how, context_pending=self._context_pending)
                return
            finally:
                self._reopening = False
        messages = await self._engine.run(self.session.messages)
        meta: dict[str, Any] = {"transcript": transcript_json(messages)} if messages else {}
        response = await conn.new_session(cwd=cwd, mcp_servers=servers, turnback=meta)
        self.session_response = response
        self._agent_session = response.session_id
        self._context_pending = bool(messages)
        await self._remember_session("new", context_pending=self._context_pending)

    async def _restore_settings(self, sidecar: Sidecar) -> None:
        """Give a newly started agent process the settings the user chose for the previous one
        (a restart after a crash, or a later run of turnback), in the order they were made."""
        for key, params in self._settings.items():
            method = key.split(" ")[0]
            try:
                await sidecar.request(method, {**params, "sessionId": self._agent_session})
            except acp.RequestError as error:
                await self._notice(
                    ActivityLevel.WARNING,
                    "agent.setting.lost",
                    f"the agent, started again, refused {method} {params} "
                    f"({_describe(error)}); choose that setting again",
                    {"method": method, "params": params},
                )

    def _last_agent_session(self) -> str | None:
        """The agent session this turnback session used last, if it ran the same command."""
        state = self.session.record.agent_state
        if state.get("command") != list(self.command):
            return None
        settings = state.get("settings")
        if isinstance(settings, dict):
            self._settings = {str(k): v for k, v in settings.items() if isinstance(v, dict)}
        self._context_pending = bool(state.get("contextPending"))
        value = state.get("agentSessionId")
        return value if isinstance(value, str) else None

    async def _remember_session(self, how: str, *, context_pending: bool) -> None:
        await self._engine.run(self.session.set_agent_state, self._agent_state(context_pending))
        await self._reactor.submit(self._session_notice(how, context_pending))

    def _agent_state(self, context_pending: bool) -> dict[str, object]:
        return {
            "agentSessionId": self._agent_session,
            "command": list(self.command),
            "contextPending": context_pending,
            "settings": self._settings,
        }

    async def _prompt_blocks(self, prompt: str | list[dict[str, Any]]) -> list[Any]:
        blocks: list[Any] = [acp.text_block(prompt)] if isinstance(prompt, str) else list(prompt)
        if not self._context_pending:
            return blocks
        if self._context is not None:
            messages: list[Message] = self._context
        else:
            messages = await self._engine.run(self.session.messages)
        text = render_transcript(messages)
        if self.features.embedded_context:
            resource = acp.embedded_text_resource(
                f"turnback://session/{self.session.id}/transcript", text, mime_type="text/plain"
            )
            context: Any = acp.resource_block(resource)
        else:
            context = acp.text_block(text)
        # Marked, so an agent that reads its prompt as instructions (the scripted agent) can
        # tell turnback's context from what the user asked.
        context.field_meta = {"turnback": {"context": "transcript"}}
        return [context, *blocks]

    # -- conversation rollback (called through AgentRollback) -------------------------------

    def check_rollback(self, turns: int) -> None:
        if turns == 0:
            return
        if self._current is not None:
            raise RollbackUnavailable(
                f"turn {self._current.number} is running; wait for it to end or cancel it "
                "before reverting"
            )
        sidecar = self._sidecar
        if sidecar is None or not sidecar.alive:
            raise RollbackUnavailable(
                f"agent {' '.join(self.command)!r} is not running, so its conversation cannot "
                "be rolled back; AgentRuntime.revert starts it first"
            )
        if not self.features.rollback and not self.policy.fresh_session_rollback:
            raise RollbackUnavailable(
                f"agent {' '.join(self.command)!r} cannot roll its conversation back (it does "
                "not advertise _meta.turnback.rollback) and fresh-session rollback is off; revert "
                "the files only (conversation=False), or allow ResumePolicy(fresh_session_rollback)"
            )

    async def roll_back(self, turns: int, transcript: list[Message]) -> None:
        """Roll the agent's conversation back ``turns`` turns (the module docstring of
        :mod:`turnback.runtime.rollback` says how).

        Runs while the reactor and the engine thread may be busy with the revert that called
        it, so it only talks to the agent and posts activities; it never waits on either."""
        sidecar = self._sidecar
        if sidecar is None or not sidecar.alive or self._agent_session is None:
            raise RollbackUnavailable(
                f"agent {' '.join(self.command)!r} is not running, so its conversation cannot "
                "be rolled back; start it (AgentRuntime.revert does) and revert again"
            )
        if self.features.rollback:
            try:
                await sidecar.conn.ext_method(
                    ROLLBACK_METHOD, {"sessionId": self._agent_session, "turns": turns}
                )
            except acp.RequestError as error:
                self._reactor.post(
                    Notice(
                        ActivityLevel.WARNING,
                        "agent.rollback.failed",
                        f"the agent refused to roll back {turns} turns ({_describe(error)}); "
                        "starting a fresh agent session with the transcript instead",
                        {"turns": turns},
                    )
                )
            else:
                self._reactor.post(
                    Notice(
                        ActivityLevel.INFO,
                        "agent.rolled_back",
                        f"the agent rolled its conversation back {turns} turns",
                        {"turns": turns, "how": "agent"},
                    )
                )
                return
        if not self.policy.fresh_session_rollback:
            raise RollbackUnavailable("the agent could not roll back and fresh sessions are off")
        session_id = await self._fresh_session(sidecar, transcript)
        self._reactor.post(
            Notice(
                ActivityLevel.INFO,
                "agent.rolled_back",
                f"a fresh agent session {session_id} replaces the rolled-back one; "
                f"the {len(transcript)} messages that remain go ahead of the next prompt",
                {"turns": turns, "how": "fresh-session", "messages": len(transcript)},
            )
        )

    async def undo_revert(self) -> Revert:
        """Undo the session's last revert through the engine. An agent cannot roll its own
        conversation forward again, so when the revert had rolled the conversation back, a
        fresh agent session is given the whole restored transcript ahead of the next prompt."""
        if self._current is not None:
            raise RollbackUnavailable(
                f"turn {self._current.number} is running; wait for it to end or cancel it "
                "before undoing a revert"
            )
        undone: Revert = await self._engine.run(self.session.undo_revert)
        if undone.conversation:
            await self._ensure_agent()
            assert self._sidecar is not None
            transcript = await self._engine.run(self.session.messages)
            session_id = await self._fresh_session(self._sidecar, transcript)
            await self._notice(
                ActivityLevel.INFO,
                "agent.rolled_forward",
                f"the revert was undone: a fresh agent session {session_id} is given the "
                f"{len(transcript)} messages of the restored conversation ahead of the next prompt",
                {"revert": undone.id, "messages": len(transcript)},
            )
        return undone

    async def _fresh_session(self, sidecar: Sidecar, transcript: list[Message]) -> str:
        """Replace the agent's session by a new one that gets ``transcript`` (persisted, so a
        restart before the next prompt still delivers it)."""
        servers = list(self._relay.mcp_servers) if self._relay is not None else []
        response = await sidecar.conn.new_session(
            cwd=str(self.session.workspace),
            mcp_servers=servers,
            turnback={"transcript": transcript_json(transcript)},
        )
        self.session_response = response
        self._agent_session = response.session_id
        self._context_pending, self._context = bool(transcript), list(transcript)
        # From a revert the engine thread is busy inside it: write from another thread.
        await asyncio.to_thread(
            self.session.set_agent_state, self._agent_state(self._context_pending)
        )
        self._reactor.post(self._session_notice("new", self._context_pending))
        return response.session_id

    def _session_notice(self, how: str, context_pending: bool) -> Notice:
        """A line for people saying which agent session serves this one (the runtime reads it
        back from the session's ``agent_state``, not from here)."""
        return Notice(
            ActivityLevel.INFO,
            "agent.session",
            f"agent session {self._agent_session} {how}",
            {
                "agentSessionId": self._agent_session,
                "command": list(self.command),
                "opened": how,
                "contextPending": context_pending,
                "features": {
                    "loadSession": self.features.load_session,
                    "resumeSession": self.features.resume_session,
                    "checkpoints": self.features.checkpoints,
                    "rollback": self.features.rollback,
                },
            },
        )

    # -- the wire, in order ------------------------------------------------------------------

    def _watch(self, frame: Frame, line: bytes) -> bool:
        """Called for every frame from the agent, in wire order, before the SDK handles it.
        Returns whether a relay took the frame (the SDK then never sees it)."""
        method = frame.get("method")
        if method is None:
            return False  # a response to one of our requests
        params = frame.get("params")
        if not isinstance(params, dict):
            params = {}
        if method == "session/update":
            turn = self._live
            if turn is not None and params.get("sessionId") == self._agent_session:
                self._record(turn, params.get("update"))
            if self._relay is None and "id" not in frame:
                # Recorded, and nobody else wants it: the SDK would build its models from it
                # only to call a handler that does nothing (a third of a chunk's cost).
                return True
        elif method == CHECKPOINT_METHOD:
            self._checkpoint(params)
        elif method == "session/request_permission" and "id" in frame:
            self._permission_requested(frame["id"], params)
        elif method == "elicitation/create" and "id" in frame:
            self._input_requested(frame["id"], params)
        elif self._relay is None and (
            not isinstance(method, str)
            or (method not in CLIENT_METHODS and method not in _KNOWN_EXTENSIONS)
        ):
            self._report_frame(
                "agent.method.unknown",
                f"the agent called a method turnback does not know: {str(method)[:100]!r}"
                f" ({'request' if 'id' in frame else 'notification'}); it was answered "
                "'method not found'"
                if "id" in frame
                else f"the agent sent an unknown notification {str(method)[:100]!r}; ignored",
                {"method": str(method)[:200]},
            )
        if self._relay is None:
            return False
        return self._relay.agent_frame(frame, self._reopening, self._reply, line)

    def _replier(self, generation: int) -> Callable[[Frame], Awaitable[None]]:
        """Answers to the agent process of ``generation``; dropped once it has been replaced."""

        async def reply(frame: Frame) -> None:
            sidecar = self._sidecar
            if generation != self._generation or sidecar is None or not sidecar.alive:
                return
            with contextlib.suppress(ConnectionError, OSError, AgentDied):
                await sidecar.send_frame(frame)

        return reply

    def _record(self, turn: RunningTurn, update: Any) -> bool:
        try:
            turn.record(update, sync=False)
        except InvalidEvent as error:
            self._report_frame(
                "agent.update.invalid",
                f"an update from the agent was not recorded: {error}",
                {"update": repr(update)[:500]},
            )
            return False
        except OwnershipLost:
            # Another process took the turn over: nothing more of it is written. Stop the agent
            # now rather than at its own end; the end then says what happened.
            if not self._cancelling:
                self._stopping = asyncio.ensure_future(self.cancel())
            return False
        except TurnNotRunning:
            return False
        return True

    def _checkpoint(self, params: dict[str, Any]) -> None:
        turn = self._live
        if turn is None or params.get("sessionId") != self._agent_session:
            self._report_frame(
                "agent.checkpoint.ignored",
                "the agent sent a step checkpoint outside a running turn; ignored",
                {"params": repr(params)[:500]},
            )
            return
        event: dict[str, Any] = {
            "sessionUpdate": EventKind.STEP_CHECKPOINT.value,
            "step": params.get("step"),
            "checkpointId": params.get("checkpointId"),
        }
        if params.get("state") is not None:
            event["state"] = params["state"]
        if params.get("storePath") is not None:
            event["storePath"] = params["storePath"]
        if self._record(turn, event):
            if isinstance(params.get("storePath"), str):
                self._store_paths.add(params["storePath"])
            self._reactor.post(CheckpointSaved(turn, int(event["step"])))

    def _permission_requested(self, rpc_id: Any, params: dict[str, Any]) -> None:
        turn = self._live
        if turn is None:
            return  # the handler answers "cancelled": no turn can take it
        request_id = f"{self._generation}.{rpc_id}"
        tool_call = params.get("toolCall")
        event = {
            "sessionUpdate": EventKind.PERMISSION_REQUESTED.value,
            "requestId": request_id,
            "toolCall": tool_call,
            "options": params.get("options"),
        }
        if self._record(turn, event):
            key = str(tool_call.get("toolCallId")) if isinstance(tool_call, dict) else ""
            self._permissions.setdefault(key, deque()).append((request_id, turn))

    def _input_requested(self, rpc_id: Any, params: dict[str, Any]) -> None:
        turn = self._live
        if turn is None:
            return
        request_id = f"{self._generation}.{rpc_id}"
        event = {
            "sessionUpdate": EventKind.INPUT_REQUESTED.value,
            "requestId": request_id,
            "message": params.get("message"),
            "params": params,
        }
        if self._record(turn, event):
            self._inputs.append((request_id, turn))

    def _malformed(self, line: bytes, why: str) -> None:
        self._report_frame(
            "agent.frame.malformed",
            f"the agent wrote a line that is not a JSON-RPC message ({why}); it was skipped",
            {"frame": line[:300].decode(errors="replace"), "error": why},
        )

    def _report_frame(self, code: str, message: str, data: dict[str, Any]) -> None:
        self._frame_reports += 1
        if self._frame_reports > _MAX_FRAME_REPORTS:
            return
        if self._frame_reports == _MAX_FRAME_REPORTS:
            message += " (further problems with this agent run are not reported)"
        turn = self._live.token if self._live is not None else None
        self._reactor.post(Notice(ActivityLevel.WARNING, code, message, data, turn))

    # -- answering the agent -----------------------------------------------------------------

    async def answer_permission(
        self, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        pending = self._permissions.get(str(tool_call.tool_call_id))
        if not pending:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        request_id, turn = pending.popleft()
        # Durable (and so in the session's pending requests) before anyone is asked.
        await self._engine.run(turn.sync)
        request = PermissionRequest(
            request_id,
            turn.token,
            tool_call.model_dump(mode="json", by_alias=True, exclude_none=True),
            [o.model_dump(mode="json", by_alias=True, exclude_none=True) for o in options],
        )
        choice: str | None = None
        if self._on_permission is not None:
            try:
                choice = await _call(self._on_permission, request)
            except Exception as error:
                await self._notice(
                    ActivityLevel.ERROR,
                    "permission.callback.failed",
                    f"the permission callback failed ({type(error).__name__}: {error}); the "
                    "request was answered 'cancelled'",
                    {"requestId": request_id},
                    turn.token,
                )
        if choice is not None and choice not in {o.option_id for o in options}:
            choice = None
        answer = {
            "sessionUpdate": EventKind.PERMISSION_ANSWERED.value,
            "requestId": request_id,
            "outcome": "selected" if choice is not None else "cancelled",
        }
        if choice is not None:
            answer["optionId"] = choice
        self._record(turn, answer)
        # Durable before the agent hears it.
        try:
            await self._engine.run(turn.sync)
        except OwnershipLost:
            choice = None  # the turn is no longer this process's: the agent is being stopped
        if choice is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice)
        )

    async def answer_input(self, message: str, mode: Any) -> Any:
        if not self._inputs:
            return CancelElicitationResponse(action="cancel")
        request_id, turn = self._inputs.popleft()
        try:
            await self._engine.run(turn.sync)
        except OwnershipLost:
            return CancelElicitationResponse(action="cancel")  # see answer_permission
        shape = mode.model_dump(mode="json", by_alias=True, exclude_none=True)
        content: dict[str, Any] | None = None
        if self._on_input is not None:
            try:
                content = await _call(
                    self._on_input, InputRequest(request_id, turn.token, message, shape)
                )
            except Exception as error:
                await self._notice(
                    ActivityLevel.ERROR,
                    "input.callback.failed",
                    f"the input callback failed ({type(error).__name__}: {error}); the request "
                    "was declined",
                    {"requestId": request_id},
                    turn.token,
                )
        self._record(
            turn,
            {
                "sessionUpdate": EventKind.INPUT_ANSWERED.value,
                "requestId": request_id,
                "action": "accept" if content is not None else "decline",
                "content": content,
            },
        )
        await self._engine.run(turn.sync)
        if content is None:
            return DeclineElicitationResponse(action="decline")
        return AcceptElicitationResponse(action="accept", content=content)

    # -- activities --------------------------------------------------------------------------

    async def _notice(
        self,
        level: ActivityLevel,
        code: str,
        message: str,
        data: dict[str, Any],
        turn: str | None = None,
    ) -> None:
        await self._reactor.submit(Notice(level, code, message, data, turn))

    def _death(self, sidecar: Sidecar) -> str:
        return f"agent {sidecar.described!r} exited (status {sidecar.returncode})"


class _Client:
    """What the SDK calls on the client side. Recording already happened in the wire watch;
    these only answer."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self._runtime = runtime

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        return None

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **_: Any,
    ) -> RequestPermissionResponse:
        return await self._runtime.answer_permission(tool_call, options)

    async def create_elicitation(self, message: str, mode: Any, **_: Any) -> Any:
        return await self._runtime.answer_input(message, mode)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise acp.RequestError.method_not_found(f"_{method}")


async def _call(callback: Callable[[Any], Any], request: Any) -> Any:
    result = callback(request)
    if inspect.isawaitable(result):
        result = await result
    return result


def _resume_meta(checkpoint: StepCheckpoint) -> dict[str, Any]:
    meta: dict[str, Any] = {"checkpointId": checkpoint.checkpoint_id, "step": checkpoint.step}
    if checkpoint.state is not None:
        meta["state"] = checkpoint.state
    return meta


def _describe(error: acp.RequestError) -> str:
    data = error.data
    if isinstance(data, dict) and data.get("details"):
        return f"{error} ({data['details']})"
    return str(error)


__all__ = [
    "AgentRuntime",
    "InputRequest",
    "PermissionRequest",
    "ResumePolicy",
    "ResumeUnavailable",
]
