"""An agent written with the SDK alone that opens no session in a process that has not been
through ``authenticate``. Run as ``python tests/acp/auth_agent.py``."""

import asyncio
import uuid

import acp
from acp.schema import (
    AuthenticateResponse,
    AuthMethodAgent,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
)


class Guarded:
    def __init__(self):
        self.method = None

    def on_connect(self, conn):
        self.conn = conn

    async def initialize(self, protocol_version, **_):
        methods = [AuthMethodAgent(id="token", name="A token")]
        return InitializeResponse(protocol_version=protocol_version, auth_methods=methods)

    async def authenticate(self, method_id, **_):
        if method_id != "token":
            raise acp.RequestError.invalid_params({"methodId": method_id})
        self.method = method_id
        return AuthenticateResponse()

    async def new_session(self, cwd, **_):
        if self.method is None:
            raise acp.RequestError.auth_required()
        return NewSessionResponse(session_id=uuid.uuid4().hex)

    async def prompt(self, prompt, session_id, **_):
        said = acp.update_agent_message_text(f"authenticated with {self.method}")
        await self.conn.session_update(session_id=session_id, update=said)
        return PromptResponse(stop_reason="end_turn")


async def main():
    reader, writer = await acp.stdio_streams()
    await acp.run_agent(Guarded(), writer, reader)


if __name__ == "__main__":
    asyncio.run(main())
