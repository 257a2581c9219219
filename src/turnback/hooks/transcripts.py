"""What an agent said in a turn, read from its own transcript: the hooks carry only the last
answer (``last_assistant_message``), the transcript every piece of text in order.

Claude Code's transcript (``transcript_path``, JSON lines; as 2.1.332 writes it): the prompt is a
``user`` entry carrying the hook's ``prompt_id`` as ``promptId``; the agent's replies follow as
``assistant`` entries whose ``message.content`` holds ``text``, ``thinking`` and ``tool_use``
blocks, each entry with a ``uuid``; tool results come back as ``user`` entries of the same
``promptId``. Anything else in the file is ignored, and so is a line that cannot be read: the
transcript is the agent's, in a format it may change, so reading it never fails a hook.
"""

from __future__ import annotations

import json
import os
import time

from turnback.records import record

#: A transcript larger than this is not read (the hook falls back on the last answer).
MAX_BYTES = 64 * 2**20

#: How long a tool's hook waits for the transcript to reach the tool call. Claude Code writes
#: its transcript on a timer of its own, beside running the hook: the call is usually there
#: within 30 ms, but on a loaded machine it was seen later than 0.25 s, and what the agent said
#: before the tool was then journaled after it. The wait ends as soon as the call is there.
WAIT = 2.0
#: How long a transcript that does not exist yet is waited for: a session's first tool call can
#: come before Claude Code has created it (within some 0.2 s), and a Claude Code that keeps no
#: transcript (``--no-session-persistence``) must not cost each tool call the whole wait.
CREATED_WAIT = 0.5


@record
class Said:
    """One piece of what the agent said: ``key`` names it for good (entry and block), ``kind``
    is ``agent_message_chunk`` or ``agent_thought_chunk``."""

    key: str
    kind: str
    text: str


def _read(path: str, wait_for: str | None, wait: float) -> bytes | None:
    """The transcript, once it names ``wait_for`` (Claude Code writes it beside running its
    hooks, not always before: a session's first tool call can come before the file does), or as
    it is after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    created_by = time.monotonic() + min(wait, CREATED_WAIT)  # else it is not kept at all
    read_size = -1
    data = b""
    while True:
        try:
            size = os.stat(path).st_size
            if size != read_size:  # read again only once it has grown
                with open(path, "rb") as file:
                    data = file.read(MAX_BYTES + 1)
                read_size = size
        except FileNotFoundError:
            if wait_for is None or time.monotonic() >= created_by:
                return None
        except OSError:
            return None
        if len(data) > MAX_BYTES:
            return None
        if wait_for is None or wait_for.encode() in data or time.monotonic() >= deadline:
            return data
        time.sleep(0.005)


def claude(
    path: object, prompt_id: object, *, wait_for: str | None = None, wait: float = WAIT
) -> list[Said]:
    """What Claude Code said after the prompt ``prompt_id``, in order; empty when it cannot be
    told (no transcript, no such prompt, an unreadable file). With ``wait_for`` (a tool call's
    id), up to ``wait`` seconds for the transcript to reach it."""
    if not isinstance(path, str) or not path or not isinstance(prompt_id, str) or not prompt_id:
        return []
    data = _read(path, wait_for, wait)
    if data is None:
        return []
    # A long session's transcript is mostly earlier turns: parse from the prompt's first line
    first = data.find(json.dumps(prompt_id).encode())
    if first < 0:
        return []
    data = data[data.rfind(b"\n", 0, first) + 1 :]
    said: list[Said] = []
    inside = False
    for line in data.splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):  # a line cut short, or nested past Python's limit
            continue
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        if kind == "user" and entry.get("promptId") is not None:
            inside = entry.get("promptId") == prompt_id
            continue
        if kind != "assistant" or not inside:
            continue
        message = entry.get("message")
        blocks = message.get("content") if isinstance(message, dict) else None
        if not isinstance(blocks, list):
            continue
        for index, block in enumerate(blocks):
            if not isinstance(block, dict):
                continue
            text = block.get("text") if block.get("type") == "text" else block.get("thinking")
            if block.get("type") in ("text", "thinking") and isinstance(text, str) and text:
                chunk = "agent_message_chunk" if block["type"] == "text" else "agent_thought_chunk"
                said.append(Said(f"{entry.get('uuid')}:{index}", chunk, text))
    return said
