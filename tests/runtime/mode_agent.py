"""An agent written with the SDK alone that has modes and says which one it is in. It keeps
nothing on disk, so a restarted process starts in its default mode. Used by the runtime tests."""

import asyncio
import uuid

import acp
from acp.schema import (
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
)

MODES = ("ask", "code")


class Moded:
    def __init__(self):
        self.modes = {}

    def on_connect(self, conn):
        self.conn = conn

    async def initialize(self, protocol_version, **_):
        return InitializeResponse(protocol_version=protocol_version)

    async def new_session(self, cwd, **_):
        session_id = uuid.uuid4().hex
        self.modes[session_id] = "ask"
        available = [SessionMode(id=mode, name=mode.title()) for mode in MODES]
        return NewSessionResponse(
            session_id=session_id,
            modes=SessionModeState(current_mode_id="ask", available_modes=available),
        )

    async def set_session_mode(self, mode_id, session_id, **_):
        if mode_id not in MODES or session_id not in self.modes:
            raise acp.RequestError.invalid_params({"modeId": mode_id})
        self.modes[session_id] = mode_id
        return SetSessionModeResponse()

    async def prompt(self, prompt, session_id, **_):
        await self.conn.session_update(
            session_id=session_id,
            update=acp.update_agent_message_text(f"mode {self.modes[session_id]}"),
        )
        return PromptResponse(stop_reason="end_turn")


async def main():
    reader, writer = await acp.stdio_streams()
    await acp.run_agent(Moded(), writer, reader)


if __name__ == "__main__":
    asyncio.run(main())
