"""An agent's request for user input (ACP elicitation) reaches the editor through the proxy, in
the editor's session, and the answer is journaled on the way back."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, cast

import acp
from acp.schema import AcceptElicitationResponse

import turnback
from tests.acp.harness import CAPABILITIES, Editor, proxy_command, run
from turnback.model import EventKind, TurnStatus

ASKING_AGENT = (sys.executable, str(Path(__file__).parents[1] / "runtime" / "asking_agent.py"))


class AnsweringEditor(Editor):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, Any]] = []

    async def create_elicitation(self, message: str, mode: Any, **_: Any) -> Any:
        self.asked.append((message, mode))
        return AcceptElicitationResponse(action="accept", content={"name": "Ada"})


def test_an_input_request_reaches_the_editor_and_is_journaled(home: Path, tmp_path: Path) -> None:
    editor = AnsweringEditor()
    command = proxy_command(home, ASKING_AGENT)

    async def scenario() -> str:
        async with acp.spawn_agent_process(
            cast(acp.Client, editor),
            command[0],
            *command[1:],
            env=dict(os.environ),
            cwd=tmp_path,
            use_unstable_protocol=True,
        ) as (conn, _):
            await conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES
            )
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[acp.text_block("ask me")])
            return sid

    sid = run(scenario())
    [(message, mode)] = editor.asked
    assert message == "Who is this for?" and mode.session_id == sid
    assert json.loads(editor.text(sid)) == {"action": "accept", "content": {"name": "Ada"}}
    with turnback.open(home) as tb:
        session = tb.session(sid)
        [turn] = session.turns()
        kinds = [e.kind for e in session.run_events(turn.token)]
    assert turn.status is TurnStatus.COMPLETED
    assert EventKind.INPUT_REQUESTED in kinds and EventKind.INPUT_ANSWERED in kinds
