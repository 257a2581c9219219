"""The committed conversation: the messages folded from the turns that ended, their runs of
text chunks read back from the events they join."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from turnback import jsontext
from turnback.model import TEXT_RUNS, Message, MessageKind, unreadable
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import MESSAGE, SPAN, dumps, marks
from turnback.store.sql.turns import ENDED
from turnback.store.tx import ConversationTx

CHUNK_KINDS = ("user_message_chunk", "agent_message_chunk", "agent_thought_chunk")


class ConversationQueries(Queries, ConversationTx):
    """Messages' rows. ``_joined_texts`` is a dialect hook: the backend's own aggregate."""

    def insert_messages(self, messages: Sequence[Message]) -> None:
        self._run_many(
            "INSERT INTO messages (session_id, turn, idx, kind, data) VALUES (?, ?, ?, ?, ?)",
            [(m.session_id, m.turn, m.index, m.kind.value, dumps(m.data)) for m in messages],
        )

    def messages(self, session_id: str) -> list[Message]:
        conversation = (
            f"t.session_id = ? AND t.status IN ({marks(ENDED)}) AND t.reverted_by IS NULL"
        )
        rows = self._all(
            f"SELECT {MESSAGE.select('m')} FROM messages m "
            f"JOIN turns t ON t.token = m.turn WHERE {conversation} "
            "ORDER BY t.number, t.started_at, m.idx",
            (session_id, *ENDED),
        )
        return self._with_text(rows, conversation, (session_id, *ENDED))

    def turn_messages(self, token: str) -> list[Message]:
        rows = self._all(
            f"SELECT {MESSAGE.select()} FROM messages WHERE turn = ? ORDER BY idx", (token,)
        )
        return self._with_text(rows, "t.token = ?", (token,))

    def _with_text(
        self, rows: list[tuple[Any, ...]], turns: str, params: Sequence[Any]
    ) -> list[Message]:
        """Messages from their rows, each run of text chunks (``TEXT_RUNS``) read back from the
        events it joins (of the turns ``turns`` selects): the database joins the text column of
        each run, so a run of a thousand chunks comes back as one string, not a thousand rows."""
        messages = MESSAGE.records(rows)
        if not any(TEXT_RUNS in m.data for m in messages):
            return messages
        numbers = dict(self._all(f"SELECT t.token, t.id FROM turns t WHERE {turns}", params))
        spans: set[tuple[int, int]] = set()
        for m in messages:
            base = (numbers.get(m.turn) or 0) * SPAN
            for run in m.data.get(TEXT_RUNS) or ():
                if isinstance(run, list) and len(run) == 3 and all(type(n) is int for n in run):
                    spans.add((base + run[1], base + run[2]))
        joined = self._joined_texts(sorted(spans)) if spans else {}

        def text_of(base: int) -> Callable[[int, int], str]:
            return lambda first, last: self._run_text(joined, base, first, last)

        return [
            _joined(m, text_of((numbers.get(m.turn) or 0) * SPAN)) if TEXT_RUNS in m.data else m
            for m in messages
        ]

    @abstractmethod
    def _joined_texts(self, spans: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
        """For each range of event keys whose every event has its text apart (``text`` not
        null), the texts joined in key order. A backend's own aggregate."""

    def _run_text(
        self, joined: Mapping[tuple[int, int], str], base: int, first: int, last: int
    ) -> str:
        """The text of the events ``first`` to ``last`` of a turn (keys from ``base``): joined by
        the database, or else (an event written before schema 7, or whose text stayed in its
        payload) read event by event; ValueError naming the first that is missing or damaged."""
        text = joined.get((base + first, base + last))
        if text is not None:
            return text
        if not 0 <= last - first < SPAN:
            raise ValueError(f"a run of text chunks from {first} to {last} is not one")
        rows = self._all(
            "SELECT id, payload, text FROM events "
            f"WHERE id BETWEEN ? AND ? AND kind IN ({marks(CHUNK_KINDS)})",
            (base + first, base + last, *CHUNK_KINDS),
        )
        texts = {key: apart if apart is not None else _chunk_text(p) for key, p, apart in rows}
        parts = [texts.get(base + seq) for seq in range(first, last + 1)]
        if None in parts:
            seq = first + parts.index(None)
            raise ValueError(f"event {seq} of its turn, a text chunk, is missing or damaged")
        return "".join(parts)  # type: ignore[arg-type]


#: How turnback encoded a plain text chunk before schema 7 kept its text apart, up to its text:
#: such a payload's text is read as the one JSON string it holds there (a tenth of the cost of
#: parsing it).
_CHUNK_PREFIXES = tuple(
    f'{{"sessionUpdate":"{kind}","content":{{"type":"text","text":"' for kind in CHUNK_KINDS
)


def _chunk_text(payload: str) -> str | None:
    """The text of a message chunk whose content is one plain text block; None if it is not
    one (a damaged row)."""
    if payload.endswith('"}}'):
        for prefix in _CHUNK_PREFIXES:
            if payload.startswith(prefix):
                try:  # the string that opens at the prefix's last character
                    text, end = jsontext.scan(payload, len(prefix) - 1)
                except ValueError:
                    return None
                if end == len(payload) - 2:
                    return str(text)
                break
    try:
        content = json.loads(payload).get("content")
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(content, dict) or content.get("type") != "text":
        return None
    text = content.get("text", "")
    return text if isinstance(text, str) else None


def _joined(message: Message, text_of: Callable[[int, int], str]) -> Message:
    """A message whose runs of text chunks are given their text, ``text_of(first, last)``;
    unreadable, saying why, when one of them cannot be read."""
    data = dict(message.data)
    content = list(data.get("content") or ())
    try:
        for index, first, last in data.pop(TEXT_RUNS):
            content[index] = {"type": "text", "text": text_of(first, last)}
    except (ValueError, TypeError, IndexError) as error:
        return replace(message, kind=MessageKind.UNREADABLE, data=unreadable(message.data, error))
    return replace(message, data={**data, "content": content})
