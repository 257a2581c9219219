"""The wire splits lines out of large reads: what it receives is the same, message for message
and error for error in wire order, wherever the far side's writes (and so the reads) break the
stream."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnback.engine.fold import fold
from turnback.runtime import wire as wire_module
from turnback.runtime.wire import Rejected, Wire, read_update, with_session_id

LIMIT = 200


class Sink:
    """An output nobody reads."""

    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def message(index: int, size: int) -> bytes:
    """A request whose line is at least ``size`` bytes long."""
    line = {"jsonrpc": "2.0", "id": index, "method": "m", "params": {"pad": "x" * size}}
    return json.dumps(line, separators=(",", ":")).encode()


def receive_all(stream: bytes, pieces: list[int]) -> list[Any]:
    """What a wire with a limit of LIMIT bytes receives from ``stream`` when it arrives cut
    at ``pieces``: each message's id, and ("too long", id, size) for each rejected line."""

    async def scenario() -> list[Any]:
        reader = asyncio.StreamReader()
        seen: list[Any] = []

        def rejected(rejected: Rejected) -> None:
            seen.append(("too long", rejected.rpc_id, rejected.data and rejected.data["size"]))

        wire = Wire(reader, Sink(), LIMIT, rejected=rejected)

        async def feed() -> None:
            at = 0
            for cut in [*sorted(pieces), len(stream)]:
                if cut > at:
                    reader.feed_data(stream[at:cut])
                    at = cut
                    await asyncio.sleep(0)
            reader.feed_eof()

        feeding = asyncio.ensure_future(feed())
        while (frame := await wire.receive()) is not None:
            seen.append(frame["id"])
        await feeding
        return seen

    return asyncio.run(scenario())


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 10, LIMIT - 60, LIMIT, 3 * LIMIT]), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
    last_newline=st.booleans(),
)
def test_messages_and_over_long_lines_come_out_in_order_however_the_reads_fall(
    sizes: list[int], cuts: list[int], last_newline: bool
) -> None:
    lines = [message(index, size) for index, size in enumerate(sizes)]
    stream = b"\n".join(lines) + (b"\n" if last_newline else b"")
    expected: list[Any] = []
    for index, line in enumerate(lines):
        if len(line) <= LIMIT:
            expected.append(index)
        else:
            newline = index < len(lines) - 1 or last_newline
            expected.append(("too long", index, len(line) + newline))
    assert receive_all(stream, [c for c in cuts if c < len(stream)]) == expected


def test_blank_lines_and_crlf_are_not_messages() -> None:
    stream = b"\r\n\n" + message(1, 0) + b"\r\n  \n" + message(2, 0)
    assert receive_all(stream, [1, 5]) == [1, 2]


class Counting(Sink):
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


def test_what_the_watch_forwards_from_one_read_goes_out_in_one_write_before_receive_returns() -> (
    None
):
    async def scenario() -> tuple[Any, list[bytes]]:
        reader = asyncio.StreamReader()
        editor = Counting()
        out = Wire(asyncio.StreamReader(), editor, LIMIT, rejected=print)

        def watch(frame: dict[str, Any], line: bytes) -> bool:
            if frame["method"] != "m":
                return False
            out.post_line(line)
            return True

        wire = Wire(reader, Sink(), LIMIT, rejected=print, watch=watch)
        taken = [message(index, 0) for index in range(3)]
        other = b'{"jsonrpc":"2.0","id":9,"method":"other"}'
        reader.feed_data(b"\n".join([*taken, other]) + b"\n")
        frame = await wire.receive()
        return frame, list(editor.writes)  # as receive returned, before the loop went on

    frame, writes = asyncio.run(scenario())
    assert frame is not None and frame["id"] == 9
    assert writes == [b"".join(message(index, 0) + b"\n" for index in range(3))]


def update_line(session: str, update: str) -> bytes:
    """A session/update written as the SDKs write it, ``update`` its JSON text."""
    head = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
    return f'{head}"{session}","update":{update}}}}}'.encode()


def py_chunk(text: str, kind: str = "agent_message_chunk") -> str:
    """A plain text chunk as the Python SDK writes it (``text`` already JSON-escaped)."""
    return f'{{"content":{{"text":"{text}","type":"text"}},"sessionUpdate":"{kind}"}}'


def ts_chunk(text: str, kind: str = "agent_message_chunk") -> str:
    """The same as the TypeScript SDK writes it."""
    return f'{{"sessionUpdate":"{kind}","content":{{"type":"text","text":"{text}"}}}}'


def watched(
    stream: bytes, *, watch_all: bool = True
) -> tuple[list[tuple[dict[str, Any], bytes]], list[Any]]:
    """What a wire's watch sees of ``stream`` (read at once), and what receive returns."""

    async def scenario() -> tuple[list[tuple[dict[str, Any], bytes]], list[Any]]:
        reader = asyncio.StreamReader()
        seen: list[tuple[dict[str, Any], bytes]] = []

        def watch(frame: dict[str, Any], line: bytes) -> bool:
            seen.append((frame, line))
            return "id" not in frame

        wire = Wire(reader, Sink(), 1 << 16, rejected=print, watch=watch if watch_all else None)
        reader.feed_data(stream)
        reader.feed_eof()
        returned = []
        while (frame := await wire.receive()) is not None:
            returned.append(frame)
        return seen, returned

    return asyncio.run(scenario())


def test_plain_text_chunks_of_one_session_and_kind_read_together_reach_the_watch_as_one() -> None:
    lines = [
        update_line("a", py_chunk("Hello")),  # 0-2: one run, in either SDK's form
        update_line("a", ts_chunk(r", \"wor")),
        update_line("a", py_chunk(r"ld\"\n \u00e9 ü")),
        update_line("a", py_chunk("hmm", "agent_thought_chunk")),  # 3: another kind
        update_line("a", py_chunk("So")),  # 4: then another session
        update_line("b", py_chunk("other")),
        update_line("a", '{"sessionUpdate":"plan","entries":[]}'),  # 6: not a text chunk
        update_line("a", py_chunk("one")),  # 7: alone: halves of a pair are never joined
        update_line("a", py_chunk(r"\ud83d")),
        update_line("a", py_chunk(r"\ude00")),
        b'{"jsonrpc":"2.0","id":1,"method":"session/request_permission","params":{}}',
        update_line("a", py_chunk("x")),  # 11-12: a run after a request
        update_line("a", py_chunk("y")),
    ]
    seen, returned = watched(b"\n".join(lines) + b"\n")

    runs = [[0, 1, 2], [3], [4], [5], [6], [7], [8], [9], [10], [11, 12]]
    assert [line for _, line in seen] == [lines[run[0]] for run in runs]
    assert [frame["id"] for frame in returned] == [1]
    for (frame, line), run in zip(seen, runs, strict=True):
        alone = [read_update(lines[index]) for index in run]
        if alone[0] is None:  # the request
            continue
        assert frame.lines == (None if len(run) == 1 else [lines[index] for index in run])
        updates = [one["params"]["update"] for one in alone if one is not None]
        if len(run) > 1:
            texts = "".join(update["content"]["text"] for update in updates)
            assert frame["params"]["update"]["content"]["text"] == texts
        assert (
            frame.update_text is not None
            and json.loads(frame.update_text) == (frame["params"]["update"])
        )
        # The conversation folds the same either way.
        assert fold("p", [json.loads(frame.update_text)]) == fold("p", updates)
        # Each line is forwarded as it was written, with the editor's session id.
        forwarded = [
            with_session_id(one, lines[index], "editor")
            for one, index in zip(alone, run, strict=False)
        ]
        assert with_session_id(frame, line, "editor") == b"\n".join(forwarded)


def test_a_wire_without_a_watch_hands_out_each_chunk_as_it_was_written() -> None:
    lines = [update_line("a", py_chunk(text)) for text in ("a", "b", "c")]
    seen, returned = watched(b"\n".join(lines) + b"\n", watch_all=False)
    assert seen == []
    assert [frame["params"]["update"]["content"]["text"] for frame in returned] == ["a", "b", "c"]


class Source:
    """A pipe's read transport, noting when it is paused."""

    def __init__(self, transport: asyncio.ReadTransport) -> None:
        self._transport = transport
        self.pauses = 0

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self.pauses += 1
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()


def test_a_flowing_stream_is_left_to_gather_and_a_line_alone_is_read_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wire_module, "SETTLE", 0.5)  # long enough for any load

    async def scenario() -> tuple[list[list[str]], list[int]]:
        loop = asyncio.get_running_loop()
        read_end, write_end = os.pipe()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_end, "rb")
        )
        source = Source(transport)
        seen: list[list[str]] = []
        arrived = asyncio.Event()

        def watch(frame: dict[str, Any], line: bytes) -> bool:
            lines = frame.lines or [line]
            seen.append([read_update(one)["params"]["update"]["content"]["text"] for one in lines])
            arrived.set()
            return True

        wire = Wire(reader, Sink(), 1 << 16, rejected=print, watch=watch, source=cast(Any, source))
        receiving = asyncio.ensure_future(wire.receive())

        async def write(*texts: str) -> None:
            arrived.clear()
            for text in texts:  # one write each, as an agent writes each chunk
                os.write(write_end, update_line("a", py_chunk(text)) + b"\n")
                await asyncio.sleep(0)  # the loop would read each at once
            await arrived.wait()

        pauses = []
        for text in ("1", "2", "3"):  # lines that come alone: read at once, no pause
            await write(text)
        pauses.append(source.pauses)
        arrived.clear()
        os.write(write_end, b"".join(update_line("a", py_chunk(t)) + b"\n" for t in "45"))
        await arrived.wait()  # a read of two lines: a stream flows
        await write("6", "7", "8")  # written while the wire waits: read as one burst
        pauses.append(source.pauses)  # that read held three lines: the wire waits again
        await write("9")  # read after that wait, alone
        await write("10")  # ... so the next is read at once
        pauses.append(source.pauses)
        os.close(write_end)
        assert await receiving is None
        return seen, pauses

    seen, pauses = asyncio.run(scenario())
    assert seen == [["1"], ["2"], ["3"], ["4", "5"], ["6", "7", "8"], ["9"], ["10"]]
    assert pauses == [0, 2, 2]
