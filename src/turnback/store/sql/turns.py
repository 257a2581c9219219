"""Turns' rows: their lifecycle in the store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnback.model import Turn, TurnStatus
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import TURN, dumps, loads, marks, readable
from turnback.store.tx import TurnEnd, TurnsTx

ENDED = tuple(status.value for status in TurnStatus if status.ended)


class TurnQueries(Queries, TurnsTx):
    def insert_turn(self, turn: Turn) -> None:
        values = {name: getattr(turn, name) for name in TURN.names}
        values.update(status=turn.status.value, prompt=dumps(turn.prompt))
        self._run(
            f"INSERT INTO turns ({TURN.select()}, id) "
            f"VALUES ({marks(TURN.names)}, {self._NEW_TURN_ID})",
            [values[name] for name in TURN.names],
        )

    def get_turn(self, token: str) -> Turn | None:
        row = self._one(f"SELECT {TURN.select()} FROM turns WHERE token = ?", (token,))
        return TURN.record(row) if row else None

    def turns(self, tokens: Sequence[str]) -> list[Turn]:
        if not tokens:
            return []
        rows = self._all(
            f"SELECT {TURN.select()} FROM turns WHERE token IN ({marks(tokens)})", tuple(tokens)
        )
        return TURN.records(rows)

    def running_turn(self, session_id: str) -> Turn | None:
        row = self._one(
            f"SELECT {TURN.select()} FROM turns WHERE session_id = ? AND status = 'running'",
            (session_id,),
        )
        return TURN.record(row) if row else None

    def running_turns_in_workspace(self, workspace: str) -> list[Turn]:
        rows = self._all(
            f"SELECT {TURN.select('t')} FROM turns t "
            "JOIN sessions s ON s.id = t.session_id "
            "WHERE s.workspace = ? AND t.status = 'running'",
            (workspace,),
        )
        return TURN.records(rows)

    def turns_with_status(self, status: TurnStatus) -> list[Turn]:
        rows = self._all(
            f"SELECT {TURN.select()} FROM turns WHERE status = ? ORDER BY started_at",
            (status.value,),
        )
        return TURN.records(rows)

    def session_turns(self, session_id: str) -> list[Turn]:
        rows = self._all(
            f"SELECT {TURN.select()} FROM turns WHERE session_id = ? ORDER BY started_at, number",
            (session_id,),
        )
        return TURN.records(rows)

    def conversation_overview(self) -> dict[str, tuple[int, Any]]:
        rows = self._all(
            "SELECT session_id, turns, prompt FROM (SELECT session_id, prompt, "
            "count(*) OVER (PARTITION BY session_id) AS turns, "
            "row_number() OVER (PARTITION BY session_id ORDER BY number) AS position "
            f"FROM turns WHERE status IN ({marks(ENDED)}) AND reverted_by IS NULL) AS ranked "
            "WHERE position = 1",
            ENDED,
        )
        return {session_id: (int(turns), loads(prompt)) for session_id, turns, prompt in rows}

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
        cursor = self._run(
            "UPDATE turns SET status = ?, ended_at = ?, detail = ?, event_count = ? "
            "WHERE token = ? AND status = ?",
            (status.value, ended_at, readable(detail), event_count, token, expected.value),
        )
        return cursor.rowcount == 1

    def end_turns(self, ends: Sequence[TurnEnd], *, expected: TurnStatus) -> None:
        self._run_many(
            "UPDATE turns SET status = ?, ended_at = ?, detail = ?, event_count = ? "
            "WHERE token = ? AND status = ?",
            [
                (status.value, ended_at, readable(detail), count, token, expected.value)
                for token, status, ended_at, detail, count in ends
            ],
        )

    def reopen_turn(self, token: str, owner_id: str, fence: str) -> bool:
        cursor = self._run(
            "UPDATE turns SET status = ?, owner_id = ?, fence = ?, ended_at = NULL, detail = NULL, "
            "event_count = 0, end_checkpoint = NULL WHERE token = ? AND status = ?",
            (TurnStatus.RUNNING.value, owner_id, fence, token, TurnStatus.INTERRUPTED.value),
        )
        if cursor.rowcount != 1:
            return False
        self._run("DELETE FROM messages WHERE turn = ?", (token,))
        self._run("DELETE FROM file_changes WHERE turn = ? AND scope = 'turn'", (token,))
        return True

    def reposition_turn(self, token: str, number: int, parent: str | None) -> None:
        self._run(
            "UPDATE turns SET number = ?, parent = ? WHERE token = ?", (number, parent, token)
        )

    def delete_turn(self, token: str) -> None:
        row = self._one("SELECT id FROM turns WHERE token = ?", (token,))
        self._delete_events([row[0]] if row else [])
        self._run("DELETE FROM turns WHERE token = ?", (token,))
