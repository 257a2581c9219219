"""The processes that run turns, and their leases."""

from __future__ import annotations

from collections.abc import Collection

from turnback.model import UNFINISHED_REVERTS, Owner
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import OWNER, marks
from turnback.store.tx import OwnersTx

_UNFINISHED = tuple(state.value for state in UNFINISHED_REVERTS)


class OwnerQueries(Queries, OwnersTx):
    """Owners' rows. ``now`` is a dialect hook: the database's clock, in seconds since the
    epoch, by which alone leases are judged, so machines whose clocks disagree still agree on
    who holds a lease."""

    def renew_lease(self, owner_id: str, seconds: float) -> float | None:
        """Extend an owner's lease to ``seconds`` from now (database time); the new expiry, or
        None when the owner's row is gone."""
        expires = self.now() + seconds
        cursor = self._run("UPDATE owners SET lease_expires = ? WHERE id = ?", (expires, owner_id))
        return expires if cursor.rowcount == 1 else None

    def upsert_owner(self, owner: Owner) -> None:
        self._run(
            f"INSERT INTO owners ({OWNER.select()}) VALUES ({marks(OWNER.names)}) "
            "ON CONFLICT (id) DO UPDATE SET "
            # an owner recorded without a lease (an agent's process, say) keeps the one it holds
            "lease_expires = coalesce(excluded.lease_expires, owners.lease_expires)",
            [getattr(owner, name) for name in OWNER.names],
        )

    def get_owner(self, owner_id: str) -> Owner | None:
        row = self._one(f"SELECT {OWNER.select()} FROM owners WHERE id = ?", (owner_id,))
        return OWNER.record(row) if row else None

    def get_owners(self, owner_ids: Collection[str]) -> dict[str, Owner]:
        if not owner_ids:
            return {}
        ids = sorted(owner_ids)
        rows = self._all(f"SELECT {OWNER.select()} FROM owners WHERE id IN ({marks(ids)})", ids)
        return {owner.id: owner for owner in OWNER.records(rows)}

    def unreferenced_owners(self) -> list[Owner]:
        rows = self._all(
            f"SELECT {OWNER.select()} FROM owners WHERE id NOT IN "
            "(SELECT owner_id FROM turns WHERE status = 'running' AND owner_id IS NOT NULL) "
            "AND id NOT IN (SELECT owner_id FROM reverts WHERE owner_id IS NOT NULL "
            f"AND state IN ({marks(_UNFINISHED)}))",
            _UNFINISHED,
        )
        return OWNER.records(rows)

    def delete_owner(self, owner_id: str, *, lease: float | None = None) -> bool:
        if lease is None:
            return self._run("DELETE FROM owners WHERE id = ?", (owner_id,)).rowcount == 1
        cursor = self._run(
            "DELETE FROM owners WHERE id = ? AND lease_expires = ?", (owner_id, lease)
        )
        return cursor.rowcount == 1
