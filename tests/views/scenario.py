"""A home with every kind of turn, revert and activity, for the tests that pin the ``--json``
shapes: three sessions, one of them with a turn still running in this process."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import turnback
from turnback.engine import revert
from turnback.model import RevertRequest

from ..conftest import abandon as dead_owners_turn


def chunk(text: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def abandon(tb: turnback.Turnback, session: turnback.Session, prompt: str, *events: Any) -> str:
    """A running turn whose owner is dead, as a crash leaves it; returns its token."""
    return dead_owners_turn(tb, session, events, prompt).token


@dataclass
class Scenario:
    home: Path
    workspace: Path
    #: the session with every kind of turn, revert and activity
    full: str
    #: a second session, with a turn whose owner died for ``recover`` to find
    second: str
    #: two turns recovery set aside (a journal row it cannot read), to apply and to discard
    aside: tuple[str, str]
    #: a turn whose owner died, left for ``recover`` to apply as interrupted
    abandoned: str
    #: the open handle that runs the live turn; closed by :meth:`close`
    tb: turnback.Turnback
    running: turnback.RunningTurn

    def close(self) -> None:
        self.running.complete()
        self.tb.close()


def build(tmp: Path) -> Scenario:
    home, workspace = tmp / "home", tmp / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("mine\n")
    (workspace / ".gitignore").write_text("*.log\n")
    tb = turnback.open(home)
    full = tb.create_session(workspace, title="every kind of turn", agent="test-agent")
    # 1: completed, with every kind of message
    with full.turn("create the app") as turn:
        turn.record(chunk("Let me think.", "agent_thought_chunk"))
        turn.record(
            {
                "sessionUpdate": "plan",
                "entries": [{"content": "write app.py", "priority": "high", "status": "pending"}],
            }
        )
        turn.record(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "t1",
                "title": "Write app.py",
                "kind": "edit",
                "status": "in_progress",
            }
        )
        (workspace / "app.py").write_text('def main():\n    return "one"\n')
        turn.record(
            {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}
        )
        turn.step(1, "cp-1", state={"files": ["app.py"]})
        turn.record(chunk("Created "))
        turn.record(chunk("app.py."))
        turn.record({"sessionUpdate": "current_mode_update", "currentModeId": "code"})
    # a hand edit between turns: changed outside any turn
    (workspace / "by-hand.txt").write_text("typed by a person\n")
    # 2: failed
    with full.turn([{"type": "text", "text": "add a helper"}]) as turn:
        (workspace / "helper.py").write_text("HELP = 1\n")
        turn.record(chunk("Adding a helper."))
        turn.fail("the agent stopped: out of credits")
    # 3: cancelled
    with full.turn("rename the notes") as turn:
        (workspace / "notes.txt").rename(workspace / "NOTES.md")
        turn.record(chunk("Renaming…"))
        turn.cancel("cancelled (KeyboardInterrupt)")
    # 4: interrupted (its process died; recovery applied it)
    abandon(tb, full, "crashed midway", chunk("half"), chunk(" done"))
    tb.recover()
    # 5: completed, binary and deleted files; then reverted to 3 and the revert undone
    with full.turn("drop the helper, add a logo") as turn:
        (workspace / "helper.py").unlink()
        (workspace / "logo.bin").write_bytes(bytes(range(256)))
        (workspace / "debug.log").write_text("ignored\n")
        turn.record(chunk("Done."))
    full.revert(3)
    full.undo_revert()
    # a revert that was given up midway: rolled back
    request = RevertRequest(4, conversation=False)
    started = revert.start_revert(tb.store, tb.checkpoints, full.id, request, lease=tb.lease)
    started.abandon("the agent refused to roll back")
    # a committed revert of the files only, keeping hand edits: turn 5 stays in the conversation
    (workspace / "NOTES.md").write_text("mine, edited\n")
    full.revert(4, files=True, conversation=False, keep_user_edits=True)
    # 6: completed after the revert
    with full.turn("write the changelog") as turn:
        (workspace / "CHANGES.md").write_text("# Changes\n")
        turn.record(chunk("Wrote it."))
    (workspace / "later.txt").write_text("since the head\n")
    # activities of every level, one with a remedy
    full.add_activity("info", "note.info", "an informative line", {"n": 1})
    full.add_activity("warning", "note.warning", "a warning", {"remedy": "recover"})
    full.add_activity("error", "note.error", "an error", {"why": "disk"}, turn=turn.turn.token)
    # 7 and 8: set aside (a journal row recovery cannot read)
    aside = (_set_aside(tb, full, "crashed unreadably"), _set_aside(tb, full, "crashed again"))
    # a second session: a completed turn, then one whose process died
    other = tmp / "other"
    other.mkdir()
    second = tb.create_session(other, title=None, agent=None)
    with second.turn("hello") as turn:
        (other / "hello.txt").write_text("hello\n")
        turn.record(chunk("Hi."))
    abandoned = abandon(tb, second, "left behind", chunk("going"))
    return Scenario(home, workspace, full.id, second.id, aside, abandoned, tb, _running(tb))


def _set_aside(tb: turnback.Turnback, session: turnback.Session, prompt: str) -> str:
    token = abandon(tb, session, prompt, chunk("half"), chunk(" gone"))
    database = sqlite3.connect(tb.home / "turnback.db")
    with database:
        database.execute(
            "UPDATE events SET payload = '{' "
            "WHERE id / 4294967296 = (SELECT id FROM turns WHERE token = ?) "
            "AND id - id / 4294967296 * 4294967296 = 2",
            (token,),
        )
    database.close()
    tb.recover()
    return token


def _running(tb: turnback.Turnback) -> turnback.RunningTurn:
    """A turn of a third, quiet session, running until the scenario closes (``recover`` lists
    it as live)."""
    workspace = tb.home.parent / "quiet"
    workspace.mkdir()
    running = tb.create_session(workspace, title="quiet").turn("still going")
    running.record(chunk("working"))
    running.sync()
    return running
