"""Plain data: the records turnback keeps and returns. No I/O here.

Events are Agent Client Protocol ``session/update`` payloads, stored verbatim as JSON objects
with a ``sessionUpdate`` discriminator. turnback's own kinds use the ACP extension convention
(a leading underscore): ``_turnback/permission_requested`` and so on.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any, TypedDict, Unpack

from turnback.records import record

JSON = dict[str, Any]


class TurnStatus(enum.StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    SET_ASIDE = "set_aside"

    @property
    def ended(self) -> bool:
        """Whether a turn in this status is part of its session's conversation."""
        return self in _ENDED


_ENDED = frozenset(
    {TurnStatus.COMPLETED, TurnStatus.FAILED, TurnStatus.CANCELLED, TurnStatus.INTERRUPTED}
)


class Durability(enum.StrEnum):
    """When a recorded event becomes durable (docs/design.md, invariant 3)."""

    STRICT = "strict"  # every event is synced before record() returns
    BATCHED = "batched"  # buffered and flushed within a window; boundary events wait
    TURN = "turn"  # only the begin and the end of a turn are durable


class ActivityLevel(enum.StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class EventKind(enum.StrEnum):
    """The event kinds turnback knows. Any other ``sessionUpdate`` value is kept verbatim."""

    USER_MESSAGE_CHUNK = "user_message_chunk"
    AGENT_MESSAGE_CHUNK = "agent_message_chunk"
    AGENT_THOUGHT_CHUNK = "agent_thought_chunk"
    TOOL_CALL = "tool_call"
    TOOL_CALL_UPDATE = "tool_call_update"
    PLAN = "plan"
    AVAILABLE_COMMANDS_UPDATE = "available_commands_update"
    CURRENT_MODE_UPDATE = "current_mode_update"
    PERMISSION_REQUESTED = "_turnback/permission_requested"
    PERMISSION_ANSWERED = "_turnback/permission_answered"
    INPUT_REQUESTED = "_turnback/input_requested"
    INPUT_ANSWERED = "_turnback/input_answered"
    STEP_CHECKPOINT = "_turnback/step_checkpoint"
    REWIND = "_turnback/rewind"  # the turn resumes from a step checkpoint; later events are void
    ERROR = "_turnback/error"
    NOTICE = "_turnback/notice"


class MessageKind(enum.StrEnum):
    """One entry of a session's folded conversation."""

    USER = "user"
    AGENT = "agent"
    THOUGHT = "thought"
    TOOL_CALL = "tool_call"
    PLAN = "plan"
    ERROR = "error"
    NOTICE = "notice"
    OTHER = "other"  # an update kind turnback does not fold; replayed as it was
    UNREADABLE = "unreadable"  # a stored row that cannot be read back; data says what it held


#: What a stored JSON value that cannot be read back is shown as: ``{UNREADABLE: the text's
#: first characters, "error": why}`` -- never an exception that hides the rest.
UNREADABLE = "_turnback/unreadable"


#: The key of a stored message's data that lists its runs of text chunks, each as ``[index,
#: first, last]``: the content block at ``index`` is the text of the turn's events ``first`` to
#: ``last`` joined, read back from them (the block is stored as null). The text of a message is
#: so stored once, in its events. Only the store sees this key: it gives messages back whole.
TEXT_RUNS = "_turnback/runs"


def whole_event(event: Any, text: str | None) -> Any:
    """The event a journal entry's parsed ``payload`` and ``text`` hold together: its text put
    back into its content block."""
    if text is not None and isinstance(event, dict):
        content = event.get("content")
        block = content if isinstance(content, dict) else {"type": "text"}
        event["content"] = {**block, "text": text}
    return event


def unreadable(text: object, error: Exception) -> dict[str, Any]:
    return {UNREADABLE: str(text)[:200], "error": f"{type(error).__name__}: {error}"[:200]}


def is_unreadable(value: object) -> bool:
    return isinstance(value, dict) and UNREADABLE in value


@record
class Owner:
    """A process that runs turns: identified by host, boot, pid and process start time."""

    id: str
    host: str
    boot_id: str
    pid: int
    start_time: int
    created_at: float
    lease_expires: float | None = None


@record
class SessionRecord:
    id: str
    workspace: str
    title: str | None
    agent: str | None
    head: str | None  # token of the last committed turn
    status: str
    pending_requests: tuple[JSON, ...]
    created_at: float
    updated_at: float
    agent_state: JSON = field(default_factory=dict)  # the runtime's memory of the agent
    host: str | None = None  # the machine a handoff gave it to (None: never handed off)
    host_fence: str | None = None  # the fencing token of that handoff


@record
class Turn:
    token: str
    session_id: str
    number: int
    parent: str | None
    owner_id: str | None
    status: TurnStatus
    prompt: Any  # a string, or a list of ACP content blocks
    started_at: float
    ended_at: float | None = None
    detail: str | None = None  # why it failed, was cancelled or set aside
    event_count: int = 0
    begin_checkpoint: str | None = None  # workspace commit before the turn ran
    end_checkpoint: str | None = None  # workspace commit when it ended
    reverted_by: int | None = None  # the revert that took it out of the conversation
    fence: str | None = None  # the fencing token of the lease running it (engine/owners.py)
    host: str | None = None  # the machine that holds its workspace checkpoints

    @property
    def in_conversation(self) -> bool:
        """Whether the turn is part of its session's current conversation."""
        return self.status.ended and self.reverted_by is None

    @property
    def prompt_text(self) -> str:
        return prompt_text(self.prompt)


def conversation(turns: Iterable[Turn]) -> list[Turn]:
    """The turns of a session's current conversation, in order: the one way every part of
    turnback counts and numbers them."""
    return sorted((t for t in turns if t.in_conversation), key=lambda t: t.number)


def prompt_text(prompt: Any) -> str:
    """The text of a prompt: a string, or the text blocks of a list of ACP content blocks."""
    if isinstance(prompt, str):
        return prompt
    if is_unreadable(prompt):
        return "[unreadable prompt]"
    if not isinstance(prompt, list):
        return ""
    return "".join(
        block["text"]
        for block in prompt
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


@record(frozen=False)
class JournalEntry:
    """One event of a running (or set-aside) turn, as the journal holds it. Not frozen, unlike
    the other records: one is built for every event a turn records, and a frozen record
    takes five times as long to build; nothing changes one once built."""

    turn: str
    seq: int
    kind: str
    payload: str  # the event, as JSON text; parsed only when folded
    at: float
    #: The text of a plain text chunk, kept apart from ``payload`` (which then holds the event
    #: without it) so that recording never escapes it into JSON, and a run of chunks is read
    #: back by joining a column; None for every other event (see :func:`whole_event`).
    text: str | None = None


@record
class Message:
    """One entry of a session's conversation, folded from a turn's events."""

    session_id: str
    turn: str
    index: int  # position within the turn
    kind: MessageKind
    data: JSON = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The text of a message, tool call title or plan, for people to read."""
        if self.kind is MessageKind.UNREADABLE:
            return "[unreadable message]"
        if self.kind is MessageKind.TOOL_CALL:
            return str(self.data.get("title") or "")
        content = self.data.get("content")
        if isinstance(content, list):
            return "".join(
                block["text"]
                for block in content
                if isinstance(block, dict)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
            )
        if isinstance(content, dict) and content.get("type") == "text":
            return str(content.get("text", ""))
        if isinstance(self.data.get("text"), str):
            return str(self.data["text"])
        return ""

    @property
    def result(self) -> str:
        """What a tool call reported, as text: its text content, the files its diffs change,
        its terminals, else its raw output when that is text (``rawOutput``: a string, or an
        object's ``output``, ``stdout`` and ``stderr``). Empty for other messages."""
        if self.kind is not MessageKind.TOOL_CALL:
            return ""
        said: list[str] = []  # the tool's text
        changed: list[str] = []  # its diffs and terminals
        content = self.data.get("content")
        for item in content if isinstance(content, list) else []:
            if not isinstance(item, dict):
                continue
            block = item.get("content")
            if item.get("type") == "content" and isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    said.append(block["text"])
            elif item.get("type") == "diff":
                changed.append(f"changed {item.get('path', '?')}")
            elif item.get("type") == "terminal":
                changed.append(f"terminal {item.get('terminalId', '?')}")
        if not any(text.strip() for text in said):
            said = _raw_output(self.data.get("rawOutput"))
        return "\n".join(text for text in [*changed, *said] if text.strip())


def _raw_output(raw: Any) -> list[str]:
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, dict):
        return [raw[k] for k in ("output", "stdout", "stderr") if isinstance(raw.get(k), str)]
    return []


@record
class RunEvent:
    """One event of a turn's run timeline: a journal entry as stored, read back whole (of a turn
    that runs or is set aside, what its journal holds so far)."""

    session_id: str
    turn: str
    seq: int
    kind: str
    event: JSON
    at: float


@record
class StepCheckpoint:
    turn: str
    step: int
    checkpoint_id: str
    journal_seq: int  # the journal position it marks
    state: Any = None
    store_path: str | None = None
    at: float = 0.0


@record
class ToolCheckpoint:
    """The workspace as it was just before a tool of a turn ran (a shell command, a write):
    the ``number``-th such checkpoint of the turn. ``commit`` is None when the capture failed;
    ``git_state`` is the repository's refs, stash and reflog, kept before a destructive git
    command."""

    turn: str
    number: int
    tool: str
    call_id: str | None
    summary: str
    commit: str | None
    git_state: Any = None
    at: float = 0.0


@record
class Handoff:
    """A session given to another machine of a fleet: from ``from_host`` (the machine that
    held it, else the one that ran its last turn; None when no turn has run) to ``to_host``,
    under the fencing token ``fence``. The workspace there was brought to the head turn
    (``turn``; 0: the session has none) -- to its checkpoint ``moment``: ``end``, or when its
    machine died during it ``before tool N`` or ``begin`` -- by writing or deleting
    ``written``."""

    session_id: str
    from_host: str | None
    to_host: str
    turn: int
    moment: str
    written: tuple[str, ...]
    fence: str
    at: float


@record
class Rescue:
    """Files brought back as they were before a tool of a turn: ``paths``, from checkpoint
    ``source``; ``undo_checkpoint`` is the workspace captured just before, which ``undo`` puts
    those paths back from."""

    id: int
    session_id: str
    turn: str
    before_tool: int  # 0: the turn's begin
    paths: tuple[str, ...]
    source: str
    undo_checkpoint: str
    written: tuple[str, ...]
    at: float
    undone_at: float | None = None


@record
class Activity:
    id: int
    session_id: str | None
    turn: str | None
    level: ActivityLevel
    code: str  # e.g. "turn.recovered", "checkpoint.capture.failed"
    message: str
    data: JSON
    at: float


@record
class UnrecoveredTurn:
    """A set-aside turn: kept until a person applies or discards it."""

    turn: Turn
    reason: str


@record
class RecoveryReport:
    recovered: tuple[Turn, ...] = ()  # applied as interrupted by this run
    set_aside: tuple[UnrecoveredTurn, ...] = ()  # every set-aside turn, new or old
    live: tuple[Turn, ...] = ()  # running turns whose owner is alive: only read
    reverts: tuple[Revert, ...] = ()  # half-done reverts rolled back, undos finished


@record
class SweepReport:
    step_checkpoints: int = 0
    owners: int = 0

    @property
    def total(self) -> int:
        return self.step_checkpoints + self.owners


# -- workspace checkpoints ------------------------------------------------------------------


class ChangeKind(enum.StrEnum):
    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    RENAMED = "renamed"
    TYPE_CHANGED = "type_changed"


@record
class FileChange:
    """What one turn (or the time between turns) did to one path."""

    path: str
    kind: ChangeKind
    additions: int = 0
    deletions: int = 0
    binary: bool = False
    old_path: str | None = None  # for renames


@record
class WorkspaceCheckpoint:
    """A commit of the workspace's files in turnback's shadow repository."""

    commit: str
    tree: str
    ref: str
    skipped: tuple[str, ...] = ()  # paths left out (too large); restores leave them alone
    seconds: float = 0.0
    watched: bool = False  # a file watcher said what changed; no scan of the workspace
    fallback: str | None = None  # why a watched workspace was scanned after all


class RevertState(enum.StrEnum):
    STARTED = "started"  # the undo checkpoint is captured; files may be moving
    FILES_RESTORED = "files_restored"  # files are at the target; the conversation is not yet
    COMMITTED = "committed"  # files and conversation are rolled back
    ROLLED_BACK = "rolled_back"  # it failed or was interrupted; the files were put back
    UNDOING = "undoing"  # undo_revert() is putting things back
    UNDONE = "undone"  # undo_revert() put everything back as it was


#: Revert states that hold the workspace (the files may be moving) and their owner's row.
UNFINISHED_REVERTS = (RevertState.STARTED, RevertState.FILES_RESTORED, RevertState.UNDOING)


@record
class Revert:
    id: int
    session_id: str
    to_turn: str | None  # None: back to before the first turn
    from_head: str | None
    target: str | None  # the workspace commit the files were restored to
    undo_checkpoint: str | None  # the workspace as it was just before the revert
    files: bool
    conversation: bool
    keep_user_edits: bool
    state: RevertState
    created_at: float
    detail: str | None = None
    ended_at: float | None = None
    owner_id: str | None = None

    @property
    def refused(self) -> bool:
        """Refused before it wrote anything (its hand edits in the way of ``keep_user_edits``):
        it ended rolled back, and nothing changed."""
        return self.state is RevertState.ROLLED_BACK and (self.detail or "").startswith(REFUSED)


#: How the detail of a refused revert begins (see :attr:`Revert.refused`).
REFUSED = "refused, nothing changed: "


@record
class RevertRequest:
    """What a revert (or its plan) is asked to do: rewind to turn ``to_turn`` (0: before the
    first) the files, the conversation or both; ``keep_user_edits`` undoes only the agent's own
    changes to the files."""

    to_turn: int
    files: bool = True
    conversation: bool = True
    keep_user_edits: bool = False

    @classmethod
    def of(cls, target: int | RevertRequest, **options: Unpack[RevertOptions]) -> RevertRequest:
        """``target`` as it is, or a request to rewind to turn ``target`` with ``options``."""
        if isinstance(target, RevertRequest):
            if options:
                raise TypeError("give a RevertRequest or a turn number with options, not both")
            return target
        return cls(target, **options)


class RevertOptions(TypedDict, total=False):
    """A revert's options as keywords (``session.revert(2, keep_user_edits=True)``): the fields
    of :class:`RevertRequest` but its target."""

    files: bool
    conversation: bool
    keep_user_edits: bool


@record
class RevertPlan:
    """What a revert would do to the files, computed while writing nothing.

    Each list holds file changes from the workspace as it is now: ``restore`` the paths written
    back (with the lines added and removed), ``delete`` the paths removed, ``keep`` the paths
    left as they are although they differ from the target (``kept_because`` says why, by path:
    ``ignored``, ``not captured``, ``unreadable`` (a directory), ``pre-existing`` or ``user
    edit``), and ``conflicts`` the hand edits in the way: a plain revert overwrites them,
    ``keep_user_edits`` refuses them."""

    restore: tuple[FileChange, ...] = ()
    delete: tuple[FileChange, ...] = ()
    keep: tuple[FileChange, ...] = ()
    conflicts: tuple[FileChange, ...] = ()
    kept_because: Mapping[str, str] = field(default_factory=dict)


@record
class TurnDiff:
    """What one turn changed in the workspace: checkpoint at its begin to checkpoint at its end."""

    turn: Turn
    files: tuple[FileChange, ...]
    outside: tuple[FileChange, ...]  # changed between the previous turn and this one, by hand
    available: bool  # both checkpoints exist, so the files above are the whole story
    patch: str | None = None  # the unified patch, when asked for


@record
class RangeDiff:
    """What the workspace changed from the end of one turn to the end of a later one (0: before
    the first turn): the agent's turns and the edits made by hand between them, together."""

    from_turn: int
    to_turn: int
    files: tuple[FileChange, ...]
    patch: str | None = None  # the unified patch, when asked for


@record
class GcReport:
    # turns' checkpoints no longer kept (older than ``keep``), and reverts' no longer undoable
    checkpoints_released: int = 0
    refs_removed: int = 0
    bytes_freed: int = 0
    problems: tuple[str, ...] = ()  # workspaces that could not be pruned, and why
    dry_run: bool = False  # what it would do: nothing was released, removed or freed


@record
class HealthCheck:
    """One finding of ``turnback doctor``: what was checked, whether it is healthy (None: it
    was skipped, and ``detail`` says why), what to do (``fix``, in words; ``remedy``, as
    :mod:`turnback.errors` names it, of ``session``)."""

    name: str
    ok: bool | None
    detail: str
    fix: str | None = None
    remedy: str | None = None
    session: str | None = None
