"""User-input requests (ACP elicitation): persisted as pending, answered through the embedding
application's callback, journaled with their answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import turnback
from tests.runtime.harness import run, text_of
from turnback.model import EventKind, TurnStatus
from turnback.runtime import AgentRuntime, InputRequest

ASKING_AGENT = """
    import asyncio, json, os, uuid
    import acp
    from acp.schema import (
        ElicitationFormSessionMode, ElicitationSchema, InitializeResponse, NewSessionResponse,
        PromptResponse,
    )

    class Asking:
        def on_connect(self, conn):
            self.conn = conn

        async def initialize(self, protocol_version, **_):
            return InitializeResponse(protocol_version=protocol_version)

        async def new_session(self, cwd, **_):
            return NewSessionResponse(session_id=uuid.uuid4().hex)

        async def prompt(self, prompt, session_id, **_):
            schema = ElicitationSchema(properties={"name": {"type": "string"}})
            answer = await self.conn.create_elicitation(
                "Who is this for?",
                ElicitationFormSessionMode(session_id=session_id, requested_schema=schema),
            )
            said = json.dumps(answer.model_dump(mode="json", exclude_none=True))
            await self.conn.session_update(
                session_id=session_id, update=acp.update_agent_message_text(said)
            )
            return PromptResponse(stop_reason="end_turn")

    async def main():
        reader, writer = await acp.stdio_streams()
        await acp.run_agent(Asking(), writer, reader)

    asyncio.run(main())
"""


def test_an_input_request_is_pending_answered_and_journaled(
    tb: turnback.Turnback,
    session: turnback.Session,
    write_agent: Callable[[str, str], tuple[str, ...]],
) -> None:
    command = write_agent("asking_agent", ASKING_AGENT)
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
