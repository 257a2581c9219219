"""The queries both backends share, written once.

:class:`SQLTx` holds every query of the :class:`~turnback.store.Tx` protocol in the SQL that SQLite
and PostgreSQL both speak, with ``?`` placeholders; a backend subclasses it and fills in the few
dialect hooks: how a statement is run (PostgreSQL rewrites ``?`` to ``%s``), the database's clock,
how a session is locked, and the integrity check. Each backend's module keeps only what is its
own: opening, transactions, migrations and the classification of its errors.

The concurrency contract (what the engine needs from ``Store.atomic()``, and both backends give):

* **One writer per session.** A write transaction that changes a session or its turns calls
  :meth:`SQLTx.lock_sessions` first; from then on, until it commits, no other transaction of any
  process changes that session, its turns, their events or step checkpoints, so a
  read-then-write (the running-turn check of a begin, the pending requests of a session, the
  re-read of a turn before it is committed or recovered) cannot be overtaken. SQLite gives this
  to every write transaction at once (``BEGIN IMMEDIATE``: one writer for the whole file);
  PostgreSQL by ``SELECT … FOR UPDATE`` on the session rows, in id order so two transactions
  that lock several sessions cannot deadlock. A transaction takes all its session locks in one
  statement: a begin and a revert lock every session of their workspace
  (:meth:`SQLTx.lock_workspace`), since a revert holds the workspace against new turns.
* **Reads are a snapshot.** ``Store.read()`` sees one committed state and writes nothing.
* **Constraints back the rules.** One running turn per session is also a unique index, so a
  writer that forgot the lock fails instead of breaking invariant 8.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Protocol

from turnback import jsontext
from turnback.errors import StoreError
from turnback.model import (
    TEXT_RUNS,
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


def _dumps(value: Any) -> str:
    return jsontext.dumps(value)  # unpaired surrogates escaped: both stores keep UTF-8


def _loads(text: Any, fallback: Any = None) -> Any:
    """A stored JSON value; one that cannot be read back is shown as unreadable (or as
    ``fallback``, for the store's own bookkeeping), never raised: one damaged row must not
    hide a session's others."""
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError) as error:
        return unreadable(text, error) if fallback is None else fallback


def _text(value: str | None) -> str | None:
    """A sentence for people (a detail, a title, an activity): one that quotes an agent's
    unpaired surrogate keeps a replacement character in its place."""
    return jsontext.readable(value) if value is not None else None


_ENDED = tuple(status.value for status in TurnStatus if status.ended)
#: A turn's events are its journal while it runs or is set aside, its run timeline once ended.
_KEEPS_JOURNAL = (TurnStatus.RUNNING.value, TurnStatus.SET_ASIDE.value)
#: An event's key is one integer: its turn's ``id`` times 2**32 plus its seq (schema 6), so the
#: events of turn ``t`` are one range of the primary key (``_OF_TURN``), each at its seq.
SPAN = 4294967296
_OF_TURN = f"e.id BETWEEN t.id * {SPAN} AND t.id * {SPAN} + {SPAN - 1}"
_SEQ = f"(e.id - t.id * {SPAN})"
_CHUNK_KINDS = ("user_message_chunk", "agent_message_chunk", "agent_thought_chunk")
_KEEPS_STEPS = (*_KEEPS_JOURNAL, TurnStatus.INTERRUPTED.value)


class Cursor(Protocol):
    """The part of a DB-API cursor the queries use (sqlite3's and psycopg's both have it)."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


def _session(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(
        id=row[0],
        workspace=row[1],
        title=row[2],
        agent=row[3],
        head=row[4],
        status=row[5],
        pending_requests=tuple(_loads(row[6], [])),
        created_at=row[7],
        updated_at=row[8],
        agent_state=_loads(row[9], {}),
    )


_SESSION_COLUMNS = (
    "id, workspace, title, agent, head, status, pending_requests, created_at, updated_at, "
    "agent_state"
)
#: The columns of a turn's and a revert's rows, named once: each is the record's field of the
#: same name, so a row maps onto its record by name, not by position.
_TURN_FIELDS = (
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
_TURN_COLUMNS = ", ".join(_TURN_FIELDS)
_OWNER_COLUMNS = "id, host, boot_id, pid, start_time, created_at, lease_expires"
_REVERT_FIELDS = (
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
_REVERT_COLUMNS = ", ".join(_REVERT_FIELDS)


def _turn(row: tuple[Any, ...]) -> Turn:
    fields = dict(zip(_TURN_FIELDS, row, strict=True))
    fields["status"] = TurnStatus(fields["status"])
    fields["prompt"] = _loads(fields["prompt"])
    return Turn(**fields)


def _revert(row: tuple[Any, ...]) -> Revert:
    fields = dict(zip(_REVERT_FIELDS, row, strict=True))
    for flag in ("files", "conversation", "keep_user_edits"):
        fields[flag] = bool(fields[flag])
    fields["state"] = RevertState(fields["state"])
    return Revert(**fields)


def _owner(row: tuple[Any, ...]) -> Owner:
    return Owner(
        id=row[0],
        host=row[1],
        boot_id=row[2],
        pid=row[3],
        start_time=row[4],
        created_at=row[5],
        lease_expires=row[6],
    )


class SQLTx:
    """The operations of a transaction. A backend fills in the dialect hooks below."""

    # -- dialect hooks -------------------------------------------------------------------------

    #: what makes a SELECT take row locks ("" where every write transaction holds them all)
    _FOR_UPDATE = ""
    #: the ``id`` a new turn takes (the database numbers them; none is reused while its
    #: events exist, since a turn's events go with it)
    _NEW_TURN_ID = "(SELECT coalesce(max(id), 0) + 1 FROM turns)"

    def _run(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Execute one statement with ``?`` placeholders."""
        raise NotImplementedError

    def _run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def now(self) -> float:
        """The database's clock, in seconds since the epoch: leases are judged by it alone, so
        machines whose clocks disagree still agree on who holds a lease."""
        raise NotImplementedError

    def integrity_problems(self) -> list[str]:
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------

    def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._run(sql, params).fetchone()
        return row

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._run(sql, params).fetchall())

    def lock_sessions(self, session_ids: Sequence[str]) -> None:
        """Hold these sessions against every other writer until this transaction ends (the
        contract above)."""
        if self._FOR_UPDATE and session_ids:
            ids = sorted(set(session_ids))
            self._run(
                f"SELECT id FROM sessions WHERE id IN ({_marks(ids)}) ORDER BY id"
                + self._FOR_UPDATE,
                ids,
            )

    def lock_workspace(self, session_id: str) -> None:
        """:meth:`lock_sessions` for every session on the workspace of ``session_id`` (itself
        included): what a begin and a revert take, since a revert holds its whole workspace
        against new turns."""
        if self._FOR_UPDATE:
            self._run(
                "SELECT id FROM sessions WHERE workspace = "
                "(SELECT workspace FROM sessions WHERE id = ?) ORDER BY id" + self._FOR_UPDATE,
                (session_id,),
            )

    def lock_turns(self, tokens: Sequence[str]) -> dict[str, tuple[TurnStatus, str | None]]:
        """:meth:`lock_sessions` for the sessions of these turns, in the same statement that
        reads each turn's (status, fencing token)."""
        return {row[0]: (TurnStatus(row[1]), row[2]) for row in self._locked_turns(tokens)}

    def _locked_turns(self, tokens: Sequence[str]) -> list[tuple[Any, ...]]:
        """:meth:`lock_turns`' statement: each turn's token, status, fencing token and number."""
        if not tokens:
            return []
        return self._all(
            "SELECT t.token, t.status, t.fence, t.id FROM turns t "
            "JOIN sessions s ON s.id = t.session_id "
            f"WHERE t.token IN ({_marks(tokens)}) ORDER BY s.id"
            + (f"{self._FOR_UPDATE} OF s" if self._FOR_UPDATE else ""),
            tuple(tokens),
        )

    def renew_lease(self, owner_id: str, seconds: float) -> float | None:
        """Extend an owner's lease to ``seconds`` from now (database time); the new expiry, or
        None when the owner's row is gone."""
        expires = self.now() + seconds
        cursor = self._run("UPDATE owners SET lease_expires = ? WHERE id = ?", (expires, owner_id))
        return expires if cursor.rowcount == 1 else None

    # sessions

    def insert_session(self, session: SessionRecord) -> None:
        self._run(
            f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES ({_marks(range(10))})",
            (
                session.id,
                session.workspace,
                _text(session.title),
                session.agent,
                session.head,
                session.status,
                _dumps(list(session.pending_requests)),
                session.created_at,
                session.updated_at,
                _dumps(session.agent_state),
            ),
        )

    def get_session(self, session_id: str) -> SessionRecord | None:
        row = self._one(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        return _session(row) if row else None

    def find_sessions(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        rows = self._all(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE substr(id, 1, ?) = ? "
            "ORDER BY created_at LIMIT ?",
            (len(prefix), prefix, limit),
        )
        return [_session(row) for row in rows]

    def list_sessions(self) -> list[SessionRecord]:
        rows = self._all(f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY updated_at DESC")
        return [_session(row) for row in rows]

    def delete_session(self, session_id: str) -> None:
        ids = self._all("SELECT id FROM turns WHERE session_id = ?", (session_id,))
        self._delete_events([row[0] for row in ids])
        self._run("DELETE FROM sessions WHERE id = ?", (session_id,))  # other rows cascade

    def _delete_events(self, turn_ids: Sequence[int | None]) -> None:
        """Remove the events of these turns: keyed by number, not by a reference to their
        turn, they do not go by cascade."""
        self._run_many(
            "DELETE FROM events WHERE id BETWEEN ? AND ?",
            [(i * SPAN, i * SPAN + SPAN - 1) for i in turn_ids if i is not None],
        )

    def set_head(self, session_id: str, head: str | None, now: float) -> None:
        self._run(
            "UPDATE sessions SET head = ?, updated_at = ? WHERE id = ?", (head, now, session_id)
        )

    def set_agent_state(self, session_id: str, state: dict[str, object], now: float) -> None:
        self._run(
            "UPDATE sessions SET agent_state = ?, updated_at = ? WHERE id = ?",
            (_dumps(state), now, session_id),
        )

    def set_pending_requests(
        self, session_id: str, requests: Sequence[dict[str, object]], now: float
    ) -> None:
        self._run(
            "UPDATE sessions SET pending_requests = ?, updated_at = ? WHERE id = ?",
            (_dumps(list(requests)), now, session_id),
        )

    # turns

    def insert_turn(self, turn: Turn) -> None:
        values = {field: getattr(turn, field) for field in _TURN_FIELDS}
        values.update(status=turn.status.value, prompt=_dumps(turn.prompt))
        self._run(
            f"INSERT INTO turns ({_TURN_COLUMNS}, id) "
            f"VALUES ({_marks(_TURN_FIELDS)}, {self._NEW_TURN_ID})",
            [values[field] for field in _TURN_FIELDS],
        )

    def get_turn(self, token: str) -> Turn | None:
        row = self._one(f"SELECT {_TURN_COLUMNS} FROM turns WHERE token = ?", (token,))
        return _turn(row) if row else None

    def running_turn(self, session_id: str) -> Turn | None:
        row = self._one(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE session_id = ? AND status = 'running'",
            (session_id,),
        )
        return _turn(row) if row else None

    def turns_with_status(self, status: TurnStatus) -> list[Turn]:
        rows = self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE status = ? ORDER BY started_at",
            (status.value,),
        )
        return [_turn(row) for row in rows]

    def session_turns(self, session_id: str) -> list[Turn]:
        rows = self._all(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE session_id = ? ORDER BY started_at, number",
            (session_id,),
        )
        return [_turn(row) for row in rows]

    def conversation_overview(self) -> dict[str, tuple[int, Any]]:
        rows = self._all(
            "SELECT session_id, turns, prompt FROM (SELECT session_id, prompt, "
            "count(*) OVER (PARTITION BY session_id) AS turns, "
            "row_number() OVER (PARTITION BY session_id ORDER BY number) AS position "
            f"FROM turns WHERE status IN ({_marks(_ENDED)}) AND reverted_by IS NULL) AS ranked "
            "WHERE position = 1",
            _ENDED,
        )
        return {row[0]: (int(row[1]), _loads(row[2])) for row in rows}

    def end_turn(
        self,
        token: str,
        status: TurnStatus,
        ended_at: float,
        detail: str | None,
        event_count: int,
        *,
        expected: TurnStatus,
    ) -> bool:
        cursor = self._run(
            "UPDATE turns SET status = ?, ended_at = ?, detail = ?, event_count = ? "
            "WHERE token = ? AND status = ?",
            (status.value, ended_at, _text(detail), event_count, token, expected.value),
        )
        return cursor.rowcount == 1

    def reopen_turn(self, token: str, owner_id: str, fence: str) -> bool:
        cursor = self._run(
            "UPDATE turns SET status = ?, owner_id = ?, fence = ?, ended_at = NULL, detail = NULL, "
            "event_count = 0, end_checkpoint = NULL WHERE token = ? AND status = ?",
            (TurnStatus.RUNNING.value, owner_id, fence, token, TurnStatus.INTERRUPTED.value),
        )
        if cursor.rowcount != 1:
            return False
        self._run("DELETE FROM messages WHERE turn = ?", (token,))
        self._run("DELETE FROM file_changes WHERE turn = ? AND scope = 'turn'", (token,))
        return True

    def reposition_turn(self, token: str, number: int, parent: str | None) -> None:
        self._run(
            "UPDATE turns SET number = ?, parent = ? WHERE token = ?", (number, parent, token)
        )

    def delete_turn(self, token: str) -> None:
        row = self._one("SELECT id FROM turns WHERE token = ?", (token,))
        self._delete_events([row[0]] if row else [])
        self._run("DELETE FROM turns WHERE token = ?", (token,))

    # a turn's events: its journal while it runs or is set aside, its run timeline once ended

    def append_journal(self, entries: Sequence[JournalEntry]) -> int:
        if not entries:
            return 0
        ordered = sorted({e.turn for e in entries})
        ids = dict(  # the turns' numbers, and which of them still run
            self._all(
                f"SELECT token, id FROM turns WHERE status = ? AND token IN ({_marks(ordered)})",
                (TurnStatus.RUNNING.value, *ordered),
            )
        )
        return self._insert_events(entries, ids)

    def _insert_events(self, entries: Sequence[JournalEntry], ids: Mapping[str, int]) -> int:
        """Write the entries of the turns numbered in ``ids``; how many others were dropped."""
        kept = [
            (ids[e.turn] * SPAN + e.seq, e.kind, e.payload, e.at, e.text)
            for e in entries
            if e.turn in ids
        ]
        if kept:
            self._run_many(
                "INSERT INTO events (id, kind, payload, at, text) VALUES (?, ?, ?, ?, ?)", kept
            )
        return len(entries) - len(kept)

    def append_fenced(
        self, entries: Sequence[JournalEntry], fences: Mapping[str, str | None]
    ) -> dict[str, tuple[TurnStatus, str | None]]:
        """Under the locks of the entries' sessions: write the entries of each turn that runs
        under its fencing token in ``fences`` (a turn absent from it, or with None there: that
        runs at all); return each turn's (status, fencing token) as found under the locks."""
        states: dict[str, tuple[TurnStatus, str | None]] = {}
        ids: dict[str, int] = {}  # the numbers of the turns written to
        for token, status, fence, number in self._locked_turns(sorted({e.turn for e in entries})):
            states[token] = (TurnStatus(status), fence)
            if status == TurnStatus.RUNNING.value and fences.get(token) in (None, fence):
                ids[token] = number
        self._insert_events(entries, ids)
        return states

    def journal(self, token: str) -> list[JournalEntry]:
        rows = self._all(
            f"SELECT t.token, {_SEQ}, e.kind, e.payload, e.at, e.text FROM turns t JOIN events e "
            f"ON {_OF_TURN} WHERE t.token = ? AND t.status IN (?, ?) ORDER BY e.id",
            (token, *_KEEPS_JOURNAL),
        )
        return [JournalEntry(*row) for row in rows]

    def journal_size(self, token: str) -> tuple[int, int]:
        row = self._one(
            f"SELECT count(*), coalesce(max({_SEQ}), 0) FROM turns t JOIN events e "
            f"ON {_OF_TURN} WHERE t.token = ? AND t.status IN (?, ?)",
            (token, *_KEEPS_JOURNAL),
        )
        assert row is not None
        return int(row[0]), int(row[1])

    # committed conversation

    def insert_messages(self, messages: Sequence[Message]) -> None:
        self._run_many(
            "INSERT INTO messages (session_id, turn, idx, kind, data) VALUES (?, ?, ?, ?, ?)",
            [(m.session_id, m.turn, m.index, m.kind.value, _dumps(m.data)) for m in messages],
        )

    def messages(self, session_id: str) -> list[Message]:
        conversation = (
            f"t.session_id = ? AND t.status IN ({_marks(_ENDED)}) AND t.reverted_by IS NULL"
        )
        rows = self._all(
            "SELECT m.session_id, m.turn, m.idx, m.kind, m.data FROM messages m "
            f"JOIN turns t ON t.token = m.turn WHERE {conversation} "
            "ORDER BY t.number, t.started_at, m.idx",
            (session_id, *_ENDED),
        )
        return self._with_text(rows, conversation, (session_id, *_ENDED))

    def turn_messages(self, token: str) -> list[Message]:
        rows = self._all(
            "SELECT session_id, turn, idx, kind, data FROM messages WHERE turn = ? ORDER BY idx",
            (token,),
        )
        return self._with_text(rows, "t.token = ?", (token,))

    def _with_text(
        self, rows: list[tuple[Any, ...]], turns: str, params: Sequence[Any]
    ) -> list[Message]:
        """Messages from their rows, each run of text chunks (``TEXT_RUNS``) read back from the
        events it joins (of the turns ``turns`` selects): the database joins the text column of
        each run, so a run of a thousand chunks comes back as one string, not a thousand rows."""
        messages = [_message(row) for row in rows]
        if not any(TEXT_RUNS in m.data for m in messages):
            return messages
        numbers = dict(self._all(f"SELECT t.token, t.id FROM turns t WHERE {turns}", params))
        spans: set[tuple[int, int]] = set()
        for m in messages:
            base = (numbers.get(m.turn) or 0) * SPAN
            for run in m.data.get(TEXT_RUNS) or ():
                if isinstance(run, list) and len(run) == 3 and all(type(n) is int for n in run):
                    spans.add((base + run[1], base + run[2]))
        joined = self._joined_texts(sorted(spans)) if spans else {}

        def text_of(base: int) -> Callable[[int, int], str]:
            return lambda first, last: self._run_text(joined, base, first, last)

        return [
            _joined(m, text_of((numbers.get(m.turn) or 0) * SPAN)) if TEXT_RUNS in m.data else m
            for m in messages
        ]

    def _joined_texts(self, spans: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
        """For each range of event keys whose every event has its text apart (``text`` not
        null), the texts joined in key order. A backend's own aggregate."""
        raise NotImplementedError

    def _run_text(
        self, joined: Mapping[tuple[int, int], str], base: int, first: int, last: int
    ) -> str:
        """The text of the events ``first`` to ``last`` of a turn (keys from ``base``): joined by
        the database, or else (an event written before schema 7, or whose text stayed in its
        payload) read event by event; ValueError naming the first that is missing or damaged."""
        text = joined.get((base + first, base + last))
        if text is not None:
            return text
        if not 0 <= last - first < SPAN:
            raise ValueError(f"a run of text chunks from {first} to {last} is not one")
        rows = self._all(
            "SELECT id, payload, text FROM events "
            f"WHERE id BETWEEN ? AND ? AND kind IN ({_marks(_CHUNK_KINDS)})",
            (base + first, base + last, *_CHUNK_KINDS),
        )
        texts = {key: apart if apart is not None else _chunk_text(p) for key, p, apart in rows}
        parts = [texts.get(base + seq) for seq in range(first, last + 1)]
        if None in parts:
            seq = first + parts.index(None)
            raise ValueError(f"event {seq} of its turn, a text chunk, is missing or damaged")
        return "".join(parts)  # type: ignore[arg-type]

    def insert_run_events(self, events: Sequence[RunEvent]) -> None:
        self._run_many(
            f"INSERT INTO events (id, kind, payload, at) SELECT id * {SPAN} + ?, ?, ?, ? "
            "FROM turns WHERE token = ?",
            [(e.seq, e.kind, _dumps(e.event), e.at, e.turn) for e in events],
        )

    def replace_run_events(self, events: Sequence[RunEvent]) -> None:
        self._run_many(
            "UPDATE events SET kind = ?, payload = ? "
            f"WHERE id = (SELECT id * {SPAN} + ? FROM turns WHERE token = ?)",
            [(e.kind, _dumps(e.event), e.seq, e.turn) for e in events],
        )

    def run_events(self, token: str) -> list[RunEvent]:
        rows = self._all(
            f"SELECT t.session_id, t.token, {_SEQ}, e.kind, e.payload, e.at, e.text "
            f"FROM turns t JOIN events e ON {_OF_TURN} WHERE t.token = ? ORDER BY e.id",
            (token,),
        )
        return [
            RunEvent(r[0], r[1], r[2], r[3], whole_event(_loads(r[4]), r[6]), r[5]) for r in rows
        ]

    # step checkpoints

    def insert_step_checkpoint(self, checkpoint: StepCheckpoint) -> None:
        self._run(
            "INSERT INTO step_checkpoints "
            "(turn, step, checkpoint_id, journal_seq, state, store_path, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                checkpoint.turn,
                checkpoint.step,
                checkpoint.checkpoint_id,
                checkpoint.journal_seq,
                _dumps(checkpoint.state),
                checkpoint.store_path,
                checkpoint.at,
            ),
        )

    def step_checkpoints(self, token: str) -> list[StepCheckpoint]:
        rows = self._all(
            "SELECT turn, step, checkpoint_id, journal_seq, state, store_path, at "
            "FROM step_checkpoints WHERE turn = ? ORDER BY journal_seq",
            (token,),
        )
        return [
            StepCheckpoint(r[0], r[1], r[2], r[3], json.loads(r[4]) if r[4] else None, r[5], r[6])
            for r in rows
        ]

    def delete_step_checkpoints(self, token: str, after_seq: int = -1) -> int:
        return self._run(
            "DELETE FROM step_checkpoints WHERE turn = ? AND journal_seq > ?", (token, after_seq)
        ).rowcount

    def delete_orphan_step_checkpoints(self) -> int:
        return self._run(
            "DELETE FROM step_checkpoints WHERE turn NOT IN "
            f"(SELECT token FROM turns WHERE status IN ({_marks(_KEEPS_STEPS)}))",
            _KEEPS_STEPS,
        ).rowcount

    # activities

    def insert_activity(
        self,
        session_id: str | None,
        turn: str | None,
        level: ActivityLevel,
        code: str,
        message: str,
        data: dict[str, object],
        at: float,
    ) -> int:
        row = self._one(
            "INSERT INTO activities (session_id, turn, level, code, message, data, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (session_id, turn, level.value, code, _text(message), _dumps(data), at),
        )
        assert row is not None
        return int(row[0])

    def activities(self, session_id: str | None, limit: int = 1000) -> list[Activity]:
        where, params = ("WHERE session_id = ?", (session_id,)) if session_id else ("", ())
        rows = self._all(
            "SELECT id, session_id, turn, level, code, message, data, at FROM activities "
            f"{where} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [
            Activity(r[0], r[1], r[2], ActivityLevel(r[3]), r[4], r[5], _loads(r[6]), r[7])
            for r in reversed(rows)
        ]

    # owners

    def upsert_owner(self, owner: Owner) -> None:
        self._run(
            f"INSERT INTO owners ({_OWNER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET "
            # an owner recorded without a lease (by a revert, say) keeps the lease it holds
            "lease_expires = coalesce(excluded.lease_expires, owners.lease_expires)",
            (
                owner.id,
                owner.host,
                owner.boot_id,
                owner.pid,
                owner.start_time,
                owner.created_at,
                owner.lease_expires,
            ),
        )

    def get_owner(self, owner_id: str) -> Owner | None:
        row = self._one(f"SELECT {_OWNER_COLUMNS} FROM owners WHERE id = ?", (owner_id,))
        return _owner(row) if row else None

    def unreferenced_owners(self) -> list[Owner]:
        rows = self._all(
            f"SELECT {_OWNER_COLUMNS} FROM owners WHERE id NOT IN "
            "(SELECT owner_id FROM turns WHERE status = 'running' AND owner_id IS NOT NULL)"
        )
        return [_owner(row) for row in rows]

    def delete_owner(self, owner_id: str, *, lease: float | None = None) -> bool:
        if lease is None:
            return self._run("DELETE FROM owners WHERE id = ?", (owner_id,)).rowcount == 1
        cursor = self._run(
            "DELETE FROM owners WHERE id = ? AND lease_expires = ?", (owner_id, lease)
        )
        return cursor.rowcount == 1

    # workspace checkpoints and file changes

    def release_checkpoints(self, tokens: Sequence[str]) -> None:
        self._run_many(
            "UPDATE turns SET begin_checkpoint = NULL, end_checkpoint = NULL WHERE token = ?",
            [(t,) for t in tokens],
        )

    def release_revert_checkpoints(self, revert_ids: Sequence[int]) -> None:
        self._run_many(
            "UPDATE reverts SET target = NULL, undo_checkpoint = NULL WHERE id = ?",
            [(i,) for i in revert_ids],
        )

    def set_checkpoint(self, token: str, which: str, commit: str | None) -> None:
        column = {"begin": "begin_checkpoint", "end": "end_checkpoint"}[which]
        self._run(f"UPDATE turns SET {column} = ? WHERE token = ?", (commit, token))

    def insert_file_changes(self, token: str, scope: str, changes: Sequence[FileChange]) -> None:
        self._run_many(
            "INSERT INTO file_changes "
            '(turn, scope, path, kind, additions, deletions, "binary", old_path) '
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (turn, scope, path) DO UPDATE SET "
            "kind = excluded.kind, additions = excluded.additions, deletions = excluded.deletions, "
            '"binary" = excluded."binary", old_path = excluded.old_path',
            [
                (
                    token,
                    scope,
                    c.path,
                    c.kind.value,
                    c.additions,
                    c.deletions,
                    int(c.binary),
                    c.old_path,
                )
                for c in changes
            ],
        )

    def file_changes(self, token: str, scope: str) -> list[FileChange]:
        rows = self._all(
            'SELECT path, kind, additions, deletions, "binary", old_path FROM file_changes '
            "WHERE turn = ? AND scope = ? ORDER BY path",
            (token, scope),
        )
        return [FileChange(r[0], ChangeKind(r[1]), r[2], r[3], bool(r[4]), r[5]) for r in rows]

    def session_file_changes(self, session_id: str) -> dict[tuple[str, str], list[FileChange]]:
        rows = self._all(
            'SELECT f.turn, f.scope, f.path, f.kind, f.additions, f.deletions, f."binary", '
            "f.old_path FROM file_changes f JOIN turns t ON t.token = f.turn "
            "WHERE t.session_id = ? ORDER BY f.turn, f.scope, f.path",
            (session_id,),
        )
        found: dict[tuple[str, str], list[FileChange]] = {}
        for r in rows:
            change = FileChange(r[2], ChangeKind(r[3]), r[4], r[5], bool(r[6]), r[7])
            found.setdefault((r[0], r[1]), []).append(change)
        return found

    def checkpoint_commits(self) -> set[str]:
        rows = self._all(
            "SELECT begin_checkpoint FROM turns UNION SELECT end_checkpoint FROM turns "
            "UNION SELECT target FROM reverts UNION SELECT undo_checkpoint FROM reverts"
        )
        return {row[0] for row in rows if row[0]}

    # reverts

    def insert_revert(self, revert: Revert) -> int:
        fields = _REVERT_FIELDS[1:]  # the database numbers reverts
        values = {field: getattr(revert, field) for field in fields}
        values.update(
            files=int(revert.files),
            conversation=int(revert.conversation),
            keep_user_edits=int(revert.keep_user_edits),
            state=revert.state.value,
        )
        row = self._one(
            f"INSERT INTO reverts ({', '.join(fields)}) VALUES ({_marks(fields)}) RETURNING id",
            [values[field] for field in fields],
        )
        assert row is not None
        return int(row[0])

    def get_revert(self, revert_id: int) -> Revert | None:
        row = self._one(f"SELECT {_REVERT_COLUMNS} FROM reverts WHERE id = ?", (revert_id,))
        return _revert(row) if row else None

    def reverts(self, session_id: str | None, states: Sequence[RevertState] = ()) -> list[Revert]:
        clauses, params = [], []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if states:
            clauses.append(f"state IN ({_marks([s.value for s in states])})")
            params += [s.value for s in states]
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._all(f"SELECT {_REVERT_COLUMNS} FROM reverts {where} ORDER BY id", params)
        return [_revert(row) for row in rows]

    def set_revert_state(
        self,
        revert_id: int,
        state: RevertState,
        now: float,
        detail: str | None = None,
        owner_id: str | None = None,
    ) -> None:
        self._run(
            "UPDATE reverts SET state = ?, ended_at = ?, detail = coalesce(?, detail), "
            "owner_id = coalesce(?, owner_id) WHERE id = ?",
            (state.value, now, detail, owner_id, revert_id),
        )

    def mark_reverted(self, tokens: Sequence[str], revert_id: int | None) -> None:
        self._run_many(
            "UPDATE turns SET reverted_by = ? WHERE token = ?", [(revert_id, t) for t in tokens]
        )

    def unmark_reverted(self, revert_id: int) -> list[str]:
        tokens = [
            row[0]
            for row in self._all("SELECT token FROM turns WHERE reverted_by = ?", (revert_id,))
        ]
        self._run("UPDATE turns SET reverted_by = NULL WHERE reverted_by = ?", (revert_id,))
        return tokens

    def running_turns_in_workspace(self, workspace: str) -> list[Turn]:
        rows = self._all(
            f"SELECT {', '.join('t.' + c for c in _TURN_FIELDS)} FROM turns t "
            "JOIN sessions s ON s.id = t.session_id "
            "WHERE s.workspace = ? AND t.status = 'running'",
            (workspace,),
        )
        return [_turn(row) for row in rows]


class SQLStore:
    """What the two stores share besides their queries: a connection used under one lock, the
    driver's errors translated into turnback's at every use, and how it is closed. A backend
    sets ``_ERROR`` (its driver's base exception) and says what each error means."""

    _ERROR: type[Exception]
    _lock: threading.RLock
    _conn: Any

    def _translate_error(self, error: Any) -> StoreError:
        raise NotImplementedError

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except self._ERROR as error:
            raise self._translate_error(error) from error

    def read(self) -> AbstractContextManager[SQLTx]:
        raise NotImplementedError

    def integrity_problems(self) -> list[str]:
        with self.read() as tx:
            return tx.integrity_problems()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _marks(values: Sequence[object]) -> str:
    return ", ".join("?" for _ in values)


#: How turnback encoded a plain text chunk before schema 7 kept its text apart, up to its text:
#: such a payload's text is read with the JSON decoder's string scanner alone (a tenth of the
#: cost of parsing it).
_CHUNK_PREFIXES = tuple(
    f'{{"sessionUpdate":"{kind}","content":{{"type":"text","text":"' for kind in _CHUNK_KINDS
)


def _chunk_text(payload: str) -> str | None:
    """The text of a message chunk whose content is one plain text block; None if it is not
    one (a damaged row)."""
    if payload.endswith('"}}'):
        for prefix in _CHUNK_PREFIXES:
            if payload.startswith(prefix):
                try:
                    text, end = scanstring(payload, len(prefix))
                except ValueError:
                    return None
                if end == len(payload) - 2:
                    return str(text)
                break
    try:
        content = json.loads(payload).get("content")
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(content, dict) or content.get("type") != "text":
        return None
    text = content.get("text", "")
    return text if isinstance(text, str) else None


def _joined(message: Message, text_of: Callable[[int, int], str]) -> Message:
    """A message whose runs of text chunks are given their text, ``text_of(first, last)``;
    unreadable, saying why, when one of them cannot be read."""
    data = dict(message.data)
    content = list(data.get("content") or ())
    try:
        for index, first, last in data.pop(TEXT_RUNS):
            content[index] = {"type": "text", "text": text_of(first, last)}
    except (ValueError, TypeError, IndexError) as error:
        return replace(message, kind=MessageKind.UNREADABLE, data=unreadable(message.data, error))
    return replace(message, data={**data, "content": content})


def _message(row: tuple[Any, ...]) -> Message:
    try:
        return Message(row[0], row[1], row[2], MessageKind(row[3]), json.loads(row[4]))
    except (ValueError, TypeError, RecursionError) as error:
        return Message(row[0], row[1], row[2], MessageKind.UNREADABLE, unreadable(row[4], error))
