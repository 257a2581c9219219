"""A revert holds its workspace against new turns from the transaction that writes its row until
it commits or rolls back (bug: a turn begun during a long revert committed on a reverted parent)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback import RevertInProgress, TurnInProgress, TurnStatus

from .test_revert import files, run_turns, workspace

__all__ = ["workspace"]  # the fixture


def _wrap(monkeypatch: pytest.MonkeyPatch, owner: object, name: str, after: Callable[..., Any]):
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        after(*args, **kwargs)
        return result

    monkeypatch.setattr(owner, name, wrapped)


def test_a_turn_begun_while_the_revert_captures_wins_and_the_revert_changes_nothing(
    tb: turnback.Turnback, home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = tb.create_session(workspace)
    run_turns(session, workspace)
    before = files(workspace)
    other = turnback.open(home)
    begun: list[turnback.RunningTurn] = []

    def begin_a_turn(_workspace: str, ref: str) -> None:
        if "/revert-" in ref and not begun:
            begun.append(other.session(session.id).turn("begun during the revert"))

    assert tb.checkpoints is not None
    _wrap(monkeypatch, tb.checkpoints, "capture", begin_a_turn)
    with pytest.raises(TurnInProgress):
        session.revert(1)
    assert files(workspace) == before and session.reverts() == []
    begun[0].complete()
    newest = session.turns()[-1]
    assert newest.status is TurnStatus.COMPLETED and newest.number == 4
    other.close()


def test_no_turn_begins_while_a_revert_moves_the_files(
    tb: turnback.Turnback, home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = tb.create_session(workspace)
    run_turns(session, workspace)
    other = turnback.open(home)
    neighbour = other.create_session(workspace)  # another session on the same workspace
    refused: list[BaseException] = []

    def try_to_begin(*_args: Any, **_kwargs: Any) -> None:
        for handle in (other.session(session.id), neighbour):
            try:
                handle.turn("begun while the files move").complete()
            except RevertInProgress as error:
                refused.append(error)

    assert tb.checkpoints is not None
    _wrap(monkeypatch, tb.checkpoints.snapshots, "restore", try_to_begin)
    done = session.revert(1)
    assert len(refused) == 2 and all(e.revert_id == done.id for e in refused)
    assert [t.number for t in session.turns() if t.in_conversation] == [1]
    assert neighbour.turns() == []
    session.undo_revert()  # nothing began on a reverted parent, so the undo is possible
    assert [t.number for t in session.turns() if t.in_conversation] == [1, 2, 3]
    other.close()
