"""Folding a turn's events into conversation messages, with ACP's own semantics.

* consecutive chunks of one kind (``user_message_chunk``, ``agent_message_chunk``,
  ``agent_thought_chunk``) concatenate into one message; any other event ends the message, and
  so does a chunk with another ``messageId`` (which the message keeps, to be replayed);
* ``tool_call`` opens a tool message and every ``tool_call_update`` with the same ``toolCallId``
  merges into it (fields present in the update replace the ones before);
* a ``plan`` replaces the turn's previous plan, in place;
* an update kind turnback does not know is kept verbatim as an ``other`` message and replayed,
  never dropped. turnback's own bookkeeping kinds (permissions, input, step checkpoints) stay in
  the run timeline only, and a journal entry that could not be read is an ``unreadable``
  message.

Pure functions: no I/O, so recovery can fold the same journal any number of times.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from turnback.model import JSON, TEXT_RUNS, EventKind, JournalEntry, MessageKind, whole_event

_CHUNKS = {
    EventKind.USER_MESSAGE_CHUNK.value: MessageKind.USER,
    EventKind.AGENT_MESSAGE_CHUNK.value: MessageKind.AGENT,
    EventKind.AGENT_THOUGHT_CHUNK.value: MessageKind.THOUGHT,
}
_CHUNK_KINDS = frozenset(_CHUNKS.values())
_TIMELINE_ONLY = frozenset(
    {
        EventKind.PERMISSION_REQUESTED.value,
        EventKind.PERMISSION_ANSWERED.value,
        EventKind.INPUT_REQUESTED.value,
        EventKind.INPUT_ANSWERED.value,
        EventKind.STEP_CHECKPOINT.value,
        EventKind.REWIND.value,
        EventKind.AVAILABLE_COMMANDS_UPDATE.value,
        EventKind.CURRENT_MODE_UPDATE.value,
    }
)
_FINISHED_TOOL = frozenset({"completed", "failed"})
UNREADABLE = "_turnback/unreadable"


class UnreadableEntry(ValueError):
    """A journal entry whose payload is not a JSON object: recovery sets its turn aside."""

    def __init__(self, entry: JournalEntry, why: str) -> None:
        super().__init__(f"journal entry {entry.seq} of turn {entry.turn} is unreadable ({why})")
        self.entry = entry


def parse(entry: JournalEntry, *, keep_unreadable: bool = False) -> JSON:
    """The event an entry holds. An unreadable one raises, or with ``keep_unreadable`` is
    wrapped so its raw text still reaches the run timeline."""
    try:
        event = json.loads(entry.payload)
        if isinstance(event, dict):
            return whole_event(event, entry.text)  # type: ignore[no-any-return]
        why = "not a JSON object"
    except ValueError as error:
        why = str(error)
    if keep_unreadable:
        return {"sessionUpdate": UNREADABLE, "kind": entry.kind, "raw": entry.payload, "error": why}
    raise UnreadableEntry(entry, why)


def superseded(timeline: Iterable[tuple[int, JSON]]) -> set[int]:
    """Seqs of events a later ``_turnback/rewind`` made void: those recorded after the step
    checkpoint it rewound to. They stay in the run timeline and leave the conversation, so an
    update the agent sends again after a resume is shown once."""
    seen: list[int] = []
    void: set[int] = set()
    for seq, event in timeline:
        if event.get("sessionUpdate") == EventKind.REWIND:
            to = event.get("toSeq", 0)
            void.update(s for s in seen if s > to)
        seen.append(seq)
    return void


def prompt_blocks(prompt: Any) -> list[JSON]:
    if isinstance(prompt, str):
        return [{"type": "text", "text": prompt}]
    return [block for block in prompt if isinstance(block, dict)]


class Folder:
    """Folds a turn's events one at a time. A running turn folds as it records, so completing
    it need not read its journal back; recovery folds a journal in one go (:func:`fold`).

    With ``refer``, the messages are what the store keeps: a run of text chunks is the range of
    seqs it joins (``TEXT_RUNS``), not a copy of their text, which the events already hold; the
    folder then keeps no text at all. Each event is given with its seq."""

    def __init__(self, prompt: Any, *, refer: bool = False) -> None:
        self._messages: list[tuple[MessageKind, JSON]] = [
            (MessageKind.USER, {"content": prompt_blocks(prompt)})
        ]
        self._open: MessageKind | None = None
        self._tools: dict[str, int] = {}
        self._plan: int | None = None
        self._refer = refer

    def add(self, event: JSON, seq: int = 0) -> None:
        """Fold one event (``seq``: its position in the journal, needed with ``refer``). The
        folder keeps references into ``event``: pass one nobody else will change (a freshly
        parsed one)."""
        kind = str(event.get("sessionUpdate", ""))
        chunk = _CHUNKS.get(kind)
        if chunk is not None:
            self._chunk(chunk, event.get("content"), event.get("messageId"), seq)
            return
        self._open = None
        if kind in _TIMELINE_ONLY:
            return
        messages = self._messages
        body = {key: value for key, value in event.items() if key != "sessionUpdate"}
        if kind in (EventKind.TOOL_CALL, EventKind.TOOL_CALL_UPDATE):
            call_id = str(event.get("toolCallId", ""))
            if call_id in self._tools:
                merged = messages[self._tools[call_id]][1]
                merged.update({key: value for key, value in body.items() if value is not None})
            else:
                self._tools[call_id] = len(messages)
                messages.append((MessageKind.TOOL_CALL, body))
        elif kind == EventKind.PLAN:
            if self._plan is None:
                self._plan = len(messages)
                messages.append((MessageKind.PLAN, body))
            else:
                messages[self._plan] = (MessageKind.PLAN, body)
        elif kind == EventKind.ERROR:
            messages.append((MessageKind.ERROR, body))
        elif kind == EventKind.NOTICE:
            messages.append((MessageKind.NOTICE, body))
        elif kind == UNREADABLE:
            messages.append((MessageKind.UNREADABLE, dict(event)))
        else:
            messages.append((MessageKind.OTHER, dict(event)))

    def add_text(self, kind: str, text: str, message_id: Any = None, seq: int = 0) -> None:
        """Fold a chunk event whose content is one plain text block, from its text alone."""
        self._add_text(self._content(_CHUNKS[kind], message_id), text, seq)

    def _chunk(self, chunk: MessageKind, block: Any, message_id: Any, seq: int) -> None:
        content = self._content(chunk, message_id)
        if _plain_text(block):
            self._add_text(content, block.get("text", ""), seq)
        elif block is not None:
            content.append(block)

    def _add_text(self, content: list[Any], text: str, seq: int) -> None:
        last = content[-1] if content else None
        if not self._refer:
            if isinstance(last, _TextRun):
                last.add(text)
            else:
                content.append(_TextRun(text))
        elif isinstance(last, _SeqRun) and last.last == seq - 1:
            last.last = seq
        else:
            content.append(_SeqRun(seq))

    def _content(self, chunk: MessageKind, message_id: Any) -> list[Any]:
        """The content of the open message of ``chunk``'s kind, opening one when needed."""
        # ACP: chunks of one message share a messageId; a new messageId starts a new message.
        if self._open is not chunk or (
            message_id is not None and self._messages[-1][1].get("messageId") != message_id
        ):
            data: JSON = {"content": []}
            if message_id is not None:
                data["messageId"] = message_id
            self._messages.append((chunk, data))
        self._open = chunk
        content: list[Any] = self._messages[-1][1]["content"]
        return content

    def messages(self) -> list[tuple[MessageKind, JSON]]:
        """The turn's messages so far; each run of plain text as one text block (with
        ``refer``: as a null block and its seqs in ``TEXT_RUNS``)."""
        return [
            (kind, _chunk_message(data)) if kind in _CHUNK_KINDS else (kind, data)
            for kind, data in self._messages
        ]


def _chunk_message(data: JSON) -> JSON:
    content: list[Any] = []
    runs: list[list[int]] = []
    for block in data["content"]:
        if isinstance(block, _SeqRun):
            runs.append([len(content), block.first, block.last])
            content.append(None)
        elif isinstance(block, _TextRun):
            content.append({"type": "text", "text": block.text()})
        else:
            content.append(block)
    return {**data, "content": content, TEXT_RUNS: runs} if runs else {**data, "content": content}


class _SeqRun:
    """Consecutive plain text chunks of one message, as the seqs of their events."""

    __slots__ = ("first", "last")

    def __init__(self, seq: int) -> None:
        self.first = self.last = seq


class _TextRun:
    """Consecutive plain text chunks of one message, joined as they come: each chunk costs its
    text and about a byte more (kept as a block each, a chunk costs some 250 bytes)."""

    __slots__ = ("_joined", "_recent")

    def __init__(self, text: str) -> None:
        self._joined: list[str] = []  # each the text of _JOIN_EVERY chunks
        self._recent = [text]

    def add(self, text: str) -> None:
        self._recent.append(text)
        if len(self._recent) == _JOIN_EVERY:
            self._joined.append("".join(self._recent))
            self._recent = []

    def text(self) -> str:
        return "".join(self._joined) + "".join(self._recent)


#: Chunks of a text run kept apart before they are joined into one string: the cost of a string
#: object (some 57 bytes) is shared by this many chunks, and each character is copied twice.
_JOIN_EVERY = 64


def is_text_chunk(kind: str, event: JSON) -> bool:
    """A message chunk whose content is one plain text block (most of any turn's events)."""
    return kind in _CHUNKS and _plain_text(event.get("content"))


def fold(prompt: Any, events: Iterable[JSON]) -> list[tuple[MessageKind, JSON]]:
    """The messages of one turn: the user's prompt, then what its events say."""
    folder = Folder(prompt)
    for event in events:
        folder.add(event)
    return folder.messages()


def _plain_text(block: Any) -> bool:
    """Whether ``block`` is a text block with no key but ``type`` and a string ``text``."""
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text", ""), str)
        and (len(block) == 1 or (len(block) == 2 and "text" in block))
    )


def unfinished_tool_calls(events: Sequence[JSON]) -> list[str]:
    """Ids of tool calls that started and never reported ``completed`` or ``failed``."""
    status: dict[str, str | None] = {}
    for event in events:
        kind = event.get("sessionUpdate")
        if kind in (EventKind.TOOL_CALL, EventKind.TOOL_CALL_UPDATE):
            call_id = str(event.get("toolCallId", ""))
            if event.get("status") is not None or call_id not in status:
                status[call_id] = event.get("status")
    return [call_id for call_id, state in status.items() if state not in _FINISHED_TOOL]


def cancelled_tool_result(call_id: str, why: str) -> JSON:
    """The synthetic result given to a tool call that never finished."""
    return {
        "sessionUpdate": EventKind.TOOL_CALL_UPDATE.value,
        "toolCallId": call_id,
        "status": "failed",
        "content": [{"type": "content", "content": {"type": "text", "text": f"Cancelled: {why}"}}],
        "_meta": {"turnback": {"synthetic": True, "cancelled": True}},
    }


def notice(text: str, **data: Any) -> JSON:
    return {"sessionUpdate": EventKind.NOTICE.value, "text": text, **data}


def error_event(text: str, **data: Any) -> JSON:
    return {"sessionUpdate": EventKind.ERROR.value, "text": text, **data}
