"""Deleting a session: everything of it leaves the store in one transaction, never while a turn
runs or is set aside, and gc then releases its workspace checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

import turnback
from tests.conftest import insert_next_turn
from turnback.errors import DECIDE, SessionNotFound, TurnInProgress
from turnback.model import TurnStatus


def test_delete_removes_the_session_and_gc_releases_its_checkpoints(
    tb: turnback.Turnback, tmp_path: Path
) -> None:
    workspace = tmp_path / "w"
    workspace.mkdir()
    (workspace / "a.txt").write_text("one\n")
    session = tb.create_session(workspace=workspace)
    other = tb.create_session(workspace=tmp_path)
    with session.turn("edit") as turn:
        (workspace / "a.txt").write_text("two\n")
        turn.record(
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}
        )

    session.delete()

    with pytest.raises(SessionNotFound):
        tb.session(session.id)
    with pytest.raises(SessionNotFound):
        session.delete()
    assert [s.id for s in tb.sessions()] == [other.id]
    [deleted] = [a for a in tb.activities() if a.code == "session.deleted"]
    assert deleted.data == {"session": session.id, "workspace": str(workspace.resolve())}
    assert tb.gc(older_than=0).refs_removed == 2  # the baseline and the turn's end
    assert (workspace / "a.txt").read_text() == "two\n"  # the files are the user's


def test_delete_is_refused_while_a_turn_runs_or_is_set_aside(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    with session.turn("working"), pytest.raises(TurnInProgress):
        session.delete()
    with tb.store.atomic() as tx:
        insert_next_turn(tx, session.id, owner_id=None, status=TurnStatus.SET_ASIDE, prompt="aside")
    with pytest.raises(TurnInProgress, match="kept until each is applied or discarded") as aside:
        session.delete()
    assert (aside.value.turn, aside.value.state, aside.value.remedy) == (2, "set_aside", DECIDE)
    assert tb.session(session.id).turns()
