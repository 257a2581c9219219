"""The ``--json`` shapes: what ``turnback … --json`` prints and the review page's API answers.

One frozen record per shape, built from the model's records (``of``) and turned into JSON one
way (:meth:`View.to_json`, or :func:`to_json` for a list of them): the command line and the page
render the same records, so a script reading either sees the same shape. The README's
"``--json`` shapes" section is written from these classes (their fields and docstrings), and a
test fails when the two differ.

No rules here: what a shape holds is read by the caller (or by the few readers below that
gather one shape's records from a :class:`~turnback.engine.handle.Session`).
"""

from __future__ import annotations

import dataclasses
import typing
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, ClassVar, Self

from turnback.errors import CheckpointUnavailable
from turnback.model import (
    Activity,
    ActivityLevel,
    ChangeKind,
    FileChange,
    GcReport,
    Handoff,
    HealthCheck,
    Message,
    MessageKind,
    RecoveryReport,
    Rescue,
    Revert,
    RevertPlan,
    RevertState,
    RunEvent,
    SessionRecord,
    SweepReport,
    ToolCheckpoint,
    Turn,
    TurnDiff,
    TurnStatus,
    UnrecoveredTurn,
    prompt_text,
)
from turnback.records import record

if TYPE_CHECKING:
    from turnback.engine.handle import Session, Turnback
    from turnback.hooks.install import Installed


class View:
    """A ``--json`` shape. ``called`` is how the README calls a shape that others include.

    A log of 1,000 turns is some 5,000 views, built and turned into JSON on every ``log --json``
    and every look of the review page. So each view class gets, when first used, two functions
    written for its fields (:func:`_write`): ``to_json``, one dict display, and ``_make``, which
    sets a new instance's slots directly, at half the cost of a record's ``__init__`` (which
    takes its arguments in any form and sets each field in a loop)."""

    __slots__ = ()
    called: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # each class its own two functions, never its parent's (they know other fields)
        type.__setattr__(cls, "to_json", View.to_json)
        type.__setattr__(cls, "_make", View.__dict__["_make"])

    def to_json(self) -> dict[str, Any]:
        """This record as JSON values: an object whose keys are in the documented order."""
        return _write(type(self))[0](self)

    @classmethod
    def _make(cls, *values: Any) -> Self:
        """``cls(*values)``, faster."""
        return _write(cls)[1](cls, *values)  # type: ignore[no-any-return]


def _write(cls: type[View]) -> tuple[Callable[[View], dict[str, Any]], Callable[..., Any]]:
    """Write ``cls``'s ``to_json`` and ``_make`` and put them on it. A JSON key differs from
    its attribute only where it cannot be a Python name (``from``)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields]
    scope: dict[str, Any] = {"_new": object.__new__, "_json": to_json}
    scope.update({f"_set_{name}": getattr(cls, name).__set__ for name in names})
    items = ", ".join(
        f"{f.metadata.get('json', f.name)!r}: "
        + (f"_json(view.{f.name})" if _holds_views(hints[f.name]) else f"view.{f.name}")
        for f in fields
    )
    sets = "".join(f"    _set_{name}(view, {name})\n" for name in names)
    exec(
        f"def to_json(view):\n    return {{{items}}}\n"
        f"def make(cls, {', '.join(names)}):\n    view = _new(cls)\n{sets}    return view\n",
        scope,
    )
    type.__setattr__(cls, "to_json", scope["to_json"])
    type.__setattr__(cls, "_make", classmethod(scope["make"]))
    return scope["to_json"], scope["make"]


def _holds_views(hint: Any) -> bool:
    if isinstance(hint, type):
        return issubclass(hint, View)
    return any(_holds_views(arg) for arg in typing.get_args(hint))


def to_json(value: Any) -> Any:
    """A view, or a list of views, as JSON values; anything else as it is."""
    if isinstance(value, View):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [to_json(item) for item in value]
    return value


def _changes(changes: Iterable[FileChange]) -> tuple[ChangeView, ...]:
    make = ChangeView._make
    return tuple([make(*_change(c)) for c in changes])


# -- the shapes others include --------------------------------------------------------------


@record
class TurnView(View):
    """Times are Unix seconds; ``status`` is ``running``, ``completed``, ``failed``,
    ``cancelled``, ``interrupted`` or ``set_aside``; ``detail`` says why a turn failed, was
    cancelled or set aside."""

    called: ClassVar[str | None] = "turn"

    token: str
    number: int
    parent: str | None
    status: TurnStatus
    prompt: Any
    started_at: float
    ended_at: float | None
    events: int
    detail: str | None

    @classmethod
    def of(cls, turn: Turn) -> TurnView:
        return cls._make(*_turn(turn))


_TurnFields = tuple[str, int, str | None, TurnStatus, Any, float, float | None, int, str | None]
_SessionFields = tuple[
    str, str, str | None, str | None, str | None, str, tuple[Any, ...], float, float
]
_ChangeFields = tuple[str, ChangeKind, int, int, bool, str | None]


def _turn(turn: Turn) -> _TurnFields:
    return (
        turn.token,
        turn.number,
        turn.parent,
        turn.status,
        turn.prompt,
        turn.started_at,
        turn.ended_at,
        turn.event_count,
        turn.detail,
    )


@record
class SessionView(View):
    """``pending_requests`` are the permission and input requests a running turn waits on."""

    called: ClassVar[str | None] = "session"

    id: str
    workspace: str
    title: str | None
    agent: str | None
    head: str | None
    status: str
    pending_requests: tuple[Any, ...]
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, session: SessionRecord) -> SessionView:
        return cls(*_session(session))


def _session(session: SessionRecord) -> _SessionFields:
    return (
        session.id,
        session.workspace,
        session.title,
        session.agent,
        session.head,
        session.status,
        session.pending_requests,
        session.created_at,
        session.updated_at,
    )


@record
class ChangeView(View):
    """``kind`` is ``added``, ``modified``, ``deleted``, ``renamed`` or ``type_changed``;
    ``old_path`` is a renamed file's path before."""

    called: ClassVar[str | None] = "file change"

    path: str
    kind: ChangeKind
    additions: int
    deletions: int
    binary: bool
    old_path: str | None

    @classmethod
    def of(cls, change: FileChange) -> ChangeView:
        return cls._make(*_change(change))


def _change(change: FileChange) -> _ChangeFields:
    return (
        change.path,
        change.kind,
        change.additions,
        change.deletions,
        change.binary,
        change.old_path,
    )


@record
class RevertView(View):
    """``state`` is ``committed``, ``undone`` or ``rolled_back`` once it has ended (``started``,
    ``files_restored`` or ``undoing`` while it moves files); ``to_turn`` and ``from_head`` are
    turn tokens; ``undo_checkpoint`` is the workspace commit an undo puts back. A revert
    ``--keep-user-edits`` refused (hand edits in its way) ends ``rolled_back`` with a ``detail``
    that begins ``refused, nothing changed:``."""

    called: ClassVar[str | None] = "revert"

    id: int
    session: str
    state: RevertState
    to_turn: str | None
    from_head: str | None
    files: bool
    conversation: bool
    keep_user_edits: bool
    undo_checkpoint: str | None
    detail: str | None
    created_at: float
    ended_at: float | None

    @classmethod
    def of(cls, revert: Revert) -> RevertView:
        return cls(
            revert.id,
            revert.session_id,
            revert.state,
            revert.to_turn,
            revert.from_head,
            revert.files,
            revert.conversation,
            revert.keep_user_edits,
            revert.undo_checkpoint,
            revert.detail,
            revert.created_at,
            revert.ended_at,
        )


@record
class MessageView(View):
    """One entry of a turn's conversation: ``kind`` is ``user``, ``agent``, ``thought``,
    ``tool_call``, ``plan``, ``error``, ``notice``, ``other`` or ``unreadable``; ``data`` is
    what the agent sent."""

    called: ClassVar[str | None] = "message"

    kind: MessageKind
    text: str
    data: Any

    @classmethod
    def of(cls, message: Message) -> MessageView:
        return cls._make(message.kind, message.text, message.data)


@record
class ActivityView(View):
    """``level`` is ``info``, ``warning`` or ``error``; ``data.remedy``, when there is one, is
    what settles it, which the human output words as a command."""

    called: ClassVar[str | None] = "activity"

    level: ActivityLevel
    code: str
    message: str
    turn: str | None
    data: Any
    at: float

    @classmethod
    def of(cls, activity: Activity) -> ActivityView:
        return cls._make(
            activity.level,
            activity.code,
            activity.message,
            activity.turn,
            activity.data,
            activity.at,
        )


@record
class SessionTurnView(TurnView):
    """A turn with its session's id."""

    called: ClassVar[str | None] = None

    session: str

    @classmethod
    def of(cls, turn: Turn) -> SessionTurnView:
        return cls._make(*_turn(turn), turn.session_id)


@record
class UnrecoveredView(SessionTurnView):
    """A set-aside turn, and why recovery could not apply it."""

    called: ClassVar[str | None] = "set-aside turn"

    reason: str

    @classmethod
    def of(cls, item: UnrecoveredTurn) -> UnrecoveredView:  # type: ignore[override]
        return cls._make(*_turn(item.turn), item.turn.session_id, item.reason)


# -- each command's shape -------------------------------------------------------------------


@record
class ListedSession(SessionView):
    """``turns``: how many its conversation holds (its head is turn ``turns``); ``set_aside``:
    how many wait to be applied or discarded; ``first_prompt``: the text of its first turn's
    prompt, what names a session without a title."""

    called: ClassVar[str | None] = None

    turns: int
    set_aside: int
    first_prompt: str | None


@record
class CheckpointsView(View):
    """A turn's workspace checkpoints: the commits before and after it."""

    begin: str | None
    end: str | None


@record
class LogTurnView(TurnView):
    """A turn of the log: its files, the changes made before it outside any turn, its
    workspace checkpoints, and the revert that took it out of the conversation."""

    called: ClassVar[str | None] = None

    files: tuple[ChangeView, ...]
    outside: tuple[ChangeView, ...]
    checkpoints: CheckpointsView
    reverted_by: int | None

    @classmethod
    def of(cls, diff: TurnDiff) -> LogTurnView:  # type: ignore[override]
        turn = diff.turn
        return cls._make(
            *_turn(turn),
            _changes(diff.files),
            _changes(diff.outside),
            CheckpointsView._make(turn.begin_checkpoint, turn.end_checkpoint),
            turn.reverted_by,
        )


@record
class LogView(View):
    """``since_head`` is null when a turn is running, a revert is moving the files, or the
    workspace cannot be captured."""

    session: SessionView
    turns: tuple[LogTurnView, ...]
    reverts: tuple[RevertView, ...]
    since_head: tuple[ChangeView, ...] | None

    @classmethod
    def of(
        cls,
        session: SessionRecord,
        timeline: Sequence[TurnDiff],
        reverts: Sequence[Revert],
        since_head: Sequence[FileChange] | None,
    ) -> LogView:
        return cls(
            SessionView.of(session),
            tuple(LogTurnView.of(d) for d in timeline),
            tuple(RevertView.of(r) for r in reverts),
            None if since_head is None else _changes(since_head),
        )


@record
class RunEventView(View):
    """One event of a turn's run timeline, as the agent sent it."""

    seq: int
    kind: str
    event: Any
    at: float

    @classmethod
    def of(cls, event: RunEvent) -> RunEventView:
        return cls._make(event.seq, event.kind, event.event, event.at)


@record
class ShowView(View):
    """One turn's conversation and its run timeline; ``session`` is the session's id."""

    session: str
    turn: TurnView
    messages: tuple[MessageView, ...]
    events: tuple[RunEventView, ...]


@record
class DiffView(View):
    """``available`` is false when a workspace checkpoint of the turn is missing; ``patch`` is
    null then, and under ``--stat``."""

    turn: TurnView
    available: bool
    files: tuple[ChangeView, ...]
    outside: tuple[ChangeView, ...]
    patch: str | None

    @classmethod
    def of(cls, diff: TurnDiff) -> DiffView:
        return cls(
            TurnView.of(diff.turn),
            diff.available,
            _changes(diff.files),
            _changes(diff.outside),
            diff.patch,
        )


@record
class KeptView(ChangeView):
    """A file a revert keeps, and why (see :class:`PlanView`)."""

    called: ClassVar[str | None] = None

    reason: str | None


@record
class PlanView(View):
    """Each a list of file changes from the workspace as it is now; a kept file's ``reason``
    is ``ignored``, ``not captured``, ``unreadable`` (a directory that cannot be read),
    ``pre-existing`` or ``user edit``; ``conflicts`` are hand edits a plain revert overwrites,
    or that ``--keep-user-edits`` cannot keep."""

    restore: tuple[ChangeView, ...]
    delete: tuple[ChangeView, ...]
    keep: tuple[KeptView, ...]
    conflicts: tuple[ChangeView, ...]

    @classmethod
    def of(cls, plan: RevertPlan) -> PlanView:
        return cls(
            _changes(plan.restore),
            _changes(plan.delete),
            tuple(KeptView(*_change(c), plan.kept_because.get(c.path)) for c in plan.keep),
            _changes(plan.conflicts),
        )


@record
class ConflictView(View):
    """A revert that would overwrite hand edits, and their paths; or a handoff refused because
    the workspace holds changes that are not the session's, and the paths that differ from its
    head (exit code 3)."""

    error: str
    conflicts: tuple[str, ...]


@record
class IncompleteView(View):
    """Files a revert could not write, a full disk say (exit code 1)."""

    error: str
    paths: tuple[str, ...]


@record
class InterruptedView(View):
    """A revert or undo Ctrl-C stopped (exit code 130), and the revert as it was left."""

    error: str
    interrupted: bool
    revert: RevertView | None


@record
class GcView(View):
    """``problems``: the workspaces that could not be pruned, and why; ``dry_run``: the counts
    are what it would release and remove, and nothing was changed (``bytes_freed`` is 0)."""

    checkpoints_released: int
    refs_removed: int
    bytes_freed: int
    problems: tuple[str, ...]
    dry_run: bool

    @classmethod
    def of(cls, report: GcReport) -> GcView:
        return cls(
            report.checkpoints_released,
            report.refs_removed,
            report.bytes_freed,
            report.problems,
            report.dry_run,
        )


@record
class ToolPointView(View):
    """``number``: its place among the turn's tool checkpoints (``--before-tool``); ``summary``:
    the command or the path; ``checkpoint``: the workspace commit, null when the capture
    failed; ``git_state``: the repository's ``head``, ``refs``, ``stash`` and ``reflog`` before
    a destructive git command, else null."""

    number: int
    tool: str
    call_id: str | None
    summary: str
    checkpoint: str | None
    git_state: Any
    at: float

    @classmethod
    def of(cls, point: ToolCheckpoint) -> ToolPointView:
        return cls(
            point.number,
            point.tool,
            point.call_id,
            point.summary,
            point.commit,
            point.git_state,
            point.at,
        )


@record
class RescuePointsView(View):
    """The points a turn's files can be brought back from: its begin (``--before-tool 0``) and
    a checkpoint before each of its shell and write tools."""

    session: str
    turn: TurnView
    tools: tuple[ToolPointView, ...]


@record
class RescueView(View):
    """``before_tool``: 0 for the turn's begin; ``written``: the paths written or deleted;
    ``source``: the checkpoint they came from; ``undo_checkpoint``: the workspace just before,
    which ``--undo`` puts those paths back from; ``undone_at`` is null until it is undone."""

    id: int
    session: str
    turn: str
    before_tool: int
    paths: tuple[str, ...]
    written: tuple[str, ...]
    source: str
    undo_checkpoint: str
    at: float
    undone_at: float | None

    @classmethod
    def of(cls, rescue: Rescue) -> RescueView:
        return cls(
            rescue.id,
            rescue.session_id,
            rescue.turn,
            rescue.before_tool,
            rescue.paths,
            rescue.written,
            rescue.source,
            rescue.undo_checkpoint,
            rescue.at,
            rescue.undone_at,
        )


@record
class HandoffView(View):
    """``from``: the machine that held the session, else the one that ran its last turn (null
    when no turn ran); ``to``: this machine, where its turns run from now on; ``turn``: the
    head turn the workspace here was brought to (0: none), at its checkpoint ``moment``
    (``end``; ``before tool N`` or ``begin`` when its machine died during it); ``written``: the
    paths written or deleted to get there; ``fence``: the fencing token of the hold."""

    session: str
    from_host: str | None = field(metadata={"json": "from"})
    to: str
    turn: int
    moment: str
    written: tuple[str, ...]
    fence: str
    at: float

    @classmethod
    def of(cls, handoff: Handoff) -> HandoffView:
        return cls(
            handoff.session_id,
            handoff.from_host,
            handoff.to_host,
            handoff.turn,
            handoff.moment,
            handoff.written,
            handoff.fence,
            handoff.at,
        )


@record
class HooksView(View):
    """``files``: the configuration files written; ``events``: the agent's events turnback's
    hooks were installed for (or removed from); ``notes``: what else to do (Codex: trust
    them)."""

    agent: str
    files: tuple[str, ...]
    events: tuple[str, ...]
    notes: tuple[str, ...]

    @classmethod
    def of(cls, done: Installed) -> HooksView:
        return cls(done.agent, done.files, done.events, done.notes)


@record
class RecoverView(View):
    """``recovered``: applied as interrupted by this run; ``set_aside``: every set-aside turn,
    new or old; ``live``: running turns whose process is alive, only read; ``reverts``: reverts
    left half done, rolled back, and undos finished."""

    recovered: tuple[SessionTurnView, ...]
    set_aside: tuple[UnrecoveredView, ...]
    live: tuple[SessionTurnView, ...]
    reverts: tuple[RevertView, ...]

    @classmethod
    def of(cls, report: RecoveryReport) -> RecoverView:
        return cls(
            tuple(SessionTurnView.of(t) for t in report.recovered),
            tuple(UnrecoveredView.of(u) for u in report.set_aside),
            tuple(SessionTurnView.of(t) for t in report.live),
            tuple(RevertView.of(r) for r in report.reverts),
        )


@record
class AppliedView(View):
    """A set-aside turn applied: the turn as it now is."""

    applied: TurnView


@record
class DiscardedView(View):
    """A set-aside turn discarded: its token, and how many events went with it."""

    discarded: str
    events: int


@record
class SweepView(View):
    """How many step checkpoints and dead owners were removed."""

    step_checkpoints: int
    owners: int

    @classmethod
    def of(cls, report: SweepReport) -> SweepView:
        return cls(report.step_checkpoints, report.owners)


@record
class CheckView(View):
    """``ok`` is null for a check that was skipped, ``detail`` saying why; ``fix`` in words;
    ``remedy`` as a library error names it, or null."""

    name: str
    ok: bool | None
    detail: str
    fix: str | None
    remedy: str | None

    @classmethod
    def of(cls, check: HealthCheck) -> CheckView:
        return cls(check.name, check.ok, check.detail, check.fix, check.remedy)


@record
class DemoTurnView(View):
    """A turn of the demo's session."""

    number: int
    token: str
    status: TurnStatus
    events: int
    reverted: bool

    @classmethod
    def of(cls, turn: Turn) -> DemoTurnView:
        return cls(
            turn.number,
            turn.token,
            turn.status,
            turn.event_count,
            turn.reverted_by is not None,
        )


@record
class DemoView(View):
    """``home`` is null unless ``--keep``; ``workspace`` is null unless ``--keep`` or
    ``--workspace``, since the demo removes what it made."""

    home: str | None
    workspace: str | None
    session: str
    turns: tuple[DemoTurnView, ...]


# -- the review page's own answers ------------------------------------------------------------


@record
class SummaryView(View):
    """The session, the numbers of its conversation's turns, and its first turn's prompt (what
    names a session without a title)."""

    session: SessionView
    conversation: tuple[int, ...]
    first_prompt: str | None


@record
class TimelineView(View):
    """What the session page shows beside the log: set-aside turns, the review mark, and the
    last 50 activities."""

    unrecovered: tuple[UnrecoveredView, ...]
    review_mark: int | None
    activities: tuple[ActivityView, ...]


@record
class PatchView(View):
    """The patch of some of a turn's files."""

    paths: tuple[str, ...]
    patch: str | None


@record
class RangeView(View):
    """What changed from the end of turn ``from`` to the end of turn ``to``."""

    from_turn: int = field(metadata={"json": "from"})
    to_turn: int = field(metadata={"json": "to"})
    files: tuple[ChangeView, ...]
    patch: str | None


@record
class RunningView(View):
    """A running turn and its conversation so far, as it grows."""

    turn: TurnView
    messages: tuple[MessageView, ...]


@record
class ReviewMarkView(View):
    """The turn the user marked as reviewed."""

    review_mark: int


# -- reading one shape's records --------------------------------------------------------------


def sessions(tb: Turnback) -> list[ListedSession]:
    """``sessions``: every session, most recently active first, with how many turns its
    conversation holds and how many are set aside."""
    records = tb.sessions()
    overview = tb.conversations() if records else {}
    aside = Counter(u.turn.session_id for u in tb.unrecovered()) if records else Counter()
    listed = []
    for r in records:
        turns, first = overview.get(r.id, (0, None))
        text = None if first is None else prompt_text(first)
        listed.append(ListedSession(*_session(r), turns, aside[r.id], text))
    return listed


def log(handle: Session) -> LogView:
    """``log``: the session, each turn with its files and checkpoints, the reverts, and what
    changed since the head (None while a turn runs or a revert moves the files, or when it
    cannot be known)."""
    timeline = handle.timeline()
    reverts = handle.reverts()
    from turnback.engine.turns import unfinished

    running = any(d.turn.status == "running" for d in timeline)
    since = None if running or unfinished(reverts) else handle.changes_since_head()
    return LogView.of(handle.record, timeline, reverts, since)


def show(handle: Session, turn: int | str) -> ShowView:
    """``show``: one turn's conversation and its run timeline."""
    found = handle.get_turn(turn)
    return ShowView(
        handle.id,
        TurnView.of(found),
        tuple(MessageView.of(m) for m in handle.turn_messages(found.token)),
        tuple(RunEventView.of(e) for e in handle.run_events(found.token)),
    )


def diff(handle: Session, turn: int | str, *, patch: bool = True) -> DiffView:
    """``diff``: a turn's files, the changes made outside it, and its patch (None without
    ``patch``, or when the checkpoints are unavailable)."""
    try:
        found = handle.diff(turn, patch=patch)
    except CheckpointUnavailable:
        found = handle.diff(turn)  # "available": false says so
    return DiffView.of(found)


def rescue_points(handle: Session, turn: int | str | None) -> RescuePointsView:
    """What ``rescue SESSION`` lists: the turn's points to bring files back from."""
    found = handle.rescue_turn(turn)
    return RescuePointsView(
        handle.id,
        TurnView.of(found),
        tuple(ToolPointView.of(p) for p in handle.tool_checkpoints(found.token)),
    )
