"""How the proxy forwards an agent's ``session/update``: the line as the agent wrote it, with only
the session id replaced, when that is safe; re-encoded from the parsed message otherwise."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from turnback import jsontext
from turnback.acp.editor import Editor
from turnback.acp.sessions import SessionRelay, Sessions
from turnback.runtime.wire import (
    UpdateFrame,
    _chunk_update,
    _text_chunk,
    read_update,
    with_session_id,
)

EDITOR_ID = "editor-session"


class Recorder:
    """What the relay hands on: lines for the editor, and the agent's commands."""

    def __init__(self) -> None:
        self.wire = self
        self.lines: list[bytes] = []
        self.commands: list[tuple[dict[str, Any], bool]] = []

    def post_line(self, line: bytes) -> None:
        self.lines.append(line)

    def agent_commands(self, editor: object, update: dict[str, Any], *, forward: bool) -> None:
        self.commands.append((update, forward))

    def announce_commands(self, editor: object) -> None:
        pass


def relay_to(recorder: Recorder) -> SessionRelay:
    relay = SessionRelay(cast(Editor, recorder), cast(Sessions, recorder), EDITOR_ID, [])
    relay.editor_session = cast(Any, "the editor session")
    return relay


async def reply(frame: dict[str, Any]) -> None:
    raise AssertionError("a notification is not answered")


def forward(line: bytes, *, replay: bool = False) -> Recorder:
    recorder = Recorder()
    relay = relay_to(recorder)
    relay.answered()  # the editor knows the session
    assert relay.agent_frame(json.loads(line), replay, reply, line)
    return recorder


def test_updates_before_the_editor_knows_the_session_wait_for_its_answer() -> None:
    recorder = Recorder()
    relay = relay_to(recorder)
    commands = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"agent-1",'
    commands += b'"update":{"sessionUpdate":"available_commands_update","availableCommands":[]}}}'
    for line in (COMPACT, commands, COMPACT):
        assert relay.agent_frame(json.loads(line), False, reply, line)
    assert recorder.lines == []
    assert [forwarded for _, forwarded in recorder.commands] == [False]  # kept, not sent
    relay.answered()
    assert len(recorder.lines) == 2 and recorder.lines[0] == recorder.lines[1]
    assert b'"sessionId":"editor-session"' in recorder.lines[0]


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


HEAD = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"agent-1","update":'


@pytest.mark.parametrize(
    ("line", "text_kept"),
    [
        (COMPACT, True),
        (HEAD + b'{"sessionUpdate":"plan","entries":[]}}}', True),
        (HEAD + '{"sessionUpdate":"agent_message_chunk","text":"h\\u00e9 é"}}}'.encode(), True),
        # an unpaired surrogate written raw: read as Python's json reads it, encoded again
        (HEAD + b'{"sessionUpdate":"agent_message_chunk","text":"\xed\xa0\x80"}}}', False),
        # values JSON has no text for: encoded again (which refuses them)
        (HEAD + b'{"sessionUpdate":"plan","entries":[NaN]}}}', False),
        (HEAD + b'{"sessionUpdate":"plan","note":"Infinity and NaN"}}}', False),
        # message chunks of plain text as each SDK writes them (read without the JSON scanner)
        (
            HEAD + b'{"content":{"text":"chunk \\n\\"NaN\\" \\ud800","type":"text"},'
            b'"sessionUpdate":"agent_message_chunk"}}}',
            True,
        ),
        (
            HEAD
            + '{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":'
            '"é [[{{"}}}}'.encode(),
            True,
        ),
        (
            HEAD + b'{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":""}}}}',
            True,
        ),
        (
            HEAD + b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":'
            b'"\xed\xa0\x80"}}}}',
            False,
        ),
        (
            HEAD + b'{"content":{"text":"","type":"text"},"sessionUpdate":"agent_thought_chunk"}}}',
            True,
        ),
        # the same forms with something more: read by the JSON scanner
        (
            HEAD + b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":'
            b'"a","annotations":null}}}}',
            True,
        ),
        (
            HEAD + b'{"content":{"text":"a","type":"text"},"sessionUpdate":"agent_message_chunk",'
            b'"messageId":"m"}}}',
            True,
        ),
    ],
)
def test_an_update_in_the_sdks_form_is_read_once_with_its_text(
    line: bytes, text_kept: bool
) -> None:
    frame = read_update(line)
    assert isinstance(frame, UpdateFrame)
    assert frame == jsontext.loads(line)
    assert repr(frame["params"]) == repr(jsontext.loads(line)["params"])  # keys in their order
    update = frame["params"]["update"]
    assert (frame.update_text is not None) is text_kept
    if frame.update_text is not None:
        assert json.loads(frame.update_text) == update
        assert frame.update_text.encode()  # storable as UTF-8
    out = with_session_id(frame, line, EDITOR_ID)
    assert out == line.replace(b'"agent-1"', f'"{EDITOR_ID}"'.encode(), 1)
    assert jsontext.loads(out)["params"] == {"sessionId": EDITOR_ID, "update": update}


def test_chunks_of_plain_text_in_the_sdks_forms_are_read_without_the_json_scanner() -> None:
    start = len(HEAD)
    for update, content_end in (
        (
            '{"content":{"text":"a\\"b","type":"text"},"sessionUpdate":"agent_thought_chunk"}',
            '"text"}',
        ),
        ('{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"a\\"b"}}', '"b"}'),
    ):
        text = HEAD.decode() + update + "}}"
        read = _text_chunk(text, start)
        assert read is not None
        kind, chunk, written, kind_first = read
        assert _chunk_update(kind, chunk, kind_first) == json.loads(update)
        assert list(json.dumps(_chunk_update(kind, chunk, kind_first))) == list(
            json.dumps(json.loads(update))
        )  # its keys in the order they were written
        assert written == 'a\\"b'
        more = content_end[:-1] + ',"x":1}'
        assert _text_chunk(text.replace(content_end, more), start) is None
        assert _text_chunk(text.replace("chunk", "chunks"), start) is None
        assert _text_chunk(text + " ", start) is None


@pytest.mark.parametrize(
    "line",
    [
        # another key after the update, and a second update key written with an escape
        HEAD + b'{"sessionUpdate":"plan","entries":[]},"_meta":{}}}',
        HEAD + b'{"sessionUpdate":"plan","entries":[]},"\\u0075pdate":{"sessionUpdate":"x"}}}',
        HEAD + b'{"sessionUpdate":"plan","entries":[]}},"params":{}}',
        HEAD + b'{"sessionUpdate":"plan","entries":[]}}} ',
        HEAD + b'{"sessionUpdate":"plan","entries":[}}}',
        HEAD + b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"}}}}}',
        HEAD + b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"}}}',
        HEAD.replace(b'"agent-1"', b"7") + b'{"sessionUpdate":"plan"}}}',
        b'{"jsonrpc":"2.0","id":1,"method":"session/update","params":{}}',
    ],
)
def test_any_other_line_is_left_to_the_json_reader(line: bytes) -> None:
    assert read_update(line) is None


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
