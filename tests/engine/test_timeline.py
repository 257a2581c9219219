"""A session's timeline, and the overview of every session, cost a fixed number of queries
whatever the number of turns (log was quadratic: each turn's diff re-read every turn)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import turnback
from turnback.model import ChangeKind, FileChange


def _statements(tb: turnback.Turnback, call: Callable[[], Any]) -> int:
    seen: list[str] = []
    connection = tb.store._conn  # type: ignore[attr-defined]
    connection.set_trace_callback(seen.append)
    try:
        call()
    finally:
        connection.set_trace_callback(None)
    return len([s for s in seen if s.lstrip().upper().startswith("SELECT")])


def _session(tb: turnback.Turnback, workspace: Path, turns: int) -> turnback.Session:
    session = tb.create_session(workspace)
    for number in range(turns):
        with session.turn(f"turn {number}") as turn:
            pass
        with tb.store.atomic() as tx:
            tx.insert_file_changes(
                turn.turn.token, "turn", [FileChange(f"f{number}.py", ChangeKind.ADDED, 1, 0)]
            )
    return session


def test_the_timeline_and_the_overview_cost_the_same_for_3_or_30_turns(tmp_path: Path) -> None:
    with turnback.open(tmp_path / "home", checkpoints=False) as tb:
        short = _session(tb, tmp_path, 3)
        long = _session(tb, tmp_path, 30)
        assert [len(d.files) for d in long.timeline()] == [1] * 30
        assert _statements(tb, short.timeline) == _statements(tb, long.timeline)
        assert tb.conversations()[long.id][0] == 30
        assert tb.conversations()[short.id] == (3, "turn 0")
        with long.turn("running") as turn:  # a running turn adds one count, not one per turn
            assert _statements(tb, long.timeline) == _statements(tb, short.timeline) + 1
            assert long.timeline()[-1].turn.status == "running"
            turn.record({"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}})
            tb.journal.flush()
            assert long.turns()[-1].event_count == 1


def test_a_short_number_is_never_taken_for_a_token_prefix(tmp_path: Path) -> None:
    from turnback.engine.turns import RunningTurn, begin
    from turnback.errors import TurnNotFound

    with turnback.open(tmp_path / "home", checkpoints=False) as tb:
        session = tb.create_session(tmp_path)
        token = "7123" + "0" * 28
        RunningTurn(
            tb.store, tb.journal, begin(tb.store, session.id, "x", lease=tb.lease, token=token)
        ).complete()
        try:
            session.get_turn("7")
        except TurnNotFound as error:
            assert "no turn 7" in str(error)
        else:
            raise AssertionError("turn 7 does not exist, yet '7' found a turn by its token")
        assert session.get_turn("7123").token == token and session.get_turn("1").token == token
