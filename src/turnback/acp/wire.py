"""The editor's side of the wire: newline-delimited JSON-RPC on the proxy's stdin and stdout.

:class:`EditorWire` is a transport for the SDK's JSON-RPC ``Connection`` (``send``, ``receive``,
``close``) with these differences from the SDK's own stdio transport, each because a proxy must
never leave the editor waiting:

* A line that is not JSON, not an object, nested deeper than
  :data:`turnback.jsontext.MAX_DEPTH`, or not a usable JSON-RPC message is answered at once with
  a JSON-RPC error (``-32700`` parse error, ``-32600`` invalid request) instead of being logged
  and dropped -- the SDK drops it silently, and a non-object, a deep nesting or an object ``id``
  even stops its receive loop. Nothing one line holds ends the loop.
* What is written is JSON that encodes as UTF-8 whatever it holds: an unpaired surrogate goes
  out as the ``\\uXXXX`` escape it came in as (:func:`turnback.jsontext.dumps`).
* A frame longer than ``max_frame`` bytes is skipped without being held in memory and answered
  with ``-32600`` naming the limit; the id is read from the frame's first bytes (JSON-RPC clients
  write it before the params), so the editor's request fails instead of hanging.
* Writes are posted synchronously and go out in call order (:meth:`EditorWire.post`): the
  agent's notifications are forwarded from the frame watch, which cannot await, and must stay in
  order with the responses and requests the SDK sends through :meth:`EditorWire.send`. What is
  posted in one pass of the event loop goes out in one write. While more than ``BACKLOG`` bytes
  wait for the editor, :meth:`EditorWire.backlog` has the proxy stop reading from the agent.

When the editor goes away -- stdin at end of file, or stdout closed -- :attr:`EditorWire.gone` is
set; the proxy then ends the running turns and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import sys
import threading
from collections.abc import Awaitable
from typing import Any, Protocol, cast

from turnback import jsontext
from turnback.runtime.sidecar import note_sent

log = logging.getLogger("turnback.acp")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
_HEAD = 4096
#: The id of the editor's request the current task serves (None for a notification).
REQUEST_ID: contextvars.ContextVar[Any] = contextvars.ContextVar("turnback_editor_request")
#: Bytes written and not yet read by the editor past which the proxy reads no more from the
#: agent until the editor has caught up.
BACKLOG = 1 << 20


class Output(Protocol):
    """Where the editor reads from: an ``asyncio.StreamWriter``, or :class:`_FileOutput`."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def is_closing(self) -> bool: ...


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


async def open_stdio(limit: int) -> tuple[asyncio.StreamReader, Output]:
    """This process's stdin and stdout for the wire; a regular file works as well as a pipe."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except ValueError:

        def feed() -> None:
            try:
                while data := os.read(sys.stdin.fileno(), 1 << 16):
                    loop.call_soon_threadsafe(reader.feed_data, data)
            finally:
                loop.call_soon_threadsafe(reader.feed_eof)

        threading.Thread(target=feed, name="turnback-acp-stdin", daemon=True).start()
    output: Output
    try:
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, sys.stdout
        )
        output = asyncio.StreamWriter(transport, protocol, None, loop)
    except ValueError:
        output = _FileOutput(sys.stdout.fileno())
    return reader, output


class EditorWire:
    """The SDK ``Transport`` over the editor's stdio (see the module docstring)."""

    def __init__(self, reader: asyncio.StreamReader, writer: Output, max_frame: int) -> None:
        self._reader = reader
        self._writer = writer
        self.max_frame = max_frame
        self.gone = asyncio.Event()
        self._pending: list[bytes] = []  # posted, not yet written: one write per loop pass
        self._pending_bytes = 0

    # -- writing -----------------------------------------------------------------------------

    def post(self, message: dict[str, Any]) -> None:
        """Write one message, after everything posted before it."""
        self.post_line(jsontext.dumps(message).encode())

    def post_line(self, line: bytes) -> None:
        """Write one message that is already JSON text (no newline), after everything posted
        before it. Messages posted in one pass of the event loop go out in one write: an agent's
        burst of updates costs one system call (and one wake-up of the editor), not one each."""
        if not self._pending:
            asyncio.get_running_loop().call_soon(self.flush)
        self._pending.append(line)
        self._pending.append(b"\n")
        self._pending_bytes += len(line) + 1

    def flush(self) -> None:
        """Write what was posted now."""
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        if self._writer.is_closing():
            self.gone.set()
            return
        try:
            self._writer.write(data)
        except (ConnectionError, RuntimeError) as error:
            log.warning("the editor's stdout is closed (%s)", error)
            self.gone.set()

    def backlog(self) -> Awaitable[None] | None:
        """While more than ``BACKLOG`` bytes wait for the editor to read them: something that
        is done once it has read most of them (or has gone). None otherwise."""
        transport = getattr(self._writer, "transport", None)
        waiting = self._pending_bytes + (transport.get_write_buffer_size() if transport else 0)
        return self._caught_up() if waiting > BACKLOG else None

    async def _caught_up(self) -> None:
        self.flush()
        with contextlib.suppress(ConnectionError):
            await self._writer.drain()

    async def send(self, message: dict[str, Any]) -> None:
        note_sent(self.send, message)
        self.post(message)
        self.flush()
        try:
            await self._writer.drain()
        except ConnectionError as error:
            self.gone.set()
            raise ConnectionError(f"the editor went away: {error}") from error

    def error(self, rpc_id: Any, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self.post({"jsonrpc": "2.0", "id": rpc_id, "error": error})

    # -- reading -----------------------------------------------------------------------------

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if line is None:
                self.gone.set()
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = self._check(line)
            except Exception as error:  # one bad line must not end the receive loop
                log.exception("turnback acp could not read a line from the editor")
                self.error(
                    None, -32603, f"Internal error: turnback acp could not read a line ({error})"
                )
                continue
            if message is not None:
                # The SDK handles the message in a task made now, in this context: its handler
                # can tell which request of the editor it is serving.
                REQUEST_ID.set(message.get("id") if "method" in message else None)
                return message

    def _check(self, line: bytes) -> dict[str, Any] | None:
        """The message a line holds, or None after answering why it is not one."""
        try:
            message = jsontext.loads(line)
        except jsontext.TooDeep as error:
            self.error(
                jsontext.request_id(line[:_HEAD]),
                INVALID_REQUEST,
                f"Invalid request: {error} (turnback acp's limit); it was skipped",
                {"limit": jsontext.MAX_DEPTH},
            )
            return None
        except ValueError as error:
            self.error(
                None,
                PARSE_ERROR,
                f"Parse error: turnback acp received a line that is not JSON ({error})",
                {"line": line[:200].decode(errors="replace")},
            )
            return None
        problem = jsontext.rpc_problem(message)
        if problem is not None:
            rpc_id = message.get("id") if isinstance(message, dict) else None
            if isinstance(rpc_id, bool) or not isinstance(rpc_id, int | str):
                rpc_id = None
            self.error(rpc_id, *problem)
            return None
        return cast(dict[str, Any], message)

    async def _read_line(self) -> bytes | None:
        """One line; None at end of file. An over-long line is answered and skipped."""
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as partial:
            return partial.partial or None  # a last line without a newline still counts
        except asyncio.LimitOverrunError as overrun:
            head = await self._reader.read(min(overrun.consumed, _HEAD))
            size = len(head) + await self._skip_line()
            rpc_id = jsontext.request_id(head)
            self.error(
                rpc_id,
                INVALID_REQUEST,
                f"Invalid request: a message of {size} bytes or more is over turnback acp's "
                f"limit of {self.max_frame} bytes (turnback acp --max-frame raises it); it was "
                "skipped",
                {"limit": self.max_frame, "size": size},
            )
            return b""

    async def _skip_line(self) -> int:
        """Discard the rest of the current line without holding it; returns its size."""
        skipped = 0
        while True:
            try:
                rest = await self._reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as overrun:
                skipped += len(await self._reader.read(overrun.consumed))
            except asyncio.IncompleteReadError as partial:
                return skipped + len(partial.partial)
            else:
                return skipped + len(rest)

    async def close(self) -> None:
        self.flush()
        try:
            if not self._writer.is_closing():
                await self._writer.drain()
        except ConnectionError:
            pass
