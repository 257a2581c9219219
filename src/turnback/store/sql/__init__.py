"""The queries both backends share, written once.

:class:`SQLTx` is every query of the :class:`~turnback.store.Tx` protocol, in the SQL that SQLite
and PostgreSQL both speak, with ``?`` placeholders: one class per concern (sessions, turns, the
journal, the conversation, ...), each in its module here and each implementing its protocol of
:mod:`turnback.store.tx`. A backend subclasses it and fills in the few dialect hooks: how a
statement is run (PostgreSQL rewrites ``?`` to ``%s``), the database's clock, how a session is
locked, how a run of text is joined, and the integrity check. Each backend's module keeps only
what is its own: opening, transactions, migrations and the classification of its errors.
Records are mapped to and from rows by column name (:mod:`turnback.store.sql.rows`).

The concurrency contract (what the engine needs from ``Store.atomic()``, and both backends give):

* **One writer per session.** A write transaction that changes a session or its turns calls
  ``lock_sessions`` (:class:`~turnback.store.sql.locks.LockQueries`) first; from then on, until it
  commits, no other transaction of any process changes that session, its turns, their events or step
  checkpoints, so a read-then-write (the running-turn check of a begin, the pending requests of a
  session, the re-read of a turn before it is committed or recovered) cannot be overtaken. SQLite
  gives this to every write transaction at once (``BEGIN IMMEDIATE``: one writer for the whole
  file); PostgreSQL by ``SELECT … FOR UPDATE`` on the session rows, in id order so two transactions
  that lock several sessions cannot deadlock. A transaction takes all its session locks in one
  statement: a begin and a revert lock every session of their workspace (``lock_workspace``), since
  a revert holds the workspace against new turns.
* **Reads are a snapshot.** ``Store.read()`` sees one committed state and writes nothing.
* **Constraints back the rules.** One running turn per session is also a unique index, so a
  writer that forgot the lock fails instead of breaking invariant 8.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from turnback.errors import StoreError
from turnback.store.sql.activities import ActivityQueries
from turnback.store.sql.base import Cursor
from turnback.store.sql.conversation import ConversationQueries
from turnback.store.sql.files import FileQueries
from turnback.store.sql.journal import JournalQueries
from turnback.store.sql.locks import LockQueries
from turnback.store.sql.owners import OwnerQueries
from turnback.store.sql.requests import RequestQueries
from turnback.store.sql.reverts import RevertQueries
from turnback.store.sql.rows import SPAN
from turnback.store.sql.sessions import SessionQueries
from turnback.store.sql.steps import StepQueries
from turnback.store.sql.tools import ToolQueries
from turnback.store.sql.turns import TurnQueries
from turnback.store.tx import HealthTx


class SQLTx(
    LockQueries,
    OwnerQueries,
    SessionQueries,
    RequestQueries,
    TurnQueries,
    JournalQueries,
    ConversationQueries,
    StepQueries,
    ActivityQueries,
    FileQueries,
    RevertQueries,
    ToolQueries,
    HealthTx,
):
    """The operations of a transaction, every concern's. A backend fills in the dialect hooks
    (``_run``, ``_run_many``, ``now``, ``_joined_texts``, ``integrity_problems``)."""


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


__all__ = ["SPAN", "Cursor", "SQLStore", "SQLTx"]
