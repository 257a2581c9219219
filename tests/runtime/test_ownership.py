"""A turn another process takes over while the agent still runs it: the runtime stops the agent,
writes nothing more of the turn, and says so."""

from __future__ import annotations

import pytest

import turnback
from tests.runtime.harness import SCRIPTED, run, text_of
from turnback.engine import recovery
from turnback.model import TurnStatus
from turnback.runtime import AgentRuntime, PermissionRequest


def test_a_turn_taken_over_mid_prompt_is_stopped_and_reported(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    taken: list[turnback.Turn] = []

    def take_over(request: PermissionRequest) -> str:
        running = session.running()
        assert running is not None and running.owner_id
        with tb.store.atomic() as tx:
            tx.delete_owner(running.owner_id)  # its owner is gone, as a dead machine's is
        settled = recovery.recover_turn(tb.store, running)  # as another process recovers it
        assert settled is not None
        taken.append(settled)
        return "allow"

    async def scenario() -> None:
        async with await AgentRuntime.start(tb, session, SCRIPTED, on_permission=take_over) as rt:
            with pytest.raises(turnback.OwnershipLost):
                await rt.prompt("say before\nask deploy\nstream 200\nsay after")

    run(scenario())
    [recovered] = taken
    assert recovered.status is TurnStatus.INTERRUPTED
    turn = session.get_turn(recovered.token)
    assert (turn.status, turn.event_count, turn.ended_at) == (
        recovered.status,
        recovered.event_count,
        recovered.ended_at,
    ), "the taken-over process ended the turn again"
    said = text_of(session.turn_messages(turn.token))
    assert said.startswith("before") and "chunk" not in said and "after" not in said
    lost = [a for a in session.activities() if a.code == "turn.ownership.lost"]
    assert [a.turn for a in lost] == [turn.token]
    assert "taken over" in lost[0].message
