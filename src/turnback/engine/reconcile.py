"""Writes whose commit may or may not have happened (README, Design, invariants 1-3).

Some facts about a commit whose reply was lost:

* A store error raised by a write transaction does not say whether it committed. On PostgreSQL
  the server may commit and its reply never arrive: the network drops, the backend is terminated
  (``pg_terminate_backend``, a restart), the server fails over. The client cannot tell that from
  a transaction that never reached COMMIT. (On SQLite a failed commit has rolled back; reading
  back costs one read and tells the same.)
* Doing the write again blindly is wrong both ways: an event inserted twice is refused by the
  primary key (every later flush of the turn then fails the same way, for ever), and a turn's
  end or begin written twice would be a second turn or an end contradicting the first.
* Taking the error at its word is wrong too: a begin that landed leaves a running turn that its
  live owner never runs and nobody else may recover; an end that landed is later mistaken for a
  takeover.

So every write of a turn carries what identifies it, and after an error the engine reads back
whether it landed, then goes on from what is stored:

* a begin or a reopen: the turn's token and the fencing token it drew (no other write gives a
  running turn that fencing token);
* a journal flush: the seqs of its entries. A flush is one transaction, and the turn's journal
  on disk is always a prefix of what was recorded, so the entries at or below the highest seq
  stored landed, with the rows that travel with them (a step checkpoint, pending requests), and
  the others did not;
* an end: its status and its end time, as this process chose them (recovery, the only other
  writer that ends a running turn, chooses its own).

A read-back is a read, on a fresh connection when the old one broke. When even that fails (the
store is out of reach), the outcome stays unknown and the caller is told the store's error; what
it did not know yet is read back before the next write of the same turn (the next flush, the next
end, the session's next begin), never written again first.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from turnback import faults
from turnback.model import Turn, TurnStatus
from turnback.store import Store


def begun(store: Store, token: str, fence: str) -> tuple[Turn, int] | None:
    """The turn ``token`` and the highest seq of its journal, if a begin or reopen that drew
    ``fence`` landed (the turn runs under it); None if it did not. StoreError if the store
    cannot be read."""
    faults.point("turn.begin.reconcile")
    with store.read() as tx:
        turn = tx.get_turn(token)
        if turn is None or turn.status is not TurnStatus.RUNNING or turn.fence != fence:
            return None
        return turn, tx.journal_size(token)[1]


def journal_heads(
    store: Store, fences: Mapping[str, str | None], tokens: Collection[str]
) -> dict[str, int | None]:
    """For each turn of ``tokens``: the highest seq its journal holds, or None if it no longer
    runs under its fencing token in ``fences`` (another process took it over; a turn absent from
    ``fences`` only needs to run). StoreError if the store cannot be read."""
    faults.point("journal.reconcile")
    heads: dict[str, int | None] = {}
    with store.read() as tx:
        for token in tokens:
            turn = tx.get_turn(token)
            running = turn is not None and turn.status is TurnStatus.RUNNING
            if not running or fences.get(token) not in (None, turn.fence if turn else None):
                heads[token] = None
            else:
                heads[token] = tx.journal_size(token)[1]
    return heads


def ended(store: Store, token: str, ends: Collection[tuple[TurnStatus, float]]) -> Turn | None:
    """The turn ``token`` if one of the ends this process wrote (each a status and an end time)
    landed; None if none did, or another process ended it. StoreError if the store cannot be
    read."""
    faults.point("turn.end.reconcile")
    with store.read() as tx:
        turn = tx.get_turn(token)
    if turn is None or (turn.status, turn.ended_at) not in ends:
        return None
    return turn
