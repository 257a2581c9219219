"""A process for the crash suite to kill: it runs one scenario through turnback's public API.

    python child.py SCENARIO HOME '{"session": ..., "ack": ..., ...}'

Every call that returned is written to the ``ack`` file right after it returns, so the suite knows
exactly what turnback acknowledged before the process died. A plain ``write`` reaches the page
cache, which a SIGKILL of this process does not lose.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import turnback


def acknowledge(path: str, **data: Any) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(data) + "\n").encode())
    finally:
        os.close(fd)


def event(i: int) -> tuple[dict[str, Any], bool]:
    """The i-th event of a stream, and whether it is a boundary event."""
    meta = {"crash": f"e{i}"}
    if i % 5 == 0:
        return {
            "sessionUpdate": "tool_call",
            "toolCallId": f"t{i}",
            "title": f"tool {i}",
            "status": "in_progress",
            "_meta": meta,
        }, True
    return {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": f"chunk {i} "},
        "_meta": meta,
    }, False


def stream(tb: turnback.Turnback, args: dict[str, Any]) -> None:
    """Begin a turn, record a stream of events, end it. With ``retry``, as a caller that
    meets a store error would: a begin or an end that raised is tried once more, and an event
    whose record raised is not acknowledged (the stream goes on)."""
    ack = args["ack"]
    retry = bool(args.get("retry"))
    session = tb.session(args["session"])
    prompt = args.get("prompt", "do the work")
    try:
        turn = session.turn(prompt)
    except turnback.StoreError:
        if not retry:
            raise
        acknowledge(ack, what="begin failed")
        turn = session.turn(prompt)
    acknowledge(ack, what="begin", token=turn.token)
    for i in range(1, args["events"] + 1):
        try:
            if args.get("steps") and i % 7 == 0:
                turn.step(i, checkpoint_id=f"c{i}", state={"i": i})
                acknowledge(ack, what="event", id=f"step{i}", boundary=True, step=True)
            else:
                update, boundary = event(i)
                turn.record(update)
                acknowledge(ack, what="event", id=f"e{i}", boundary=boundary)
        except turnback.StoreError:
            if not retry:
                raise
        if args.get("pause_every") and i % args["pause_every"] == 0:
            time.sleep(0.002)
    end = args.get("end", "complete")
    ends = {
        "complete": lambda: turn.complete(),
        "fail": lambda: turn.fail(RuntimeError("the agent gave up")),
        "cancel": lambda: turn.cancel("the user pressed stop"),
    }
    if end not in ends:
        raise SystemExit(f"unknown end {end!r}")
    try:
        ends[end]()
    except turnback.StoreError:
        if not retry:
            raise
        ends[end]()
    acknowledge(ack, what="end", end=end)


def main() -> None:
    scenario, home = sys.argv[1], sys.argv[2]
    args: dict[str, Any] = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    tb = turnback.open(home, durability=args.get("mode", "batched"))
    if scenario == "stream":
        stream(tb, args)
    elif scenario == "recover":
        tb.recover()
    elif scenario == "edit":
        session = tb.session(args["session"])
        if args.get("watch") and tb.checkpoints is not None:  # the end capture is watched
            assert tb.checkpoints.watch(session.workspace)
        turn = session.turn(args.get("prompt", "edit the files"))
        acknowledge(args["ack"], what="begin", token=turn.token)
        workspace = session.workspace
        for path, content in args["files"].items():
            (workspace / path).write_text(content)
        turn.record({"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}})
        turn.complete()
        acknowledge(args["ack"], what="end", end="complete")
    elif scenario == "revert":
        tb.session(args["session"]).revert(
            args["to"], keep_user_edits=args.get("keep_user_edits", False)
        )
    elif scenario == "undo":
        tb.session(args["session"]).undo_revert()
    elif scenario == "reopen":
        with tb.session(args["session"]).reopen(args["turn"]) as turn:
            turn.record(event(99)[0])
    elif scenario == "apply":
        tb.session(args["session"]).apply(args["turn"])
    elif scenario == "discard":
        tb.session(args["session"]).discard(args["turn"])
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    if "ack" in args:
        acknowledge(args["ack"], what="done", scenario=scenario)
    tb.close()


if __name__ == "__main__":
    main()
