"""Durable state behind one protocol.

The engine only ever sees :class:`Store` and the :class:`Tx`
it hands out (one protocol per concern, :mod:`turnback.store.tx`). A transaction is the unit of
atomicity: everything done on one ``Tx`` inside ``store.atomic()`` commits together or not at
all. Backends are chosen by URL through :func:`open_store`; each is imported only when asked for,
so the embedded default never pays for another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from turnback.errors import StoreNotFound, StoreUnavailable
from turnback.model import JournalEntry, TurnStatus
from turnback.store.tx import Tx


class Store(Protocol):
    """A durable store. ``atomic()`` is a write transaction that excludes other writers;
    ``read()`` is a consistent snapshot."""

    url: str

    def atomic(self) -> AbstractContextManager[Tx]: ...
    def read(self) -> AbstractContextManager[Tx]: ...
    def integrity_problems(self) -> list[str]: ...
    def append_fenced(
        self, entries: Sequence[JournalEntry], fences: Mapping[str, str | None]
    ) -> dict[str, tuple[TurnStatus, str | None]]:
        """:meth:`Tx.append_fenced` in a transaction of its own: a journal flush with nothing
        else to write. A backend may do it in fewer round trips than ``atomic()`` would."""
        ...

    def compact(self) -> int:
        """Give back disk space the store holds but no longer needs; returns the bytes freed."""
        ...

    def close(self) -> None: ...


DEFAULT_DATABASE = "turnback.db"


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / DEFAULT_DATABASE}"


def open_store(url: str, *, busy_timeout: float = 5.0, create: bool = True) -> Store:
    """Open the store a URL names: ``sqlite:///path/to/file.db`` (the default backend) or
    ``postgresql://user@host:port/database`` (a fleet's shared store; needs the ``postgres``
    extra).

    With ``create=False`` a store that does not exist yet raises StoreNotFound instead of being
    made, so a mistyped home is reported rather than silently created."""
    if url.startswith("sqlite:///"):
        from turnback.store.sqlite import SQLiteStore

        path = Path(url.removeprefix("sqlite:///"))
        if not create and not path.exists():
            raise StoreNotFound(
                f"there is no turnback database at {path}: nothing has run with this home yet. "
                "Check --home or TURNBACK_HOME"
            )
        return SQLiteStore(path, busy_timeout=busy_timeout)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from turnback.store.postgres import PostgresStore
        except ImportError as error:
            raise StoreUnavailable(
                f"a PostgreSQL store needs psycopg ({error}); install turnback[postgres]"
            ) from error
        return PostgresStore(url, busy_timeout=busy_timeout, create=create)
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise StoreUnavailable(
        f"no store backend for {scheme!r} URLs ({url!r}); use sqlite:///path/to/turnback.db "
        "or postgresql://user@host:port/database"
    )


__all__ = ["DEFAULT_DATABASE", "Store", "Tx", "open_store", "sqlite_url"]
