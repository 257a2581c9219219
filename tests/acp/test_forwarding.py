"""How the proxy forwards an agent's ``session/update``: the line as the agent wrote it, with only
the session id replaced, when that is safe; re-encoded from the parsed message otherwise."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from turnback.acp.proxy import Proxy, _SessionRelay

EDITOR_ID = "editor-session"


class Recorder:
    """What the relay hands the proxy: raw lines, or parsed updates to re-encode."""

    def __init__(self) -> None:
        self.wire = self
        self.lines: list[bytes] = []
        self.updates: list[dict[str, Any]] = []

    def post_line(self, line: bytes) -> None:
        self.lines.append(line)

    def forward_update(self, editor: object, params: dict[str, Any]) -> None:
        self.updates.append(params)


def forward(line: bytes, *, replay: bool = False) -> Recorder:
    recorder = Recorder()
    relay = _SessionRelay(cast(Proxy, recorder), EDITOR_ID, [])

    async def reply(frame: dict[str, Any]) -> None:
        raise AssertionError("a notification is not answered")

    assert relay.agent_frame(json.loads(line), replay, reply, line)
    return recorder


COMPACT = (
    b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"agent-1",'
    b'"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text",'
    b'"text":"it said \\"sessionId\\": 1.50 \\u00e9"},"_meta":{"x":[1.0,2]}}}}'
)


def test_an_update_in_the_sdks_form_goes_out_as_written() -> None:
    recorder = forward(COMPACT)
    assert recorder.updates == []
    [line] = recorder.lines
    assert line == COMPACT.replace(b'"sessionId":"agent-1"', f'"sessionId":"{EDITOR_ID}"'.encode())
    # what the agent wrote survives byte for byte: escapes, number formatting, _meta
    assert b'1.50 \\u00e9"},"_meta":{"x":[1.0,2]}' in line


@pytest.mark.parametrize(
    "line",
    [
        # spaces, or another key order: not the form the relay recognises
        b'{"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "agent-1", '
        b'"update": {"sessionUpdate": "plan", "entries": []}}}',
        b'{"method":"session/update","jsonrpc":"2.0","params":{"update":{"sessionUpdate":"plan",'
        b'"entries":[]},"sessionId":"agent-1"}}',
        # a second sessionId key anywhere in the line
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"agent-1",'
        b'"update":{"sessionUpdate":"tool_call","toolCallId":"t","rawInput":{"sessionId":"x"}}}}',
        # an id written with escapes
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"agent\\u002d1",'
        b'"update":{"sessionUpdate":"plan","entries":[]}}}',
        # the commands turnback adds its own to
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"agent-1",'
        b'"update":{"sessionUpdate":"available_commands_update","availableCommands":[]}}}',
    ],
)
def test_any_other_update_is_re_encoded_with_the_editors_session_id(line: bytes) -> None:
    recorder = forward(line)
    assert recorder.lines == []
    params = json.loads(line)["params"]
    assert recorder.updates == [{**params, "sessionId": EDITOR_ID}]


def test_an_update_replayed_while_the_agent_reloads_is_not_forwarded() -> None:
    recorder = forward(COMPACT, replay=True)
    assert (recorder.lines, recorder.updates) == ([], [])
