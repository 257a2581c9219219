"""Reverts' rows, and the turns each took out of the conversation."""

from __future__ import annotations

from collections.abc import Sequence

from turnback.model import UNFINISHED_REVERTS, Revert, RevertState
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import REVERT, marks
from turnback.store.tx import RevertsTx


class RevertQueries(Queries, RevertsTx):
    def insert_revert(self, revert: Revert) -> int:
        names = REVERT.names[1:]  # the database numbers reverts
        values = {name: getattr(revert, name) for name in names}
        values.update(
            files=int(revert.files),
            conversation=int(revert.conversation),
            keep_user_edits=int(revert.keep_user_edits),
            state=revert.state.value,
        )
        row = self._one(
            f"INSERT INTO reverts ({', '.join(names)}) VALUES ({marks(names)}) RETURNING id",
            [values[name] for name in names],
        )
        assert row is not None
        return int(row[0])

    def get_revert(self, revert_id: int) -> Revert | None:
        row = self._one(f"SELECT {REVERT.select()} FROM reverts WHERE id = ?", (revert_id,))
        return REVERT.record(row) if row else None

    def reverts(self, session_id: str | None, states: Sequence[RevertState] = ()) -> list[Revert]:
        clauses, params = [], []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if states:
            clauses.append(f"state IN ({marks([s.value for s in states])})")
            params += [s.value for s in states]
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._all(f"SELECT {REVERT.select()} FROM reverts {where} ORDER BY id", params)
        return REVERT.records(rows)

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

    def take_revert(self, revert_id: int, from_owner: str | None, to_owner: str) -> bool:
        unfinished = [s.value for s in UNFINISHED_REVERTS]
        cursor = self._run(
            "UPDATE reverts SET owner_id = ? WHERE id = ? AND coalesce(owner_id, '') = ? "
            f"AND state IN ({marks(unfinished)})",
            (to_owner, revert_id, from_owner or "", *unfinished),
        )
        return cursor.rowcount == 1

    def mark_reverted(self, tokens: Sequence[str], revert_id: int | None) -> None:
        self._run_many(
            "UPDATE turns SET reverted_by = ? WHERE token = ?", [(revert_id, t) for t in tokens]
        )

    def unmark_reverted(self, revert_id: int) -> list[str]:
        tokens = [
            token
            for (token,) in self._all("SELECT token FROM turns WHERE reverted_by = ?", (revert_id,))
        ]
        self._run("UPDATE turns SET reverted_by = NULL WHERE reverted_by = ?", (revert_id,))
        return tokens
