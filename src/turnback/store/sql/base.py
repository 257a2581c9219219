"""What every group of queries stands on: how a backend runs a statement.

The queries are written once, in the SQL that SQLite and PostgreSQL both speak, with ``?``
placeholders; a backend fills in the dialect hooks of :class:`Queries` (how a statement is run,
what makes a SELECT take row locks, how a new turn is numbered) and those a group of queries
declares for itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Protocol

from turnback.store.sql.rows import SPAN, marks


class Cursor(Protocol):
    """The part of a DB-API cursor the queries use (sqlite3's and psycopg's both have it)."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Queries(ABC):
    """The dialect hooks, and the few statements more than one group of queries needs."""

    #: what makes a SELECT take row locks ("" where every write transaction holds them all)
    _FOR_UPDATE = ""
    #: the ``id`` a new turn takes (the database numbers them; none is reused while its
    #: events exist, since a turn's events go with it)
    _NEW_TURN_ID = "(SELECT coalesce(max(id), 0) + 1 FROM turns)"

    @abstractmethod
    def _run(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Execute one statement with ``?`` placeholders."""

    @abstractmethod
    def _run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._run(sql, params).fetchone()
        return row

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._run(sql, params).fetchall())

    def _locked_turns(self, tokens: Sequence[str]) -> list[tuple[Any, ...]]:
        """Lock the sessions of these turns (see ``lock_sessions``) in the statement that reads
        each turn's token, status, fencing token and number."""
        if not tokens:
            return []
        return self._all(
            "SELECT t.token, t.status, t.fence, t.id FROM turns t "
            "JOIN sessions s ON s.id = t.session_id "
            f"WHERE t.token IN ({marks(tokens)}) ORDER BY s.id"
            + (f"{self._FOR_UPDATE} OF s" if self._FOR_UPDATE else ""),
            tuple(tokens),
        )

    def _delete_events(self, turn_ids: Sequence[int | None]) -> None:
        """Remove the events of these turns: keyed by number, not by a reference to their
        turn, they do not go by cascade."""
        self._run_many(
            "DELETE FROM events WHERE id BETWEEN ? AND ?",
            [(i * SPAN, i * SPAN + SPAN - 1) for i in turn_ids if i is not None],
        )
