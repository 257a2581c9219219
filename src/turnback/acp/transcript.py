"""A session's stored conversation as ACP ``session/update`` payloads, for ``session/load`` and
``session/fork``.

The conversation turnback keeps is the folded form of each turn's events (chunks joined, tool
call updates merged, the last plan). Replaying it gives the editor the same conversation in
fewer notifications; turnback's own notices (an interrupted turn's recovery notice, an error)
become agent text marked ``_meta.turnback.notice``, since an editor knows no turnback kinds.

A fork copies the source's conversation turn by turn into a new session, through the public
turn API: each turn begins with the source turn's prompt, records its folded messages as events
and ends as the source turn ended. Folding those events again gives the same messages, so the
fork's transcript is the source's and its turn numbers match.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from turnback.engine.handle import Session, Turnback
from turnback.model import EventKind, Message, MessageKind, TurnStatus

_CHUNKS = {
    MessageKind.USER: EventKind.USER_MESSAGE_CHUNK.value,
    MessageKind.AGENT: EventKind.AGENT_MESSAGE_CHUNK.value,
    MessageKind.THOUGHT: EventKind.AGENT_THOUGHT_CHUNK.value,
}


def replay(messages: list[Message]) -> Iterator[dict[str, Any]]:
    """The ``update`` objects that show ``messages`` to an editor, in order."""
    for message in messages:
        if message.kind in (MessageKind.NOTICE, MessageKind.ERROR):
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


def fork(tb: Turnback, source: Session, workspace: str, agent: str | None) -> Session:
    """A new session in ``workspace`` whose conversation is a copy of ``source``'s."""
    record = source.record
    title = f"fork of {record.title or source.id[:12]}"
    target = tb.create_session(workspace=workspace, title=title, agent=agent)
    turns = sorted((t for t in source.turns() if t.in_conversation), key=lambda t: t.number)
    for turn in turns:
        messages = source.turn_messages(turn.token)
        running = target.turn(turn.prompt)
        for message in messages[1:]:  # the first is the prompt, which the turn begins with
            for event in _events(message):
                running.record(event, sync=False)
        detail = f"as turn {turn.number} of session {source.id[:12]} ended: {turn.detail or ''}"
        if turn.status is TurnStatus.COMPLETED:
            running.complete()
        elif turn.status is TurnStatus.FAILED:
            running.fail(detail.rstrip(": "))
        else:
            running.cancel(f"{turn.status.value} {detail}".rstrip(": "))
    return target
