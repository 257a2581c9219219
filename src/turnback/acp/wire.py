"""The editor's side of the wire: turnback's :class:`~turnback.runtime.wire.Wire` on the
proxy's stdin and stdout.

A proxy must never leave the editor waiting, so a line the wire rejects (not JSON, not an object,
nested too deeply, not a usable JSON-RPC message, over ``--max-frame``) is answered at once with
the JSON-RPC error it deserves. :data:`REQUEST_ID` tells a handler which request of the editor
it is serving. The agent's notifications are forwarded from the runtime's frame watch with
:meth:`EditorWire.post`, in order with what the connection sends; while the editor has a backlog the
proxy reads no more from the agent. When the editor goes away -- stdin at end of file, or stdout
closed -- :attr:`EditorWire.gone` is set; the proxy then ends the running turns and exits.
Under a conductor, what it sends for the proxy's successor is taken off the wire, in wire order,
by :attr:`EditorWire.taken` (:mod:`turnback.acp.chain`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import selectors
import stat
import sys
import threading
from typing import Any

from turnback.runtime.wire import (
    BACKLOG,
    INVALID_REQUEST,
    PARSE_ERROR,
    Frame,
    Output,
    Rejected,
    Watch,
    Wire,
)

log = logging.getLogger("turnback.acp")

#: The id of the editor's request the current task serves (None for a notification).
REQUEST_ID: contextvars.ContextVar[Any] = contextvars.ContextVar("turnback_editor_request")


class _FileOutput:
    """Standard output that is a regular file, not a pipe (asyncio cannot watch those)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return False


async def open_stdio(
    limit: int, read: bytes = b"", *, ended: bool = False
) -> tuple[asyncio.StreamReader, Output]:
    """This process's stdin (after ``read``, what was read from it already; ``ended``: read to
    its end) and stdout for the wire. Whatever they are -- a pipe, a socket, a terminal,
    ``/dev/null``, a regular file -- works: what the event loop cannot watch is read by a
    thread, or written in place."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    if read:
        reader.feed_data(read)
    if ended:
        reader.feed_eof()
    elif _watchable(sys.stdin.fileno()):
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    else:

        def feed() -> None:
            try:
                while data := os.read(sys.stdin.fileno(), 1 << 16):
                    loop.call_soon_threadsafe(reader.feed_data, data)
            except OSError:
                pass  # unreadable from here on: as good as its end
            finally:
                loop.call_soon_threadsafe(reader.feed_eof)

        threading.Thread(target=feed, name="turnback-acp-stdin", daemon=True).start()
    output: Output
    if _watchable(sys.stdout.fileno()):
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, sys.stdout
        )
        output = asyncio.StreamWriter(transport, protocol, None, loop)
    else:
        output = _FileOutput(sys.stdout.fileno())
    return reader, output


def _watchable(fd: int) -> bool:
    """Whether the event loop can watch ``fd`` as a pipe: a pipe, a socket or a terminal can
    be; a regular file cannot, nor can ``/dev/null`` (epoll refuses both), and the loop
    would find that out only later, in a callback, leaving the wire waiting forever."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, selectors.EVENT_READ)
        except OSError:
            return False
    return True


class EditorWire(Wire):
    """The wire to the editor (see the module docstring)."""

    def __init__(self, reader: asyncio.StreamReader, writer: Output, max_frame: int) -> None:
        super().__init__(reader, writer, max_frame, rejected=self._answer, watch=self._take)
        #: what takes the frames meant for the proxy's successor, under a conductor
        self.taken: Watch | None = None

    def _take(self, frame: Frame, line: bytes) -> bool:
        return self.taken is not None and self.taken(frame, line)

    async def receive(self) -> Frame | None:
        message = await super().receive()
        if message is not None:
            # The message is handled in a task made now, in this context: its handler can
            # tell which request of the editor it is serving.
            REQUEST_ID.set(message.get("id") if "method" in message else None)
        return message

    def _answer(self, rejected: Rejected) -> None:
        message = rejected.message
        if rejected.data is not None and "size" in rejected.data:
            message += (
                " (to raise the limit, put `--max-frame BYTES` between `acp` and `--` in the "
                "agent's command in your editor's settings)"
            )
        elif rejected.data is not None and "limit" in rejected.data:
            message += " (turnback acp's limit)"
        data = rejected.data
        if rejected.code == PARSE_ERROR:
            data = {"line": rejected.line.decode(errors="replace")}
        self.error(rejected.rpc_id, rejected.code, message, data)

    def error(self, rpc_id: Any, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self.post({"jsonrpc": "2.0", "id": rpc_id, "error": error})


__all__ = ["BACKLOG", "INVALID_REQUEST", "PARSE_ERROR", "REQUEST_ID", "EditorWire", "open_stdio"]
