"""A session's stored conversation as ACP ``session/update`` payloads, for ``session/load``.

The conversation turnback keeps is the folded form of each turn's events (chunks joined, tool
call updates merged, the last plan). Replaying it gives the editor the same conversation in
fewer notifications; turnback's own notices (an interrupted turn's recovery notice, an error)
become agent text marked ``_meta.turnback.notice``, since an editor knows no turnback kinds.

A fork (``session/fork``) is the engine's ``Session.fork``: the conversation's rows copied in one
transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from turnback.model import EventKind, Message, MessageKind

_CHUNKS = {
    MessageKind.USER: EventKind.USER_MESSAGE_CHUNK.value,
    MessageKind.AGENT: EventKind.AGENT_MESSAGE_CHUNK.value,
    MessageKind.THOUGHT: EventKind.AGENT_THOUGHT_CHUNK.value,
}


def replay(messages: list[Message]) -> Iterator[dict[str, Any]]:
    """The ``update`` objects that show ``messages`` to an editor, in order."""
    for message in messages:
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
            yield {"sessionUpdate": chunk, "content": block}
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
