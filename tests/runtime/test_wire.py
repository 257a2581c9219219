"""The wire splits lines out of large reads: what it receives is the same, message for message
and error for error in wire order, wherever the far side's writes (and so the reads) break the
stream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from turnback.runtime.wire import Rejected, Wire

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
