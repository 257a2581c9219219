"""The runtime suite's shared pieces: real agent processes over real pipes."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

from turnback.model import Activity, Message, MessageKind

T = TypeVar("T")
SCRIPTED = (sys.executable, "-m", "turnback.agents.scripted")


def run(scenario: Awaitable[T], timeout: float = 30) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(scenario, timeout)

    return asyncio.run(bounded())


def codes(activities: list[Activity]) -> list[str]:
    return [a.code for a in activities if not a.code.startswith("checkpoint.captured")]


def text_of(messages: list[Message], kind: MessageKind = MessageKind.AGENT) -> str:
    return "".join(m.text for m in messages if m.kind is kind)


def tool_titles(messages: list[Message]) -> list[str]:
    return [str(m.data.get("title")) for m in messages if m.kind is MessageKind.TOOL_CALL]
