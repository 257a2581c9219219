"""Continuing an interrupted turn: ``Session.reopen`` makes the recovered turn run again from its
last step checkpoint, and it ends like any other turn, once, in its own place."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback import MessageKind, TurnInProgress, TurnStatus
from turnback.engine.owners import current_owner
from turnback.errors import ResumeUnavailable
from turnback.model import Owner, StepCheckpoint, Turn

AbandonTurn = Callable[..., Turn]


def chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def interrupted(
    tb: turnback.Turnback, session: turnback.Session, abandoned_turn: AbandonTurn
) -> Turn:
    """A turn killed after a step checkpoint at seq 2 and two more events, then recovered."""
    step = {"sessionUpdate": "_turnback/step_checkpoint", "step": 1, "checkpointId": "c1"}
    tool = {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "t1", "status": "pending"}
    turn = abandoned_turn(session, [chunk("before "), step, chunk("after "), tool])
    with tb.store.atomic() as tx:
        tx.insert_step_checkpoint(StepCheckpoint(turn.token, 1, "c1", 2, {"i": 1}, None, 1.0))
    [recovered] = tb.recover().recovered
    assert recovered.status is TurnStatus.INTERRUPTED
    return recovered


def test_a_reopened_turn_goes_on_from_its_step_and_shows_what_followed_once(
    tb: turnback.Turnback, session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    first = interrupted(tb, session, abandoned_turn)
    before = [m.text for m in session.turn_messages(first.token)]
    assert "after " in before and before[-1].startswith("This turn was interrupted")

    turn = session.reopen(first.number)
    assert (turn.token, turn.number, turn.turn.status) == (first.token, 1, TurnStatus.RUNNING)
    assert session.running() == turn.turn
    assert session.record.head is None  # its parent, while it runs again
    assert session.messages() == []  # nothing of it is in the conversation while it runs
    checkpoint = turn.last_checkpoint()
    assert checkpoint is not None and (checkpoint.step, checkpoint.state) == (1, {"i": 1})
    turn.record(chunk("after, again"))
    ended = turn.complete()

    assert ended.status is TurnStatus.COMPLETED and ended.number == 1
    assert session.record.head == first.token
    assert [t.token for t in session.turns()] == [first.token]
    messages = session.turn_messages(first.token)
    assert [(m.kind, m.text) for m in messages] == [
        (MessageKind.USER, "do it"),
        (MessageKind.AGENT, "before "),
        (MessageKind.AGENT, "after, again"),  # "after " and the tool call are not shown twice
    ]
    # everything stays in the run timeline: the first attempt, recovery's notices, the rewind
    kinds = [e.kind for e in session.run_events(first.token)]
    assert kinds == [
        "agent_message_chunk",
        "_turnback/step_checkpoint",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",  # recovery cancelled the unfinished tool call
        "_turnback/notice",
        "_turnback/rewind",
        "agent_message_chunk",
    ]
    assert ended.event_count == len(kinds)


def test_a_reopened_turn_measures_its_files_from_its_own_beginning(
    tb: turnback.Turnback, home: Path, session: turnback.Session
) -> None:
    turn = session.turn("edit")
    (session.workspace / "a.txt").write_text("a\n")
    turn.step(1, "c1")
    recovered = _kill_and_recover(tb, home, session, turn)
    assert [c.path for c in session.diff(recovered.token).files] == ["a.txt"]

    again = session.reopen(recovered.token)
    (session.workspace / "b.txt").write_text("b\n")
    again.complete()
    assert [c.path for c in session.diff(recovered.token).files] == ["a.txt", "b.txt"]


def test_only_the_interrupted_head_of_an_idle_session_can_be_reopened(
    tb: turnback.Turnback, session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    first = interrupted(tb, session, abandoned_turn)
    running = session.turn("next")
    with pytest.raises(TurnInProgress) as raised:
        session.reopen(first.token)
    assert raised.value.running_token == running.token
    running.complete()
    for ref in (first.token, running.token):  # no longer the head; not interrupted
        with pytest.raises(ResumeUnavailable, match="only an interrupted turn at its"):
            session.reopen(ref)
    assert session.get_turn(first.token).status is TurnStatus.INTERRUPTED
    assert session.record.head == running.token


def _kill_and_recover(
    tb: turnback.Turnback, home: Path, session: turnback.Session, turn: turnback.RunningTurn
) -> Turn:
    """Leave ``turn`` as a crash would -- its owner a process that is gone -- and recover it."""
    turn.sync()
    me = current_owner()
    dead = Owner("dead-" + turn.token, me.host, me.boot_id, me.pid, me.start_time + 1, time.time())
    with tb.store.atomic() as tx:
        tx.upsert_owner(dead)
    conn = sqlite3.connect(home / "turnback.db")
    with conn:
        conn.execute("UPDATE turns SET owner_id = ? WHERE token = ?", (dead.id, turn.token))
    conn.close()
    [recovered] = tb.recover().recovered
    return recovered


def test_a_fork_of_an_interrupted_session_can_continue_it_too(
    tb: turnback.Turnback, session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    first = interrupted(tb, session, abandoned_turn)
    fork = session.fork()
    [copy] = fork.turns()
    assert copy.status is TurnStatus.INTERRUPTED
    with fork.reopen(copy.token) as turn:
        checkpoint = turn.last_checkpoint()
        assert checkpoint is not None and (checkpoint.step, checkpoint.checkpoint_id) == (1, "c1")
        turn.record(chunk("the fork's way"))
    assert [m.text for m in fork.turn_messages(copy.token)][1:] == ["before ", "the fork's way"]
    assert session.get_turn(first.token).status is TurnStatus.INTERRUPTED  # the original stays
