"""How the proxy forwards an agent's ``session/update``: the line as the agent wrote it, with only
the session id replaced, when that is safe; re-encoded from the parsed message otherwise."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from turnback.acp.proxy import Proxy, _SessionRelay
from turnback.runtime.wire import with_session_id

EDITOR_ID = "editor-session"


class Recorder:
    """What the relay hands the proxy: lines for the editor, and the agent's commands."""

    def __init__(self) -> None:
        self.wire = self
        self.lines: list[bytes] = []
        self.commands: list[tuple[dict[str, Any], bool]] = []

    def post_line(self, line: bytes) -> None:
        self.lines.append(line)

    def agent_commands(self, editor: object, update: dict[str, Any], *, forward: bool) -> None:
        self.commands.append((update, forward))


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
    [line] = recorder.lines
    assert line == COMPACT.replace(b'"sessionId":"agent-1"', f'"sessionId":"{EDITOR_ID}"'.encode())
    # what the agent wrote survives byte for byte: escapes, number formatting, _meta
    assert b'1.50 \\u00e9"},"_meta":{"x":[1.0,2]}' in line


@pytest.mark.parametrize(
    ("line", "as_written"),
    [
        # spaces: encoded again
        (
            b'{"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "agent-1", '
            b'"update": {"sessionUpdate": "plan", "entries": []}}}',
            False,
        ),
        # another key order, the one sessionId compact: replaced in place
        (
            b'{"method":"session/update","jsonrpc":"2.0","params":{"update":{"sessionUpdate":'
            b'"plan","entries":[]},"sessionId":"agent-1"}}',
            True,
        ),
        # a second sessionId key anywhere in the line: encoded again (compact, so the same)
        (
            b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"agent-1",'
            b'"update":{"sessionUpdate":"tool_call","toolCallId":"t","rawInput":'
            b'{"sessionId":"agent-1"}}}}',
            False,
        ),
        # an id written with escapes
        (
            b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"agent\\u002d1",'
            b'"update":{"sessionUpdate":"plan","entries":[]}}}',
            False,
        ),
    ],
)
def test_the_session_id_is_replaced_in_place_only_where_that_is_safe(
    line: bytes, as_written: bool
) -> None:
    frame = json.loads(line)
    [out] = forward(line).lines
    assert out == with_session_id(frame, line, EDITOR_ID)
    params = frame["params"]
    assert json.loads(out) == {**frame, "params": {**params, "sessionId": EDITOR_ID}}
    assert (out == line.replace(b'"agent-1"', f'"{EDITOR_ID}"'.encode())) is as_written


def test_the_agents_commands_are_kept_and_sent_with_turnbacks() -> None:
    line = (
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"agent-1",'
        b'"update":{"sessionUpdate":"available_commands_update","availableCommands":[]}}}'
    )
    recorder = forward(line)
    assert recorder.lines == []
    assert recorder.commands == [(json.loads(line)["params"]["update"], True)]
    # while the agent replays a session it reopens, they are kept, not sent
    assert forward(line, replay=True).commands == [(json.loads(line)["params"]["update"], False)]


def test_an_update_replayed_while_the_agent_reloads_is_not_forwarded() -> None:
    recorder = forward(COMPACT, replay=True)
    assert (recorder.lines, recorder.commands) == ([], [])
