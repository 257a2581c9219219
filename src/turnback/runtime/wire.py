"""The ACP wire, owned by turnback: newline-delimited JSON-RPC frames over a pair of streams.

:class:`Wire` is a transport for the SDK's JSON-RPC ``Connection`` on its public message-level
seam (``Connection(handler, transport)``: ``send``, ``receive``, ``close``). Both sides of turnback
use it: the runtime towards an agent process, the proxy towards the editor. It differs from the
SDK's own stdio transport where a durable proxy needs it to:

* **Every frame in wire order, with its line.** ``watch(frame, line)`` sees each message as it
  comes off the pipe, synchronously, before the SDK dispatches it (the SDK runs each message in
  its own task, so handlers can see messages out of order); the runtime records there. A watch
  that returns true has taken the frame: the SDK never sees it.
* **Bad lines are reported, not dropped.** A line that is not JSON, not an object or not a
  JSON-RPC message goes to ``rejected`` with the JSON-RPC error it deserves (the SDK logs and drops
  it, and a non-object even stops its receive loop). The proxy answers the editor with it; the
  runtime makes it an activity.
* **A frame limit.** A line longer than ``max_frame`` bytes is skipped without being held in
  memory and rejected with ``-32600``; its id is read from the frame's first bytes (JSON-RPC
  writers put it before the params), so a request fails instead of hanging.
* **Ordered, batched writes.** :meth:`Wire.post` writes synchronously, in call order with what the
  SDK sends through :meth:`Wire.send`; what is posted in one pass of the event loop goes out in
  one write. While more than ``BACKLOG`` bytes wait for the reader, :meth:`Wire.backlog` says so,
  and a watch that took a frame waits on ``pace`` before the next one is read: a slow reader on
  one side slows the writer on the other instead of filling memory.
* **Session ids replaced in the line.** :func:`with_session_id` forwards a frame as it was written
  with only its session id changed when that is safe, and re-encodes it when it is not.

When the far side goes away -- end of file, or its input closed -- :attr:`Wire.gone` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("turnback.wire")

Frame = dict[str, Any]
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
#: Bytes written and not yet read past which a watch that took a frame waits for the reader.
BACKLOG = 1 << 20
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")')
_HEAD = 4096
_DECODER = json.JSONDecoder()
_SESSION_KEY = b'"sessionId"'
_YIELD_EVERY = 16


class Output(Protocol):
    """Where the far side reads from: an ``asyncio.StreamWriter``, or a plain file."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def is_closing(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Rejected:
    """A line that is not a JSON-RPC message, and the error it deserves."""

    rpc_id: Any  # the request's id when it could be read, else None
    code: int
    message: str
    line: bytes  # its first bytes
    data: dict[str, Any] | None = None


Watch = Callable[[Frame, bytes], bool]
Pace = Callable[[], Awaitable[None] | None]


class Wire:
    """The SDK ``Transport`` over a reader and a writer (see the module docstring)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: Output,
        max_frame: int,
        *,
        rejected: Callable[[Rejected], None],
        watch: Watch | None = None,
        pace: Pace | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.max_frame = max_frame
        self._rejected = rejected
        self._watch = watch
        self._pace = pace
        self.gone = asyncio.Event()
        self._pending: list[bytes] = []  # posted, not yet written: one write per loop pass
        self._pending_bytes = 0
        self._read = 0

    # -- writing -----------------------------------------------------------------------------

    def post(self, message: Frame) -> None:
        """Write one message, after everything posted before it."""
        self.post_line(encode(message))

    def post_line(self, line: bytes) -> None:
        """Write one message that is already JSON text (no newline), after everything posted
        before it. Messages posted in one pass of the event loop go out in one write: a burst
        of updates costs one system call (and one wake-up of the reader), not one each."""
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
            log.warning("the other side's input is closed (%s)", error)
            self.gone.set()

    def backlog(self) -> Awaitable[None] | None:
        """While more than ``BACKLOG`` bytes wait for the far side to read them: something that
        is done once it has read most of them (or has gone). None otherwise."""
        transport = getattr(self._writer, "transport", None)
        waiting = self._pending_bytes + (transport.get_write_buffer_size() if transport else 0)
        return self._caught_up() if waiting > BACKLOG else None

    async def _caught_up(self) -> None:
        self.flush()
        with contextlib.suppress(ConnectionError):
            await self._writer.drain()

    async def send(self, message: Frame) -> None:
        self.post(message)
        self.flush()
        if self.gone.is_set():
            raise ConnectionError("the other side went away")
        try:
            await self._writer.drain()
        except ConnectionError as error:
            self.gone.set()
            raise ConnectionError(f"the other side went away: {error}") from error

    # -- reading -----------------------------------------------------------------------------

    async def receive(self) -> Frame | None:
        while True:
            self._read += 1
            if not self._read % _YIELD_EVERY:
                # A reader with lines buffered returns them without suspending: let the loop
                # run other work now and then, however fast the far side writes.
                await asyncio.sleep(0)
            line = await self._read_line()
            if line is None:
                self.gone.set()
                return None
            line = line.strip()
            if not line:
                continue
            message = self._check(line)
            if message is None:
                continue
            if self._watch is not None and self._watch(message, line):
                # Taken by the watch: read no more while the far side has a backlog.
                if self._pace is not None and (backlog := self._pace()) is not None:
                    await backlog
                continue
            return message

    def _reject(self, rpc_id: Any, code: int, message: str, line: bytes, **data: Any) -> None:
        self._rejected(Rejected(rpc_id, code, message, line[:200], data or None))

    def _check(self, line: bytes) -> Frame | None:
        """The message a line holds, or None after rejecting it."""
        try:
            message = parse(line)
        except ValueError as error:
            self._reject(None, PARSE_ERROR, f"Parse error: a line that is not JSON ({error})", line)
            return None
        if not isinstance(message, dict):
            kind = "a batch (array)" if isinstance(message, list) else type(message).__name__
            self._reject(
                None,
                INVALID_REQUEST,
                f"Invalid request: a JSON-RPC message must be an object, not {kind}; "
                "batches are not part of ACP",
                line,
            )
            return None
        method = message.get("method")
        rpc_id = message.get("id")
        if "method" in message and not isinstance(method, str):
            self._reject(
                rpc_id, INVALID_REQUEST, "Invalid request: 'method' must be a string", line
            )
            return None
        if method is None and ("id" not in message or not ({"result", "error"} & message.keys())):
            self._reject(
                rpc_id,
                INVALID_REQUEST,
                "Invalid request: a message needs a 'method' (a request or notification) or an "
                "'id' with a 'result' or an 'error' (a response)",
                line,
            )
            return None
        params = message.get("params")
        if method is not None and params is not None and not isinstance(params, dict):
            self._reject(
                rpc_id,
                INVALID_PARAMS,
                f"Invalid params: the params of {method!r} must be an object",
                line,
            )
            return None
        return message

    async def _read_line(self) -> bytes | None:
        """One line; None at end of file. An over-long line is rejected and skipped."""
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as partial:
            return partial.partial or None  # a last line without a newline still counts
        except asyncio.LimitOverrunError as overrun:
            head = await self._reader.read(min(overrun.consumed, _HEAD))
            size = len(head) + await self._skip_line()
            found = _ID.search(head)
            self._reject(
                json.loads(found[1]) if found else None,
                INVALID_REQUEST,
                f"Invalid request: a message of {size} bytes or more is over the limit of "
                f"{self.max_frame} bytes; it was skipped",
                head,
                limit=self.max_frame,
                size=size,
            )
            return b""
        except (ConnectionError, OSError) as error:
            log.warning("the other side's output failed (%s)", error)
            return None

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


def encode(message: Any) -> bytes:
    """A message as compact JSON text, as the ACP SDKs write it."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def parse(line: bytes) -> Any:
    """``json.loads(line)`` for a stripped line, without the per-call work that is half its cost
    on a short message (detecting the encoding, matching whitespace twice)."""
    text = line.decode()
    value, end = _DECODER.raw_decode(text)
    if end != len(text):
        raise ValueError(f"Extra data: line 1 column {end + 1} (char {end})")
    return value


def with_session_id(frame: Frame, line: bytes, session_id: str) -> bytes:
    """``line`` (which holds ``frame``) with its ``params.sessionId`` replaced by ``session_id``.

    The text is changed in place only when that is certainly the one place: the line has exactly
    one ``"sessionId"`` key (a string value cannot hold those bytes unescaped) and it is followed
    by the old id as ``json.dumps`` writes it. Otherwise -- whitespace, escapes written
    differently, a nested sessionId -- the frame is encoded again, which is always right."""
    params = frame.get("params")
    old = params.get("sessionId") if isinstance(params, dict) else None
    if isinstance(old, str) and line.count(_SESSION_KEY) == 1:
        before = _SESSION_KEY + b":" + encode(old)
        if line.count(before) == 1:
            return line.replace(before, _SESSION_KEY + b":" + encode(session_id))
    changed = dict(frame)
    if isinstance(params, dict):
        changed["params"] = {**params, "sessionId": session_id}
    return encode(changed)


__all__ = [
    "BACKLOG",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "PARSE_ERROR",
    "Frame",
    "Output",
    "Pace",
    "Rejected",
    "Watch",
    "Wire",
    "encode",
    "parse",
    "with_session_id",
]
