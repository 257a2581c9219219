"""A session's stored conversation as ACP ``session/update`` payloads, for ``session/load``.

The conversation turnback keeps is the folded form of each turn's events (chunks joined, tool
call updates merged, the last plan, each message's ``messageId``; turnback assigns one where the
agent gave none, the user's prompt included: see :func:`message_id`). Replaying it gives the editor
the same conversation in fewer notifications; turnback's own notices -- an interrupted turn's
recovery, a turn resumed after the agent stopped, an error, and between turns a rewind or a
slash command's answer -- become agent text marked ``_meta.turnback.notice``, where they
happened, since an editor knows no turnback kinds.

A fork (``session/fork``) is the engine's ``Session.fork``: the conversation's rows copied in one
transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from turnback.model import Activity, EventKind, Message, MessageKind, Turn

_CHUNKS = {
    MessageKind.USER: EventKind.USER_MESSAGE_CHUNK.value,
    MessageKind.AGENT: EventKind.AGENT_MESSAGE_CHUNK.value,
    MessageKind.THOUGHT: EventKind.AGENT_THOUGHT_CHUNK.value,
}


#: The namespace of the message ids turnback assigns (UUIDs, as ACP's message ids are).
_IDS = uuid.UUID("6f1d2a3e-0b7c-5e4f-9a8d-2c1b0e9f7a65")


def assigned_id(turn: str, index: int) -> str:
    """The id turnback gives the message at ``index`` of the turn whose token is ``turn`` when
    the agent gave it none: the same every time it is asked, so a ``session/load`` shows the
    ids a ``session/prompt`` answered with."""
    return str(uuid.uuid5(_IDS, f"{turn}/{index}"))


def message_id(message: Message) -> str | None:
    """A user, agent or thought message's ``messageId``: the agent's own, else turnback's
    (:func:`assigned_id`); None for what is not such a message (a tool call, a plan)."""
    if message.kind not in _CHUNKS:
        return None
    own = message.data.get("messageId")
    return str(own) if own is not None else assigned_id(message.turn, message.index)


#: Activities a session/load shows again where they happened, as the proxy words them.
COMMAND_ANSWERED = "command.answered"
_REPLAYED = frozenset({"turn.reverted", "turn.revert.undone", COMMAND_ANSWERED})


def replay(
    messages: Sequence[Message], turns: Sequence[Turn] = (), activities: Sequence[Activity] = ()
) -> Iterator[dict[str, Any]]:
    """The ``update`` objects that show ``messages`` to an editor, in order, with turnback's
    own lines between turns (a rewind, a slash command's answer) before the first turn that
    began after them."""
    started = {turn.token: turn.started_at for turn in turns}
    notes = sorted((a for a in activities if a.code in _REPLAYED), key=lambda a: a.at)
    shown = 0
    current: str | None = None
    for message in messages:
        if message.turn != current:
            current = message.turn
            begin = started.get(current, float("inf"))
            while shown < len(notes) and notes[shown].at < begin:
                yield _note(notes[shown])
                shown += 1
        yield from _message(message)
    for note in notes[shown:]:
        yield _note(note)


def _note(activity: Activity) -> dict[str, Any]:
    data = activity.data
    if activity.code == COMMAND_ANSWERED:
        return notice_chunk(activity.message, "command")
    if activity.code == "turn.reverted":
        turns = data.get("turns")
        later = len(turns) if isinstance(turns, list) else 0
        return notice_chunk(
            f"Rewound to turn {data.get('to')}; {later} later turn(s) kept as history.", "rewind"
        )
    turns = data.get("turns")
    back = len(turns) if isinstance(turns, list) else 0
    return notice_chunk(f"Undid a rewind: {back} turn(s) are back.", "rewind")


def _message(message: Message) -> Iterator[dict[str, Any]]:
    if message.kind is MessageKind.UNREADABLE:
        yield notice_chunk(
            "A stored message of this session cannot be read back and is left out here.",
            "unreadable",
        )
    elif message.kind in (MessageKind.NOTICE, MessageKind.ERROR):
        yield notice_chunk(message.text, message.kind.value)
    else:
        yield from _events(message)


def notice_chunk(text: str, kind: str = "notice") -> dict[str, Any]:
    """turnback speaking to the editor, as agent text on a line of its own."""
    return {
        "sessionUpdate": EventKind.AGENT_MESSAGE_CHUNK.value,
        "content": {"type": "text", "text": f"\n[turnback] {text}\n"},
        "_meta": {"turnback": {"notice": kind}},
    }


def _events(message: Message) -> Iterator[dict[str, Any]]:
    """The events that fold back into ``message``."""
    data = message.data
    chunk = _CHUNKS.get(message.kind)
    if chunk is not None:
        content = data.get("content")
        for block in content if isinstance(content, list) else []:
            yield {"sessionUpdate": chunk, "content": block, "messageId": message_id(message)}
    elif message.kind is MessageKind.TOOL_CALL:
        yield {"sessionUpdate": EventKind.TOOL_CALL.value, **data}
    elif message.kind is MessageKind.PLAN:
        yield {"sessionUpdate": EventKind.PLAN.value, **data}
    elif message.kind is MessageKind.NOTICE:
        yield {"sessionUpdate": EventKind.NOTICE.value, **data}
    elif message.kind is MessageKind.ERROR:
        yield {"sessionUpdate": EventKind.ERROR.value, **data}
    else:
        yield dict(data)  # an update kind turnback keeps verbatim
