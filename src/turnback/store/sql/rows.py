"""Records to rows and back, by column name.

Each record the store reads has its columns named once, here, as :class:`Columns`: the names
are the record's field names, each selected from a column of that name or from an expression
that stands for it. A query selects ``COLUMNS.select()`` and a row becomes its record with
``COLUMNS.record(row)``, field by field by name, so a column added, dropped or reordered cannot
shift another into the wrong field. Values the database cannot hold as they are (JSON, enums,
booleans) are converted here too, and both backends read through the same code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from turnback import jsontext
from turnback.model import (
    Activity,
    ActivityLevel,
    ChangeKind,
    FileChange,
    JournalEntry,
    Message,
    MessageKind,
    Owner,
    Revert,
    RevertState,
    RunEvent,
    SessionRecord,
    StepCheckpoint,
    Turn,
    TurnStatus,
    unreadable,
    whole_event,
)

R = TypeVar("R")

#: An event's key is one integer: its turn's ``id`` times 2**32 plus its seq (schema 6), so the
#: events of turn ``t`` are one range of the primary key (``OF_TURN``), each at its seq.
SPAN = 4294967296
OF_TURN = f"e.id BETWEEN t.id * {SPAN} AND t.id * {SPAN} + {SPAN - 1}"
SEQ = f"(e.id - t.id * {SPAN})"


def dumps(value: Any) -> str:
    return jsontext.dumps(value)  # unpaired surrogates escaped: both stores keep UTF-8


def loads(text: Any, fallback: Any = None) -> Any:
    """A stored JSON value; one that cannot be read back is shown as unreadable (or as
    ``fallback``, for the store's own bookkeeping), never raised: one damaged row must not
    hide a session's others."""
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError) as error:
        return unreadable(text, error) if fallback is None else fallback


def readable(value: str | None) -> str | None:
    """A sentence for people (a detail, a title, an activity): one that quotes an agent's
    unpaired surrogate keeps a replacement character in its place."""
    return jsontext.readable(value) if value is not None else None


def marks(values: Sequence[object]) -> str:
    return ", ".join("?" for _ in values)


class Columns(Generic[R]):
    """The columns of one record, named once. ``columns`` are the record's field names, each
    a column of that name or, written ``name=expression``, an expression read as it;
    ``build`` makes the record from the fields by name."""

    def __init__(
        self, build: Callable[[dict[str, Any]], R], *columns: str, **expressions: str
    ) -> None:
        self.build = build
        self.names = (*columns, *expressions)
        self._expressions = expressions

    def select(self, table: str | None = None) -> str:
        """The select list, in the order of ``names``; its plain columns qualified by
        ``table`` when given."""
        return ", ".join(
            self._expressions.get(name) or (f"{table}.{name}" if table else name)
            for name in self.names
        )

    def record(self, row: Sequence[Any]) -> R:
        return self.build(dict(zip(self.names, row, strict=True)))

    def records(self, rows: Sequence[Sequence[Any]]) -> list[R]:
        return [self.record(row) for row in rows]


def _session(f: dict[str, Any]) -> SessionRecord:
    # its pending requests are rows of their own, read apart (see SessionQueries)
    return SessionRecord(**f | {"pending_requests": (), "agent_state": loads(f["agent_state"], {})})


def _turn(f: dict[str, Any]) -> Turn:
    return Turn(**f | {"status": TurnStatus(f["status"]), "prompt": loads(f["prompt"])})


def _revert(f: dict[str, Any]) -> Revert:
    flags = {flag: bool(f[flag]) for flag in ("files", "conversation", "keep_user_edits")}
    return Revert(**f | flags | {"state": RevertState(f["state"])})


def _run_event(f: dict[str, Any]) -> RunEvent:
    event = whole_event(loads(f.pop("payload")), f.pop("text"))
    return RunEvent(**f, event=event)


def _step(f: dict[str, Any]) -> StepCheckpoint:
    return StepCheckpoint(**f | {"state": json.loads(f["state"]) if f["state"] else None})


def _activity(f: dict[str, Any]) -> Activity:
    return Activity(**f | {"level": ActivityLevel(f["level"]), "data": loads(f["data"])})


def _file_change(f: dict[str, Any]) -> FileChange:
    return FileChange(**f | {"kind": ChangeKind(f["kind"]), "binary": bool(f["binary"])})


def _message(f: dict[str, Any]) -> Message:
    try:
        return Message(**f | {"kind": MessageKind(f["kind"]), "data": json.loads(f["data"])})
    except (ValueError, TypeError, RecursionError) as error:
        return Message(**f | {"kind": MessageKind.UNREADABLE, "data": unreadable(f["data"], error)})


SESSION = Columns(
    _session,
    "id",
    "workspace",
    "title",
    "agent",
    "head",
    "status",
    "created_at",
    "updated_at",
    "agent_state",
)
TURN = Columns(
    _turn,
    "token",
    "session_id",
    "number",
    "parent",
    "owner_id",
    "status",
    "prompt",
    "started_at",
    "ended_at",
    "detail",
    "event_count",
    "begin_checkpoint",
    "end_checkpoint",
    "reverted_by",
    "fence",
    "host",
)
REVERT = Columns(
    _revert,
    "id",
    "session_id",
    "to_turn",
    "from_head",
    "target",
    "undo_checkpoint",
    "files",
    "conversation",
    "keep_user_edits",
    "state",
    "created_at",
    "detail",
    "ended_at",
    "owner_id",
)
OWNER = Columns(
    lambda f: Owner(**f),
    "id",
    "host",
    "boot_id",
    "pid",
    "start_time",
    "created_at",
    "lease_expires",
)
#: An event's columns (from ``turns t JOIN events e ON OF_TURN``).
_EVENT = {"turn": "t.token", "seq": SEQ, "kind": "e.kind", "payload": "e.payload", "at": "e.at"}
#: A turn's event as its journal holds it.
JOURNAL_ENTRY = Columns(lambda f: JournalEntry(**f), **_EVENT, text="e.text")
#: A turn's event read back whole.
RUN_EVENT = Columns(_run_event, session_id="t.session_id", **_EVENT, text="e.text")
STEP_CHECKPOINT = Columns(
    _step, "turn", "step", "checkpoint_id", "journal_seq", "state", "store_path", "at"
)
ACTIVITY = Columns(_activity, "id", "session_id", "turn", "level", "code", "message", "data", "at")
_FILE_CHANGE = ("path", "kind", "additions", "deletions", "old_path")
FILE_CHANGE = Columns(_file_change, *_FILE_CHANGE, binary='"binary"')  # a keyword, quoted
#: A file change with the turn and scope it belongs to, as ``((turn, scope), change)``.
SCOPED_FILE_CHANGE = Columns(
    lambda f: ((f.pop("turn"), f.pop("scope")), _file_change(f)),
    "turn",
    "scope",
    *_FILE_CHANGE,
    binary='"binary"',
)
MESSAGE = Columns(_message, "session_id", "turn", "kind", "data", index="idx")
