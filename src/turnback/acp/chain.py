"""``turnback acp`` as a link of an ACP proxy chain run by a conductor (draft: the RFD "Agent
Extensions via ACP Proxies", known as proxy chains).

Some facts about the draft that this module depends on:

* A conductor starts each component of a chain and passes every message between two of them.
  A component learns that it is a proxy from its first request: ``_proxy/initialize`` (the
  reference conductor's name; the RFD's text writes ``proxy/initialize``), with the parameters
  of ``initialize``, answered as ``initialize`` is.
* Its successor -- the next proxy, or the agent -- is reached through the conductor, on the same
  stdin and stdout, in an envelope: ``_proxy/successor`` (``proxy/successor`` for a conductor
  that used the RFD's name) whose params are the inner message's ``method`` and ``params``. A
  request goes as a request, and the conductor's answer is the successor's; a notification goes
  as a notification. What the successor sends comes back in the same envelope. The draft's
  earlier split names, ``_proxy/successor/request`` and ``_proxy/successor/notification``, are
  read too. The inner params, ``_meta`` and all, pass as they are; an envelope's own ``_meta``
  is that hop's (the reference conductor sets none) and is not passed on.
* Anything else the conductor sends comes from the predecessor (the editor's side), and what
  turnback sends the conductor without an envelope goes there.

:class:`Successor` is the successor as the runtime sees it: a
:class:`~turnback.runtime.sidecar.Link`, written to and read from exactly as an agent
process's pipes are, so sessions, durable turns, journaled permissions and ``$/cancel_request``
work as they do with a process. Frames are taken from the conductor's side by the editor wire's
watch (:attr:`~turnback.acp.wire.EditorWire.taken`), in wire order, and posted to it in the
order the runtime writes them: nothing waits in a task, so no message overtakes another.

Ids belong to one hop each. A request the runtime sends its successor goes to the conductor
under an id of this link's own (``successor-N``: JSON-RPC ids the proxy's connection, which
counts in integers, never uses); a request from the successor reaches the runtime under a
number of the link's own, and its answer goes back under the conductor's id. A
``$/cancel_request`` follows a request across the hop with the id the next hop saw, in either
direction; it is sent to the conductor without an envelope, since the id it names is one the
conductor was given.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from turnback.acp.editor import cancel_notice
from turnback.acp.wire import EditorWire
from turnback.runtime.rpc import INVALID_PARAMS
from turnback.runtime.sidecar import MAX_FRAME
from turnback.runtime.wire import CANCEL_REQUEST, Frame, encode, parse

log = logging.getLogger("turnback.acp")

#: The methods a conductor initializes a proxy component with, and the envelope each implies.
INITIALIZE: dict[str, str] = {
    "_proxy/initialize": "_proxy/successor",
    "proxy/initialize": "proxy/successor",
}
#: The envelopes a conductor delivers the successor's messages in.
ENVELOPES = frozenset(
    {
        "_proxy/successor",
        "proxy/successor",
        "_proxy/successor/request",
        "_proxy/successor/notification",
    }
)
_PREFIX = "successor-"


class Successor:
    """The conductor's successor as an agent the runtime reaches (see the module docstring)."""

    described = "the conductor's successor"

    def __init__(self, wire: EditorWire, envelope: str) -> None:
        self._wire = wire
        #: the envelope the runtime's messages go out in
        self.envelope = envelope
        self._reader: asyncio.StreamReader | None = None
        self._exited: asyncio.Future[int] | None = None
        self._sent = 0
        #: the runtime's requests waiting for the successor: the conductor's id -> the runtime's
        self._outgoing: dict[str, Any] = {}
        #: the successor's requests waiting for the runtime: the link's id -> the conductor's
        self._incoming: dict[int, Any] = {}
        self._received = 0

    # -- a run of the link, for the runtime's sidecar ----------------------------------------

    async def open(self) -> tuple[asyncio.StreamReader, _Input, asyncio.Future[int]]:
        await self.close()
        self._reader = asyncio.StreamReader(limit=MAX_FRAME)
        self._exited = asyncio.get_running_loop().create_future()
        self._wire.taken = self.take
        return self._reader, _Input(self), self._exited

    async def close(self) -> None:
        """End this run: the runtime reads its end; what the successor asked is refused."""
        if self._reader is not None:
            self._reader.feed_eof()
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(0)
        for asked in self._incoming.values():
            self._wire.error(asked, -32603, "turnback's link to its successor was closed")
        self._reader, self._exited = None, None
        self._outgoing.clear()
        self._incoming.clear()

    @property
    def running(self) -> bool:
        """Whether a run is open (between :meth:`open` and :meth:`close`)."""
        return self._exited is not None and not self._exited.done()

    def _feed(self, frame: Frame) -> None:
        assert self._reader is not None
        self._reader.feed_data(encode(frame) + b"\n")

    # -- from the conductor (the editor wire's watch) ----------------------------------------

    def take(self, frame: Frame, line: bytes) -> bool:
        """Take what the conductor sends for this link: the successor's messages, answers to
        the runtime's requests, and cancels of the successor's requests."""
        if not self.running:
            return False
        method = frame.get("method")
        if method is None:
            inner = self._outgoing.pop(str(frame["id"]), None) if _is_ours(frame) else None
            if inner is None:
                return False
            self._feed({**frame, "id": inner})  # the error object as written, data and all
            return True
        params = frame.get("params")
        if method == CANCEL_REQUEST:
            return self._cancel_incoming(params)
        if method not in ENVELOPES:
            return False
        if not isinstance(params, dict) or not isinstance(params.get("method"), str):
            if "id" in frame:
                self._wire.error(
                    frame["id"],
                    INVALID_PARAMS,
                    f"Invalid params: {method} carries the inner message's method (a string) "
                    "and params",
                    {"method": method},
                )
            return True
        inner_method: str = params["method"]
        message: Frame = {"jsonrpc": "2.0"}
        if "id" in frame:
            message["id"] = self._received
            self._incoming[self._received] = frame["id"]
            self._received += 1
        message["method"] = inner_method
        if "params" in params:
            message["params"] = params["params"]
        if inner_method == CANCEL_REQUEST and "id" not in message:
            # of a request already answered, or never seen: its id names none of the runtime's
            self._cancel_incoming(message.get("params"))
            return True
        return self._forward(message)

    def _forward(self, message: Frame) -> bool:
        self._feed(message)
        return True

    def _cancel_incoming(self, params: Any) -> bool:
        """The conductor's ``$/cancel_request`` of a request of the successor's: passed on with
        the id the runtime saw."""
        request = params.get("requestId") if isinstance(params, dict) else None
        for link_id, asked in self._incoming.items():
            if asked == request and type(asked) is type(request):
                self._feed(cancel_notice(link_id))
                return True
        return False

    # -- from the runtime --------------------------------------------------------------------

    def sent(self, frame: Frame) -> None:
        """One message the runtime wrote to its successor."""
        method = frame.get("method")
        if method is None:  # the runtime's answer to a request of the successor's
            asked = self._incoming.pop(frame.get("id"), None)  # type: ignore[arg-type]
            if asked is not None:
                self._wire.post({**frame, "id": asked})
            return
        if method == CANCEL_REQUEST and "id" not in frame:
            params = frame.get("params")
            request = params.get("requestId") if isinstance(params, dict) else None
            for outer, inner in self._outgoing.items():
                if inner == request and type(inner) is type(request):
                    self._wire.post(cancel_notice(outer))
                    return
            return  # its request was answered already: the successor's ids are not the runtime's
        wrapped: dict[str, Any] = {"method": method}
        if "params" in frame:
            wrapped["params"] = frame["params"]
        envelope: Frame = {"jsonrpc": "2.0"}
        if "id" in frame:
            outer = f"{_PREFIX}{self._sent}"
            self._sent += 1
            self._outgoing[outer] = frame["id"]
            envelope["id"] = outer
        envelope["method"] = self.envelope
        envelope["params"] = wrapped
        self._wire.post(envelope)


def _is_ours(frame: Frame) -> bool:
    rpc_id = frame.get("id")
    return isinstance(rpc_id, str) and rpc_id.startswith(_PREFIX)


class _Input:
    """The successor's input as the runtime writes to it: lines, each handed to
    :meth:`Successor.sent`."""

    def __init__(self, successor: Successor) -> None:
        self._successor = successor
        self._partial = b""

    def write(self, data: bytes) -> None:
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            if line.strip():
                self._successor.sent(parse(line))

    async def drain(self) -> None:
        return None  # what is posted to the conductor is paced by the editor wire

    def is_closing(self) -> bool:
        return not self._successor.running


__all__ = ["ENVELOPES", "INITIALIZE", "Successor"]
