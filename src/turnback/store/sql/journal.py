"""A turn's events, in place: its journal while it runs or is set aside, its run timeline once
it has ended."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from turnback.model import JournalEntry, RunEvent, TurnStatus
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import JOURNAL_ENTRY, OF_TURN, RUN_EVENT, SEQ, SPAN, dumps, marks
from turnback.store.tx import JournalTx

#: A turn's events are its journal while it runs or is set aside, its run timeline once ended.
KEEPS_JOURNAL = (TurnStatus.RUNNING.value, TurnStatus.SET_ASIDE.value)


class JournalQueries(Queries, JournalTx):
    def append_journal(self, entries: Sequence[JournalEntry]) -> int:
        if not entries:
            return 0
        ordered = sorted({e.turn for e in entries})
        ids = dict(  # the turns' numbers, and which of them still run
            self._all(
                f"SELECT token, id FROM turns WHERE status = ? AND token IN ({marks(ordered)})",
                (TurnStatus.RUNNING.value, *ordered),
            )
        )
        return self._insert_events(entries, ids)

    def _insert_events(self, entries: Sequence[JournalEntry], ids: Mapping[str, int]) -> int:
        """Write the entries of the turns numbered in ``ids``; how many others were dropped."""
        kept = [
            (ids[e.turn] * SPAN + e.seq, e.kind, e.payload, e.at, e.text)
            for e in entries
            if e.turn in ids
        ]
        if kept:
            self._run_many(
                "INSERT INTO events (id, kind, payload, at, text) VALUES (?, ?, ?, ?, ?)", kept
            )
        return len(entries) - len(kept)

    def append_fenced(
        self, entries: Sequence[JournalEntry], fences: Mapping[str, str | None]
    ) -> dict[str, tuple[TurnStatus, str | None]]:
        """Under the locks of the entries' sessions: write the entries of each turn that runs
        under its fencing token in ``fences`` (a turn absent from it, or with None there: that
        runs at all); return each turn's (status, fencing token) as found under the locks."""
        states: dict[str, tuple[TurnStatus, str | None]] = {}
        ids: dict[str, int] = {}  # the numbers of the turns written to
        for token, status, fence, number in self._locked_turns(sorted({e.turn for e in entries})):
            states[token] = (TurnStatus(status), fence)
            if status == TurnStatus.RUNNING.value and fences.get(token) in (None, fence):
                ids[token] = number
        self._insert_events(entries, ids)
        return states

    def journal(self, token: str) -> list[JournalEntry]:
        rows = self._all(
            f"SELECT {JOURNAL_ENTRY.select()} FROM turns t JOIN events e "
            f"ON {OF_TURN} WHERE t.token = ? AND t.status IN (?, ?) ORDER BY e.id",
            (token, *KEEPS_JOURNAL),
        )
        return JOURNAL_ENTRY.records(rows)

    def journals(self, tokens: Sequence[str]) -> dict[str, list[JournalEntry]]:
        found: dict[str, list[JournalEntry]] = {token: [] for token in tokens}
        if not tokens:
            return found
        rows = self._all(
            f"SELECT {JOURNAL_ENTRY.select()} FROM turns t JOIN events e "
            f"ON {OF_TURN} WHERE t.token IN ({marks(tokens)}) AND t.status IN (?, ?) "
            "ORDER BY e.id",
            (*tokens, *KEEPS_JOURNAL),
        )
        for entry in JOURNAL_ENTRY.records(rows):
            found[entry.turn].append(entry)
        return found

    def journal_size(self, token: str) -> tuple[int, int]:
        row = self._one(
            f"SELECT count(*), coalesce(max({SEQ}), 0) FROM turns t JOIN events e "
            f"ON {OF_TURN} WHERE t.token = ? AND t.status IN (?, ?)",
            (token, *KEEPS_JOURNAL),
        )
        assert row is not None
        count, highest = row
        return int(count), int(highest)

    def insert_run_events(self, events: Sequence[RunEvent]) -> None:
        self._run_many(
            f"INSERT INTO events (id, kind, payload, at) SELECT id * {SPAN} + ?, ?, ?, ? "
            "FROM turns WHERE token = ?",
            [(e.seq, e.kind, dumps(e.event), e.at, e.turn) for e in events],
        )

    def replace_run_events(self, events: Sequence[RunEvent]) -> None:
        self._run_many(
            "UPDATE events SET kind = ?, payload = ? "
            f"WHERE id = (SELECT id * {SPAN} + ? FROM turns WHERE token = ?)",
            [(e.kind, dumps(e.event), e.seq, e.turn) for e in events],
        )

    def run_events(self, token: str) -> list[RunEvent]:
        rows = self._all(
            f"SELECT {RUN_EVENT.select()} "
            f"FROM turns t JOIN events e ON {OF_TURN} WHERE t.token = ? ORDER BY e.id",
            (token,),
        )
        return RUN_EVENT.records(rows)
