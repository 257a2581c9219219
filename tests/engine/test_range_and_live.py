"""Range diffs between turns, and the conversation of a turn that has not ended yet."""

from __future__ import annotations

from pathlib import Path

import pytest

import turnback
from turnback import MessageKind
from turnback.errors import CheckpointUnavailable, TurnNotFound


def say(turn: turnback.RunningTurn, text: str) -> None:
    turn.record({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def test_a_range_diff_covers_the_turns_and_the_hand_edits_between(
    tb: turnback.Turnback, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = tb.create_session(workspace)
    with session.turn("one"):
        (workspace / "a.txt").write_text("a\n")
    (workspace / "hand.txt").write_text("by hand\n")
    with session.turn("two"):
        (workspace / "a.txt").write_text("A\n")
        (workspace / "b.txt").write_text("b\n")
    with session.turn("three"):
        (workspace / "b.txt").unlink()

    everything = session.range_diff(0, 3, patch=True)
    middle = session.range_diff(1, 2)

    assert {f.path: f.kind.value for f in everything.files} == {
        "a.txt": "added",
        "hand.txt": "added",
    }
    assert everything.patch is not None and "+A" in everything.patch
    assert {f.path for f in middle.files} == {"a.txt", "b.txt", "hand.txt"}
    assert middle.patch is None
    assert session.range_diff(2, 2).files == ()
    with pytest.raises(TurnNotFound, match="earlier turn to a later one"):
        session.range_diff(3, 1)
    with pytest.raises(TurnNotFound, match="has no turn 4"):
        session.range_diff(1, 4)


def test_a_range_needs_its_checkpoints(tmp_path: Path) -> None:
    with turnback.open(tmp_path / "home", checkpoints=False) as tb:
        session = tb.create_session(tmp_path)
        with session.turn("one"):
            pass
        with pytest.raises(CheckpointUnavailable, match="no workspace checkpoint"):
            session.range_diff(0, 1)


def test_a_running_turn_shows_its_conversation_so_far(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    turn = session.turn("go")
    say(turn, "first, ")
    say(turn, "then")
    turn.record({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Run", "status": "x"})
    tb.journal.flush()

    live = session.turn_messages(turn.token)

    assert [(m.kind, m.text) for m in live][:2] == [
        (MessageKind.USER, "go"),
        (MessageKind.AGENT, "first, then"),
    ]
    assert live[2].kind == MessageKind.TOOL_CALL
    turn.complete()
    assert [m.text for m in session.turn_messages(turn.token)][:2] == ["go", "first, then"]
