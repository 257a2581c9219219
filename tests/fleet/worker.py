"""A turnback process of a fleet, for the fleet tests: one of several "machines" (TURNBACK_HOST)
sharing one store through turnback's public API.

    python worker.py SCENARIO '{"home": ..., "url": ..., ...}'

It prints one JSON line per thing it did, flushed at once, so the test knows what was
acknowledged even if the process is stopped or killed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from typing import Any

import turnback


def say(**data: Any) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def writer(tb: turnback.Turnback, args: dict[str, Any]) -> None:
    """Begin a turn, record events, then wait for a line on stdin before writing again."""
    turn = tb.session(args["session"]).turn("write something")
    for i in range(args["events"]):
        turn.record(chunk(f"e{i} "))
    say(what="ready", token=turn.token)
    sys.stdin.readline()
    for attempt in ("record", "complete"):
        try:
            if attempt == "record":
                turn.record(chunk("after the takeover"))
            else:
                turn.complete()
        except turnback.OwnershipLost as lost:
            say(what=attempt, error="OwnershipLost", message=str(lost), token=lost.token)
        else:
            say(what=attempt, error=None)


def hammer(tb: turnback.Turnback, args: dict[str, Any]) -> None:
    """Turns, records, recovery, sweep and reverts on shared sessions and one of its own."""
    rng = random.Random(args["seed"])
    sessions = [*args["shared"], tb.create_session(args["workspace"]).id]
    deadline = time.monotonic() + args["seconds"]
    crash_at = args.get("crash_at")
    done = 0
    while time.monotonic() < deadline:
        session = tb.session(rng.choice(sessions))
        roll = rng.random()
        if roll < 0.1:
            report = tb.recover()
            say(what="recover", recovered=[t.token for t in report.recovered])
            continue
        if roll < 0.15:
            tb.sweep()
            continue
        if roll < 0.22:
            numbers = [t.number for t in session.turns() if t.in_conversation]
            if numbers and session.running() is None:
                try:
                    session.revert(max(numbers) - 1, files=False)
                except (turnback.TurnInProgress, turnback.NothingToRevert, turnback.TurnNotFound):
                    pass  # another process began a turn, or reverted further, since the read
                else:
                    say(what="revert", session=session.id)
            continue
        try:
            turn = session.turn("hammer")
        except turnback.TurnInProgress:
            continue
        say(what="begin", token=turn.token, session=session.id)
        for i in range(rng.randint(1, 6)):
            turn.record(chunk(f"{i} "))
        if crash_at is not None and done == crash_at:
            say(what="crash", token=turn.token)
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            turn.complete()
        except turnback.OwnershipLost as lost:
            say(what="lost", token=turn.token, message=str(lost))
            continue
        say(what="complete", token=turn.token)
        done += 1


def frozen(tb: turnback.Turnback, args: dict[str, Any]) -> None:
    """Begin a turn, armed to stop (SIGSTOP) inside the begin's transaction; once continued,
    say what became of that begin, then try it again."""
    for attempt in ("begin", "again"):
        try:
            turn = tb.session(args["session"]).turn("frozen")
        except turnback.TurnbackError as error:
            say(what=attempt, error=type(error).__name__, message=str(error))
        else:
            say(what=attempt, error=None, token=turn.token)
            turn.complete()


def reverter(tb: turnback.Turnback, args: dict[str, Any]) -> None:
    """Revert a session's conversation (``TURNBACK_FAULT`` may stop or kill it midway), then
    say what became of it."""
    try:
        record = tb.session(args["session"]).revert(args["to"], files=args.get("files", False))
    except turnback.OwnershipLost as lost:
        say(what="revert", error="OwnershipLost", message=str(lost))
    else:
        say(what="revert", error=None, state=record.state)


def main() -> None:
    scenario, args = sys.argv[1], json.loads(sys.argv[2])
    tb = turnback.open(
        args["home"],
        durability=args.get("mode", "strict"),
        database_url=args.get("url"),
        checkpoints=args.get("checkpoints", False),
        busy_timeout=args.get("busy_timeout", 60),  # eight processes share SQLite's one write
        # lock, without fairness
    )
    {"writer": writer, "hammer": hammer, "frozen": frozen, "reverter": reverter}[scenario](tb, args)
    tb.close()


if __name__ == "__main__":
    main()
