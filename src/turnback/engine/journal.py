"""The journal's durability policy (docs/design.md, invariant 3: acknowledged means durable).

``Journal.append`` is called by ``RunningTurn.record``; when it returns, the event is
*acknowledged*, and what that promises depends on the mode:

* ``strict`` -- the event and everything before it is committed (synced) before append returns.
* ``batched`` -- events wait in memory and a flusher thread commits them together within
  ``window`` seconds, one sync per batch. A *boundary* event (tool call start or end, permission,
  user input, step checkpoint, error) is committed with everything before it before append returns.
* ``turn`` -- events wait in memory until the turn ends; a crash loses them (never the turn's
  begin, which is always durable).

Flushes are serialised by one lock and each takes the whole buffer, so the journal on disk is
always a prefix of what was acknowledged, in order: a boundary event can never be durable while an
event recorded before it is not. Rows that must commit together with an event (a step checkpoint,
a change to the session's pending requests) travel with it as ``after`` callbacks run in the same
transaction. A flush that fails keeps its entries in memory, and the error is raised to the next
caller that needs durability. A failed flush may have committed all the same (its reply was
lost): before anything is written again, what it wrote is read back, and only what did not land
is kept (``engine/reconcile.py``), so the journal stays a prefix of what was recorded, each
event in it once.

Fencing (see ``engine/owners.py``): a turn this process runs is *held* with its fencing token.
Each flush locks the sessions of the turns it writes and reads their status and token in the same
transaction; the entries and rows of a turn that is no longer running under that token are
dropped, never written, and the turn is marked lost. From then on its every write raises
``OwnershipLost``, as does a flush asked for on its behalf.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from turnback import faults
from turnback.engine import reconcile
from turnback.errors import OwnershipLost, StoreError
from turnback.model import Durability, JournalEntry, TurnStatus
from turnback.records import record
from turnback.store import Store, Tx

After = Callable[[Tx], None]


@record(frozen=False)
class _Pending:
    entries: list[JournalEntry]
    after: list[tuple[str, int, After]]  # (turn, seq of the entry it goes with, callback)


class Journal:
    def __init__(self, store: Store, mode: Durability, *, window: float = 0.01) -> None:
        self.store = store
        self.mode = mode
        self.window = window
        self._mutex = threading.Lock()  # guards the buffer
        self._flushing = threading.Lock()  # serialises flushes, so disk order = record order
        self._wake = threading.Condition(self._mutex)
        self._pending = _Pending([], [])
        self._first_pending_at: float | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        #: the longest a boundary append waited for its commit, in seconds (for benchmarks)
        self.longest_boundary_wait = 0.0
        self._fences: dict[str, str | None] = {}  # turns held, and their fencing tokens
        self._lost: dict[str, str] = {}  # turns taken over, and why
        #: a flush failed without its caller learning whether it committed (engine/reconcile.py)
        self._unconfirmed = False

    # -- fencing -------------------------------------------------------------------------------

    def hold(self, turn: str, fence: str | None) -> None:
        """Write ``turn``'s entries only while it runs under ``fence``."""
        with self._mutex:
            self._fences[turn] = fence
            self._lost.pop(turn, None)

    def release(self, turn: str) -> None:
        with self._mutex:
            self._fences.pop(turn, None)
            self._lost.pop(turn, None)

    def lose_all(self, reason: str) -> None:
        """Every held turn is lost (this process's lease was): write none of them again."""
        with self._mutex:
            self._mark_lost(set(self._fences), reason)

    def lose_turn(self, turn: str, reason: str) -> None:
        with self._mutex:
            self._mark_lost({turn}, reason)

    def check(self, turn: str) -> None:
        """Raise OwnershipLost if ``turn`` was taken over."""
        reason = self._lost.get(turn)
        if reason is not None:
            raise OwnershipLost(
                f"turn {turn} was taken over ({reason}); nothing this process recorded for it "
                "since was written, and nothing more will be. Stop the turn here",
                turn,
            )

    def _mark_lost(self, turns: set[str], reason: str) -> None:
        """With the mutex held: mark ``turns`` lost and drop what waits to be written for them."""
        for turn in turns:
            self._lost.setdefault(turn, reason)
        self._pending.entries = [e for e in self._pending.entries if e.turn not in turns]
        self._pending.after = [a for a in self._pending.after if a[0] not in turns]

    def append(
        self, entry: JournalEntry, *, boundary: bool, after: After | None = None, wait: bool = True
    ) -> None:
        """Buffer ``entry`` and, as the mode says, commit it before returning. With
        ``wait=False`` it is only buffered: the caller makes it durable with :meth:`flush` (off
        its event loop, say) before it acknowledges the event to anyone."""
        self.check(entry.turn)
        with self._mutex:
            self._pending.entries.append(entry)
            if after is not None:
                self._pending.after.append((entry.turn, entry.seq, after))
            if self._first_pending_at is None:
                self._first_pending_at = time.monotonic()
                if self.mode is Durability.BATCHED:
                    # The flusher sleeps until this first entry is due; waking it for each
                    # later one would only cost a thread switch per event.
                    self._start_flusher()
                    self._wake.notify()
            if self.mode is Durability.TURN or not wait:
                return
            if (
                self.mode is Durability.BATCHED
                and not boundary
                and len(self._pending.entries) < 4096
                and time.monotonic() - self._first_pending_at < self.window
            ):
                # The flusher commits it within the window. Past the window the caller flushes
                # itself: a thread that keeps recording can keep the flusher from running.
                return
        started = time.monotonic()
        self.flush(entry.turn)
        if boundary:
            self.longest_boundary_wait = max(self.longest_boundary_wait, time.monotonic() - started)

    def flush(self, turn: str | None = None) -> None:
        """Commit everything appended so far; raises the store's error if it cannot, and
        OwnershipLost if ``turn`` was found taken over.

        A flush that failed may have committed all the same (the reply to its commit was lost):
        what it wrote is read back, at once or else before the next flush writes anything, and
        only what did not land is written again (engine/reconcile.py)."""
        with self._flushing:
            with self._mutex:
                pending, self._pending = self._pending, _Pending([], [])
                self._first_pending_at = None
            try:
                if self._unconfirmed and (pending.entries or pending.after):
                    self._unwritten(pending)
                if pending.entries or pending.after:
                    self._write(pending)
            except StoreError:
                with self._mutex:
                    # Keep them, in order, ahead of anything appended meanwhile.
                    self._pending = _Pending(
                        pending.entries + self._pending.entries, pending.after + self._pending.after
                    )
                    self._first_pending_at = self._first_pending_at or time.monotonic()
                raise
        if turn is not None:
            self.check(turn)

    def _write(self, pending: _Pending) -> None:
        """Write ``pending`` in one transaction, but for the held turns found taken over (marked
        lost). When that fails, what did not land stays in ``pending``, and the store's error is
        raised unless all of it landed."""
        faults.point("journal.flush.before")
        tokens = sorted({e.turn for e in pending.entries} | {a[0] for a in pending.after})
        fences = {t: self._fences[t] for t in tokens if t in self._fences}
        try:
            if pending.after:
                with self.store.atomic() as tx:
                    states = tx.append_fenced(pending.entries, fences)
                    lost = self._lost_of(tokens, states)
                    for token, _seq, after in pending.after:
                        if token not in lost:
                            after(tx)
            else:  # events alone: the store may write them in fewer round trips
                states = self.store.append_fenced(pending.entries, fences)
                lost = self._lost_of(tokens, states)
            faults.point("journal.flush.after")
        except StoreError as error:
            self._unconfirmed = True
            try:
                self._unwritten(pending)
            except StoreError:
                raise error from None  # read back before the next flush writes
            if pending.entries or pending.after:
                raise
            return  # it had committed
        pending.entries, pending.after = [], []
        if lost:
            with self._mutex:
                self._mark_lost(lost, "another process recovered it")

    def _unwritten(self, pending: _Pending) -> None:
        """Read back what an unconfirmed flush wrote and leave in ``pending`` only what did not
        land. A held turn no longer running under its fencing token was taken over: it is
        marked lost, and none of its entries is left."""
        tokens = {e.turn for e in pending.entries} | {a[0] for a in pending.after}
        fences = {t: self._fences[t] for t in tokens if t in self._fences}
        heads = reconcile.journal_heads(self.store, fences, sorted(tokens))
        self._unconfirmed = False
        gone = {t for t, head in heads.items() if head is None}
        pending.entries = [
            e for e in pending.entries if e.turn not in gone and e.seq > (heads[e.turn] or 0)
        ]
        pending.after = [a for a in pending.after if a[0] not in gone and a[1] > (heads[a[0]] or 0)]
        if gone & set(fences):
            with self._mutex:
                self._mark_lost(gone & set(fences), "another process recovered it")

    def _lost_of(
        self, tokens: list[str], states: dict[str, tuple[TurnStatus, str | None]]
    ) -> set[str]:
        """The held turns among ``tokens`` that no longer run under their fencing token."""
        return {
            token
            for token in tokens
            if token in self._fences
            and states.get(token) != (TurnStatus.RUNNING, self._fences[token])
        }

    def discard(self, turn: str) -> None:
        """Forget the unflushed entries of a turn that was removed or ended elsewhere."""
        with self._mutex:
            self._pending.entries = [e for e in self._pending.entries if e.turn != turn]
            self._pending.after = [a for a in self._pending.after if a[0] != turn]
            self._fences.pop(turn, None)

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()
        if self.mode is not Durability.TURN:
            self.flush()

    # -- the batched flusher -------------------------------------------------------------------

    def _start_flusher(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(
                target=self._run_flusher, name="turnback-journal", daemon=True
            )
            self._thread.start()

    def _run_flusher(self) -> None:
        while True:
            with self._mutex:
                while self._first_pending_at is None and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                assert self._first_pending_at is not None
                due = self._first_pending_at + self.window
                delay = due - time.monotonic()
                if delay > 0:
                    self._wake.wait(delay)
                    continue
            try:
                self.flush()
            except StoreError:
                with self._mutex:
                    self._wake.wait(min(1.0, self.window * 10))  # back off; callers see the error
