"""Records to rows and back, by column name.

Each record the store reads has its columns named once, here, as :class:`Columns`: the names
are the record's field names, each selected from a column of that name or from an expression
that stands for it. A query selects ``COLUMNS.select()`` and a row becomes its record with
``COLUMNS.record(row)``, field by field by name, so a column added, dropped or reordered cannot
shift another into the wrong field. Values the database cannot hold as they are (JSON, enums,
booleans) are converted here too, and both backends read through the same code.
"""

from __future__ import annotations

import enum
import functools
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
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
    Rescue,
    Revert,
    RevertState,
    RunEvent,
    SessionRecord,
    StepCheckpoint,
    ToolCheckpoint,
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


E = TypeVar("E", bound=enum.Enum)


def member(kind: type[E]) -> Callable[[Any], E]:
    """``kind(value)`` for a column read into an enum: a dict lookup first (calling an enum
    class costs a microsecond, a row of a long session's timeline holds two or three), the
    call itself for a value it does not know, so a bad one raises the same ``ValueError``."""
    members = {m.value: m for m in kind}

    def read(value: Any) -> E:
        found = members.get(value)
        return found if found is not None else kind(value)

    return read


class Columns(Generic[R]):
    """The columns of one record, named once. ``columns`` are the names of ``make``'s
    parameters (the record's fields), each read from a column of that name or, written
    ``name=expression``, from an expression; ``convert`` turns a column's value into its
    field's (JSON text, an enum, a flag).

    Each value goes to ``make``'s parameter of its column's name, through a function written
    once from the names, ``lambda row: make(row[3], row[0], …, status=convert(row[5]))``: the
    parameters ``make`` takes in order are matched to their columns by name and passed by
    position (a call by keyword costs four times as much as one by position), the rest by
    keyword, so no column can slip into another's field whatever the order of either."""

    def __init__(
        self,
        make: Callable[..., R],
        *columns: str,
        convert: Mapping[str, Callable[[Any], Any]] | None = None,
        **expressions: str,
    ) -> None:
        self.names = (*columns, *expressions)
        self._expressions = expressions
        convert = convert or {}
        assert set(convert) <= set(self.names), f"conversions of no column: {convert}"
        column = {name: i for i, name in enumerate(self.names)}

        def value(name: str) -> str:
            read = f"row[{column[name]}]"
            return f"convert_{name}({read})" if name in convert else read

        positional: list[str] = []
        for parameter in inspect.signature(make).parameters.values():
            if (
                parameter.kind is not parameter.POSITIONAL_OR_KEYWORD
                or parameter.name not in column
            ):
                break
            positional.append(parameter.name)
        keywords = [name for name in self.names if name not in positional]
        arguments = [value(name) for name in positional]
        arguments += [f"{name}={value(name)}" for name in keywords]
        scope = {"make": make, **{f"convert_{name}": f for name, f in convert.items()}}
        self.record: Callable[[Sequence[Any]], R] = eval(
            f"lambda row: make({', '.join(arguments)})", scope
        )

    def select(self, table: str | None = None) -> str:
        """The select list, in the order of ``names``; its plain columns qualified by
        ``table`` when given."""
        return ", ".join(
            self._expressions.get(name) or (f"{table}.{name}" if table else name)
            for name in self.names
        )

    def records(self, rows: Sequence[Sequence[Any]]) -> list[R]:
        record = self.record
        return [record(row) for row in rows]


def _json_or(fallback: Any) -> Callable[[Any], Any]:
    return lambda text: loads(text, fallback)


def _run_event(
    session_id: str, turn: str, seq: int, kind: str, payload: str, at: float, text: str | None
) -> RunEvent:
    return RunEvent(session_id, turn, seq, kind, whole_event(loads(payload), text), at)


def _message(session_id: str, turn: str, index: int, kind: str, data: str) -> Message:
    try:
        return Message(session_id, turn, index, MessageKind(kind), json.loads(data))
    except (ValueError, TypeError, RecursionError) as error:
        return Message(session_id, turn, index, MessageKind.UNREADABLE, unreadable(data, error))


#: A session's pending requests are rows of their own, read apart (see SessionQueries).
SESSION = Columns(
    functools.partial(SessionRecord, pending_requests=()),
    "id",
    "workspace",
    "title",
    "agent",
    "head",
    "status",
    "created_at",
    "updated_at",
    "agent_state",
    "host",
    "host_fence",
    convert={"agent_state": _json_or({})},
)
TURN = Columns(
    Turn,
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
    convert={"status": member(TurnStatus), "prompt": loads},
)
REVERT = Columns(
    Revert,
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
    convert={
        "files": bool,
        "conversation": bool,
        "keep_user_edits": bool,
        "state": member(RevertState),
    },
)
OWNER = Columns(Owner, "id", "host", "boot_id", "pid", "start_time", "created_at", "lease_expires")
#: An event's columns (from ``turns t JOIN events e ON OF_TURN``).
_EVENT: dict[str, Any] = {
    "turn": "t.token",
    "seq": SEQ,
    "kind": "e.kind",
    "payload": "e.payload",
    "at": "e.at",
}
#: A turn's event as its journal holds it.
JOURNAL_ENTRY = Columns(JournalEntry, **_EVENT, text="e.text")
#: A turn's event read back whole.
RUN_EVENT = Columns(_run_event, session_id="t.session_id", **_EVENT, text="e.text")
STEP_CHECKPOINT = Columns(
    StepCheckpoint,
    "turn",
    "step",
    "checkpoint_id",
    "journal_seq",
    "state",
    "store_path",
    "at",
    convert={"state": lambda text: json.loads(text) if text else None},
)
TOOL_CHECKPOINT = Columns(
    ToolCheckpoint,
    "turn",
    "number",
    "tool",
    "call_id",
    "summary",
    "git_state",
    "at",
    commit="checkpoint",
    convert={"git_state": lambda text: loads(text) if text else None},
)
RESCUE = Columns(
    Rescue,
    "id",
    "session_id",
    "turn",
    "before_tool",
    "paths",
    "source",
    "undo_checkpoint",
    "written",
    "at",
    "undone_at",
    convert={"paths": lambda t: tuple(loads(t, [])), "written": lambda t: tuple(loads(t, []))},
)
ACTIVITY = Columns(
    Activity,
    "id",
    "session_id",
    "turn",
    "level",
    "code",
    "message",
    "data",
    "at",
    convert={"level": member(ActivityLevel), "data": loads},
)
_FILE_CHANGE = ("path", "kind", "additions", "deletions", "old_path")
_FILE_CONVERT: dict[str, Callable[[Any], Any]] = {"kind": member(ChangeKind), "binary": bool}
FILE_CHANGE = Columns(FileChange, *_FILE_CHANGE, convert=_FILE_CONVERT, binary='"binary"')


#: A file change with the turn and scope it belongs to, as ``((turn, scope), change)``.
def _scoped_change(
    turn: str,
    scope: str,
    path: str,
    kind: ChangeKind,
    additions: int,
    deletions: int,
    old_path: str | None,
    binary: bool,
) -> tuple[tuple[str, str], FileChange]:
    return (turn, scope), FileChange(path, kind, additions, deletions, binary, old_path)


SCOPED_FILE_CHANGE = Columns(
    _scoped_change,
    "turn",
    "scope",
    *_FILE_CHANGE,
    convert=_FILE_CONVERT,
    binary='"binary"',  # a keyword, quoted
)
MESSAGE = Columns(_message, "session_id", "turn", "kind", "data", index="idx")
