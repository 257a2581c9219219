"""Step checkpoints: the points inside a turn its agent can resume from."""

from __future__ import annotations

from turnback.model import StepCheckpoint, TurnStatus
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import STEP_CHECKPOINT, dumps, marks
from turnback.store.tx import StepsTx

#: The turns whose step checkpoints are kept: they run, or may run again.
_KEEPS_STEPS = tuple(
    s.value for s in (TurnStatus.RUNNING, TurnStatus.SET_ASIDE, TurnStatus.INTERRUPTED)
)


class StepQueries(Queries, StepsTx):
    def insert_step_checkpoint(self, checkpoint: StepCheckpoint) -> None:
        values = {name: getattr(checkpoint, name) for name in STEP_CHECKPOINT.names}
        values.update(state=dumps(checkpoint.state))
        self._run(
            f"INSERT INTO step_checkpoints ({STEP_CHECKPOINT.select()}) "
            f"VALUES ({marks(STEP_CHECKPOINT.names)})",
            [values[name] for name in STEP_CHECKPOINT.names],
        )

    def step_checkpoints(self, token: str) -> list[StepCheckpoint]:
        rows = self._all(
            f"SELECT {STEP_CHECKPOINT.select()} FROM step_checkpoints WHERE turn = ? "
            "ORDER BY journal_seq",
            (token,),
        )
        return STEP_CHECKPOINT.records(rows)

    def delete_step_checkpoints(self, token: str, after_seq: int = -1) -> int:
        return self._run(
            "DELETE FROM step_checkpoints WHERE turn = ? AND journal_seq > ?", (token, after_seq)
        ).rowcount

    def delete_orphan_step_checkpoints(self) -> int:
        return self._run(
            "DELETE FROM step_checkpoints WHERE turn NOT IN "
            f"(SELECT token FROM turns WHERE status IN ({marks(_KEEPS_STEPS)}))",
            _KEEPS_STEPS,
        ).rowcount
