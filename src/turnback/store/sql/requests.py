"""Sessions' pending requests, one row each: asking or answering one is one small write."""

from __future__ import annotations

from collections.abc import Sequence

from turnback.store.sql.base import Queries
from turnback.store.sql.rows import dumps
from turnback.store.tx import RequestsTx


class RequestQueries(Queries, RequestsTx):
    def add_pending_request(
        self, session_id: str, turn: str, request_id: str, request: dict[str, object], at: float
    ) -> None:
        self._run(
            "INSERT INTO pending_requests (session_id, turn, request_id, request, at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (turn, request_id) DO UPDATE SET "
            "request = excluded.request, at = excluded.at",
            (session_id, turn, request_id, dumps(request), at),
        )

    def remove_pending_request(self, turn: str, request_id: str) -> bool:
        return (
            self._run(
                "DELETE FROM pending_requests WHERE turn = ? AND request_id = ?",
                (turn, request_id),
            ).rowcount
            > 0
        )

    def clear_pending_requests(self, turns: Sequence[str]) -> None:
        self._run_many("DELETE FROM pending_requests WHERE turn = ?", [(t,) for t in turns])
