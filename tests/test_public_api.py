"""The public surface: the names ``turnback`` exports, and the documented quickstart."""

from __future__ import annotations

from pathlib import Path

import pytest

import turnback


def test_exported_members() -> None:
    """Changing the public names must be deliberate: update this list when you mean to."""
    assert turnback.__all__ == [
        "Activity",
        "ActivityLevel",
        "AgentDied",
        "AgentError",
        "AgentUnavailable",
        "AmbiguousId",
        "ChangeKind",
        "CheckpointUnavailable",
        "ConversationRollback",
        "Durability",
        "EventKind",
        "ExtraMissing",
        "FileChange",
        "GcReport",
        "GitFailed",
        "GitUnavailable",
        "HealthCheck",
        "InvalidEvent",
        "InvalidId",
        "InvalidOption",
        "Message",
        "MessageKind",
        "NotSetAside",
        "NothingToRevert",
        "OwnershipLost",
        "RangeDiff",
        "RecoveryReport",
        "RestoreIncomplete",
        "ResumeUnavailable",
        "Revert",
        "RevertConflict",
        "RevertInProgress",
        "RevertPlan",
        "RevertState",
        "RollbackUnavailable",
        "RunEvent",
        "RunningTurn",
        "SchemaTooNew",
        "Session",
        "SessionElsewhere",
        "SessionNotFound",
        "SessionRecord",
        "StepCheckpoint",
        "StoreCorrupt",
        "StoreError",
        "StoreLocked",
        "StoreNotFound",
        "StoreUnavailable",
        "SweepReport",
        "Turn",
        "TurnDiff",
        "TurnInProgress",
        "TurnNotFound",
        "TurnNotRunning",
        "TurnStatus",
        "Turnback",
        "TurnbackError",
        "UnrecoveredTurn",
        "WorkspaceCheckpoint",
        "WorkspaceDiverged",
        "WorkspaceError",
        "__version__",
        "open",
    ]


def test_exported_members_exist_and_are_public() -> None:
    for name in turnback.__all__:
        assert hasattr(turnback, name), name
    for name in turnback.__all__:
        value = getattr(turnback, name)
        module = getattr(value, "__module__", None)
        if module is not None and name != "open":
            assert module.startswith("turnback"), (name, module)


def test_every_exported_error_is_a_turnback_error() -> None:
    errors = [
        getattr(turnback, name)
        for name in turnback.__all__
        if isinstance(getattr(turnback, name), type)
        and issubclass(getattr(turnback, name), Exception)
    ]
    assert len(errors) >= 15
    for error in errors:
        assert issubclass(error, turnback.TurnbackError), error


def test_quickstart(tmp_path: Path) -> None:
    """The README's and the issue's quickstart, step by step, with what each step promises."""
    home = tmp_path / "home"
    tb = turnback.open(home=home)
    try:
        assert isinstance(tb, turnback.Turnback)
        assert tb.durability is turnback.Durability.BATCHED
        assert (home / "turnback.db").is_file()

        session = tb.create_session(workspace=tmp_path, title="quickstart", agent="scripted")
        assert isinstance(session, turnback.Session)
        record = session.record
        assert (record.workspace, record.title, record.agent) == (
            str(tmp_path.resolve()),
            "quickstart",
            "scripted",
        )
        assert tb.session(session.id[:6]) == session

        with session.turn("fix the failing test") as turn:
            assert isinstance(turn, turnback.RunningTurn)
            turn.record(
                {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "Looking…"},
                }
            )
            turn.record(
                {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": " Found it."},
                }
            )
            turn.step(1, checkpoint_id="c1", state={"k": "v"})

        [done] = session.turns()
        assert done.status is turnback.TurnStatus.COMPLETED
        assert done.number == 1
        assert done.event_count == 3
        assert done.prompt == "fix the failing test"
        assert [(m.kind, m.text) for m in session.messages()] == [
            (turnback.MessageKind.USER, "fix the failing test"),
            (turnback.MessageKind.AGENT, "Looking… Found it."),
        ]
        assert session.activities() == []
        assert session.unrecovered() == []

        report = tb.recover()
        assert isinstance(report, turnback.RecoveryReport)
        assert (report.recovered, report.set_aside, report.live) == ((), (), ())

        swept = tb.sweep()
        assert isinstance(swept, turnback.SweepReport)
        assert swept.total == 0
    finally:
        tb.close()
    tb.close()  # closing twice is harmless

    with turnback.open(home=home) as again:
        assert [s.id for s in again.sessions()] == [session.id]
        assert again.session(session.id).record.head == done.token


def test_open_defaults_to_turnback_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNBACK_HOME", str(tmp_path / "from-env"))
    with turnback.open() as tb:
        tb.create_session(workspace=tmp_path)
    assert (tmp_path / "from-env" / "turnback.db").is_file()


def test_open_rejects_an_unknown_durability(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="strict, batched, turn"):
        turnback.open(home=tmp_path, durability="sometimes")
    assert not (tmp_path / "turnback.db").exists()


@pytest.mark.parametrize("mode", ["strict", "batched", "turn"])
def test_open_accepts_every_durability(tmp_path: Path, mode: str) -> None:
    with turnback.open(home=tmp_path, durability=mode) as tb:
        assert tb.durability == mode
