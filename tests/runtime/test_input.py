"""User-input requests (ACP elicitation): persisted as pending, answered through the embedding
application's callback, journaled with their answers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import turnback
from tests.runtime.harness import run, text_of
from turnback.model import EventKind, TurnStatus
from turnback.runtime import AgentRuntime, InputRequest

ASKING_AGENT = (sys.executable, str(Path(__file__).with_name("asking_agent.py")))


def test_an_input_request_is_pending_answered_and_journaled(
    tb: turnback.Turnback,
    session: turnback.Session,
) -> None:
    command = ASKING_AGENT
    seen: list[tuple[InputRequest, Any]] = []

    def answer(request: InputRequest) -> dict[str, Any]:
        seen.append((request, session.record.pending_requests))  # durable before we are asked
        return {"name": "Ada"}

    async def scenario() -> turnback.Turn:
        async with await AgentRuntime.start(tb, session, command, on_input=answer) as rt:
            return await rt.prompt("ask me")

    turn = run(scenario())
    assert turn.status is TurnStatus.COMPLETED
    [(request, pending)] = seen
    assert request.message == "Who is this for?" and request.turn == turn.token
    assert [p["kind"] for p in pending] == ["input"]
    assert session.record.pending_requests == ()
    kinds = [e.kind for e in session.run_events(turn.token)]
    assert kinds.index(EventKind.INPUT_REQUESTED) < kinds.index(EventKind.INPUT_ANSWERED)
    answered = next(e for e in session.run_events(turn.token) if e.kind == EventKind.INPUT_ANSWERED)
    assert answered.event["action"] == "accept" and answered.event["content"] == {"name": "Ada"}
    said = json.loads(text_of(session.turn_messages(turn.token)))
    assert said == {"action": "accept", "content": {"name": "Ada"}}
