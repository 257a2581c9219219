"""The commands a front-end gives the engine, one frozen record each.

A command names what it acts on by id (a session's full id, as every front-end holds once it has
resolved what its user typed) and carries its options as fields, so a front-end builds one record
and the service carries it out (:class:`~turnback.service.Service`): ``apply`` is the engine call
the command stands for, run wherever the service runs engine work. A command decides nothing
itself; the rules are the engine's.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from turnback.model import (
    Activity,
    ActivityLevel,
    GcReport,
    Handoff,
    Message,
    RecoveryReport,
    Rescue,
    Revert,
    RevertPlan,
    RevertRequest,
    SweepReport,
    Turn,
    TurnStatus,
)
from turnback.records import record

if TYPE_CHECKING:
    from turnback.engine.handle import Session, Turnback
    from turnback.engine.turns import RunningTurn

T = TypeVar("T")


@runtime_checkable
class AgentRollback(Protocol):
    """The agent's side of a conversation revert, for an async caller: the engine's
    :class:`~turnback.engine.revert.ConversationRollback` (``check`` before any file moves,
    ``apply`` for a sync caller) and ``roll_back``, awaited on the caller's loop."""

    def check(self, turns: int) -> None: ...

    def apply(self, turns: int, transcript: list[Message]) -> None: ...

    async def roll_back(self, turns: int, transcript: list[Message]) -> None: ...


class Command(Generic[T]):
    """A request to the engine whose answer is a ``T``."""

    __slots__ = ()

    def apply(self, tb: Turnback) -> T:
        """Carry the command out on ``tb`` (on the service's side: never on an event loop)."""
        raise NotImplementedError


# -- sessions ------------------------------------------------------------------------------------


@record
class CreateSession(Command["Session"]):
    """A new session; ``session_id`` names it when the front-end derives it (a terminal
    agent's hooks, from the agent's own session id; ``turnback acp``'s start); ``existing``:
    a session already stored under it is the one meant."""

    workspace: str
    title: str | None = None
    agent: str | None = None
    session_id: str | None = None
    existing: bool = False

    def apply(self, tb: Turnback) -> Session:
        return tb.create_session(
            self.workspace,
            self.title,
            self.agent,
            session_id=self.session_id,
            existing=self.existing,
        )


@record
class ForkSession(Command["Session"]):
    """A new session whose conversation is a copy of ``session``'s (``Session.fork``)."""

    session: str
    workspace: str | None = None
    title: str | None = None
    agent: str | None = None

    def apply(self, tb: Turnback) -> Session:
        return tb.session(self.session).fork(self.workspace, self.title, self.agent)


@record
class DeleteSession(Command[None]):
    session: str

    def apply(self, tb: Turnback) -> None:
        tb.session(self.session).delete()


@record
class SetAgentState(Command[None]):
    """Remember what the runtime needs of the agent behind a session (its own session id)."""

    session: str
    state: dict[str, object]

    def apply(self, tb: Turnback) -> None:
        tb.session(self.session).set_agent_state(self.state)


@record
class AddActivity(Command[Activity]):
    session: str
    level: ActivityLevel
    code: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    turn: str | None = None

    def apply(self, tb: Turnback) -> Activity:
        return tb.session(self.session).add_activity(
            self.level, self.code, self.message, self.data, self.turn
        )


# -- turns ---------------------------------------------------------------------------------------


@record
class BeginTurn(Command["RunningTurn"]):
    """Begin a turn: its row and prompt are durable, its baseline captured, when it answers."""

    session: str
    prompt: Any

    def apply(self, tb: Turnback) -> RunningTurn:
        return tb.session(self.session).turn(self.prompt)


@record
class ReopenTurn(Command["RunningTurn"]):
    """Run an interrupted head turn again from its last step checkpoint."""

    session: str
    turn: int | str

    def apply(self, tb: Turnback) -> RunningTurn:
        return tb.session(self.session).reopen(self.turn)


@record
class SyncTurn(Command[None]):
    """Make everything ``turn`` has recorded so far durable."""

    turn: RunningTurn

    def apply(self, tb: Turnback) -> None:
        self.turn.sync()


_ENDS = {
    TurnStatus.COMPLETED: ("complete", None),
    TurnStatus.CANCELLED: ("cancel", "cancelled"),
    TurnStatus.INTERRUPTED: ("interrupt", "interrupted"),
    TurnStatus.FAILED: ("fail", "the agent failed"),
}


@record
class EndTurn(Command[Turn]):
    """End a running turn as ``status`` (completed, cancelled, interrupted or failed)."""

    turn: RunningTurn
    status: TurnStatus
    detail: str | None = None

    def apply(self, tb: Turnback) -> Turn:
        method, default = _ENDS[self.status]
        ended: Turn = getattr(self.turn, method)(self.detail or default)
        return ended


@record
class ApplySetAside(Command[Turn]):
    session: str
    turn: str

    def apply(self, tb: Turnback) -> Turn:
        return tb.session(self.session).apply(self.turn)


@record
class DiscardSetAside(Command[int]):
    """Delete a set-aside turn; answers how many events it held."""

    session: str
    turn: str

    def apply(self, tb: Turnback) -> int:
        return tb.session(self.session).discard(self.turn)


# -- reverts -------------------------------------------------------------------------------------


@record
class RevertSession(Command[Revert]):
    """Rewind ``session`` as ``request`` says. ``rollback`` is the agent's side, when an agent
    holds the conversation too: the service rolls it back between the files and the commit."""

    session: str
    request: RevertRequest
    rollback: AgentRollback | None = None

    def apply(self, tb: Turnback) -> Revert:
        raise TypeError("a revert is carried out by the service in steps, not in one call")


@record
class PlanRevert(Command[RevertPlan]):
    """What ``RevertSession`` with the same request would do to the files, writing nothing."""

    session: str
    request: RevertRequest

    def apply(self, tb: Turnback) -> RevertPlan:
        return tb.session(self.session).revert_plan(self.request)


@record
class UndoRevert(Command[Revert]):
    session: str

    def apply(self, tb: Turnback) -> Revert:
        return tb.session(self.session).undo_revert()


@record
class HandOff(Command[Handoff]):
    """Give ``session`` to this machine, named ``to_host`` (``Session.handoff``)."""

    session: str
    to_host: str

    def apply(self, tb: Turnback) -> Handoff:
        return tb.session(self.session).handoff(self.to_host)


@record
class RescueFiles(Command[Rescue]):
    """Bring ``paths`` back as they were before tool ``before_tool`` of ``turn`` (0: its
    begin; no turn: the running or last one); hand edits since the turn are kept unless
    ``force``."""

    session: str
    paths: tuple[str, ...]
    turn: int | str | None = None
    before_tool: int = 0
    force: bool = False

    def apply(self, tb: Turnback) -> Rescue:
        return tb.session(self.session).rescue(
            self.paths, self.turn, before_tool=self.before_tool, force=self.force
        )


@record
class UndoRescue(Command[Rescue]):
    session: str
    force: bool = False

    def apply(self, tb: Turnback) -> Rescue:
        return tb.session(self.session).undo_rescue(force=self.force)


# -- the whole home ------------------------------------------------------------------------------


@record
class Recover(Command[RecoveryReport]):
    def apply(self, tb: Turnback) -> RecoveryReport:
        return tb.recover()


@record
class Sweep(Command[SweepReport]):
    def apply(self, tb: Turnback) -> SweepReport:
        return tb.sweep()


@record
class CollectGarbage(Command[GcReport]):
    keep: int | None = None
    older_than: float | None = None
    dry_run: bool = False

    def apply(self, tb: Turnback) -> GcReport:
        return tb.gc(keep=self.keep, older_than=self.older_than, dry_run=self.dry_run)
