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
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from turnback.engine.handle import Session, Turnback
from turnback.engine.turns import RunningTurn
from turnback.errors import (
    WAIT,
    AgentDied,
    AgentError,
    AgentUnavailable,
    OwnershipLost,
    ResumeUnavailable,
    RollbackUnavailable,
    TurnNotRunning,
)
from turnback.model import (
    ActivityLevel,
    EventKind,
    Message,
    MessageKind,
    Revert,
    StepCheckpoint,
    Turn,
    TurnStatus,
)
from turnback.runtime.connection import AgentConnection
from turnback.runtime.policy import AgentState, OnCrash, ResumePolicy
from turnback.runtime.reactor import (
    EngineThread,
    Notice,
    Reactor,
    ResumeRequested,
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
from turnback.runtime.rollback import AgentRollback, render_transcript, transcript_json
from turnback.runtime.rpc import RequestError
from turnback.runtime.sidecar import AgentFeatures
from turnback.runtime.wire import Frame, Rejected

log = logging.getLogger("turnback.runtime")

ROLLBACK_METHOD = "_turnback/rollback"
#: Requests that change how the agent's session behaves from then on: the latest of each (of
#: each config option) is sent again to an agent process started after the one that took it.
_SETTINGS = frozenset({"session/set_mode", "session/set_config_option"})


class AgentRuntime:
    """Runs one turnback session on an agent: its turns, its agent session, its reverts.
    Create it with :meth:`start`; close it when done.

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
        self._relay = relay
        self._owns_connection = connection is None
        self._agent = connection or AgentConnection(
            command,
            cwd=session.workspace,
            env=env,
            stderr=stderr,
            initialize_timeout=self.policy.initialize_timeout,
            relay=relay,
        )
        self._engine = EngineThread()
        self._reactor = Reactor(
            session, self._engine, on_notice=relay.activity if relay is not None else None
        )
        #: the workspace start() set a watcher on, once it has (on the engine thread)
        self._watched: asyncio.Future[str | None] | None = None
        self._requests = PendingRequests(self._engine, self._reactor, on_permission, on_input)
        self._recorder = Recorder(self._reactor, self._requests, relayed=relay is not None)
        self._recorder.on_lost = self._ownership_lost
        self._stopping: asyncio.Task[None] | None = None  # the cancel after OwnershipLost
        self._opened_in = 0  # the agent process generation its session was opened in
        self._opening = asyncio.Lock()  # one opening of the agent session at a time
        self._reopens: set[asyncio.Task[None]] = set()
        self._reopening = False  # the agent replays its session's history: not news to a relay
        self._reply = self._agent.replier(0)  # answers to the current agent process
        self._state = AgentState(command=self.command)
        self._state_read = False
        self._context: list[Message] | None = None  # the transcript a rollback left, if given
        self._current: RunningTurn | None = None  # the turn being driven (also while restarting)
        self._cancelling = False
        self._prompt_meta: dict[str, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the agent's answer when its session was last opened (new, loaded or resumed)
        self.session_response: dict[str, Any] | None = None
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
    ) -> AgentRuntime:
        """Start the agent (or use ``connection``'s), and open (or load) its session for
        ``session``.

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
        runtime._loop = asyncio.get_running_loop()
        runtime._reactor.start()
        try:
            await runtime._ensure_agent()
        except BaseException:
            await runtime.close()
            raise
        checkpoints = tb.checkpoints
        if checkpoints is not None:
            # A file watcher spares each capture the scan. Nobody waits for it to be set up:
            # it runs on the engine thread, so it is in place before any capture runs there.
            runtime._watched = asyncio.ensure_future(
                runtime._engine.run(checkpoints.watch, session.workspace)
            )
        return runtime

    async def close(self) -> None:
        """Leave the agent (stopping it when this runtime started it) and stop the reactor. A
        turn still running is left to recovery."""
        self._agent.detach(self._recorder.agent_session, self)
        for task in list(self._reopens):
            task.cancel()
        if self._owns_connection:
            await self._agent.close()
        await self._reactor.close()
        watched, self._watched = self._watched, None
        if watched is not None and self.tb.checkpoints is not None:
            workspace = await watched
            if workspace is not None:
                await self._engine.run(self.tb.checkpoints.unwatch, workspace)
        await asyncio.get_running_loop().run_in_executor(None, self._engine.close)

    async def __aenter__(self) -> AgentRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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
        return self._recorder.agent_session

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
        if method in _SETTINGS and isinstance(params, dict):
            key = f"{method} {params.get('configId', '')}".rstrip()
            settings = {**self._state.settings}
            settings.pop(key, None)  # the latest last: settings are given again in order
            settings[key] = {k: v for k, v in params.items() if k != "sessionId"}
            await self._save_state(settings=settings)
        return result

    async def notify(self, method: str, params: Any) -> None:
        """Send any notification to the agent as it is, if it runs."""
        await self._agent.notify(method, params)

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
        if self._recorder.agent_session is not None:
            # One that is dying anyway fails this; the drive loop then ends the turn cancelled.
            await self._agent.notify("session/cancel", {"sessionId": self._recorder.agent_session})

    def _ownership_lost(self, turn: RunningTurn) -> None:
        """Another process took ``turn`` over: nothing more of it is written here. Stop the
        agent now rather than at its own end, whose OwnershipLost then tells the caller."""
        if self._current is turn and not self._cancelling and self._stopping is None:
            self._stopping = asyncio.ensure_future(self.cancel())
            self._stopping.add_done_callback(lambda _: setattr(self, "_stopping", None))

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
        if checkpoint is None and self.policy.on_crash is OnCrash.STOP:
            message = (
                f"turn {interrupted.number} cannot be resumed: the agent saved no step "
                "checkpoint before the process stopped, and the policy is to stop. Prompt "
                "again, or use ResumePolicy(on_crash=OnCrash.CONTINUE) to have the agent go on "
                "from where things stand"
            )
            await self._notice(ActivityLevel.ERROR, "turn.resume.unavailable", message, {})
            raise ResumeUnavailable(message)
        # Without a step checkpoint the agent is told what the turn had reported (reopening
        # voids it from the conversation, as it voids what followed a checkpoint).
        reported = (
            None
            if checkpoint is not None
            else await self._engine.run(self.session.turn_messages, interrupted.token)
        )
        await self._ensure_agent()
        turn: RunningTurn = await self._reactor.submit(ResumeRequested(interrupted.token))
        where = f"step {checkpoint.step}" if checkpoint else "where it had got to"
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
        return await self._drive(turn, interrupted.prompt, checkpoint, paths, reported)

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
                except (AgentDied, AgentUnavailable) as error:
                    then = await self._after_crash(turn, error, attempt)
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
                        return await self._end(turn, TurnStatus.CANCELLED, "cancelled")
                    if then == "continue":
                        resume = None
                        reported = await self._engine.run(turn.messages_so_far)
                    else:
                        resume = then
                    await asyncio.sleep(self.policy.delay(attempt))
                    continue
                except RequestError as error:
                    self.last_response = error
                    detail = f"the agent failed the prompt: {error.described}"
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
        agent_session = self._recorder.agent_session
        if (
            not self._agent.alive
            or agent_session is None
            or self._opened_in != self._agent.generation
        ):
            raise AgentDied(f"agent {self._agent.described!r} is not running", None)
        exited = self._agent.exited
        blocks = await self._prompt_blocks(prompt)
        meta: dict[str, Any] = dict(self._prompt_meta)
        if resume is not None:
            meta["turnback"] = {"resume": _resume_meta(resume)}
        elif reported is not None:
            blocks.insert(len(blocks) - _user_blocks(prompt), _continuation(reported))
            meta["turnback"] = {"resume": {"step": None, "attempt": attempt}}
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
                    raise AgentDied(self._death(), self._agent.returncode) from None
            response = request.result()
        except BaseException:
            request.cancel()
            raise
        finally:
            self._recorder.live = None
        response = response if isinstance(response, dict) else {}
        self.last_response = response
        if self._state.context_pending:
            self._context = None
            await self._remember_session("continued", context_pending=False)
        return str(response.get("stopReason"))

    async def _after_crash(
        self, turn: RunningTurn, error: AgentError, attempt: int
    ) -> StepCheckpoint | Literal["continue", "stop", "fail"]:
        """Settle the journal after the agent went away; returns how the turn goes on: from a
        step checkpoint (rewound to it), as a continuation (no checkpoint: what it did is
        kept), stopped (interrupted), or failed. Persisted before the agent is started again."""
        self._recorder.live = None
        returncode = self._agent.returncode
        if isinstance(error, AgentDied) and self._opened_in:
            # Closes it (unless another session already started the next one), which cancels
            # handlers still waiting on it (a permission being asked).
            await self._agent.lost(self._opened_in)
        self._requests.clear()
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
            return "continue"
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
            return "fail"
        checkpoint = await self._engine.run(turn.last_checkpoint)
        if checkpoint is None and self.policy.on_crash is OnCrash.STOP:
            await self._notice(
                ActivityLevel.WARNING,
                "turn.interrupted",
                f"the agent stopped unexpectedly during turn {turn.number} before saving a step "
                "checkpoint; the turn ends interrupted with what it did so far",
                {"returncode": returncode},
                turn.token,
            )
            return "stop"
        if checkpoint is None:
            await self._engine.run(turn.clear_requests)
        else:
            await self._engine.run(turn.rewind, checkpoint)
        where = f"from step {checkpoint.step}" if checkpoint else "where it had got to"
        # In the turn, after the rewind: the conversation says where the turn went on from (a
        # session/load shows this line; the editor was told live by the activity below).
        self._recorder.record(
            turn,
            {
                "sessionUpdate": EventKind.NOTICE.value,
                "text": f"The agent stopped unexpectedly; the turn resumed {where}.",
                "step": checkpoint.step if checkpoint else None,
                "attempt": attempt + 1,
            },
        )
        await self._notice(
            ActivityLevel.INFO,
            "turn.resuming",
            f"restarting the agent to {'resume' if checkpoint else 'continue'} turn "
            f"{turn.number} {where} (attempt {attempt + 1} of {self.policy.attempts})",
            {
                "attempt": attempt + 1,
                "step": checkpoint.step if checkpoint else None,
                "checkpointId": checkpoint.checkpoint_id if checkpoint else None,
            },
            turn.token,
        )
        return checkpoint if checkpoint is not None else "continue"

    async def _end(self, turn: RunningTurn, status: TurnStatus, detail: str | None) -> Turn:
        self._recorder.live = None
        self._requests.withdraw(turn.token)  # what it still asks its user is asked no more
        paths = frozenset(self._recorder.store_paths)
        ended: Turn = await self._reactor.submit(TurnEnded(turn, status, detail, paths))
        return ended

    async def _abandon(self, turn: RunningTurn) -> None:
        self._recorder.live = None
        if self._recorder.agent_session is not None:
            await self._agent.notify("session/cancel", {"sessionId": self._recorder.agent_session})
        # Bounded: a runtime being torn down must not hang its caller's cancellation.
        with contextlib.suppress(TurnNotRunning, RuntimeError, TimeoutError):
            await asyncio.wait_for(
                self._end(turn, TurnStatus.CANCELLED, "cancelled: the caller stopped waiting"), 10
            )

    # -- the agent process and its session --------------------------------------------------

    async def _ensure_agent(self) -> None:
        """Have a live, initialized agent with this session open in it; start the agent if it
        exited (reopening the session there)."""
        if self._opened_in and self._opened_in == self._agent.generation and self._agent.alive:
            return
        exited_between_turns = self._opened_in and self._current is None
        generation = await self._agent.ensure()
        async with self._opening:
            if generation == self._opened_in:
                return
            if exited_between_turns:
                await self._notice(
                    ActivityLevel.WARNING,
                    "agent.exited",
                    f"agent {self._agent.described!r} had exited between turns; started it again",
                    {},
                )
            await self._open_in(generation)

    def agent_restarted(self, generation: int) -> None:
        """The connection's host: a new agent process runs; reopen this session in it now."""
        if self._opened_in and self._opened_in != generation:
            task = asyncio.ensure_future(self._reopen(generation))
            self._reopens.add(task)
            task.add_done_callback(self._reopens.discard)

    async def _reopen(self, generation: int) -> None:
        async with self._opening:
            if self._opened_in == generation or self._agent.generation != generation:
                return  # opened already, or that process has gone too
            try:
                await self._open_in(generation)
            except AgentError as error:
                await self._notice(
                    ActivityLevel.WARNING,
                    "agent.session.reopen.failed",
                    f"agent session could not be reopened after the agent restarted: {error}; "
                    "the next prompt tries again",
                    {},
                )

    async def _open_in(self, generation: int) -> None:
        """Open this session in the agent process of ``generation``."""
        self._reply = self._agent.replier(generation)
        self._recorder.new_process(generation)
        try:
            await self._open_session()
            await self._restore_settings()
        except (AgentDied, RequestError) as error:
            raise AgentUnavailable(
                f"agent {self._agent.described!r} could not open a session "
                f"(status {self._agent.returncode}): "
                f"{error.described if isinstance(error, RequestError) else error}"
            ) from error
        self._opened_in = generation

    async def _open_session(self) -> None:
        """Load (or resume) the agent session this turnback session used last; else open a new
        one, and give it the conversation so far ahead of the next prompt."""
        if not self._state_read:
            self._state = await self._engine.run(self._last_state)
            self._state_read = True
        cwd = str(self.session.workspace)
        previous = self._state.agent_session_id
        servers = list(self._relay.mcp_servers) if self._relay is not None else []
        features = self._agent.features
        if previous is not None and (features.load_session or features.resume_session):
            method, how = (
                ("session/load", "loaded")
                if features.load_session
                else ("session/resume", "resumed")
            )
            self._reopening = True
            self._attach(previous)
            try:
                opened = await self._agent.request(
                    method, {"cwd": cwd, "sessionId": previous, "mcpServers": servers}
                )
            except RequestError as error:
                self._agent.detach(previous, self)
                await self._notice(
                    ActivityLevel.WARNING,
                    "agent.session.load.failed",
                    f"agent session {previous} could not be reopened ({error.described}); "
                    "opening a new one with the conversation so far",
                    {"agentSessionId": previous},
                )
            else:
                self.session_response = opened if isinstance(opened, dict) else {}
                await self._remember_session(how, context_pending=self._state.context_pending)
                return
            finally:
                self._reopening = False
        messages = await self._engine.run(self.session.messages)
        await self._new_session(messages, "new")

    async def _new_session(self, transcript: list[Message], how: str) -> str:
        """Open a new agent session for this one, given ``transcript`` (in
        ``_meta.turnback.transcript``, and ahead of the next prompt: persisted, so a restart
        before that prompt still delivers it)."""
        servers = list(self._relay.mcp_servers) if self._relay is not None else []
        params: dict[str, Any] = {"cwd": str(self.session.workspace), "mcpServers": servers}
        if transcript:
            params["_meta"] = {"turnback": {"transcript": transcript_json(transcript)}}
        response = await self._agent.request("session/new", params)
        response = response if isinstance(response, dict) else {}
        session_id = response.get("sessionId")
        if not isinstance(session_id, str):
            raise RequestError.internal_error(
                {"details": f"the agent answered session/new without a sessionId: {response}"}
            )
        self.session_response = response
        self._agent.detach(self._recorder.agent_session, self)
        self._attach(session_id)
        self._context = list(transcript) if how != "new" else None
        await self._remember_session(how, context_pending=bool(transcript))
        return session_id

    def _attach(self, agent_session: str) -> None:
        self._recorder.agent_session = agent_session
        self._state = AgentState(
            agent_session, self.command, self._state.context_pending, self._state.settings
        )
        self._agent.attach(agent_session, self)

    async def _restore_settings(self) -> None:
        """Give a newly started agent process the settings the user chose for the previous one
        (a restart after a crash, or a later run of turnback), in the order they were made."""
        for key, params in self._state.settings.items():
            method = key.split(" ")[0]
            try:
                await self._agent.request(
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

    def _last_state(self) -> AgentState:
        """What this turnback session kept about its agent session, if it ran the same
        command (another agent cannot reopen it)."""
        state = AgentState.from_json(self.session.record.agent_state)
        return state if state.command == self.command else AgentState(command=self.command)

    async def _remember_session(self, how: str, *, context_pending: bool) -> None:
        await self._save_state(context_pending=context_pending)
        # a line for people, recorded in order with what follows; the opener does not wait
        self._reactor.post(self._session_notice(how, context_pending))

    async def _save_state(
        self, *, context_pending: bool | None = None, settings: dict[str, Any] | None = None
    ) -> None:
        self._state = AgentState(
            self._recorder.agent_session,
            self.command,
            self._state.context_pending if context_pending is None else context_pending,
            self._state.settings if settings is None else settings,
        )
        await self._engine.run(self.session.set_agent_state, self._state.to_json())

    async def _prompt_blocks(self, prompt: str | list[dict[str, Any]]) -> list[Any]:
        blocks: list[Any] = [_text(prompt)] if isinstance(prompt, str) else list(prompt)
        if not self._state.context_pending:
            return blocks
        if self._context is not None:
            messages: list[Message] = self._context
        else:
            messages = await self._engine.run(self.session.messages)
        if not messages:
            return blocks
        text = render_transcript(messages)
        context: dict[str, Any]
        if self._agent.features.embedded_context:
            resource = {
                "uri": f"turnback://session/{self.session.id}/transcript",
                "text": text,
                "mimeType": "text/plain",
            }
            context = {"type": "resource", "resource": resource}
        else:
            context = _text(text)
        # Marked, so an agent that reads its prompt as instructions (the scripted agent) can
        # tell turnback's context from what the user asked.
        context["_meta"] = {"turnback": {"context": "transcript"}}
        return [context, *blocks]

    # -- conversation rollback (called through AgentRollback) -------------------------------

    def check_rollback(self, turns: int) -> None:
        if turns == 0:
            return
        if self._current is not None:
            number = self._current.number
            raise RollbackUnavailable(
                f"turn {number} is running, so the conversation cannot be rolled back now"
            ).settled_by(WAIT, turn=number, state="running")
        if not self._agent.alive:
            raise RollbackUnavailable(
                f"agent {self._agent.described!r} is not running, so its conversation cannot "
                "be rolled back; AgentRuntime.revert starts it first"
            )
        if not self.features.rollback and not self.policy.fresh_session_rollback:
            raise RollbackUnavailable(
                f"agent {self._agent.described!r} cannot roll its conversation back (it does "
                "not advertise _meta.turnback.rollback) and fresh-session rollback is off; revert "
                "the files only (conversation=False), or allow ResumePolicy(fresh_session_rollback)"
            )

    async def roll_back(self, turns: int, transcript: list[Message]) -> None:
        """Roll the agent's conversation back ``turns`` turns (the module docstring of
        :mod:`turnback.runtime.rollback` says how).

        Runs while the reactor and the engine thread may be busy with the revert that called
        it, so it only talks to the agent and posts activities; it never waits on either."""
        agent_session = self._recorder.agent_session
        if not self._agent.alive or agent_session is None:
            raise RollbackUnavailable(
                f"agent {self._agent.described!r} is not running, so its conversation cannot "
                "be rolled back; start it (AgentRuntime.revert does) and revert again"
            )
        if self.features.rollback:
            try:
                await self._agent.request(
                    ROLLBACK_METHOD, {"sessionId": agent_session, "turns": turns}
                )
            except RequestError as error:
                self._reactor.post(
                    Notice(
                        ActivityLevel.WARNING,
                        "agent.rollback.failed",
                        f"the agent refused to roll back {turns} turns ({error.described}); "
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
        session_id = await self._fresh_session(transcript)
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
            number = self._current.number
            raise RollbackUnavailable(
                f"turn {number} is running, so the conversation cannot be rolled forward now"
            ).settled_by(WAIT, turn=number, state="running")
        undone: Revert = await self._engine.run(self.session.undo_revert)
        if undone.conversation:
            await self._ensure_agent()
            transcript = await self._engine.run(self.session.messages)
            session_id = await self._fresh_session(transcript)
            await self._notice(
                ActivityLevel.INFO,
                "agent.rolled_forward",
                f"the revert was undone: a fresh agent session {session_id} is given the "
                f"{len(transcript)} messages of the restored conversation ahead of the next prompt",
                {"revert": undone.id, "messages": len(transcript)},
            )
        return undone

    async def _fresh_session(self, transcript: list[Message]) -> str:
        """Replace the agent's session by a new one that gets ``transcript`` (persisted, so a
        restart before the next prompt still delivers it). A revert calls it between its engine
        steps, so the engine thread is free to write the state."""
        servers = list(self._relay.mcp_servers) if self._relay is not None else []
        params: dict[str, Any] = {
            "cwd": str(self.session.workspace),
            "mcpServers": servers,
            "_meta": {"turnback": {"transcript": transcript_json(transcript)}},
        }
        response = await self._agent.request("session/new", params)
        response = response if isinstance(response, dict) else {}
        session_id = str(response.get("sessionId"))
        self.session_response = response
        self._agent.detach(self._recorder.agent_session, self)
        self._attach(session_id)
        self._context = list(transcript)
        self._state = AgentState(session_id, self.command, bool(transcript), self._state.settings)
        await self._engine.run(self.session.set_agent_state, self._state.to_json())
        self._reactor.post(self._session_notice("new", bool(transcript)))
        return session_id

    def _session_notice(self, how: str, context_pending: bool) -> Notice:
        """A line for people saying which agent session serves this one (the runtime reads it
        back from the session's ``agent_state``, not from here)."""
        return Notice(
            ActivityLevel.INFO,
            "agent.session",
            f"agent session {self._recorder.agent_session} {how}",
            {
                "agentSessionId": self._recorder.agent_session,
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

    # -- the connection's host: this session's frames, in wire order -------------------------

    def agent_frame(self, frame: Frame, line: bytes) -> bool:
        """Called for every frame naming this session, in wire order, before the connection
        handles it. Returns whether it was taken (the connection then never sees it)."""
        if self._recorder.frame(frame):
            return True
        if self._relay is None or frame.get("method") is None:
            return False
        return self._relay.agent_frame(frame, self._reopening, self._reply, line)

    async def agent_request(self, method: str, params: dict[str, Any]) -> Any:
        if method in ("session/request_permission", "elicitation/create"):
            return await self._requests.answer(method, params)
        raise RequestError.method_not_found(method)

    def agent_rejected(self, rejected: Rejected) -> None:
        self._recorder.rejected(rejected)

    def pending_input(self) -> bool:
        return self._requests.waiting_input

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

    def _death(self) -> str:
        return f"agent {self._agent.described!r} exited (status {self._agent.returncode})"


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _user_blocks(prompt: str | list[dict[str, Any]]) -> int:
    return 1 if isinstance(prompt, str) else len(prompt)


def _continuation(reported: Sequence[Message]) -> Any:
    """The block that tells an agent restarted mid-turn (with no step checkpoint to resume
    from) what happened: ahead of the user's prompt, marked as turnback's."""
    lines = [
        "[turnback] Your previous attempt at the request below was interrupted: the agent "
        "process stopped before it finished, and was started again."
    ]
    said = [m for m in reported if m.kind is not MessageKind.USER]
    if said:
        lines += ["", "What you had already reported in this attempt:"]
        lines += render_transcript(said).splitlines()[2:]
    lines += [
        "",
        "The workspace is as it now stands: changes made before the interruption are kept. "
        "Check it before redoing anything, then continue the request.",
    ]
    block = _text("\n".join(lines) + "\n")
    block["_meta"] = {"turnback": {"context": "continuation"}}
    return block


def _resume_meta(checkpoint: StepCheckpoint) -> dict[str, Any]:
    meta: dict[str, Any] = {"checkpointId": checkpoint.checkpoint_id, "step": checkpoint.step}
    if checkpoint.state is not None:
        meta["state"] = checkpoint.state
    return meta


__all__ = [
    "AgentRuntime",
    "AgentState",
    "InputRequest",
    "OnCrash",
    "PermissionRequest",
    "ResumePolicy",
    "ResumeUnavailable",
]
