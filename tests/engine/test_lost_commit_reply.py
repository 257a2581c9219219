"""A COMMIT the server carried out whose reply never reached turnback (the network dropped, the
backend was terminated, the server failed over): every write of a turn -- its begin, a journal
flush, a step checkpoint, its end -- reads back what landed and goes on, so the turn ends
honestly and the session is never wedged (README, Design, invariants 1-3).

A real PostgreSQL server sits behind a proxy (tests/commit_proxy.py) that forwards the COMMIT
and drops its reply, then closes the connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback.model import TurnStatus

from ..commit_proxy import CommitProxy
from ..postgres_server import Server

BEGIN = "INSERT INTO turns"
EVENTS = "INSERT INTO events"
STEP = "INSERT INTO step_checkpoints"
END = "UPDATE turns SET status"


def chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def tool_call(call: str) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": call, "title": call, "status": "pending"}


@pytest.fixture
def proxy(postgres_server: Server) -> Iterator[CommitProxy]:
    proxy = CommitProxy(postgres_server.root / ".s.PGSQL.5432")
    try:
        yield proxy
    finally:
        proxy.close()


@contextmanager
def session_through(
    proxy: CommitProxy, postgres_url: str, home: Path, durability: str = "strict"
) -> Iterator[turnback.Session]:
    """A new session of a turnback whose store is reached through ``proxy``."""
    url = proxy.url(postgres_url)
    with turnback.open(home, database_url=url, durability=durability, checkpoints=False) as tb:
        yield tb.create_session(home.parent)


@contextmanager
def turn_through(
    proxy: CommitProxy, postgres_url: str, home: Path, durability: str = "strict"
) -> Iterator[tuple[turnback.Session, turnback.RunningTurn]]:
    """A running turn that has recorded one chunk, in a session of its own, through ``proxy``."""
    with session_through(proxy, postgres_url, home, durability) as session:
        turn = session.turn("do it")
        turn.record(chunk("one "))
        yield session, turn


def settled(postgres_url: str, home: Path, session_id: str) -> tuple[list[Any], list[Any]]:
    """The session's turns and each one's events, read on a connection of its own; and a new
    turn begins and completes there: nothing holds the session."""
    with turnback.open(home, database_url=postgres_url, checkpoints=False) as tb:
        session = tb.session(session_id)
        turns = session.turns()
        events = [[(e.seq, e.kind, e.event) for e in session.run_events(t.token)] for t in turns]
        with session.turn("a later turn") as later:
            later.record(chunk("still usable"))
        assert session.get_turn(later.token).status is TurnStatus.COMPLETED
    return turns, events


def test_a_begin_whose_reply_is_lost_runs(
    proxy: CommitProxy, postgres_url: str, home: Path
) -> None:
    with session_through(proxy, postgres_url, home) as session:
        proxy.lose_reply(BEGIN)
        turn = session.turn("do it")  # the turn is there: begin read it back
        assert proxy.lost.is_set()
        turn.record(chunk("done"))
        turn.complete()
    [turns, events] = settled(postgres_url, home, session.id)
    assert [(t.token, t.status) for t in turns[:1]] == [(turn.token, TurnStatus.COMPLETED)]
    assert [kind for _seq, kind, _ in events[0]] == ["agent_message_chunk"]


def test_a_begin_unconfirmed_while_the_server_is_away_is_ended_by_the_next(
    proxy: CommitProxy, postgres_url: str, home: Path
) -> None:
    with session_through(proxy, postgres_url, home) as session:
        proxy.lose_reply(BEGIN)
        proxy.refuse(1)  # the read-back cannot reach the server either
        with pytest.raises(turnback.StoreUnavailable):
            session.turn("do it")
        # The turn's row landed, under this live process: the next begin ends it first.
        retried = session.turn("do it again")
        retried.complete()
        turns = session.turns()
    assert [(t.prompt, t.status) for t in turns] == [
        ("do it", TurnStatus.FAILED),
        ("do it again", TurnStatus.COMPLETED),
    ]
    assert "did not confirm its begin" in (turns[0].detail or "")
    assert turns[1].parent == turns[0].token
    settled(postgres_url, home, session.id)


@pytest.mark.parametrize("durability", ["strict", "batched"])
def test_a_flush_whose_reply_is_lost_is_not_written_twice(
    proxy: CommitProxy, postgres_url: str, home: Path, durability: str
) -> None:
    with turn_through(proxy, postgres_url, home, durability) as (session, turn):
        proxy.lose_reply(EVENTS)
        turn.record(tool_call("two"))  # a boundary: flushed before it returns, in both modes
        assert proxy.lost.is_set()
        turn.record(chunk("three "))
        turn.record(tool_call("four"))
        turn.complete()
    [turns, events] = settled(postgres_url, home, session.id)
    assert turns[0].status is TurnStatus.COMPLETED
    assert [(seq, kind) for seq, kind, _ in events[0]] == [
        (1, "agent_message_chunk"),
        (2, "tool_call"),
        (3, "agent_message_chunk"),
        (4, "tool_call"),
    ]


def test_a_flush_unconfirmed_while_the_server_is_away_is_reconciled_by_the_next(
    proxy: CommitProxy, postgres_url: str, home: Path
) -> None:
    with session_through(proxy, postgres_url, home) as session:
        turn = session.turn("do it")
        proxy.lose_reply(EVENTS)
        proxy.refuse(1)
        with pytest.raises(turnback.StoreUnavailable):
            turn.record(chunk("one "))  # not acknowledged: it may or may not be there
        turn.record(chunk("two "))
        turn.complete()
    [turns, events] = settled(postgres_url, home, session.id)
    assert turns[0].status is TurnStatus.COMPLETED
    assert [(seq, e["content"]["text"]) for seq, _kind, e in events[0]] == [
        (1, "one "),
        (2, "two "),
    ]


def test_a_step_checkpoint_whose_reply_is_lost_is_saved_once(
    proxy: CommitProxy, postgres_url: str, home: Path
) -> None:
    with turn_through(proxy, postgres_url, home) as (session, turn):
        proxy.lose_reply(STEP)
        turn.step(1, checkpoint_id="c1", state={"at": 1})
        assert proxy.lost.is_set()
        turn.step(2, checkpoint_id="c2")
        assert [(c.step, c.checkpoint_id) for c in session.step_checkpoints(turn.token)] == [
            (1, "c1"),
            (2, "c2"),
        ]
        turn.complete()
    [turns, events] = settled(postgres_url, home, session.id)
    assert turns[0].status is TurnStatus.COMPLETED
    assert [kind for _seq, kind, _ in events[0]] == [
        "agent_message_chunk",
        "_turnback/step_checkpoint",
        "_turnback/step_checkpoint",
    ]


@pytest.mark.parametrize(
    ("end", "status"),
    [
        ("complete", TurnStatus.COMPLETED),
        ("fail", TurnStatus.FAILED),
        ("cancel", TurnStatus.CANCELLED),
    ],
)
def test_an_end_whose_reply_is_lost_has_ended(
    proxy: CommitProxy,
    postgres_url: str,
    home: Path,
    end: str,
    status: TurnStatus,
) -> None:
    with turn_through(proxy, postgres_url, home) as (session, turn):
        proxy.lose_reply(END)
        ended = {
            "complete": lambda: turn.complete(),
            "fail": lambda: turn.fail("the agent gave up"),
            "cancel": lambda: turn.cancel("the user pressed stop"),
        }[end]()
        assert proxy.lost.is_set()
        assert ended.status is status
        with pytest.raises(turnback.TurnNotRunning, match=status.value):
            turn.fail("once more")
    [turns, events] = settled(postgres_url, home, session.id)
    assert turns[0].status is status
    errors = [kind for _seq, kind, _ in events[0] if kind == "_turnback/error"]
    assert len(errors) == (1 if end == "fail" else 0), "the end was written twice"


def test_an_end_unconfirmed_while_the_server_is_away_is_read_back_later(
    proxy: CommitProxy, postgres_url: str, home: Path
) -> None:
    with turn_through(proxy, postgres_url, home) as (session, turn):
        proxy.lose_reply(END)
        proxy.refuse(1)
        with pytest.raises(turnback.StoreUnavailable):
            turn.complete()
        # The complete landed: failing the turn now says it has ended, completed, and the
        # session's next turn begins on top of it.
        with pytest.raises(turnback.TurnNotRunning, match="completed"):
            turn.fail("the caller thought the complete had failed")
        later = session.turn("next")
        later.complete()
        turns = session.turns()
    assert [(t.prompt, t.status) for t in turns] == [
        ("do it", TurnStatus.COMPLETED),
        ("next", TurnStatus.COMPLETED),
    ]
    settled(postgres_url, home, session.id)


@pytest.mark.parametrize("away", [False, True])
def test_a_reopen_whose_reply_is_lost_runs_or_is_interrupted_again(
    proxy: CommitProxy, postgres_url: str, home: Path, away: bool
) -> None:
    """Continuing an interrupted turn is a write like a begin: read back, it runs; when the
    read-back cannot be done either, the session's next begin interrupts it again."""
    with turn_through(proxy, postgres_url, home) as (session, turn):
        turn.interrupt("the agent stopped")
        proxy.lose_reply(END)  # reopening sets the turn's status, as an end does
        if away:
            proxy.refuse(1)
            with pytest.raises(turnback.StoreUnavailable):
                session.reopen(turn.token)
            session.turn("the next one").complete()
        else:
            reopened = session.reopen(turn.token)
            reopened.record(chunk("two "))
            reopened.complete()
        assert proxy.lost.is_set()
    [turns, events] = settled(postgres_url, home, session.id)
    assert turns[0].status is (TurnStatus.INTERRUPTED if away else TurnStatus.COMPLETED)
    kinds = [kind for _seq, kind, _ in events[0]]
    assert kinds.count("_turnback/rewind") == 1, "the reopen was written twice"
    assert kinds[-1] == ("_turnback/notice" if away else "agent_message_chunk")
