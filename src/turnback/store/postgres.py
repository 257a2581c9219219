"""A fleet's store: one PostgreSQL database that every machine's turnback shares.

Facts this module relies on:

* A transaction whose ``COMMIT`` returned is durable on the server (``synchronous_commit`` on,
  the server's default); the death of the client that committed it loses nothing.
* Write transactions run at READ COMMITTED and take the per-session row locks of the
  concurrency contract (:mod:`turnback.store.sql`) with ``SELECT … FOR UPDATE``: a transaction
  that waits for a lock reads, once it has it, what the holder committed. ``lock_timeout`` is the
  busy timeout: past it the caller gets :class:`StoreLocked`.
* Reads run at REPEATABLE READ, READ ONLY: one snapshot for the whole read, as on SQLite.
* Transactions are short: none holds git work, agent I/O or any waiting but for a lock (bounded
  by ``lock_timeout``) -- the engine captures, restores and talks to agents outside them. So
  turnback leaves the server's ``idle_in_transaction_session_timeout`` (the DBA's) in force: a
  few seconds never end a healthy transaction, and they end one whose process froze (SIGSTOP,
  a paused VM) holding a session's lock, which is then everyone's again. The frozen process,
  continued, gets :class:`StoreUnavailable` (SQLSTATE 25P03, or its connection found closed):
  nothing of that transaction was written, and its next one reconnects.
* Errors are classified by SQLSTATE (its class, the first two characters), never by message.
* The schema is the one list of migrations both backends run (:mod:`turnback.store.schema`);
  the version applied is the row of ``turnback_schema``, which also marks the database as
  turnback's. Processes migrating at once serialise on an advisory lock.
"""

from __future__ import annotations

import functools
import json
import threading
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from turnback import faults
from turnback.errors import (
    SchemaTooNew,
    StoreCorrupt,
    StoreError,
    StoreLocked,
    StoreNotFound,
    StoreUnavailable,
)
from turnback.model import JournalEntry, TurnStatus
from turnback.store.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, postgres_migration
from turnback.store.sql import Cursor, SQLStore, SQLTx

#: SQLSTATE classes and codes, and what they mean to turnback.
#: What another process's write did to ours, per SQLSTATE: each is StoreLocked, and nothing of
#: the transaction was written.
_LOCKED = {
    "55P03": "kept a session locked by another process for more than {timeout:g}s",
    "40P01": "found this write deadlocked with another process's",
    "40001": "could not serialise this write with another process's",
}
#: A statement the server cancelled: its statement_timeout ran out, or an operator cancelled it.
_CANCELLED = "57014"
_UNAVAILABLE_CLASSES = {"08", "28", "53", "57", "58"}  # connection, auth, resources, server
_CORRUPT = {"XX001", "XX002"}  # data or index corrupted
_IDLE_ENDED = "25P03"  # idle_in_transaction_session_timeout: the server ended the transaction


#: A journal flush with its fencing check, in one round trip. Measured on a loaded 2-core
#: machine: a few entries go fastest as one query string (no per-statement overhead on this
#: side, the entries as one escaped JSON array); many, as prepared statements sent together
#: in pipeline mode with the entries as binary arrays (no escaping, no planning at each flush).
_MANY_ENTRIES = 16
_FENCED_FLUSH = (
    "BEGIN; SELECT s.id FROM turns t JOIN sessions s ON s.id = t.session_id "
    "WHERE t.token IN (SELECT json_array_elements_text(%s::json)) ORDER BY s.id FOR UPDATE OF s; "
    "INSERT INTO events (id, kind, payload, at, text) "
    "SELECT t.id * 4294967296 + (e->>1)::bigint, e->>2, e->>3, (e->>4)::float8, e->>6 "
    "FROM json_array_elements(%s::json) AS e JOIN turns t ON t.token = e->>0 "
    "WHERE t.status = 'running' AND (e->>5 IS NULL OR t.fence = e->>5); "
    "SELECT token, status, fence FROM turns "
    "WHERE token IN (SELECT json_array_elements_text(%s::json)); COMMIT"
)
_LOCK_TURNS = (
    "SELECT s.id FROM turns t JOIN sessions s ON s.id = t.session_id "
    "WHERE t.token = ANY(%s) ORDER BY s.id FOR UPDATE OF s"
)
_INSERT_FENCED = (
    "INSERT INTO events (id, kind, payload, at, text) "
    "SELECT t.id * 4294967296 + v.seq, v.kind, v.payload, v.at, v.text FROM unnest("
    "%b::text[], %b::bigint[], %b::text[], %b::text[], %b::float8[], %b::text[], %b::text[]"
    ") AS v (turn, seq, kind, payload, at, fence, text) JOIN turns t ON t.token = v.turn "
    "WHERE t.status = 'running' AND (v.fence IS NULL OR t.fence = v.fence)"
)
_TURN_STATES = "SELECT token, status, fence FROM turns WHERE token = ANY(%s)"


def _without_password(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


@functools.lru_cache(maxsize=512)
def _dialect(sql: str) -> str:
    """The shared queries' ``?`` placeholders as psycopg's ``%s`` (none holds a literal ? or %)."""
    return sql.replace("?", "%s")


class _PostgresTx(SQLTx):
    _FOR_UPDATE = " FOR UPDATE"
    _NEW_TURN_ID = "DEFAULT"  # an identity column: the server numbers turns

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._c = conn
        self.pipeline: psycopg.Pipeline | None = None  # set by PostgresStore.atomic

    def _run(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        cursor = self._c.execute(_dialect(sql), tuple(params))
        if self.pipeline is not None:
            self.pipeline.sync()  # its rows or row count are read at once
        return cursor

    def _run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with self._c.cursor() as cursor:
                cursor.executemany(_dialect(sql), rows)

    def _joined_texts(self, spans: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
        rows = self._all(
            "SELECT r.low, r.high, count(e.text), string_agg(e.text, '' ORDER BY e.id) "
            "FROM unnest(?::bigint[], ?::bigint[]) AS r (low, high) "
            "LEFT JOIN events e ON e.id BETWEEN r.low AND r.high GROUP BY r.low, r.high",
            ([low for low, _ in spans], [high for _, high in spans]),
        )
        return {
            (low, high): text or "" for low, high, count, text in rows if count == high - low + 1
        }

    def now(self) -> float:
        row = self._one("SELECT extract(epoch FROM clock_timestamp())::float8")
        assert row is not None
        return float(row[0])

    def integrity_problems(self) -> list[str]:
        # PostgreSQL enforces every constraint as it writes; what is left to check is that the
        # schema is the one this turnback expects.
        row = self._one("SELECT version FROM turnback_schema")
        if row is None or row[0] != SCHEMA_VERSION:
            return [f"schema version {row[0] if row else None}, expected {SCHEMA_VERSION}"]
        return []


class PostgresStore(SQLStore):
    _ERROR = psycopg.Error
    _conn: psycopg.Connection[Any]

    def __init__(self, url: str, *, busy_timeout: float = 5.0, create: bool = True) -> None:
        self._dsn = url
        #: the URL without its password, for messages and ``doctor``
        self.url = _without_password(url)
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._conn = self._connect()
        try:
            self._prepare(create)
        except BaseException:
            self._conn.close()
            raise
        self._tx = _PostgresTx(self._conn)

    @property
    def _where(self) -> str:
        """The URL without a password, for messages."""
        try:
            info = psycopg.conninfo.conninfo_to_dict(self._dsn)
        except psycopg.Error:
            return "the PostgreSQL database"
        host = info.get("host") or "localhost"
        return f"the PostgreSQL database {info.get('dbname', '?')} on {host}"

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=max(1, int(self.busy_timeout)),
                application_name="turnback",
            )
            conn.execute(f"SET lock_timeout = {int(self.busy_timeout * 1000)}")
            return conn
        except psycopg.Error as error:
            raise self._translate_error(error) from error

    # -- opening -------------------------------------------------------------------------------

    def _prepare(self, create: bool) -> None:
        with self._translated():
            found = self._conn.execute("SELECT to_regclass('turnback_schema') IS NOT NULL")
            row = found.fetchone()
            ours = bool(row and row[0])
            if not ours:
                tables = self._conn.execute(
                    "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
                ).fetchone()
                if tables and tables[0]:
                    raise StoreCorrupt(
                        f"{self._where} holds tables turnback did not create; it was left "
                        "untouched. Point TURNBACK_DATABASE_URL at a database of its own"
                    )
                if not create:
                    raise StoreNotFound(
                        f"there is no turnback store in {self._where}: nothing has run with "
                        "it yet. Check TURNBACK_DATABASE_URL"
                    )
            self._migrate()

    def _migrate(self) -> None:
        with self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (APPLICATION_ID,))
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS turnback_schema "
                "(application_id BIGINT NOT NULL, version INTEGER NOT NULL)"
            )
            row = self._conn.execute(
                "SELECT application_id, version FROM turnback_schema"
            ).fetchone()
            if row is None:
                self._conn.execute("INSERT INTO turnback_schema VALUES (%s, 0)", (APPLICATION_ID,))
                version = 0
            elif row[0] != APPLICATION_ID:
                raise StoreCorrupt(f"{self._where} is not a turnback store; it was left untouched")
            else:
                version = int(row[1])
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"{self._where} has schema version {version}, newer than this turnback's "
                    f"{SCHEMA_VERSION}; upgrade turnback to open it"
                )
            if version == SCHEMA_VERSION:
                return
            for migration in MIGRATIONS[version:]:
                for statement in postgres_migration(migration).split(";"):
                    if statement.strip():
                        self._conn.execute(statement)
            self._conn.execute("UPDATE turnback_schema SET version = %s", (SCHEMA_VERSION,))
            faults.point("store.migrate.inside")  # a migration commits whole or not at all

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[_PostgresTx]:
        """A write transaction in pipeline mode: a statement goes to the server with those
        before it whose results nobody read (BEGIN, the inserts of a journal flush) and COMMIT
        goes with what precedes it, so a strict append costs two round trips (BEGIN with the
        session's lock, then the inserts with COMMIT), as a bare INSERT + COMMIT through psycopg
        does. A connection found dropped here fails this transaction (StoreUnavailable, nothing
        written) and is opened again at the next."""
        with self._lock, self._translated():
            if self._conn.broken or self._conn.closed:
                self._reconnect()
            try:
                with self._conn.pipeline() as self._tx.pipeline:
                    self._conn.execute("BEGIN")
                    yield self._tx
                    self._conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
            finally:
                self._tx.pipeline = None

    @contextmanager
    def read(self) -> Iterator[_PostgresTx]:
        with self._lock, self._translated():
            self._begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield self._tx
            finally:
                self._rollback()

    def _begin(self, statement: str) -> None:
        """Start a transaction, reconnecting once if the server dropped the connection (it
        restarted, or an operator ended the session): no transaction was open on it, so
        nothing is lost."""
        if not (self._conn.broken or self._conn.closed):
            try:
                self._conn.execute(statement)
                return
            except psycopg.OperationalError:
                if not self._conn.broken:
                    raise
        self._reconnect()
        self._conn.execute(statement)

    def _reconnect(self) -> None:
        self._conn.close()
        self._conn = self._connect()
        self._tx = _PostgresTx(self._conn)

    def _rollback(self) -> None:
        if self._conn.closed or self._conn.broken:
            return
        if self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            try:
                self._conn.execute("ROLLBACK")
            except psycopg.Error:
                self._conn.close()  # reconnected at the next transaction

    def append_fenced(
        self, entries: Sequence[JournalEntry], fences: Mapping[str, str | None]
    ) -> dict[str, tuple[TurnStatus, str | None]]:
        """A journal flush in one round trip: BEGIN, the sessions' locks, the entries of the
        turns that still run under their fencing tokens, the turns' states and COMMIT go to the
        server together (see ``_MANY_ENTRIES`` for how), and come back together. Each statement
        takes its own snapshot (READ COMMITTED), after the lock: the fencing check sees whatever
        a takeover committed before the lock was granted, as :meth:`SQLTx.append_fenced` does."""
        if not entries:
            with self.atomic() as tx:
                return tx.append_fenced(entries, fences)
        tokens = sorted({e.turn for e in entries})
        with self._lock, self._translated():
            if self._conn.broken or self._conn.closed:
                self._reconnect()
            try:
                if len(entries) < _MANY_ENTRIES:
                    found = self._flush_few(tokens, entries, fences)
                else:
                    found = self._flush_many(tokens, entries, fences)
            except BaseException:
                self._rollback()
                raise
        return {row[0]: (TurnStatus(row[1]), row[2]) for row in found}

    def _flush_few(
        self, tokens: list[str], entries: Sequence[JournalEntry], fences: Mapping[str, str | None]
    ) -> list[tuple[Any, ...]]:
        rows = [
            (e.turn, e.seq, e.kind, e.payload, e.at, fences.get(e.turn), e.text) for e in entries
        ]
        listed = json.dumps(tokens)
        with psycopg.ClientCursor(self._conn) as cursor:
            cursor.execute(_FENCED_FLUSH, (listed, json.dumps(rows, ensure_ascii=False), listed))
            for _ in range(3):  # BEGIN, the locks, the INSERT: to the turns' states
                cursor.nextset()
            return cursor.fetchall()

    def _flush_many(
        self, tokens: list[str], entries: Sequence[JournalEntry], fences: Mapping[str, str | None]
    ) -> list[tuple[Any, ...]]:
        columns = (
            [e.turn for e in entries],
            [e.seq for e in entries],
            [e.kind for e in entries],
            [e.payload for e in entries],
            [e.at for e in entries],
            [fences.get(e.turn) for e in entries],
            [e.text for e in entries],
        )
        conn = self._conn
        with conn.pipeline():
            conn.execute("BEGIN")
            conn.execute(_LOCK_TURNS, (tokens,))
            conn.execute(_INSERT_FENCED, columns)
            states = conn.execute(_TURN_STATES, (tokens,))
            conn.execute("COMMIT")
        return states.fetchall()

    def compact(self) -> int:
        """Nothing to give back from here: the server's autovacuum reclaims dead rows, and
        its write-ahead log is the server's to recycle."""
        return 0

    # -- errors --------------------------------------------------------------------------------

    def _translate_error(self, error: psycopg.Error) -> StoreError:
        code = error.sqlstate or ""
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if code in _LOCKED:
            what = _LOCKED[code].format(timeout=self.busy_timeout)
            return StoreLocked(
                f"{self._where} {what} ({text}); nothing of it was written. Wait for that "
                "process to finish and retry"
            )
        if code == _CANCELLED:
            return StoreUnavailable(
                f"{self._where} cancelled a statement ({text}): it ran past the server's "
                "statement_timeout, or an administrator cancelled it; nothing of its transaction "
                "was written. Retry; if it keeps happening, give turnback's role a longer "
                "statement_timeout"
            )
        if code in _CORRUPT:
            return StoreCorrupt(
                f"{self._where} reports damaged data ({text}); restore it from a backup"
            )
        if code == _IDLE_ENDED:
            return StoreUnavailable(
                f"{self._where} ended this transaction: it sat idle longer than the server's "
                f"idle_in_transaction_session_timeout ({text}), as when this process was "
                "stopped or starved; nothing of it was written. Retry"
            )
        if code == "3D000":
            return StoreUnavailable(
                f"{self._where} does not exist ({text}); create it (createdb) or fix "
                "TURNBACK_DATABASE_URL"
            )
        if not code or code[:2] in _UNAVAILABLE_CLASSES:
            return StoreUnavailable(
                f"cannot use {self._where} ({text}); check that the server is running and "
                "TURNBACK_DATABASE_URL names it, then retry"
            )
        return StoreError(f"{self._where} failed: {text} (SQLSTATE {code})")
