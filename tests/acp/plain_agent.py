"""An ACP agent written with the official SDK only -- no turnback extensions -- that uses a
little of everything a client offers: streamed text with ``_meta``, tool calls, a plan, a
permission request, a file written through the client, extension requests and notifications
both ways, modes. Run as ``python tests/acp/plain_agent.py``."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, cast

import acp
from acp.helpers import update_current_mode
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    AvailableCommand,
    AvailableCommandsUpdate,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PlanEntry,
    PromptResponse,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
    TextContentBlock,
    ToolCallUpdate,
)


class PlainAgent:
    def __init__(self) -> None:
        self.client: Any = None
        self.cwd: dict[str, str] = {}
        self.count = 0
        self.pending: asyncio.Future[Any] | None = None

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=protocol_version,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="plain", title="Plain agent", version="2"),
            field_meta={"plain": {"build": 7}},
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        session_id = f"plain-{uuid.uuid4().hex[:8]}"
        self.cwd[session_id] = cwd
        modes = SessionModeState(
            current_mode_id="ask",
            available_modes=[
                SessionMode(id="ask", name="Ask"),
                SessionMode(id="code", name="Code"),
            ],
        )
        asyncio.get_running_loop().call_later(0.05, self._offer_commands, session_id)
        return NewSessionResponse(session_id=session_id, modes=modes)

    def _offer_commands(self, session_id: str) -> None:
        update = AvailableCommandsUpdate(
            session_update="available_commands_update",
            available_commands=[AvailableCommand(name="plain-help", description="help")],
        )
        self.pending = asyncio.ensure_future(
            self.client.session_update(session_id=session_id, update=update)
        )

    async def set_session_mode(
        self, mode_id: str, session_id: str, **_: Any
    ) -> SetSessionModeResponse:
        await self.client.session_update(
            session_id=session_id,
            update=update_current_mode(mode_id),
        )
        return SetSessionModeResponse(field_meta={"plain": {"mode": mode_id}})

    async def prompt(self, prompt: list[Any], session_id: str, **meta: Any) -> PromptResponse:
        self.count += 1
        text = "".join(b.text for b in prompt if isinstance(b, TextContentBlock))
        say = acp.update_agent_message_text(f"heard {text!r} with {sorted(meta)}\n")
        say.field_meta = {"plain": {"n": self.count}}
        await self.client.session_update(session_id=session_id, update=say)
        call_id = f"call-{self.count}"
        await self.client.session_update(
            session_id=session_id,
            update=acp.start_tool_call(call_id, "Write notes", kind="edit", status="pending"),
        )
        await self.client.session_update(
            session_id=session_id,
            update=acp.update_plan(
                [PlanEntry(content="write notes", priority="high", status="in_progress")]
            ),
        )
        answer = await self.client.request_permission(
            session_id=session_id,
            tool_call=ToolCallUpdate(tool_call_id=call_id, title="Write notes"),
            options=[
                PermissionOption(option_id="yes", name="Yes", kind="allow_once"),
                PermissionOption(option_id="no", name="No", kind="reject_once"),
            ],
        )
        allowed = isinstance(answer.outcome, AllowedOutcome) and answer.outcome.option_id == "yes"
        if allowed:
            await self.client.write_text_file(
                path=f"{self.cwd[session_id]}/notes-{self.count}.txt",
                content=f"notes {self.count}\n",
                session_id=session_id,
            )
        await self.client.ext_notification("plain/ping", {"n": self.count, "sessionId": session_id})
        echoed = await self.client.ext_method("plain/echo", {"n": self.count})
        await self.client.session_update(
            session_id=session_id,
            update=acp.update_tool_call(call_id, status="completed" if allowed else "failed"),
        )
        await self.client.session_update(
            session_id=session_id,
            update=acp.update_agent_message_text(f"echo {echoed}\n"),
        )
        return PromptResponse(stop_reason="end_turn", field_meta={"plain": {"tokens": self.count}})

    async def cancel(self, session_id: str, **_: Any) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method != "plain/hello":
            raise acp.RequestError.method_not_found(f"_{method}")
        return {"hi": params}

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


async def main() -> None:
    reader, writer = await acp.stdio_streams()
    await acp.run_agent(cast(acp.Agent, PlainAgent()), writer, reader)


if __name__ == "__main__":
    asyncio.run(main())
