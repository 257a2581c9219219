"""A question still being asked when its turn ends is answered ``cancelled`` (``decline`` for
input) in the turn's journal, whichever side runs first: the answer is recorded when the question
is withdrawn, ahead of the end, not when the asking handler wakes up afterwards."""

from __future__ import annotations

import asyncio
from typing import Any

import turnback
from turnback.model import EventKind
from turnback.runtime.reactor import Reactor
from turnback.runtime.requests import InputRequest, PendingRequests, PermissionRequest
from turnback.service import BeginTurn, Service

PERMISSION = {
    "toolCall": {"toolCallId": "t1", "title": "deploy"},
    "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
}
INPUT = {"message": "Who is this for?", "mode": "form", "requestedSchema": {"type": "object"}}


def ended_while_asking(
    tb: turnback.Turnback, session: turnback.Session, method: str, params: dict[str, Any]
) -> tuple[Any, list[dict[str, Any]]]:
    """The agent asks; the user is asked and never answers; the turn ends, its end written
    before the asking handler runs again. Returns the agent's answer and the turn's answers."""
    service = Service.of(tb)

    async def scenario() -> Any:
        asked = asyncio.Event()

        async def never(request: PermissionRequest | InputRequest) -> None:
            asked.set()
            await asyncio.Event().wait()

        reactor = Reactor(session, service)
        reactor.start()
        requests = PendingRequests(service, reactor, never, never)
        turn = await service.arun(BeginTurn(session.id, "deploy it"))
        requests.asked(turn, "r1", method, params)
        answering = asyncio.ensure_future(requests.answer(method, params))
        await asked.wait()
        requests.withdraw(turn.token)
        turn.complete()  # before the loop runs the handler again
        answer = await answering
        await reactor.close()
        return answer

    answer = asyncio.run(scenario())
    answered = (EventKind.PERMISSION_ANSWERED, EventKind.INPUT_ANSWERED)
    events = [e.event for e in session.run_events(1) if e.kind in answered]
    return answer, events


def test_a_permission_withdrawn_as_its_turn_ends_is_journaled_cancelled(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    answer, events = ended_while_asking(tb, session, "session/request_permission", PERMISSION)
    assert answer == {"outcome": {"outcome": "cancelled"}}
    assert [(e["requestId"], e["outcome"]) for e in events] == [("r1", "cancelled")]


def test_an_input_withdrawn_as_its_turn_ends_is_journaled_declined(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    answer, events = ended_while_asking(tb, session, "elicitation/create", INPUT)
    assert answer == {"action": "decline"}
    assert [(e["requestId"], e["action"]) for e in events] == [("r1", "decline")]
