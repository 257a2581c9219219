"""The ACP wire, owned by turnback: newline-delimited JSON-RPC frames over a pair of streams.

:class:`Wire` is the transport of turnback's JSON-RPC :class:`~turnback.runtime.rpc.Connection`
(``send``, ``receive``, ``close``). Both sides of turnback use it: the runtime towards an agent
process, the proxy towards the editor. It differs from the ACP SDKs' stdio transports where a
durable proxy needs it to:

* **Every frame in wire order, with its line.** ``watch(frame, line)`` sees each message as it
  comes off the pipe, synchronously, before the connection dispatches it (it runs each message
  in its own task, so handlers can see messages out of order); the runtime records there. A
  watch that returns true has taken the frame: the connection never sees it.
* **Bad lines are reported, not dropped.** A line that is not JSON, not an object, nested deeper
  than :data:`turnback.jsontext.MAX_DEPTH` or not a usable JSON-RPC message goes to ``rejected``
  with the JSON-RPC error it deserves (the Python SDK logs and drops it, and a non-object, a
  deep nesting, an object ``id`` or an ``error`` that is not an object even stops its loop).
  The proxy answers the editor with it; the runtime makes it an activity and refuses a request
  among them, so the agent is not left waiting. Nothing one line holds ends the loop.
* **Lossless, always-encodable JSON.** Lines are read and written with :mod:`turnback.jsontext`:
  an unpaired surrogate goes out as the ``\\uXXXX`` escape it came in as.
* **Large reads.** Lines are split out of reads of up to 64 KiB, so a burst of lines costs one
  read and one wake-up of the loop, not one each.
* **A stream left to gather.** An agent writes each streamed chunk on its own, and a reader that
  keeps up wakes for each write (a wake-up, a read and asyncio's own steps cost more than what
  the proxy does with a chunk). So while a stream flows -- the last read held more than one
  line -- a wire given its pipe's transport (``source``) stops reading it for ``SETTLE`` (half a
  millisecond; epoll rounds it up to one) before it reads again, and the lines written meanwhile
  come in one read. A line that comes alone is read at once: a notification is delayed only
  inside a stream, by at most that moment.
* **A frame limit.** A line longer than ``max_frame`` bytes is skipped (no more than the limit of
  it is ever held) and rejected with ``-32600``, in its place among the other lines; its id is
  read from the frame's first bytes (JSON-RPC writers put it before the params), so a request
  fails instead of hanging.
* **Ordered, batched writes.** :meth:`Wire.post` writes synchronously, in call order with what
  the connection sends through :meth:`Wire.send`; what is posted in one pass of the event loop
  goes out in one write, and what a watch posts goes out once its wire has handed out the lines
  it read (before it waits for more, or returns a frame), without a pass of the loop of its own.
  While more than ``BACKLOG`` bytes wait for the reader, :meth:`Wire.backlog` says so, and a
  watch that took frames waits on ``pace`` (asked every few frames) before the next one is read:
  a slow reader on one side slows the writer on the other instead of filling memory.
* **Session ids replaced in the line.** :func:`with_session_id` forwards a frame as it was written
  with only its session id changed when that is safe, and re-encodes it when it is not.
* **An update read once.** A ``session/update`` written in the SDKs' compact form (the bulk of
  what an agent sends: every streamed chunk) is read by a parser that knows that form and keeps
  where its parts are: it comes out as an :class:`UpdateFrame`, whose update's JSON text the
  journal stores as written and whose session id is replaced by slicing, so a chunk is decoded
  once and encoded never. Any other line is read as any JSON.
* **A run of text chunks seen once.** The agent writes faster than a busy reader takes its lines,
  so a read holds a dozen of them, most of them chunks of one message. Plain text chunks of one
  session and kind that follow each other among the lines read are handed to the watch as one
  :class:`UpdateFrame` whose text is theirs joined (as written: nothing is encoded again), and
  which keeps every line it was read from: the journal records one event where it would have
  recorded a dozen, the frame is routed once, and each line is still forwarded as it was
  written (:func:`with_session_id`). A message's chunks fold into the same text either way.
  Only a wire with a watch joins them; only lines already read are joined, so nothing waits.

A request sent through :meth:`Wire.send` is noted in :data:`SENT_REQUESTS` when a relay listens,
so a ``$/cancel_request`` for the request that led to it can follow it hop by hop.

When the far side goes away -- end of file, or its input closed -- :attr:`Wire.gone` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import field
from typing import Any, Protocol, cast

from turnback import jsontext
from turnback.records import record

log = logging.getLogger("turnback.wire")

Frame = dict[str, Any]
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: Bytes written and not yet read past which a watch that took a frame waits for the reader.
BACKLOG = 1 << 20
_HEAD = 4096
_READ = 1 << 16  # bytes asked for in one read
#: Seconds a wire stops reading a flowing stream, so that its next lines come in one read.
SETTLE = 0.0005
_SESSION_KEY = b'"sessionId"'
_METHOD = b'"method"'
_YIELD_EVERY = 16
_PACE_EVERY = 8
#: The first bytes of a session/update in the SDKs' compact form, up to its session id, and
#: what follows the session id there.
_UPDATE_HEAD = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
_UPDATE_HEAD_BYTES = _UPDATE_HEAD.encode()
_UPDATE_KEY = ',"update":'


#: While a wire's watch runs: the list of wires it posted to that the watching wire writes
#: before it next waits (see :meth:`Wire.post_line`).
_WATCHING = threading.local()


class UpdateFrame(dict[str, Any]):
    """A ``session/update`` notification read from a line in the SDKs' compact form
    (``{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":…,"update":…}}``), which
    knows where its parts are in that line: a dict like any frame."""

    __slots__ = ("chunk_text", "lines", "rest", "update_text")

    #: the update's JSON text as the line holds it; None when it must be encoded again (it
    #: holds an unpaired surrogate written raw, or a value JSON has no text for, like NaN)
    update_text: str | None
    #: where ``,"update":`` begins in the line's bytes (just after the session id)
    rest: int
    #: for a message chunk of plain text and nothing else: its text as the line writes it
    #: between its quotes, to which the texts of the chunks after it can be joined as written
    #: (it holds no surrogate, escaped or not); None for any other update
    chunk_text: str | None
    #: for a run of chunks joined into one frame: the lines they were read from, in order (each
    #: with the same bytes up to ``rest``); None for a frame read from one line
    lines: list[bytes] | None


class Output(Protocol):
    """Where the far side reads from: an ``asyncio.StreamWriter``, or a plain file."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def is_closing(self) -> bool: ...


@record
class Rejected:
    """A line that is not a JSON-RPC message, and the error it deserves."""

    rpc_id: Any  # the message's id when it could be read (a string or a number), else None
    code: int
    message: str
    line: bytes  # its first bytes
    data: dict[str, Any] | None = None
    #: whether it is (or, read from its first bytes, seems) a request whose sender waits for
    #: an answer with ``rpc_id``
    request: bool = False


#: JSON-RPC's notification that a request is no longer wanted (``{"requestId"}``); ids are the
#: sender's own, so a relay passes it on hop by hop, naming the id the next hop saw.
CANCEL_REQUEST = "$/cancel_request"
Sender = Callable[[Frame], Awaitable[None]]


@record(frozen=False)
class SentRequests:
    """The requests one request of a relay's client led to sending on, each as (how to write
    to where it went, its id there), while ``open``."""

    sent: list[tuple[Sender, Any]] = field(default_factory=list)
    open: bool = True


#: Set by a relay while it handles one request of its client, so a ``$/cancel_request`` for
#: that request can follow it. Tasks started meanwhile inherit it; closing it stops the notes.
SENT_REQUESTS: contextvars.ContextVar[SentRequests | None] = contextvars.ContextVar(
    "turnback_sent_requests", default=None
)


def note_sent(send: Sender, frame: Frame) -> None:
    """Note ``frame`` in :data:`SENT_REQUESTS` if it is a request and a relay listens."""
    notes = SENT_REQUESTS.get()
    if notes is not None and notes.open and "method" in frame and "id" in frame:
        notes.sent.append((send, frame["id"]))


Watch = Callable[[Frame, bytes], bool]
Pace = Callable[[], Awaitable[None] | None]


class Wire:
    """The connection's transport over a reader and a writer (see the module docstring)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: Output,
        max_frame: int,
        *,
        rejected: Callable[[Rejected], None],
        watch: Watch | None = None,
        pace: Pace | None = None,
        source: asyncio.ReadTransport | None = None,
    ) -> None:
        self._reader = reader
        self._source = source  # the transport ``reader`` is fed from, paused to let lines gather
        self._writer = writer
        self.max_frame = max_frame
        self._rejected = rejected
        self._watch = watch
        self._pace = pace
        self.gone = asyncio.Event()
        self._pending: list[bytes] = []  # posted, not yet written: one write per loop pass
        self._pending_bytes = 0
        self._read = 0
        #: read, not yet received: lines, and (first bytes, size) of each over-long one
        self._lines: deque[bytes | tuple[bytes, int]] = deque()
        self._partial: list[bytes] = []  # the start of the line being read
        self._held = 0  # its size
        self._skipped: int | None = None  # the size so far of an over-long line being skipped
        self._head = b""  # the first bytes of that line
        self._eof = False
        self._flowing = False  # whether the last read held more than one line
        self._posted: list[Wire] = []  # wires its watch posted to, written before it waits

    # -- writing -----------------------------------------------------------------------------

    def post(self, message: Frame) -> None:
        """Write one message, after everything posted before it."""
        self.post_line(encode(message))

    def post_line(self, line: bytes) -> None:
        """Write one message that is already JSON text (no newline), after everything posted
        before it. Messages posted in one pass of the event loop go out in one write: a burst
        of updates costs one system call (and one wake-up of the reader), not one each. What
        a wire's watch posts goes out when that wire has handed it all the lines it has read,
        just before it waits for more, rather than at the loop's next pass: a chunk that comes
        alone costs one pass of the loop less."""
        if not self._pending:
            watching: list[Wire] | None = getattr(_WATCHING, "posted", None)
            if watching is not None:
                watching.append(self)
            else:
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
        note_sent(self.send, message)
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
        try:
            return await self._receive()
        finally:
            self._write_posted()

    def _write_posted(self) -> None:
        """Write what the watch posted (before waiting, or returning)."""
        if self._posted:
            for wire in self._posted:
                wire.flush()
            self._posted.clear()

    async def _receive(self) -> Frame | None:
        lines, watch = self._lines, self._watch
        while True:
            self._read += 1
            if not self._read % _YIELD_EVERY:
                # A reader with lines buffered returns them without suspending: let the loop
                # run other work now and then, however fast the far side writes.
                self._write_posted()
                await asyncio.sleep(0)
            line: bytes | None
            if lines and isinstance(head := lines[0], bytes):
                lines.popleft()  # read already: taken without a coroutine
                line = head
            else:
                if not lines:
                    self._write_posted()  # about to wait for the far side
                line = await self._read_line()
            if line is None:
                self.gone.set()
                return None
            line = line.strip()
            if not line:
                continue
            message: Frame | None = None
            try:
                message = self._check(line)
                if (
                    type(message) is UpdateFrame
                    and message.chunk_text is not None
                    and lines
                    and watch is not None
                ):
                    _join_run(message, line, lines)
                taken = False
                if message is not None and watch is not None:
                    # what the watch posts waits in _posted (see post_line)
                    _WATCHING.posted = self._posted
                    try:
                        taken = watch(message, line)
                    finally:
                        _WATCHING.posted = None
            except Exception as error:  # one message must not end the receive loop
                log.exception("a line could not be read or handled")
                # a request the watch failed on is answered, so its sender is not left waiting
                rpc_id = message.get("id") if message is not None and "method" in message else None
                self._reject(
                    rpc_id,
                    INTERNAL_ERROR,
                    f"Internal error: a line could not be read or handled ({error})",
                    line,
                    request=rpc_id is not None,
                )
                continue
            if message is None:
                continue
            if taken:
                # Taken by the watch: read no more while the far side has a backlog (asked
                # every few lines: a backlog is a megabyte, a line is usually a few hundred
                # bytes, and asking costs as much as forwarding one).
                if (
                    self._pace is not None
                    and not self._read % _PACE_EVERY
                    and (backlog := self._pace()) is not None
                ):
                    self._write_posted()
                    await backlog
                continue
            return message

    def _reject(
        self,
        rpc_id: Any,
        code: int,
        message: str,
        line: bytes,
        *,
        request: bool = False,
        **data: Any,
    ) -> None:
        if isinstance(rpc_id, bool) or not isinstance(rpc_id, int | str):
            rpc_id = None
        rejected = Rejected(rpc_id, code, message, line[:200], data or None, request)
        self._rejected(rejected)

    def _check(self, line: bytes) -> Frame | None:
        """The message a line holds, or None after rejecting it."""
        try:
            update = read_update(line)
            if update is not None:
                return update
            message = parse(line)
        except jsontext.TooDeep as error:
            self._reject(
                jsontext.request_id(line[:_HEAD]),
                INVALID_REQUEST,
                f"Invalid request: {error}; it was skipped",
                line,
                request=_METHOD in line[:_HEAD],
                limit=jsontext.MAX_DEPTH,
            )
            return None
        except ValueError as error:
            self._reject(None, PARSE_ERROR, f"Parse error: a line that is not JSON ({error})", line)
            return None
        problem = jsontext.rpc_problem(message)
        if problem is not None:
            is_object = isinstance(message, dict)
            rpc_id = message.get("id") if is_object else None
            self._reject(rpc_id, *problem, line, request=is_object and "method" in message)
            return None
        return cast(Frame, message)

    async def _read_line(self) -> bytes | None:
        """One line (with no newline); None at end of file. Lines are split out of large
        reads, so a burst of lines costs one read and one wake-up, not one each. An over-long
        line is rejected and skipped without being held."""
        while not self._lines:
            if self._eof:
                return None
            try:
                if self._flowing:
                    await self._settle()
                data = await self._reader.read(_READ)
            except (ConnectionError, OSError) as error:
                log.warning("the other side's output failed (%s)", error)
                return None
            if data:
                self._split(data)
                self._flowing = len(self._lines) > 1
                continue
            self._eof = True
            if self._skipped is not None:
                self._lines.append((self._head, self._skipped))
            elif self._partial:  # a last line without a newline still counts
                self._lines.append(b"".join(self._partial))
        line = self._lines.popleft()
        if isinstance(line, tuple):  # over the limit: rejected in its turn, among the others
            self._too_long(*line)
            return b""
        return line

    async def _settle(self) -> None:
        """Let a flowing stream gather in the pipe for :data:`SETTLE` seconds (see the module
        docstring): its transport stops reading, unless its reader has stopped it already."""
        source = self._source
        if source is None or not source.is_reading():
            return
        source.pause_reading()
        try:
            await asyncio.sleep(SETTLE)
        finally:
            source.resume_reading()

    def _split(self, data: bytes) -> None:
        """Queue the lines ``data`` completes; keep the start of the next one (or, past the
        limit, only its first bytes and its size)."""
        lines = data.split(b"\n")
        rest = lines.pop()
        if lines:
            if self._skipped is not None:
                self._lines.append((self._head, self._skipped + len(lines[0]) + 1))
                self._skipped = None
                del lines[0]
            elif self._partial:
                self._partial.append(lines[0])
                lines[0] = b"".join(self._partial)
                self._partial.clear()
                self._held = 0
            if len(data) <= self.max_frame and (not lines or len(lines[0]) <= self.max_frame):
                self._lines.extend(lines)  # none can be over the limit
            else:
                for line in lines:
                    if len(line) > self.max_frame:
                        self._lines.append((line[:_HEAD], len(line) + 1))
                    else:
                        self._lines.append(line)
        if rest:
            self._hold(rest)

    def _hold(self, data: bytes) -> None:
        """Keep ``data``, the middle of a line, unless the line is already over the limit."""
        if self._skipped is not None:
            self._skipped += len(data)
            return
        self._partial.append(data)
        self._held += len(data)
        if self._held > self.max_frame:
            self._head = b"".join(self._partial)[:_HEAD]
            self._skipped = self._held
            self._partial.clear()
            self._held = 0

    def _too_long(self, head: bytes, size: int) -> None:
        """Reject the over-long line of ``size`` bytes whose first bytes are ``head``."""
        self._reject(
            jsontext.request_id(head),
            INVALID_REQUEST,
            f"Invalid request: a message of {size} bytes or more is over the limit of "
            f"{self.max_frame} bytes; it was skipped",
            head,
            request=_METHOD in head,
            limit=self.max_frame,
            size=size,
        )

    async def close(self) -> None:
        self.flush()
        try:
            if not self._writer.is_closing():
                await self._writer.drain()
        except ConnectionError:
            pass


def encode(message: Any) -> bytes:
    """A message as compact JSON text, as the ACP SDKs write it, that always encodes as UTF-8
    (an unpaired surrogate is written as its escape: :func:`turnback.jsontext.dumps`)."""
    return jsontext.dumps(message).encode()


def parse(line: bytes) -> Any:
    """The JSON value of a stripped line (:func:`turnback.jsontext.loads`: ``ValueError``, or
    :class:`~turnback.jsontext.TooDeep` past its depth limit, when it is not one)."""
    return jsontext.loads(line)


def read_update(line: bytes) -> UpdateFrame | None:
    """The session/update a stripped line holds when it is written in the SDKs' compact form
    (an :class:`UpdateFrame`), read in one pass that notes where its parts are; None for any
    other line (:func:`parse` reads it). :class:`~turnback.jsontext.TooDeep` when nested deeper
    than :data:`~turnback.jsontext.MAX_DEPTH`."""
    if not line.startswith(_UPDATE_HEAD_BYTES):
        return None
    text = line.decode("utf-8", "surrogatepass")
    scan = jsontext.scan
    try:
        session_id, end = scan(text, len(_UPDATE_HEAD))
        if not isinstance(session_id, str) or not text.startswith(_UPDATE_KEY, end):
            return None
        start = end + len(_UPDATE_KEY)
        chunk = _text_chunk(text, start)
        chunk_text: str | None = None
        if chunk is None:
            update, stop = scan(text, start)
            if text[stop:] != "}}":
                return None
            check = True
        else:
            kind, text_of, chunk_text, kind_first = chunk
            update = _chunk_update(kind, text_of, kind_first)
            stop, check = len(text) - 2, False
    except ValueError:  # not JSON there: parse() says what is wrong
        return None
    except RecursionError:
        raise jsontext.TooDeep() from None
    frame = UpdateFrame(
        jsonrpc="2.0", method="session/update", params={"sessionId": session_id, "update": update}
    )
    written = text[start:stop]
    if check:
        jsontext.check_depth(text, frame)
        check = not jsontext.finite(written)
    frame.update_text = None if check or jsontext.has_surrogates(written) else written
    frame.rest = end if line.isascii() else len(text[:end].encode("utf-8", "surrogatepass"))
    frame.chunk_text = (
        chunk_text if frame.update_text is not None and _joinable(chunk_text) else None
    )
    frame.lines = None
    return frame


def _joinable(written: str | None) -> bool:
    """Whether a chunk's text as written (between its quotes) can be joined to its neighbours'
    as written: it holds no surrogate, raw or escaped (joined, two halves of a pair written in
    two chunks would read as one character)."""
    return (
        written is not None
        and "\\ud" not in written
        and "\\uD" not in written
        and not jsontext.has_surrogates(written)
    )


def _join_run(frame: UpdateFrame, line: bytes, lines: deque[bytes | tuple[bytes, int]]) -> None:
    """Join to ``frame`` (read from ``line``, a plain text chunk) the chunks of its session and
    kind that come next among the ``lines`` read, taking their lines (see the module
    docstring). Each is read as :func:`read_update` would read it: the same bytes up to its
    update, then a plain text chunk written as an SDK writes one, up to the end of its line."""
    head = line[: frame.rest + len(_UPDATE_KEY)]
    update = frame["params"]["update"]
    kind = update["sessionUpdate"]
    taken: list[bytes] | None = None
    texts: list[str] = []
    written: list[str] = []
    while lines:
        after = lines[0]
        if not isinstance(after, bytes) or not after.startswith(head):
            break
        chunk = _text_chunk(after[len(head) :].decode("utf-8", "surrogatepass"), 0)
        if chunk is None or chunk[0] != kind or not _joinable(chunk[2]):
            break
        lines.popleft()
        if taken is None:
            taken, texts, written = [line], [update["content"]["text"]], [frame.chunk_text or ""]
        taken.append(after)
        texts.append(chunk[1])
        written.append(chunk[2])
    if taken is None:
        return
    update["content"]["text"] = "".join(texts)
    frame.chunk_text = "".join(written)
    frame.update_text = (
        f'{{"content":{{"text":"{frame.chunk_text}","type":"text"}},"sessionUpdate":"{kind}"}}'
    )
    frame.lines = taken


#: How the SDKs write a message chunk of plain text, around its text's JSON string: the Python
#: SDK in its models' key order (the kind comes after the string), the TypeScript SDK in the
#: schema's (the kind comes first). Each text is what the update holds there, ``}}`` then ends
#: the line.
_CHUNK_KINDS = ("agent_message_chunk", "agent_thought_chunk", "user_message_chunk")
_CONTENT_FIRST = '{"content":{"text":'
_KIND_AFTER = {f',"type":"text"}},"sessionUpdate":"{kind}"}}}}}}': kind for kind in _CHUNK_KINDS}
_KIND_FIRST = '{"sessionUpdate":"'
_KIND_HEADS = {
    kind: f'{_KIND_FIRST}{kind}","content":{{"type":"text","text":' for kind in _CHUNK_KINDS
}
_KIND_FIRST_TAIL = "}}}}"


def _text_chunk(text: str, start: int) -> tuple[str, str, str, bool] | None:
    """The update at ``start`` when it is a message chunk of plain text written as an SDK writes
    one, up to the end of the line: its kind, its text, its text as written between its quotes,
    and whether the kind came first (the TypeScript SDK's form). Read without the general JSON
    scanner (its one string is read by the scanner's own string reader). None otherwise: the
    general scanner reads it."""
    kind: str | None = None  # known before the text in the TypeScript SDK's form
    if text.startswith(_CONTENT_FIRST, start):
        at = start + len(_CONTENT_FIRST)
    elif text.startswith(_KIND_FIRST, start):
        named = start + len(_KIND_FIRST)
        kind = text[named : text.find('"', named)]
        head = _KIND_HEADS.get(kind)
        if head is None or not text.startswith(head, start):
            return None
        at = start + len(head)
    else:
        return None
    if text[at : at + 1] != '"':
        return None
    try:
        chunk, stop = jsontext.scan(text, at)  # the string that opens there
    except ValueError:
        return None
    if kind is not None:
        if text[stop:] != _KIND_FIRST_TAIL:
            return None
        return kind, chunk, text[at + 1 : stop - 1], True
    kind = _KIND_AFTER.get(text[stop:])
    if kind is None:
        return None
    return kind, chunk, text[at + 1 : stop - 1], False


def _chunk_update(kind: str, text: str, kind_first: bool) -> dict[str, Any]:
    """A plain text chunk's update, its keys in the order its SDK wrote them."""
    if kind_first:
        return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    return {"content": {"text": text, "type": "text"}, "sessionUpdate": kind}


@functools.lru_cache(maxsize=256)
def _session_field(session_id: str) -> bytes:
    """``"sessionId":`` and ``session_id`` as the SDKs write them (each id is encoded once)."""
    return _SESSION_KEY + b":" + encode(session_id)


@functools.lru_cache(maxsize=256)
def _update_head(session_id: str) -> bytes:
    """The first bytes of a compact session/update for ``session_id``, up to ``,"update":``."""
    return _UPDATE_HEAD_BYTES + encode(session_id)


def with_session_id(frame: Frame, line: bytes, session_id: str) -> bytes:
    """``line`` (which holds ``frame``) with its ``params.sessionId`` replaced by ``session_id``.

    The text is changed in place only when that is certainly the one place: the line has exactly
    one ``"sessionId"`` key (a string value cannot hold those bytes unescaped) and it is followed
    by the old id as ``json.dumps`` writes it. Otherwise -- whitespace, escapes written
    differently, a nested sessionId -- the frame is encoded again, which is always right."""
    if isinstance(frame, UpdateFrame):  # the one place is known
        head, rest = _update_head(session_id), frame.rest
        if frame.lines is not None:  # a run of chunks: each of its lines
            return b"\n".join([head + joined[rest:] for joined in frame.lines])
        return head + line[rest:]
    params = frame.get("params")
    old = params.get("sessionId") if isinstance(params, dict) else None
    if isinstance(old, str) and line.count(_SESSION_KEY) == 1:
        before = _session_field(old)
        if line.count(before) == 1:
            return line.replace(before, _session_field(session_id))
    changed = dict(frame)
    if isinstance(params, dict):
        changed["params"] = {**params, "sessionId": session_id}
    return encode(changed)


__all__ = [
    "BACKLOG",
    "CANCEL_REQUEST",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "PARSE_ERROR",
    "SENT_REQUESTS",
    "SETTLE",
    "Frame",
    "Output",
    "Pace",
    "Rejected",
    "Sender",
    "SentRequests",
    "UpdateFrame",
    "Watch",
    "Wire",
    "encode",
    "note_sent",
    "parse",
    "read_update",
    "with_session_id",
]
