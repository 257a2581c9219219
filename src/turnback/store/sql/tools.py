"""Workspace checkpoints taken before a turn's tools, and the rescues made from them."""

from __future__ import annotations

from turnback.model import Rescue, ToolCheckpoint
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import RESCUE, TOOL_CHECKPOINT, dumps, marks
from turnback.store.tx import ToolsTx

_TOOL_COLUMNS = ("turn", "number", "tool", "call_id", "summary", "checkpoint", "git_state", "at")


class ToolQueries(Queries, ToolsTx):
    def insert_tool_checkpoint(self, checkpoint: ToolCheckpoint) -> None:
        c = checkpoint
        git_state = dumps(c.git_state) if c.git_state is not None else None
        self._run(
            f"INSERT INTO tool_checkpoints ({', '.join(_TOOL_COLUMNS)}) "
            f"VALUES ({marks(_TOOL_COLUMNS)})",
            (c.turn, c.number, c.tool, c.call_id, c.summary, c.commit, git_state, c.at),
        )

    def tool_checkpoints(self, token: str) -> list[ToolCheckpoint]:
        rows = self._all(
            f"SELECT {TOOL_CHECKPOINT.select()} FROM tool_checkpoints WHERE turn = ? "
            "ORDER BY number",
            (token,),
        )
        return TOOL_CHECKPOINT.records(rows)

    def insert_rescue(self, rescue: Rescue) -> int:
        names = RESCUE.names[1:]  # the database numbers rescues
        values = {name: getattr(rescue, name) for name in names}
        values.update(paths=dumps(list(rescue.paths)), written=dumps(list(rescue.written)))
        row = self._one(
            f"INSERT INTO rescues ({', '.join(names)}) VALUES ({marks(names)}) RETURNING id",
            [values[name] for name in names],
        )
        assert row is not None
        return int(row[0])

    def rescues(self, session_id: str) -> list[Rescue]:
        rows = self._all(
            f"SELECT {RESCUE.select()} FROM rescues WHERE session_id = ? ORDER BY id",
            (session_id,),
        )
        return RESCUE.records(rows)

    def set_rescue_undone(self, rescue_id: int, at: float) -> None:
        self._run("UPDATE rescues SET undone_at = ? WHERE id = ?", (at, rescue_id))
