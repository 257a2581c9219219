"""A process that keeps running turns through turnback's public API, as an application would
while its database connections are cut under it: a begin or an end that raises a store error is
tried again, and an event whose record raised is not acknowledged (the stream goes on).

    python -m tests.fleet.steady_writer '{"url": ..., "home": ..., "session": ..., "mode": ...,
                                          "ack": ...}'   (from the repository's root)

Every call that returned is appended to the ``ack`` file right after it returned (one JSON line,
one ``write``), so the test knows exactly what turnback acknowledged when the process is killed.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import turnback

from ..crash.child import acknowledge

T = TypeVar("T")
EVENTS = 20


def event(turn: int, i: int) -> tuple[dict[str, Any], bool]:
    """The i-th event of a turn's stream, and whether it is a boundary event."""
    meta = {"id": f"{turn}.{i}"}
    if i % 5 == 0:
        call = {"toolCallId": f"t{i}", "title": f"tool {i}", "status": "in_progress"}
        return {"sessionUpdate": "tool_call", **call, "_meta": meta}, True
    text = {"type": "text", "text": f"{turn}.{i} "}
    return {"sessionUpdate": "agent_message_chunk", "content": text, "_meta": meta}, False


def until_done(ack: str, what: str, call: Callable[[], T]) -> T:
    """``call()``, tried again after each store error until it returns."""
    while True:
        try:
            return call()
        except turnback.StoreError as error:
            acknowledge(ack, what="error", during=what, error=type(error).__name__)
            time.sleep(0.01)


def main() -> None:
    args = json.loads(sys.argv[1])
    ack = args["ack"]
    tb = until_done(
        ack,
        "open",
        lambda: turnback.open(
            args["home"], database_url=args["url"], durability=args["mode"], checkpoints=False
        ),
    )
    session = tb.session(args["session"])
    number = 0
    while True:
        number += 1
        prompt = f"turn {number}"
        turn = until_done(ack, "begin", lambda: session.turn(prompt))  # noqa: B023
        acknowledge(ack, what="begin", token=turn.token, prompt=prompt)
        for i in range(1, EVENTS + 1):
            update, boundary = event(number, i)
            try:
                turn.record(update)
            except turnback.StoreError as error:
                acknowledge(ack, what="error", during="record", error=type(error).__name__)
                continue
            acknowledge(ack, what="event", token=turn.token, id=f"{number}.{i}", boundary=boundary)
        until_done(ack, "end", turn.complete)
        acknowledge(ack, what="end", token=turn.token)


if __name__ == "__main__":
    main()
