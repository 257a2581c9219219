"""An agent written with the SDK alone that asks the user for input (ACP elicitation) and says
what it was answered. Used by the runtime and proxy tests."""

import asyncio
import json
import uuid

import acp
from acp.schema import (
    ElicitationFormSessionMode,
    ElicitationSchema,
    InitializeResponse,
    NewSessionResponse,
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


if __name__ == "__main__":
    asyncio.run(main())
