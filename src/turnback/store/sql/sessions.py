"""Sessions' rows, read with their pending requests."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any

from turnback.model import SessionRecord
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import SESSION, dumps, loads, marks, readable
from turnback.store.tx import SessionsTx


class SessionQueries(Queries, SessionsTx):
    def insert_session(self, session: SessionRecord) -> None:
        """A new session has no pending requests: they are added one by one as asked."""
        values = {name: getattr(session, name) for name in SESSION.names}
        values.update(title=readable(session.title), agent_state=dumps(session.agent_state))
        self._run(
            f"INSERT INTO sessions ({SESSION.select()}) VALUES ({marks(SESSION.names)})",
            [values[name] for name in SESSION.names],
        )

    def get_session(self, session_id: str) -> SessionRecord | None:
        row = self._one(f"SELECT {SESSION.select()} FROM sessions WHERE id = ?", (session_id,))
        return self._sessions([row])[0] if row else None

    def find_sessions(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        rows = self._all(
            f"SELECT {SESSION.select()} FROM sessions WHERE substr(id, 1, ?) = ? "
            "ORDER BY created_at LIMIT ?",
            (len(prefix), prefix, limit),
        )
        return self._sessions(rows)

    def list_sessions(self) -> list[SessionRecord]:
        rows = self._all(f"SELECT {SESSION.select()} FROM sessions ORDER BY updated_at DESC")
        return self._sessions(rows)

    def session_heads(self, session_ids: Collection[str]) -> dict[str, str | None]:
        if not session_ids:
            return {}
        ids = sorted(session_ids)
        rows = self._all(f"SELECT id, head FROM sessions WHERE id IN ({marks(ids)})", ids)
        return {session_id: head for session_id, head in rows}

    def _sessions(self, rows: Sequence[Sequence[Any]]) -> list[SessionRecord]:
        """Sessions from their rows, each with its pending requests in the order asked."""
        sessions = SESSION.records(rows)
        if not sessions:
            return sessions
        ids = [s.id for s in sessions]
        # Many sessions (a listing): every pending request, rather than a list of ids as long.
        named = len(ids) <= 100
        where = f" WHERE session_id IN ({marks(ids)})" if named else ""
        pending: dict[str, list[Any]] = {}
        for session_id, request in self._all(
            f"SELECT session_id, request FROM pending_requests{where} ORDER BY id",
            ids if named else (),
        ):
            pending.setdefault(session_id, []).append(loads(request))
        return [
            dataclasses.replace(s, pending_requests=tuple(pending[s.id])) if s.id in pending else s
            for s in sessions
        ]

    def delete_session(self, session_id: str) -> None:
        ids = self._all("SELECT id FROM turns WHERE session_id = ?", (session_id,))
        self._delete_events([row[0] for row in ids])
        self._run("DELETE FROM sessions WHERE id = ?", (session_id,))  # other rows cascade

    def set_head(self, session_id: str, head: str | None, now: float) -> None:
        self._run_many(
            "UPDATE sessions SET head = ?, updated_at = ? WHERE id = ?", [(head, now, session_id)]
        )

    def hand_off(
        self, session_id: str, host: str, fence: str, expected: str | None, now: float
    ) -> bool:
        """Give the session to ``host`` under the fencing token ``fence``, if its current
        token is still ``expected``; whether it did."""
        cursor = self._run(
            "UPDATE sessions SET host = ?, host_fence = ?, updated_at = ? "
            "WHERE id = ? AND coalesce(host_fence, '') = ?",
            (host, fence, now, session_id, expected or ""),
        )
        return cursor.rowcount == 1

    def set_agent_state(self, session_id: str, state: dict[str, object], now: float) -> None:
        self._run(
            "UPDATE sessions SET agent_state = ?, updated_at = ? WHERE id = ?",
            (dumps(state), now, session_id),
        )
