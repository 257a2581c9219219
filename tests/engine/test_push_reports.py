"""What the background pushes to a checkpoint remote met, recorded as activities."""

from __future__ import annotations

from pathlib import Path

from turnback.engine.checkpoints import PushReports
from turnback.store import Store
from turnback.workspace.remote import PushResult


def test_a_push_that_outlives_its_handle_opens_no_connection() -> None:
    """``close`` waits a while for the pushes; one still running after it reports nothing (its
    mark stays, for the next process): it must not open a connection nobody closes."""
    opened: list[str] = []

    def connect() -> Store:
        opened.append("connection")
        raise AssertionError("a closed handle's reports opened the store")

    reports = PushReports(connect)
    reports.close()
    reports.record(PushResult(Path("/w"), ("s1",), "`git push` to /r failed"))
    assert opened == []
