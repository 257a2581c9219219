"""A journal that cannot write ends its turn instead of holding the session (bug: a full disk
left the turn running under a live owner, and every later turn() of that process raised
TurnInProgress). On a real small tmpfs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import turnback
from turnback.errors import StoreError

from ..conftest import fill


def chunk(text: str) -> dict[str, object]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def test_a_turn_whose_journal_cannot_write_ends_once_it_can(
    tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    disk = small_disk(4 * 2**20)
    tb = turnback.open(disk / "home", durability="strict", checkpoints=False)
    session = tb.create_session(tmp_path)
    turn = session.turn("fill the disk")
    turn.record(chunk("written before the disk filled"))
    filler = fill(disk)

    with pytest.raises(StoreError) as full, turn:
        for _ in range(200):
            turn.record(chunk("x" * 65536))
    assert "disk" in str(full.value).lower() or "full" in str(full.value).lower()
    with pytest.raises(StoreError):  # the disk is still full: said so, not TurnInProgress
        session.turn("while the disk is full")

    filler.unlink()  # space again: the same process ends the turn, then begins the next
    with session.turn("after the disk emptied") as after:
        after.record(chunk("fine"))
    first, second = session.turns()
    assert first.status is turnback.TurnStatus.FAILED
    assert first.detail and "StoreUnavailable" in first.detail
    assert "written before the disk filled" in "".join(m.text for m in session.turn_messages(1))
    assert second.status is turnback.TurnStatus.COMPLETED and second.parent == first.token
    tb.close()
