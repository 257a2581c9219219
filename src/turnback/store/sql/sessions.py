"""Sessions' rows."""

from __future__ import annotations

from turnback.model import SessionRecord
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import SESSION, dumps, marks, readable
from turnback.store.tx import SessionsTx


class SessionQueries(Queries, SessionsTx):
    def insert_session(self, session: SessionRecord) -> None:
        values = {name: getattr(session, name) for name in SESSION.names}
        values.update(
            title=readable(session.title),
            pending_requests=dumps(list(session.pending_requests)),
            agent_state=dumps(session.agent_state),
        )
        self._run(
            f"INSERT INTO sessions ({SESSION.select()}) VALUES ({marks(SESSION.names)})",
            [values[name] for name in SESSION.names],
        )

    def get_session(self, session_id: str) -> SessionRecord | None:
        row = self._one(f"SELECT {SESSION.select()} FROM sessions WHERE id = ?", (session_id,))
        return SESSION.record(row) if row else None

    def find_sessions(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        rows = self._all(
            f"SELECT {SESSION.select()} FROM sessions WHERE substr(id, 1, ?) = ? "
            "ORDER BY created_at LIMIT ?",
            (len(prefix), prefix, limit),
        )
        return SESSION.records(rows)

    def list_sessions(self) -> list[SessionRecord]:
        rows = self._all(f"SELECT {SESSION.select()} FROM sessions ORDER BY updated_at DESC")
        return SESSION.records(rows)

    def delete_session(self, session_id: str) -> None:
        ids = self._all("SELECT id FROM turns WHERE session_id = ?", (session_id,))
        self._delete_events([row[0] for row in ids])
        self._run("DELETE FROM sessions WHERE id = ?", (session_id,))  # other rows cascade

    def set_head(self, session_id: str, head: str | None, now: float) -> None:
        self._run(
            "UPDATE sessions SET head = ?, updated_at = ? WHERE id = ?", (head, now, session_id)
        )

    def set_agent_state(self, session_id: str, state: dict[str, object], now: float) -> None:
        self._run(
            "UPDATE sessions SET agent_state = ?, updated_at = ? WHERE id = ?",
            (dumps(state), now, session_id),
        )
