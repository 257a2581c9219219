"""Activities: the user-visible lines on a session."""

from __future__ import annotations

from collections.abc import Sequence

from turnback.model import Activity, ActivityLevel
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import ACTIVITY, dumps, readable
from turnback.store.tx import ActivitiesTx, NewActivity


class ActivityQueries(Queries, ActivitiesTx):
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
            (session_id, turn, level.value, code, readable(message), dumps(data), at),
        )
        assert row is not None
        return int(row[0])

    def insert_activities(self, activities: Sequence[NewActivity]) -> None:
        self._run_many(
            "INSERT INTO activities (session_id, turn, level, code, message, data, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (session, turn, level.value, code, readable(message), dumps(data), at)
                for session, turn, level, code, message, data, at in activities
            ],
        )

    def activities(self, session_id: str | None, limit: int = 1000) -> list[Activity]:
        where, params = ("WHERE session_id = ?", (session_id,)) if session_id else ("", ())
        rows = self._all(
            f"SELECT {ACTIVITY.select()} FROM activities {where} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return ACTIVITY.records(rows[::-1])
