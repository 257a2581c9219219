"""JSON-RPC 2.0 over the ACP wire, owned by turnback: requests, notifications, answers.

Both sides of turnback speak it over a :class:`~turnback.runtime.wire.Wire`: the runtime towards
an agent process, the proxy towards the editor. It is what the ACP SDKs' connections do, and
only that, so that serving a session needs no SDK (whose models take longer to import than an
agent takes to answer ``initialize``). Some facts it keeps:

* **Every message is handled in its own task**, as the SDKs do: a handler that waits (on the
  user, on the agent) never holds up the messages behind it. So handlers may run out of wire
  order; what must see messages in order watches the wire (:data:`~turnback.runtime.wire.Watch`).
* **Errors pass through unchanged.** An error answer becomes a :class:`RequestError` that keeps
  the error object as the far side wrote it -- ``code``, ``message`` and ``data``, even a
  ``"data": null`` or fields JSON-RPC does not name -- and a handler that raises it gives that
  object back as it was: a proxy relays an agent's refusal byte for byte. A handler that fails
  any other way answers ``-32603`` with what went wrong, and the loop goes on.
* **The receive loop never dies of one message.** The wire has checked each line (a line that is
  not a usable JSON-RPC message never reaches here); a response to no request of ours is
  dropped, and whatever a handler does stays in its task.
* **``$/cancel_request``** (:data:`~turnback.runtime.wire.CANCEL_REQUEST`) reaches the handler
  as any notification: the ids it names are the sender's, so only the handler knows what they
  led to (the proxy passes it on hop by hop).
* **When the far side goes** (end of its output) or the connection is closed, every request
  still waiting fails with ``ConnectionError``, and so does any request sent afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

log = logging.getLogger("turnback.rpc")

#: The ACP version turnback speaks (the SDKs' ``PROTOCOL_VERSION``).
PROTOCOL_VERSION = 1
#: The methods an ACP agent may call on its client (ACP's schema, as the SDK turnback is tested
#: against lists them; a test compares): the runtime records any other as an extension.
CLIENT_METHODS = frozenset(
    {
        "elicitation/complete",
        "elicitation/create",
        "fs/read_text_file",
        "fs/write_text_file",
        "mcp/connect",
        "mcp/disconnect",
        "mcp/message",
        "session/request_permission",
        "session/update",
        "terminal/create",
        "terminal/kill",
        "terminal/output",
        "terminal/release",
        "terminal/wait_for_exit",
    }
)

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603

#: ``handler(method, params, is_notification)``: the result of a request (JSON), or raises.
Handler = Callable[[str, Any, bool], Awaitable[Any]]


class RequestError(Exception):
    """A JSON-RPC error: one the far side answered with, or one to answer with."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self._written: dict[str, Any] | None = None

    @classmethod
    def answered(cls, error: dict[str, Any]) -> RequestError:
        """The error object of an answer, kept as it was written."""
        code = error.get("code")
        made = cls(
            code if isinstance(code, int) else INTERNAL_ERROR,
            str(error.get("message", "")),
            error.get("data"),
        )
        made._written = error
        return made

    @classmethod
    def invalid_params(cls, data: Any = None) -> RequestError:
        return cls(INVALID_PARAMS, "Invalid params", data)

    @classmethod
    def method_not_found(cls, method: str) -> RequestError:
        return cls(METHOD_NOT_FOUND, "Method not found", {"method": method})

    @classmethod
    def internal_error(cls, data: Any = None) -> RequestError:
        return cls(INTERNAL_ERROR, "Internal error", data)

    def to_error_obj(self) -> dict[str, Any]:
        """The error object to answer with: as the far side wrote it, when it did."""
        if self._written is not None:
            return dict(self._written)
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    @property
    def described(self) -> str:
        """The message, with what its data says: a text, or an object's ``details`` and
        ``message`` (an agent's "Internal error" often says what went wrong only there)."""
        data = self.data
        said = [data] if isinstance(data, str) else []
        if isinstance(data, dict):
            said = [data[key] for key in ("details", "message") if isinstance(data.get(key), str)]
        said = [text for text in dict.fromkeys(said) if text.strip() and text != self.message]
        return f"{self.message} ({'; '.join(said)})" if said else self.message


class Transport(Protocol):
    """Messages in and out: a :class:`~turnback.runtime.wire.Wire`."""

    async def send(self, message: dict[str, Any]) -> None: ...

    async def receive(self) -> dict[str, Any] | None: ...

    async def close(self) -> None: ...


class Connection:
    """One JSON-RPC peer over a transport (see the module docstring). Made on a running loop;
    it reads until the far side goes or :meth:`close`."""

    def __init__(self, handler: Handler, transport: Transport) -> None:
        self._handler = handler
        self._transport = transport
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._open = True
        self._receiving = asyncio.ensure_future(self._receive())

    # -- sending -----------------------------------------------------------------------------

    async def send_request(self, method: str, params: Any = None) -> Any:
        """Ask the far side; its result, :class:`RequestError` for an error answer,
        ``ConnectionError`` once it has gone."""
        self._check_open()
        rpc_id = self._next_id
        self._next_id += 1
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rpc_id] = answer
        try:
            await self._transport.send(_message(method, params, rpc_id))
            return await answer
        finally:
            self._waiting.pop(rpc_id, None)

    async def send_notification(self, method: str, params: Any = None) -> None:
        self._check_open()
        await self._transport.send(_message(method, params))

    def _check_open(self) -> None:
        if not self._open:
            raise ConnectionError("Connection closed")

    # -- receiving ---------------------------------------------------------------------------

    async def _receive(self) -> None:
        try:
            while (message := await self._transport.receive()) is not None:
                try:
                    self._dispatch(message)
                except Exception:  # one message must not end the loop
                    log.exception("a message could not be handled")
        except Exception:
            log.exception("reading messages failed")
        finally:
            self._gone()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" not in message:
            answer = self._waiting.pop(message.get("id"), None)  # type: ignore[arg-type]
            if answer is None or answer.done():
                log.debug("an answer to no request waiting: %r", message.get("id"))
            elif "error" in message:
                answer.set_exception(RequestError.answered(message["error"]))
            else:
                answer.set_result(message.get("result"))
            return
        work = self._answer(message) if "id" in message else self._notified(message)
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, request: dict[str, Any]) -> None:
        method = request["method"]
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        try:
            answer["result"] = await self._handler(method, request.get("params"), False)
        except RequestError as error:
            answer["error"] = error.to_error_obj()
        except Exception as error:
            log.exception("handling %s failed", method)
            answer["error"] = RequestError.internal_error({"details": str(error)}).to_error_obj()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            await self._transport.send(answer)

    async def _notified(self, notification: dict[str, Any]) -> None:
        method = notification["method"]
        try:
            await self._handler(method, notification.get("params"), True)
        except Exception:
            log.exception("handling the notification %s failed", method)

    # -- the end -----------------------------------------------------------------------------

    def _gone(self) -> None:
        self._open = False
        waiting, self._waiting = self._waiting, {}
        for answer in waiting.values():
            if not answer.done():
                answer.set_exception(ConnectionError("Connection closed"))

    async def close(self) -> None:
        """Stop reading, fail the requests still waiting, end the handlers. Idempotent."""
        self._gone()
        self._receiving.cancel()
        try:
            await self._transport.close()
        finally:
            tasks = [*self._tasks, self._receiving]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _message(method: str, params: Any, rpc_id: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0"}
    if rpc_id is not None:
        message["id"] = rpc_id
    message["method"] = method
    if params is not None:
        message["params"] = params
    return message


__all__ = [
    "CLIENT_METHODS",
    "PROTOCOL_VERSION",
    "Connection",
    "Handler",
    "RequestError",
    "Transport",
]
