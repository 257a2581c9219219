"""Sessions' pending requests."""

from __future__ import annotations

from collections.abc import Sequence

from turnback.store.sql.base import Queries
from turnback.store.sql.rows import dumps
from turnback.store.tx import RequestsTx


class RequestQueries(Queries, RequestsTx):
    def set_pending_requests(
        self, session_id: str, requests: Sequence[dict[str, object]], now: float
    ) -> None:
        self._run(
            "UPDATE sessions SET pending_requests = ?, updated_at = ? WHERE id = ?",
            (dumps(list(requests)), now, session_id),
        )
