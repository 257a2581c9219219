"""The per-session write locks of the concurrency contract (:mod:`turnback.store.sql`)."""

from __future__ import annotations

from collections.abc import Sequence

from turnback.model import TurnStatus
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import marks
from turnback.store.tx import LocksTx


class LockQueries(Queries, LocksTx):
    def lock_sessions(self, session_ids: Sequence[str]) -> None:
        """Hold these sessions against every other writer until this transaction ends (the
        contract above)."""
        if self._FOR_UPDATE and session_ids:
            ids = sorted(set(session_ids))
            self._run(
                f"SELECT id FROM sessions WHERE id IN ({marks(ids)}) ORDER BY id"
                + self._FOR_UPDATE,
                ids,
            )

    def lock_workspace(self, session_id: str) -> None:
        """:meth:`lock_sessions` for every session on the workspace of ``session_id`` (itself
        included): what a begin and a revert take, since a revert holds its whole workspace
        against new turns."""
        if self._FOR_UPDATE:
            self._run(
                "SELECT id FROM sessions WHERE workspace = "
                "(SELECT workspace FROM sessions WHERE id = ?) ORDER BY id" + self._FOR_UPDATE,
                (session_id,),
            )

    def lock_turns(self, tokens: Sequence[str]) -> dict[str, tuple[TurnStatus, str | None]]:
        """:meth:`lock_sessions` for the sessions of these turns, in the same statement that
        reads each turn's (status, fencing token)."""
        return {
            token: (TurnStatus(status), fence)
            for token, status, fence, _ in self._locked_turns(tokens)
        }
