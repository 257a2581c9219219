"""Tool checkpoints and rescues on every backend: kept as written, named to gc, released with
their turn's checkpoints."""

from __future__ import annotations

from turnback.model import Rescue, ToolCheckpoint, TurnStatus
from turnback.store import Store

from .test_sqlite_store import add_session, add_turn

A, B, C = "a" * 40, "b" * 40, "c" * 40


def test_tool_checkpoints_and_rescues_round_trip(store: Store) -> None:
    record = add_session(store)
    turn = add_turn(store, record.id, status=TurnStatus.COMPLETED)
    state = {"head": A, "refs": [f"{A} refs/heads/main"], "stash": [], "reflog": ["é"]}
    points = [
        ToolCheckpoint(turn.token, 2, "Bash", "toolu_2", "git reset --hard", B, state, 2.0),
        ToolCheckpoint(turn.token, 1, "Write", None, "/w/NOTES", None, None, 1.0),
    ]
    with store.atomic() as tx:
        for point in points:
            tx.insert_tool_checkpoint(point)
    with store.read() as tx:
        assert tx.tool_checkpoints(turn.token) == [points[1], points[0]]
    rescue = Rescue(0, record.id, turn.token, 2, ("README", "a dir/"), B, C, ("README",), 3.0)
    with store.atomic() as tx:
        first = tx.insert_rescue(rescue)
        second = tx.insert_rescue(rescue)
    assert second > first
    with store.atomic() as tx:
        tx.set_rescue_undone(first, 4.0)
    with store.read() as tx:
        assert tx.rescues(record.id) == [
            Rescue(first, *_fields(rescue)[1:-1], 4.0),
            Rescue(second, *_fields(rescue)[1:]),
        ]
        assert {B, C} <= tx.checkpoint_commits()  # gc keeps what they name
    with store.atomic() as tx:
        tx.release_checkpoints([turn.token])
    with store.read() as tx:
        assert tx.tool_checkpoints(turn.token) == [] and tx.rescues(record.id) == []
        assert not {B, C} & tx.checkpoint_commits()


def _fields(rescue: Rescue) -> tuple[object, ...]:
    return tuple(getattr(rescue, name) for name in Rescue.__slots__)
