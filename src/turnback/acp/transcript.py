"""A session's stored conversation as ACP ``session/update`` payloads, for ``session/load``.

The conversation turnback keeps is the folded form of each turn's events (chunks joined, tool
call updates merged, the last plan, each message's ``messageId``). Replaying it gives the editor
the same conversation in fewer notifications; turnback's own notices -- an interrupted turn's
recovery, a turn resumed after the agent stopped, an error, and between turns a rewind or a
slash command's answer -- become agent text marked ``_meta.turnback.notice``, where they
happened, since an editor knows no turnback kinds.

A fork (``session/fork``) is the engine's ``Session.fork``: the conversation's rows copied in one
transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from turnback.model import Activity, EventKind, Message, MessageKind, Turn

_CHUNKS = {
    MessageKind.USER: EventKind.USER_MESSAGE_CHUNK.value,
    MessageKind.AGENT: EventKind.AGENT_MESSAGE_CHUNK.value,
    MessageKind.THOUGHT: EventKind.AGENT_THOUGHT_CHUNK.value,
}


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
        message_id = data.get("messageId")
        for block in content if isinstance(content, list) else []:
            update = {"sessionUpdate": chunk, "content": block}
            if message_id is not None:
                update["messageId"] = message_id
            yield update
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
