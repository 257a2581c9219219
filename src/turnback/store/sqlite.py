"""The embedded store: one SQLite file in turnback's home.

Durability facts this module relies on:

* WAL mode with ``synchronous=FULL`` syncs the write-ahead log at every COMMIT, so a transaction
  whose ``COMMIT`` returned survives ``kill -9`` and power loss; one sync per transaction is what
  makes batching events into one transaction cheap.
* ``BEGIN IMMEDIATE`` takes the write lock when the transaction starts, not at its first write, so
  a read-then-write transaction (begin a turn: check there is no running turn, then insert) cannot
  be overtaken by another process between the read and the write.
* The busy timeout bounds how long a writer waits for another process; past it the caller gets
  :class:`StoreLocked`, never a silent retry loop.
* A file is only written once it is known to be ours: an existing database must carry turnback's
  ``application_id``. A foreign or damaged file is reported and left untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from turnback import jsontext
from turnback.errors import SchemaTooNew, StoreCorrupt, StoreError, StoreLocked, StoreUnavailable
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
)
from turnback.store.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION


def _dumps(value: Any) -> str:
    return jsontext.dumps(value)  # unpaired surrogates escaped: SQLite stores UTF-8


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
_HAS_JOURNAL = "(SELECT status FROM turns WHERE token = events.turn) IN (?, ?)"
_KEEPS_STEPS = (*_KEEPS_JOURNAL, TurnStatus.INTERRUPTED.value)


class SQLiteStore:
    def __init__(self, path: Path, *, busy_timeout: float = 5.0) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreUnavailable(
                f"cannot create turnback's home {path.parent}: {error.strerror or error}; "
                "make it writable or choose another home (--home or TURNBACK_HOME)"
            ) from error
        #: opened read-only: its directory cannot be written (reads work; writes raise)
        self.read_only = False
        try:
            self._conn = self._connect(str(path), uri=False)
        except StoreUnavailable:
            if not path.is_file() or _writable(path.parent):
                raise
            self._open_read_only()
        else:
            try:
                self._prepare()
            except StoreUnavailable:
                self._conn.close()
                if not path.is_file() or _writable(path.parent):
                    raise
                self._open_read_only()
            except BaseException:
                self._conn.close()
                raise
        self._tx = _SQLiteTx(self._conn)

    def _connect(self, target: str, *, uri: bool) -> sqlite3.Connection:
        try:
            return sqlite3.connect(
                target,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                uri=uri,
            )
        except sqlite3.Error as error:
            raise self._translate_error(error) from error

    def _open_read_only(self) -> None:
        """Open a database whose directory cannot be written, for reading: through its log
        when one is there, else as an unchanging file (no process can be writing it)."""
        base = "file:" + urllib.parse.quote(str(self.path)) + "?mode=ro"
        for target in (base, base + "&immutable=1"):
            self._conn = self._connect(target, uri=True)
            try:
                with self._translated():
                    self._check_identity()
                    version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            except StoreUnavailable:
                self._conn.close()
                continue
            except BaseException:
                self._conn.close()
                raise
            if version != SCHEMA_VERSION:
                self._conn.close()
                raise StoreUnavailable(
                    f"the database {self.path} needs upgrading to schema {SCHEMA_VERSION} and "
                    "its directory cannot be written; make it writable once"
                )
            self.read_only = True
            return
        raise StoreUnavailable(
            f"cannot read the database {self.path} in a directory that cannot be written; "
            "make it writable or choose another home (--home or TURNBACK_HOME)"
        )

    # -- opening -------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Check the file is ours, set the connection up, migrate. Processes opening a new home at
        the same moment can meet SQLITE_BUSY where SQLite does not wait (switching to WAL,
        recovering the WAL index), so a busy start is retried until the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                with self._translated():
                    self._check_identity()
                    self._conn.execute("PRAGMA foreign_keys=ON")
                    self._conn.execute("PRAGMA synchronous=FULL")
                    mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                    if str(mode).lower() != "wal":
                        raise StoreUnavailable(
                            f"the database {self.path} cannot use write-ahead logging (mode "
                            f"{mode}); put turnback's home on a local filesystem"
                        )
                    self._migrate()
                return
            except StoreLocked:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    def _check_identity(self) -> None:
        """Refuse a file that is not a turnback database before anything is written to it.

        Both reads share one transaction: another process creating the database at the same
        moment must not be seen half-way (tables there, application id not yet)."""
        self._conn.execute("BEGIN")
        try:
            application_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
            tables = self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            self._rollback()
        if application_id == APPLICATION_ID:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"the database {self.path} has schema version {version}, newer than this "
                    f"turnback's {SCHEMA_VERSION}; upgrade turnback to open it"
                )
            return
        if application_id != 0 or tables:
            raise StoreCorrupt(
                f"{self.path} is a SQLite database that turnback did not create; it was left "
                "untouched. Choose another home (--home or TURNBACK_HOME) or move the file away"
            )

    def _migrate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            for migration in MIGRATIONS[version:]:
                for statement in migration.split(";"):
                    if statement.strip():
                        self._conn.execute(statement)
            self._conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[_SQLiteTx]:
        with self._lock, self._translated():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._tx
                self._conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    @contextmanager
    def read(self) -> Iterator[_SQLiteTx]:
        with self._lock, self._translated():
            self._conn.execute("BEGIN")
            try:
                yield self._tx
            finally:
                self._rollback()

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            # If this fails the transaction is already gone: SQLite rolled it back itself.
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def integrity_problems(self) -> list[str]:
        with self.read() as tx:
            return tx.integrity_problems()

    def compact(self) -> int:
        """Checkpoint the write-ahead log and truncate it: a process killed with the database
        open leaves its log at full size until some connection does this."""

        def size() -> int:
            total = 0
            for suffix in ("", "-wal"):
                with contextlib.suppress(OSError):
                    total += os.stat(f"{self.path}{suffix}").st_size
            return total

        before = size()
        with self._lock, self._translated():
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return max(0, before - size())

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- errors --------------------------------------------------------------------------------

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as error:
            raise self._translate_error(error) from error

    def _translate_error(self, error: sqlite3.Error) -> StoreError:
        text = str(error)
        lowered = text.lower()
        if "locked" in lowered or "busy" in lowered:
            return StoreLocked(
                f"the database {self.path} stayed locked by another process for more than "
                f"{self.busy_timeout:g}s; wait for that process to finish, or stop it, and retry"
            )
        if "not a database" in lowered or "malformed" in lowered or "corrupt" in lowered:
            return StoreCorrupt(
                f"the database {self.path} is damaged ({text}); it was left untouched. Move it "
                "away to start afresh, or restore it from a backup"
            )
        if "full" in lowered:
            return StoreUnavailable(
                f"the disk holding {self.path} is full ({text}); nothing was written. Free some "
                "space and retry"
            )
        if "readonly" in lowered or "read-only" in lowered or "unable to open" in lowered:
            return StoreUnavailable(
                f"cannot write the database {self.path} ({text}); make its directory writable or "
                "choose another home (--home or TURNBACK_HOME)"
            )
        return StoreError(f"the database {self.path} failed: {text}")


def _writable(directory: Path) -> bool:
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".turnback-probe-"):
            return True
    except OSError:
        return False


# -- rows to records ---------------------------------------------------------------------------


def _session(row: sqlite3.Row | tuple[Any, ...]) -> SessionRecord:
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
_TURN_COLUMNS = (
    "token, session_id, number, parent, owner_id, status, prompt, started_at, ended_at, detail, "
    "event_count, begin_checkpoint, end_checkpoint, reverted_by"
)
_OWNER_COLUMNS = "id, host, boot_id, pid, start_time, created_at, lease_expires"
_REVERT_COLUMNS = (
    "id, session_id, to_turn, from_head, target, undo_checkpoint, files, conversation, "
    "keep_user_edits, state, created_at, detail, ended_at, owner_id"
)


def _turn(row: tuple[Any, ...]) -> Turn:
    return Turn(
        token=row[0],
        session_id=row[1],
        number=row[2],
        parent=row[3],
        owner_id=row[4],
        status=TurnStatus(row[5]),
        prompt=_loads(row[6]),
        started_at=row[7],
        ended_at=row[8],
        detail=row[9],
        event_count=row[10],
        begin_checkpoint=row[11],
        end_checkpoint=row[12],
        reverted_by=row[13],
    )


def _revert(row: tuple[Any, ...]) -> Revert:
    return Revert(
        id=row[0],
        session_id=row[1],
        to_turn=row[2],
        from_head=row[3],
        target=row[4],
        undo_checkpoint=row[5],
        files=bool(row[6]),
        conversation=bool(row[7]),
        keep_user_edits=bool(row[8]),
        state=RevertState(row[9]),
        created_at=row[10],
        detail=row[11],
        ended_at=row[12],
        owner_id=row[13],
    )


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


class _SQLiteTx:
    """The operations of a transaction, on the store's one connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._c = conn

    def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._c.execute(sql, params).fetchone()
        return row

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._c.execute(sql, params).fetchall()

    # sessions

    def insert_session(self, session: SessionRecord) -> None:
        self._c.execute(
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
        self._c.execute("DELETE FROM sessions WHERE id = ?", (session_id,))  # rows cascade

    def set_head(self, session_id: str, head: str | None, now: float) -> None:
        self._c.execute(
            "UPDATE sessions SET head = ?, updated_at = ? WHERE id = ?", (head, now, session_id)
        )

    def set_agent_state(self, session_id: str, state: dict[str, object], now: float) -> None:
        self._c.execute(
            "UPDATE sessions SET agent_state = ?, updated_at = ? WHERE id = ?",
            (_dumps(state), now, session_id),
        )

    def set_pending_requests(
        self, session_id: str, requests: Sequence[dict[str, object]], now: float
    ) -> None:
        self._c.execute(
            "UPDATE sessions SET pending_requests = ?, updated_at = ? WHERE id = ?",
            (_dumps(list(requests)), now, session_id),
        )

    # turns

    def insert_turn(self, turn: Turn) -> None:
        self._c.execute(
            f"INSERT INTO turns ({_TURN_COLUMNS}) VALUES ({_marks(range(14))})",
            (
                turn.token,
                turn.session_id,
                turn.number,
                turn.parent,
                turn.owner_id,
                turn.status.value,
                _dumps(turn.prompt),
                turn.started_at,
                turn.ended_at,
                turn.detail,
                turn.event_count,
                turn.begin_checkpoint,
                turn.end_checkpoint,
                turn.reverted_by,
            ),
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
            f"FROM turns WHERE status IN ({_marks(_ENDED)}) AND reverted_by IS NULL) "
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
        cursor = self._c.execute(
            "UPDATE turns SET status = ?, ended_at = ?, detail = ?, event_count = ? "
            "WHERE token = ? AND status = ?",
            (status.value, ended_at, _text(detail), event_count, token, expected.value),
        )
        return cursor.rowcount == 1

    def reopen_turn(self, token: str, owner_id: str) -> bool:
        cursor = self._c.execute(
            "UPDATE turns SET status = ?, owner_id = ?, ended_at = NULL, detail = NULL, "
            "event_count = 0, end_checkpoint = NULL WHERE token = ? AND status = ?",
            (TurnStatus.RUNNING.value, owner_id, token, TurnStatus.INTERRUPTED.value),
        )
        if cursor.rowcount != 1:
            return False
        self._c.execute("DELETE FROM messages WHERE turn = ?", (token,))
        self._c.execute("DELETE FROM file_changes WHERE turn = ? AND scope = 'turn'", (token,))
        return True

    def reposition_turn(self, token: str, number: int, parent: str | None) -> None:
        self._c.execute(
            "UPDATE turns SET number = ?, parent = ? WHERE token = ?", (number, parent, token)
        )

    def delete_turn(self, token: str) -> None:
        self._c.execute("DELETE FROM turns WHERE token = ?", (token,))

    # a turn's events: its journal while it runs or is set aside, its run timeline once ended

    def append_journal(self, entries: Sequence[JournalEntry]) -> int:
        if not entries:
            return 0
        tokens = sorted({e.turn for e in entries})
        running = {
            row[0]
            for row in self._all(
                f"SELECT token FROM turns WHERE status = ? AND token IN ({_marks(tokens)})",
                (TurnStatus.RUNNING.value, *tokens),
            )
        }
        kept = [(e.turn, e.seq, e.kind, e.payload, e.at) for e in entries if e.turn in running]
        self._c.executemany(
            "INSERT INTO events (turn, seq, kind, payload, at) VALUES (?, ?, ?, ?, ?)", kept
        )
        return len(entries) - len(kept)

    def journal(self, token: str) -> list[JournalEntry]:
        rows = self._all(
            "SELECT turn, seq, kind, payload, at FROM events WHERE turn = ? "
            f"AND {_HAS_JOURNAL} ORDER BY seq",
            (token, *_KEEPS_JOURNAL),
        )
        return [JournalEntry(*row) for row in rows]

    def journal_size(self, token: str) -> tuple[int, int]:
        row = self._one(
            f"SELECT count(*), coalesce(max(seq), 0) FROM events WHERE turn = ? AND {_HAS_JOURNAL}",
            (token, *_KEEPS_JOURNAL),
        )
        assert row is not None
        return int(row[0]), int(row[1])

    # committed conversation

    def insert_messages(self, messages: Sequence[Message]) -> None:
        self._c.executemany(
            "INSERT INTO messages (session_id, turn, idx, kind, data) VALUES (?, ?, ?, ?, ?)",
            [(m.session_id, m.turn, m.index, m.kind.value, _dumps(m.data)) for m in messages],
        )

    def messages(self, session_id: str) -> list[Message]:
        rows = self._all(
            "SELECT m.session_id, m.turn, m.idx, m.kind, m.data FROM messages m "
            "JOIN turns t ON t.token = m.turn "
            f"WHERE m.session_id = ? AND t.status IN ({_marks(_ENDED)}) AND t.reverted_by IS NULL "
            "ORDER BY t.number, t.started_at, m.idx",
            (session_id, *_ENDED),
        )
        return [_message(row) for row in rows]

    def turn_messages(self, token: str) -> list[Message]:
        rows = self._all(
            "SELECT session_id, turn, idx, kind, data FROM messages WHERE turn = ? ORDER BY idx",
            (token,),
        )
        return [_message(row) for row in rows]

    def insert_run_events(self, events: Sequence[RunEvent]) -> None:
        self._c.executemany(
            "INSERT INTO events (turn, seq, kind, payload, at) VALUES (?, ?, ?, ?, ?)",
            [(e.turn, e.seq, e.kind, _dumps(e.event), e.at) for e in events],
        )

    def replace_run_events(self, events: Sequence[RunEvent]) -> None:
        self._c.executemany(
            "UPDATE events SET kind = ?, payload = ? WHERE turn = ? AND seq = ?",
            [(e.kind, _dumps(e.event), e.turn, e.seq) for e in events],
        )

    def run_events(self, token: str) -> list[RunEvent]:
        rows = self._all(
            "SELECT t.session_id, e.turn, e.seq, e.kind, e.payload, e.at "
            "FROM events e JOIN turns t ON t.token = e.turn "
            "WHERE e.turn = ? AND t.status NOT IN (?, ?) ORDER BY e.seq",
            (token, *_KEEPS_JOURNAL),
        )
        return [RunEvent(r[0], r[1], r[2], r[3], _loads(r[4]), r[5]) for r in rows]

    # step checkpoints

    def insert_step_checkpoint(self, checkpoint: StepCheckpoint) -> None:
        self._c.execute(
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
        return self._c.execute(
            "DELETE FROM step_checkpoints WHERE turn = ? AND journal_seq > ?", (token, after_seq)
        ).rowcount

    def delete_orphan_step_checkpoints(self) -> int:
        return self._c.execute(
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
        cursor = self._c.execute(
            "INSERT INTO activities (session_id, turn, level, code, message, data, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (session_id, turn, level.value, code, _text(message), _dumps(data), at),
        )
        return int(cursor.lastrowid or 0)

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
        self._c.execute(
            f"INSERT INTO owners ({_OWNER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET lease_expires = excluded.lease_expires",
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

    def delete_owner(self, owner_id: str) -> None:
        self._c.execute("DELETE FROM owners WHERE id = ?", (owner_id,))

    # workspace checkpoints and file changes

    def release_checkpoints(self, tokens: Sequence[str]) -> None:
        self._c.executemany(
            "UPDATE turns SET begin_checkpoint = NULL, end_checkpoint = NULL WHERE token = ?",
            [(t,) for t in tokens],
        )

    def release_revert_checkpoints(self, revert_ids: Sequence[int]) -> None:
        self._c.executemany(
            "UPDATE reverts SET target = NULL, undo_checkpoint = NULL WHERE id = ?",
            [(i,) for i in revert_ids],
        )

    def set_checkpoint(self, token: str, which: str, commit: str | None) -> None:
        column = {"begin": "begin_checkpoint", "end": "end_checkpoint"}[which]
        self._c.execute(f"UPDATE turns SET {column} = ? WHERE token = ?", (commit, token))

    def insert_file_changes(self, token: str, scope: str, changes: Sequence[FileChange]) -> None:
        self._c.executemany(
            "INSERT OR REPLACE INTO file_changes "
            "(turn, scope, path, kind, additions, deletions, binary, old_path) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
            "SELECT path, kind, additions, deletions, binary, old_path FROM file_changes "
            "WHERE turn = ? AND scope = ? ORDER BY path",
            (token, scope),
        )
        return [FileChange(r[0], ChangeKind(r[1]), r[2], r[3], bool(r[4]), r[5]) for r in rows]

    def session_file_changes(self, session_id: str) -> dict[tuple[str, str], list[FileChange]]:
        rows = self._all(
            "SELECT f.turn, f.scope, f.path, f.kind, f.additions, f.deletions, f.binary, "
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
        cursor = self._c.execute(
            f"INSERT INTO reverts ({_REVERT_COLUMNS}) VALUES (NULL, {_marks(range(13))})",
            (
                revert.session_id,
                revert.to_turn,
                revert.from_head,
                revert.target,
                revert.undo_checkpoint,
                int(revert.files),
                int(revert.conversation),
                int(revert.keep_user_edits),
                revert.state.value,
                revert.created_at,
                revert.detail,
                revert.ended_at,
                revert.owner_id,
            ),
        )
        return int(cursor.lastrowid or 0)

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
        self._c.execute(
            "UPDATE reverts SET state = ?, ended_at = ?, detail = coalesce(?, detail), "
            "owner_id = coalesce(?, owner_id) WHERE id = ?",
            (state.value, now, detail, owner_id, revert_id),
        )

    def mark_reverted(self, tokens: Sequence[str], revert_id: int | None) -> None:
        self._c.executemany(
            "UPDATE turns SET reverted_by = ? WHERE token = ?", [(revert_id, t) for t in tokens]
        )

    def unmark_reverted(self, revert_id: int) -> list[str]:
        tokens = [
            row[0]
            for row in self._all("SELECT token FROM turns WHERE reverted_by = ?", (revert_id,))
        ]
        self._c.execute("UPDATE turns SET reverted_by = NULL WHERE reverted_by = ?", (revert_id,))
        return tokens

    def running_turns_in_workspace(self, workspace: str) -> list[Turn]:
        rows = self._all(
            f"SELECT {', '.join('t.' + c for c in _TURN_COLUMNS.split(', '))} FROM turns t "
            "JOIN sessions s ON s.id = t.session_id "
            "WHERE s.workspace = ? AND t.status = 'running'",
            (workspace,),
        )
        return [_turn(row) for row in rows]

    # health

    def integrity_problems(self) -> list[str]:
        problems = [str(row[0]) for row in self._all("PRAGMA integrity_check") if row[0] != "ok"]
        problems += [
            f"row {row[1]} of {row[0]} names a missing row of {row[2]}"
            for row in self._all("PRAGMA foreign_key_check")
        ]
        return problems


def _marks(values: Sequence[object]) -> str:
    return ", ".join("?" for _ in values)


def _message(row: tuple[Any, ...]) -> Message:
    try:
        return Message(row[0], row[1], row[2], MessageKind(row[3]), json.loads(row[4]))
    except (ValueError, TypeError, RecursionError) as error:
        return Message(row[0], row[1], row[2], MessageKind.UNREADABLE, unreadable(row[4], error))
