"""An agent written with the SDK alone that misbehaves on request, for the proxy's robustness
tests. Run as ``python tests/acp/rough_agent.py``.

``ROUGH_AGENT_FAIL`` is JSON ``{"method": {"code", "message", "data"}}``: ``initialize`` or
``session/new`` answers with that error. It advertises ``session/close``, and writes each call
of it, each ``session/prompt``'s id and each ``$/cancel_request`` to the file
``ROUGH_AGENT_LOG`` names. Each prompt is one word per line:

    say TEXT      an agent_message_chunk with TEXT (JSON escapes such as \\ud800 are decoded)
    deep N        a session/update line whose params nest N arrays deep, written raw
    raw STRING    STRING, a JSON string literal of characters U+0000 to U+00FF, written raw
                  as one line of bytes, one byte a character (any bytes, invalid UTF-8 too);
                  ``$SESSION`` in it becomes the prompt's session id
    sleep SECONDS wait that long
    hang          never answer this prompt, and ignore session/cancel and SIGTERM
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from typing import Any

import acp
from acp.schema import (
    AgentCapabilities,
    CloseSessionResponse,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
)


def _failure(method: str) -> acp.RequestError | None:
    failures = json.loads(os.environ.get("ROUGH_AGENT_FAIL", "{}"))
    error = failures.get(method)
    if error is None:
        return None
    return acp.RequestError(error["code"], error["message"], error.get("data"))


def _log(line: str) -> None:
    if "ROUGH_AGENT_LOG" in os.environ:
        with open(os.environ["ROUGH_AGENT_LOG"], "a") as log:
            log.write(line + "\n")


def _note_incoming(event: Any) -> None:
    message = event.message
    if getattr(event.direction, "value", "") != "incoming":
        return
    if message.get("method") == "session/prompt":
        _log(f"session/prompt {json.dumps(message.get('id'))}")
    elif message.get("method") == "$/cancel_request":
        _log(f"$/cancel_request {json.dumps((message.get('params') or {}).get('requestId'))}")


async def _raw(line: bytes) -> None:
    """Write ``line`` to stdout past the SDK, after what the SDK has written."""
    await asyncio.sleep(0.1)
    os.set_blocking(1, True)
    try:
        view = memoryview(line + b"\n")
        while view:
            view = view[os.write(1, view) :]
    finally:
        os.set_blocking(1, False)
    await asyncio.sleep(0.05)


class Rough:
    def on_connect(self, conn: Any) -> None:
        self.conn = conn
        # What arrives, as written (the SDK would answer "$/cancel_request" method-not-found).
        conn._conn.add_observer(_note_incoming)

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        if (error := _failure("initialize")) is not None:
            raise error
        capabilities = AgentCapabilities(
            field_meta={"rough": {"level": 3}},
            session_capabilities=SessionCapabilities(close=SessionCloseCapabilities()),
        )
        return InitializeResponse(
            protocol_version=protocol_version, agent_capabilities=capabilities
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        if (error := _failure("session/new")) is not None:
            raise error
        return NewSessionResponse(session_id=f"rough-{uuid.uuid4().hex[:8]}")

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        for line in text.splitlines():
            word, _, rest = line.partition(" ")
            if word == "say":
                said = acp.update_agent_message_text(json.loads(f'"{rest}"'))
                await self.conn.session_update(session_id=session_id, update=said)
            elif word == "deep":
                depth = int(rest)
                params = "[" * depth + "]" * depth
                line = f'{{"jsonrpc":"2.0","method":"session/update","params":{params}}}'
                await _raw(line.encode())
            elif word == "raw":
                await _raw(json.loads(rest).replace("$SESSION", session_id).encode("latin-1"))
            elif word == "sleep":
                await asyncio.sleep(float(rest))
            elif word == "hang":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                await asyncio.Event().wait()
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **_: Any) -> None:
        return None

    async def close_session(self, session_id: str, **_: Any) -> CloseSessionResponse:
        _log(f"session/close {session_id}")
        return CloseSessionResponse()


async def main() -> None:
    reader, writer = await acp.stdio_streams()
    await acp.run_agent(Rough(), writer, reader, use_unstable_protocol=True)


if __name__ == "__main__":
    asyncio.run(main())
