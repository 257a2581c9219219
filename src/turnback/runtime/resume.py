"""What happens to a turn when the process running it dies: the agent's, or turnback's own.

The agent dies mid-turn (the aryx seed, persisted): the latest step checkpoint is read from the
store (never from memory), the turn is rewound to it in one transaction (what came after leaves
the conversation, later checkpoints and the turn's pending requests go), and only then is the
agent started again, its session reopened, and the prompt sent again with
``_meta.turnback.resume = {checkpointId, step, state}`` so the agent continues after that step.
The agent's updates after the checkpoint were voided, so when it repeats none of them, and
repeats none of its effects, every update shows once. An agent that saved no step checkpoint
(most real agents) keeps what it did, and is sent one continuation prompt instead -- its previous
attempt was interrupted, this is what it had reported, the workspace is as it now stands --
marked ``_meta.turnback.resume = {step: null}`` (``OnCrash.CONTINUE``); or the turn ends
interrupted (``OnCrash.STOP``). Attempts are bounded by the policy; each is an activity.

Turnback's own process died mid-turn: recovery marked the turn interrupted, and
:meth:`CrashResume.reopen` runs it again in its own place from its last step checkpoint (or as a
continuation), to be driven like any other turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from turnback.engine.turns import RunningTurn
from turnback.errors import AgentDied, AgentError, ResumeUnavailable
from turnback.model import (
    ActivityLevel,
    EventKind,
    Message,
    MessageKind,
    StepCheckpoint,
    TurnStatus,
)
from turnback.records import record
from turnback.runtime.agent_session import (
    AgentSession,
    SessionLost,
    render_transcript,
    text_block,
)
from turnback.runtime.parts import SessionParts
from turnback.runtime.policy import OnCrash
from turnback.runtime.reactor import Notice, ResumeRequested

#: How a turn goes on after its agent died: from a step checkpoint (rewound to it), as a
#: continuation (no checkpoint: what it did is kept), stopped (interrupted), or failed.
Then = StepCheckpoint | Literal["continue", "stop", "fail"]


@record
class Reopened:
    """An interrupted turn running again, and what its first attempt is sent."""

    turn: RunningTurn
    prompt: Any
    checkpoint: StepCheckpoint | None
    store_paths: set[str]
    #: what the turn had reported, for a continuation (no step checkpoint)
    reported: list[Message] | None


class CrashResume:
    """Decides and records how a turn goes on after a crash (see the module docstring): the
    activities, the journal settled before the agent is started again, the attempts. It never
    starts the agent itself; the runtime's turn loop does, then sends :func:`resume_prompt`."""

    def __init__(self, parts: SessionParts, agent_session: AgentSession) -> None:
        self._parts = parts
        self._agent_session = agent_session

    async def after_crash(
        self, turn: RunningTurn, error: AgentError, attempt: int, *, cancelling: bool
    ) -> Then:
        """Settle the journal after the agent went away; returns how the turn goes on.
        Persisted before the agent is started again."""
        self._parts.recorder.live = None
        returncode = self._parts.agent.returncode
        if isinstance(error, AgentDied):
            await self._agent_session.lost()
        elif isinstance(error, SessionLost):
            self._agent_session.forget()  # the agent runs on: only its session is opened again
        self._parts.requests.clear()
        level, code = (
            (ActivityLevel.WARNING, "agent.crashed")
            if isinstance(error, AgentDied)
            else (ActivityLevel.WARNING, "agent.session.lost")
            if isinstance(error, SessionLost)
            else (ActivityLevel.ERROR, "agent.restart.failed")
        )
        command = list(self._parts.command)
        await self._notice(
            level,
            code,
            f"{error} during turn {turn.number}",
            {"returncode": returncode, "attempt": attempt, "command": command},
            turn.token,
        )
        if cancelling:
            return "continue"
        if attempt >= self._parts.policy.attempts:
            await self._notice(
                ActivityLevel.ERROR,
                "turn.resume.failed",
                f"turn {turn.number} failed: the agent kept stopping; gave up after {attempt} "
                f"restart{'s' if attempt != 1 else ''} "
                f"(ResumePolicy.attempts={self._parts.policy.attempts})",
                {"attempts": attempt},
                turn.token,
            )
            return "fail"
        checkpoint = await self._parts.service.acall(turn.last_checkpoint)
        if checkpoint is None and self._parts.policy.on_crash is OnCrash.STOP:
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
            await self._parts.service.acall(turn.clear_requests)
        else:
            await self._parts.service.acall(turn.rewind, checkpoint)
        where = f"from step {checkpoint.step}" if checkpoint else "where it had got to"
        lost = isinstance(error, SessionLost)
        stopped = "lost its session" if lost else "stopped unexpectedly"
        # In the turn, after the rewind: the conversation says where the turn went on from (a
        # session/load shows this line; the editor was told live by the activity below).
        self._parts.recorder.record(
            turn,
            {
                "sessionUpdate": EventKind.NOTICE.value,
                "text": f"The agent {stopped}; the turn resumed {where}.",
                "step": checkpoint.step if checkpoint else None,
                "attempt": attempt + 1,
            },
        )
        await self._notice(
            ActivityLevel.INFO,
            "turn.resuming",
            f"{'reopening the agent session' if lost else 'restarting the agent'} "
            f"to {'resume' if checkpoint else 'continue'} turn "
            f"{turn.number} {where} (attempt {attempt + 1} of {self._parts.policy.attempts})",
            {
                "attempt": attempt + 1,
                "step": checkpoint.step if checkpoint else None,
                "checkpointId": checkpoint.checkpoint_id if checkpoint else None,
            },
            turn.token,
        )
        return checkpoint if checkpoint is not None else "continue"

    async def finished(self, turn: RunningTurn, attempts: int, stop: str) -> None:
        """The agent answered the prompt after ``attempts`` restarts."""
        await self._notice(
            ActivityLevel.INFO,
            "turn.resumed",
            f"turn {turn.number} finished after {attempts} restart"
            f"{'s' if attempts != 1 else ''} of the agent",
            {"attempts": attempts, "stopReason": stop},
            turn.token,
        )

    async def reopen(self, ensure_agent: Callable[[], Awaitable[None]]) -> Reopened:
        """Run the session's interrupted turn again in its own place (``Session.reopen``),
        from its last step checkpoint, or as a continuation; ``ensure_agent`` has the agent
        running with its session open before the turn is reopened. Raises ResumeUnavailable
        when there is no such turn, or it has no checkpoint and the policy is to stop."""
        conversation = await self._parts.service.acall(self._parts.session.conversation)
        if not conversation or conversation[-1].status is not TurnStatus.INTERRUPTED:
            raise ResumeUnavailable(
                f"session {self._parts.session.id[:12]} has no interrupted turn at its head "
                "to resume"
            )
        interrupted = conversation[-1]
        checkpoints = await self._parts.service.acall(
            self._parts.session.step_checkpoints, interrupted.token
        )
        checkpoint = checkpoints[-1] if checkpoints else None
        if checkpoint is None and self._parts.policy.on_crash is OnCrash.STOP:
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
            else await self._parts.service.acall(
                self._parts.session.turn_messages, interrupted.token
            )
        )
        await ensure_agent()
        turn: RunningTurn = await self._parts.reactor.submit(ResumeRequested(interrupted.token))
        where = f"step {checkpoint.step}" if checkpoint else "where it had got to"
        turn.record(
            {
                "sessionUpdate": EventKind.NOTICE.value,
                "text": f"Continued from {where} after the process running it stopped.",
                "step": checkpoint.step if checkpoint else None,
            },
            sync=False,
        )
        await self._parts.service.acall(turn.sync)
        await self._notice(
            ActivityLevel.INFO,
            "turn.continued",
            f"interrupted turn {turn.number} continues from {where}",
            {"step": checkpoint.step if checkpoint else None},
            turn.token,
        )
        paths = {c.store_path for c in checkpoints if c.store_path}
        return Reopened(turn, interrupted.prompt, checkpoint, paths, reported)

    async def _notice(
        self,
        level: ActivityLevel,
        code: str,
        message: str,
        data: dict[str, Any],
        turn: str | None = None,
    ) -> None:
        await self._parts.reactor.submit(Notice(level, code, message, data, turn))


def resume_prompt(
    blocks: list[Any],
    prompt: str | list[dict[str, Any]],
    resume: StepCheckpoint | None,
    reported: list[Message] | None,
    attempt: int,
) -> dict[str, Any] | None:
    """Make an attempt after a crash a resume: ``blocks`` gets the continuation (ahead of the
    user's own blocks) when there is no step checkpoint; returns turnback's ``_meta`` key for
    the prompt, or None for a first attempt."""
    if resume is not None:
        return {"resume": _checkpoint_meta(resume)}
    if reported is None:
        return None
    user_blocks = 1 if isinstance(prompt, str) else len(prompt)
    blocks.insert(len(blocks) - user_blocks, _continuation(reported))
    return {"resume": {"step": None, "attempt": attempt}}


_NOT_THE_AGENTS = frozenset({MessageKind.USER, MessageKind.NOTICE, MessageKind.ERROR})


def _continuation(reported: Sequence[Message]) -> Any:
    """The block that tells an agent restarted mid-turn (with no step checkpoint to resume
    from) what happened: ahead of the user's prompt, marked as turnback's."""
    lines = [
        "[turnback] Your previous attempt at the request below was interrupted: the agent "
        "process (or its session) stopped before it finished, and was started again."
    ]
    # the agent's own messages: the user's prompt follows, and turnback's notes (the turn
    # resumed, an error) are not what the agent did
    said = [m for m in reported if m.kind not in _NOT_THE_AGENTS]
    if said:
        lines += ["", "What you had already reported in this attempt:"]
        lines += render_transcript(said).splitlines()[2:]
    lines += [
        "",
        "The workspace is as it now stands: changes made before the interruption are kept. "
        "Check it before redoing anything, then continue the request.",
    ]
    block = text_block("\n".join(lines) + "\n")
    block["_meta"] = {"turnback": {"context": "continuation"}}
    return block


def _checkpoint_meta(checkpoint: StepCheckpoint) -> dict[str, Any]:
    meta: dict[str, Any] = {"checkpointId": checkpoint.checkpoint_id, "step": checkpoint.step}
    if checkpoint.state is not None:
        meta["state"] = checkpoint.state
    return meta


__all__ = ["CrashResume", "Reopened", "Then", "resume_prompt"]
