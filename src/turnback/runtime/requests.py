"""The agent's requests to its user -- permissions and input (ACP elicitation) -- as pending
requests of the session.

Order, and why (docs/design.md, invariant 3: nothing is acknowledged before it is durable): a
request is recorded into the running turn as its frame comes off the pipe
(:meth:`PendingRequests.asked`, in wire order); when the connection dispatches it, the journal is
synced -- so the request is in the session's pending requests -- before the embedding application
is asked; the answer is recorded and synced before the agent hears it. A request that arrives
outside a turn, or whose turn has gone, is answered ``cancelled``/``cancel``: no turn can take it.
A request still being asked when its turn ends is withdrawn from the embedding application (its
callback is cancelled, so a proxy cancels the editor's request in turn) and answered
``cancelled``/``decline``: that answer is recorded by :meth:`PendingRequests.withdraw` itself,
before the turn's end is queued, so the end always folds it in (the handler, woken later by the
cancellation, would find the turn ended and its answer refused).
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from turnback.engine.turns import RunningTurn
from turnback.errors import InvalidEvent, OwnershipLost, TurnNotRunning
from turnback.model import ActivityLevel, EventKind
from turnback.records import record
from turnback.runtime.reactor import Notice, Reactor
from turnback.service import Service, SyncTurn


@record
class PermissionRequest:
    """A permission the agent asks for; answer with one of ``options``' ``optionId`` or None."""

    request_id: str
    turn: str
    tool_call: dict[str, Any]
    options: list[dict[str, Any]]


@record
class InputRequest:
    """Input the agent asks for (ACP elicitation); answer with a dict of content, or None."""

    request_id: str
    turn: str
    message: str
    mode: dict[str, Any]


PermissionCallback = Callable[[PermissionRequest], Awaitable[str | None] | str | None]
InputCallback = Callable[[InputRequest], Awaitable[dict[str, Any] | None] | dict[str, Any] | None]

_CANCELLED = {"outcome": {"outcome": "cancelled"}}


class PendingRequests:
    """One session's requests from its agent, between being asked and being answered."""

    def __init__(
        self,
        service: Service,
        reactor: Reactor,
        on_permission: PermissionCallback | None,
        on_input: InputCallback | None,
    ) -> None:
        self._service = service
        self._reactor = reactor
        self._on_permission = on_permission
        self._on_input = on_input
        self._permissions: dict[str, deque[tuple[str, RunningTurn]]] = {}
        self._inputs: deque[tuple[str, RunningTurn]] = deque()
        #: the callbacks being awaited, by the token of the turn that asked, each with the
        #: answer to record if it is withdrawn
        self._asking: dict[str, dict[asyncio.Future[Any], _Withdrawn]] = {}

    def withdraw(self, token: str) -> None:
        """The turn ``token`` is ending: stop asking what it asked, and record each answer as
        cancelled (declined) now, in wire order, ahead of the end."""
        for asking, withdrawn in self._asking.pop(token, {}).items():
            withdrawn.done = True
            _record(withdrawn.turn, withdrawn.answer)
            asking.cancel()

    def clear(self) -> None:
        """Forget every request (the agent process that asked them is gone)."""
        self._permissions.clear()
        self._inputs.clear()

    @property
    def waiting_input(self) -> bool:
        return bool(self._inputs)

    # -- recorded in wire order ----------------------------------------------------------------

    def asked(
        self, turn: RunningTurn, request_id: str, method: str, params: dict[str, Any]
    ) -> None:
        """Record a request the agent just made (``session/request_permission`` or
        ``elicitation/create``) into ``turn``, in wire order."""
        if method == "session/request_permission":
            tool_call = params.get("toolCall")
            event = {
                "sessionUpdate": EventKind.PERMISSION_REQUESTED.value,
                "requestId": request_id,
                "toolCall": tool_call,
                "options": params.get("options"),
            }
            if _record(turn, event):
                key = str(tool_call.get("toolCallId")) if isinstance(tool_call, dict) else ""
                self._permissions.setdefault(key, deque()).append((request_id, turn))
        else:
            event = {
                "sessionUpdate": EventKind.INPUT_REQUESTED.value,
                "requestId": request_id,
                "message": params.get("message"),
                "params": params,
            }
            if _record(turn, event):
                self._inputs.append((request_id, turn))

    # -- answered when the connection dispatches them ------------------------------------------

    async def answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "session/request_permission":
            return await self._permission(params)
        return await self._input(params)

    async def _permission(self, params: dict[str, Any]) -> dict[str, Any]:
        tool_call = params.get("toolCall")
        tool_call = tool_call if isinstance(tool_call, dict) else {}
        pending = self._permissions.get(str(tool_call.get("toolCallId")))
        if not pending:
            return _CANCELLED
        request_id, turn = pending.popleft()
        # Durable (and so in the session's pending requests) before anyone is asked.
        if not await self._synced(turn):
            return _CANCELLED
        offered = params.get("options")
        options = [o for o in offered if isinstance(o, dict)] if isinstance(offered, list) else []
        choice: str | None = None
        if self._on_permission is not None:
            withdrawn = _Withdrawn(turn, _permission_answer(request_id, None))
            try:
                choice = await self._ask(
                    withdrawn,
                    self._on_permission,
                    PermissionRequest(request_id, turn.token, tool_call, options),
                )
            except Exception as error:
                await self._failed("permission", error, request_id, turn, "answered 'cancelled'")
            if withdrawn.done:
                return _CANCELLED  # answered so when its turn ended
        if choice is not None and choice not in {o.get("optionId") for o in options}:
            choice = None
        _record(turn, _permission_answer(request_id, choice))
        # Durable before the agent hears it.
        if not await self._synced(turn):
            return _CANCELLED
        if choice is None:
            return _CANCELLED
        return {"outcome": {"outcome": "selected", "optionId": choice}}

    async def _input(self, params: dict[str, Any]) -> dict[str, Any]:
        if not self._inputs:
            return {"action": "cancel"}
        request_id, turn = self._inputs.popleft()
        if not await self._synced(turn):
            return {"action": "cancel"}
        message = params.get("message")
        mode = {k: v for k, v in params.items() if k not in ("message", "_meta")}
        content: dict[str, Any] | None = None
        if self._on_input is not None:
            withdrawn = _Withdrawn(turn, _input_answer(request_id, None))
            try:
                content = await self._ask(
                    withdrawn,
                    self._on_input,
                    InputRequest(request_id, turn.token, str(message or ""), mode),
                )
            except Exception as error:
                await self._failed("input", error, request_id, turn, "declined")
            if withdrawn.done:
                return {"action": "decline"}  # answered so when its turn ended
        _record(turn, _input_answer(request_id, content))
        if not await self._synced(turn):
            return {"action": "cancel"}
        if content is None:
            return {"action": "decline"}
        return {"action": "accept", "content": content}

    async def _ask(
        self, withdrawn: _Withdrawn, callback: Callable[[Any], Any], request: Any
    ) -> Any:
        """``callback(request)``; None if the turn ends first (see :meth:`withdraw`)."""
        token = withdrawn.turn.token
        asking = asyncio.ensure_future(_call(callback, request))
        self._asking.setdefault(token, {})[asking] = withdrawn
        try:
            return await asking
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this handler itself is being cancelled, not only the question
            return None
        finally:
            waiting = self._asking.get(token)
            if waiting is not None:
                waiting.pop(asking, None)
                if not waiting:
                    del self._asking[token]

    async def _synced(self, turn: RunningTurn) -> bool:
        """Make the turn's journal durable; False when another process took the turn over
        (OwnershipLost): the request is then answered as cancelled, and the turn is stopped
        by its end, which raises the same."""
        try:
            await self._service.arun(SyncTurn(turn))
        except OwnershipLost:
            return False
        return True

    async def _failed(
        self, what: str, error: Exception, request_id: str, turn: RunningTurn, outcome: str
    ) -> None:
        await self._reactor.submit(
            Notice(
                ActivityLevel.ERROR,
                f"{what}.callback.failed",
                f"the {what} callback failed ({type(error).__name__}: {error}); the request "
                f"was {outcome}",
                {"requestId": request_id},
                turn.token,
            )
        )


@record(frozen=False)
class _Withdrawn:
    """A question being asked for ``turn``: the answer recorded if the turn ends first, and
    whether it has (then the handler records nothing more)."""

    turn: RunningTurn
    answer: dict[str, Any]
    done: bool = False


def _permission_answer(request_id: str, choice: str | None) -> dict[str, Any]:
    answer = {
        "sessionUpdate": EventKind.PERMISSION_ANSWERED.value,
        "requestId": request_id,
        "outcome": "selected" if choice is not None else "cancelled",
    }
    if choice is not None:
        answer["optionId"] = choice
    return answer


def _input_answer(request_id: str, content: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "sessionUpdate": EventKind.INPUT_ANSWERED.value,
        "requestId": request_id,
        "action": "accept" if content is not None else "decline",
        "content": content,
    }


def _record(turn: RunningTurn, event: dict[str, Any]) -> bool:
    try:
        turn.record(event, sync=False)
    except (InvalidEvent, TurnNotRunning):
        return False
    return True


async def _call(callback: Callable[[Any], Any], request: Any) -> Any:
    result = callback(request)
    if inspect.isawaitable(result):
        result = await result
    return result


__all__ = [
    "InputCallback",
    "InputRequest",
    "PendingRequests",
    "PermissionCallback",
    "PermissionRequest",
]
