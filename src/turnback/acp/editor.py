"""The editor, as ``turnback acp`` talks to it: what it said in ``initialize`` and
``authenticate``, the ``session/update`` notifications sent to it, the agent's requests passed to
it and answered back, and the questions the runtimes ask it (permissions, input, confirmations).

Requests go hop by hop: a request the agent sends is sent on to the editor under an id of the
proxy's own connection, and a ``$/cancel_request`` from either side is passed on with the id the
other side saw (:class:`Forwarded` keeps both).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import field
from typing import Any

from turnback.acp.commands import Confirm
from turnback.acp.wire import EditorWire
from turnback.records import record
from turnback.runtime import InputRequest, PermissionRequest
from turnback.runtime.connection import AgentConnection
from turnback.runtime.relay import Reply
from turnback.runtime.rpc import Connection, RequestError
from turnback.runtime.wire import CANCEL_REQUEST, SENT_REQUESTS, Frame, SentRequests

log = logging.getLogger("turnback.acp")

REQUEST_CANCELLED = -32800
#: Cancels kept for requests of the agent's that its runtime has not asked the editor yet.
_ASKING_LIMIT = 100


def cancel_notice(rpc_id: Any) -> dict[str, Any]:
    """``$/cancel_request`` of the request sent with ``rpc_id``."""
    return {"jsonrpc": "2.0", "method": CANCEL_REQUEST, "params": {"requestId": rpc_id}}


@record(frozen=False)
class Forwarded:
    """An agent's request passed to the editor: the id(s) it went out with, and whether the
    agent has cancelled it."""

    notes: SentRequests = field(default_factory=SentRequests)
    cancelled: bool = False


class Editor:
    """The editor's side of the proxy (see the module docstring)."""

    def __init__(self, wire: EditorWire, agent: AgentConnection) -> None:
        self.wire = wire
        self._agent = agent  # whose process generation names the requests its runtimes ask
        #: the connection to the editor, once it runs
        self.conn: Connection | None = None
        self.initialize_params: dict[str, Any] = {}
        #: The editor's last accepted ``authenticate``: every agent process started later gets
        #: it too (in memory only: credentials are the agent's to keep).
        self.authenticated: dict[str, Any] | None = None
        #: the agents' requests passed to the editor, by (the agent process's reply, its id)
        self.from_agent: dict[tuple[Reply, Any], Forwarded] = {}
        #: the agents' permission and input requests the runtimes ask the editor, by the
        #: runtime's request id ("process generation.agent's id")
        self._asking: dict[str, Forwarded] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- telling it --------------------------------------------------------------------------

    def update(self, session_id: str, update: dict[str, Any]) -> None:
        """Send the editor one ``session/update`` now, in order with everything else."""
        params = {"sessionId": session_id, "update": update}
        self.wire.post({"jsonrpc": "2.0", "method": "session/update", "params": params})

    def forward_notification(self, method: str, params: Any) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.wire.post(message)

    # -- the agent's requests ----------------------------------------------------------------

    def forward_request(self, frame: Frame, params: Any, reply: Reply) -> None:
        """Pass an agent's request the runtime does not answer (files, terminals, extensions)
        to the editor, and its answer back, in the background."""
        forwarded = Forwarded()
        self.from_agent[(reply, frame["id"])] = forwarded
        self.spawn(self._forward(frame, params, reply, forwarded))

    async def _forward(self, frame: Frame, params: Any, reply: Reply, forwarded: Forwarded) -> None:
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": frame["id"]}
        SENT_REQUESTS.set(forwarded.notes)
        try:
            if forwarded.cancelled:  # the agent cancelled it before it could be sent
                answer["error"] = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
            else:
                assert self.conn is not None
                answer["result"] = await self.conn.send_request(str(frame["method"]), params)
        except RequestError as error:
            answer["error"] = error.to_error_obj()
        except (ConnectionError, OSError) as error:
            answer["error"] = {"code": -32603, "message": f"the editor went away: {error}"}
        finally:
            self.from_agent.pop((reply, frame["id"]), None)
            forwarded.notes.open = False
        await reply(answer)

    def cancel_from_agent(self, reply: Reply, params: Any) -> None:
        """The agent's ``$/cancel_request`` for a request it sent: passed to the editor with the
        id the editor saw, or, not sent yet, answered as cancelled."""
        request = params.get("requestId") if isinstance(params, dict) else None
        try:
            forwarded = self.from_agent.get((reply, request))
        except TypeError:  # an id no request can have
            return
        if forwarded is None and isinstance(request, (str, int)):
            # One the runtime asks the editor itself (a permission, an input), maybe not yet.
            forwarded = self._asking.setdefault(f"{self._agent.generation}.{request}", Forwarded())
            while len(self._asking) > _ASKING_LIMIT:  # cancels of requests long answered
                del self._asking[next(iter(self._asking))]
        if forwarded is not None:
            forwarded.cancelled = True
            for _, rpc_id in forwarded.notes.sent:
                self.wire.post(cancel_notice(rpc_id))

    # -- asking it, for the runtimes ---------------------------------------------------------

    async def _ask(self, request_id: str, method: str, params: dict[str, Any]) -> Any:
        """Ask the editor for a runtime; None if it did not answer. The editor's request is
        cancelled (``$/cancel_request``) when the agent cancels its own, or the turn ends."""
        asking = self._asking.setdefault(request_id, Forwarded())
        noting = SENT_REQUESTS.set(asking.notes)
        try:
            if asking.cancelled or self.conn is None:
                return None
            return await self.conn.send_request(method, params)
        except (RequestError, ConnectionError, OSError) as error:
            log.warning("the editor did not answer %s: %s", method, error)
            return None
        except asyncio.CancelledError:
            if not asking.cancelled:  # else the editor was told when the agent cancelled it
                for _, rpc_id in asking.notes.sent:
                    self.wire.post(cancel_notice(rpc_id))
            raise
        finally:
            SENT_REQUESTS.reset(noting)
            asking.notes.open = False
            if self._asking.get(request_id) is asking:
                del self._asking[request_id]

    async def ask_permission(self, session_id: str, request: PermissionRequest) -> str | None:
        """A runtime's permission callback: the request is journaled; ask the editor."""
        params = {
            "sessionId": session_id,
            "toolCall": request.tool_call,
            "options": request.options,
        }
        result = await self._ask(request.request_id, "session/request_permission", params)
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
            choice = outcome.get("optionId")
            return choice if isinstance(choice, str) else None
        return None

    async def ask_input(self, session_id: str, request: InputRequest) -> dict[str, Any] | None:
        """A runtime's input callback: the request is journaled; ask the editor (ACP
        elicitation), in the editor's session. Declined unless the editor accepts."""
        params = {**request.mode, "message": request.message}
        params.setdefault("mode", "url" if "url" in params else "form")
        if "sessionId" in params:
            params["sessionId"] = session_id
        result = await self._ask(request.request_id, "elicitation/create", params)
        if isinstance(result, dict) and result.get("action") == "accept":
            content = result.get("content")
            return content if isinstance(content, dict) else {}
        return None

    def confirmer(self, session_id: str) -> Confirm | None:
        """How a slash command asks the editor's user to confirm: an ``elicitation/create``
        form with nothing to fill in (accept is yes), where the editor's ``initialize``
        advertises form elicitation; ``None`` where it does not."""
        capabilities = self.initialize_params.get("clientCapabilities")
        elicits = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
        if not (isinstance(elicits, dict) and isinstance(elicits.get("form"), dict)):
            return None

        async def confirm(message: str) -> bool | None:
            if self.conn is None:
                return None
            params = {
                "sessionId": session_id,
                "mode": "form",
                "message": message,
                "requestedSchema": {"type": "object", "properties": {}},
            }
            try:
                result = await self.conn.send_request("elicitation/create", params)
            except (RequestError, ConnectionError, OSError) as error:
                log.warning("the editor did not answer a confirmation: %s", error)
                return None
            return isinstance(result, dict) and result.get("action") == "accept"

        return confirm

    # -- background work ---------------------------------------------------------------------

    def spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        """Stop what is still being passed on (the proxy is closing)."""
        for task in list(self._tasks):
            task.cancel()
