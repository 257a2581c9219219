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
import os
import sqlite3
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from turnback import faults
from turnback.durable import make_directories
from turnback.errors import SchemaTooNew, StoreCorrupt, StoreError, StoreLocked, StoreUnavailable
from turnback.model import JournalEntry, TurnStatus
from turnback.store.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION
from turnback.store.sql import SPAN, Cursor, SQLStore, SQLTx


class SQLiteStore(SQLStore):
    _ERROR = sqlite3.Error
    _conn: sqlite3.Connection

    def __init__(self, path: Path, *, busy_timeout: float = 5.0) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        try:
            make_directories(path.parent)  # a new home outlives a power cut
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
            faults.point("store.migrate.inside")  # a migration commits whole or not at all
            self._conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[_SQLiteTx]:
        # Errors translated here rather than by _translated(): one generator fewer, on the way
        # of every strict append.
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._tx
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
            except sqlite3.Error as error:
                raise self._translate_error(error) from error

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

    def append_fenced(
        self, entries: Sequence[JournalEntry], fences: Mapping[str, str | None]
    ) -> dict[str, tuple[TurnStatus, str | None]]:
        with self.atomic() as tx:
            return tx.append_fenced(entries, fences)

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

    # -- errors --------------------------------------------------------------------------------

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


#: A run of text chunks joined: one search of the table's own key. ``events`` has no index but
#: that key (a test checks it), so SQLite reads the range in key order and group_concat joins
#: in that order; from SQLite 3.44 the order is also said. (An ordered subquery would say it on
#: any version, but SQLite then copies every row through a co-routine: three times as long.)
_JOIN_RUN = (
    "SELECT count(text), group_concat(text, ''"
    + (" ORDER BY id" if sqlite3.sqlite_version_info >= (3, 44) else "")
    + ") FROM events WHERE id BETWEEN ? AND ?"
)


#: A journal entry written only if its turn still runs under the fencing token given: the check
#: and the write in one statement (the transaction holds the whole file, so nothing comes between).
_APPEND_FENCED = (
    f"INSERT INTO events (id, kind, payload, at, text) SELECT id * {SPAN} + ?, ?, ?, ?, ? "
    f"FROM turns WHERE token = ? AND status = '{TurnStatus.RUNNING.value}' AND fence = ?"
)


class _SQLiteTx(SQLTx):
    """The shared queries on the store's one connection. Every write transaction holds the
    whole file (``BEGIN IMMEDIATE``), which is more than the per-session lock asks for."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._c = conn

    def _run(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return self._c.execute(sql, params)

    def _run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._c.executemany(sql, rows)

    def now(self) -> float:
        return time.time()

    def append_fenced(
        self, entries: Sequence[JournalEntry], fences: Mapping[str, str | None]
    ) -> dict[str, tuple[TurnStatus, str | None]]:
        """One entry of a fenced turn, as every strict append is, goes in one statement: a
        quarter of an append's Python and one statement fewer. When it is not written, the
        shared code reads why (and writes nothing more, since it checks the same)."""
        if len(entries) == 1:
            e = entries[0]
            fence = fences.get(e.turn)
            if fence is not None:
                row = (e.seq, e.kind, e.payload, e.at, e.text, e.turn, fence)
                if self._c.execute(_APPEND_FENCED, row).rowcount == 1:
                    return {e.turn: (TurnStatus.RUNNING, fence)}
        return super().append_fenced(entries, fences)

    def _joined_texts(self, spans: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
        joined = {}
        for low, high in spans:
            count, text = self._c.execute(_JOIN_RUN, (low, high)).fetchone()
            if count == high - low + 1:
                joined[low, high] = text if text is not None else ""
        return joined

    def integrity_problems(self) -> list[str]:
        problems = [str(row[0]) for row in self._all("PRAGMA integrity_check") if row[0] != "ok"]
        problems += [
            f"row {rowid} of {table} names a missing row of {parent}"
            for table, rowid, parent, _ in self._all("PRAGMA foreign_key_check")
        ]
        return problems
