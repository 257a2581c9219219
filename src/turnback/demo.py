"""``turnback demo``: turnback at work on a throwaway home, in plain words.

It runs a turn to completion, then starts a second process that begins a turn, streams events and
is killed with SIGKILL in the middle, and recovers that turn in this process: nothing that was
acknowledged is lost, and the turn is applied exactly once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import turnback

_CRASHING_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import turnback
    tb = turnback.open(sys.argv[1], durability="strict")
    session = tb.session(sys.argv[2])
    turn = session.turn("add a --verbose flag to the CLI")
    for word in ["Reading ", "cli.py ", "to find ", "the options…"]:
        turn.record({"sessionUpdate": "agent_message_chunk",
                     "content": {"type": "text", "text": word}})
    turn.record({"sessionUpdate": "tool_call", "toolCallId": "edit-1",
                 "title": "Edit cli.py", "kind": "edit", "status": "in_progress"})
    turn.step(1, checkpoint_id="after-read")
    os.kill(os.getpid(), signal.SIGKILL)  # the orchestrator dies mid-turn
    """
)


def run(*, keep: bool, workspace: str | None, echo: Callable[[str], None]) -> dict[str, Any]:
    """Run the demo, telling ``echo`` each step; returns a summary (the ``--json`` output)."""
    home = Path(tempfile.mkdtemp(prefix="turnback-demo-home-"))
    work = Path(workspace) if workspace else Path(tempfile.mkdtemp(prefix="turnback-demo-ws-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        session_id = _scenario(home, work, echo, keep)
        with turnback.open(home) as tb:
            turns = tb.session(session_id).turns()
    finally:
        if keep:
            echo(f"\nKept the demo's home {home} (try `turnback --home {home} sessions`).")
        else:
            shutil.rmtree(home, ignore_errors=True)
            if workspace is None:
                shutil.rmtree(work, ignore_errors=True)
            echo("\nRemoved the demo's home; `turnback demo --keep` keeps it to explore.")
    return {
        "home": str(home) if keep else None,
        "workspace": str(work) if keep or workspace else None,
        "session": session_id,
        "turns": [
            {
                "number": t.number,
                "token": t.token,
                "status": t.status.value,
                "events": t.event_count,
            }
            for t in turns
        ],
    }


def _scenario(home: Path, work: Path, echo: Callable[[str], None], keep: bool) -> str:
    def hint(command: str) -> None:
        if keep:
            echo(f"   `turnback --home {home} {command}` shows it.")

    with turnback.open(home) as tb:
        session = tb.create_session(work, title="demo", agent="demo")
        echo(f"1. Created session {session.id[:12]} for workspace {work}.")
        with session.turn("explain what this project does") as turn:
            for word in ["It ", "makes ", "agent ", "turns ", "durable."]:
                turn.record(
                    {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": word},
                    }
                )
        echo("2. Ran turn 1 to completion: its streamed chunks were folded into one message.")
        hint(f"show {session.id[:12]} 1")

    echo("3. Started another process that begins turn 2, streams, and is killed with SIGKILL…")
    child = subprocess.run(
        [sys.executable, "-c", _CRASHING_CHILD, str(home), session.id], capture_output=True
    )
    echo(f"   it died with exit status {child.returncode} in the middle of turn 2.")

    with turnback.open(home) as tb:
        report = tb.recover()
        for recovered in report.recovered:
            echo(
                f"4. Recovered turn {recovered.number} as {recovered.status.value}: "
                f"{recovered.event_count} "
                "acknowledged events kept, the unfinished tool call given a cancelled result."
            )
        session = tb.session(session.id)
        for message in session.turn_messages(2):
            echo(f"     [{message.kind.value}] {message.text or message.data.get('title', '')}")
        again = tb.recover()
        echo(f"5. Recovered again: {len(again.recovered)} turns changed (recovery is idempotent).")
        with session.turn("now really add the flag") as turn:
            turn.record(
                {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "Done."},
                }
            )
        echo("6. Turn 3 began and completed on top of the recovered turn:")
        for t in session.turns():
            echo(f"     turn {t.number}  {t.status.value:<11}  {t.prompt_text}")
        hint(f"log {session.id[:12]}")
    return session.id
