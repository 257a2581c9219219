"""Crash suite, workspace part: SIGKILL at every fault point of capture, restore, revert and undo.

After each kill a fresh process recovers, and the files and the conversation must agree with one
recorded checkpoint: either the revert happened (files at turn 1, head at turn 1) or it did not
(files and head as before it), never a mix; and a completed revert can still be undone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback.engine.turns import begin
from turnback.errors import RestoreIncomplete, StoreUnavailable
from turnback.workspace import Snapshots

from .harness import Acks, run_child, settle_and_check

CAPTURE = ["capture.shadow", "capture.index", "capture.commit", "capture.ref"]
RESTORE = ["restore.plan", "restore.file", "restore.done"]
REVERT = [
    "revert.captured",
    "revert.started",
    "revert.files",
    "revert.commit.inside",
    "revert.done",
]
UNDO = ["undo.started", "undo.files", "undo.commit.inside", "undo.done"]
PLANNED = {*CAPTURE, *RESTORE, *REVERT, *UNDO, "revert.rollback.files", "revert.takeover"}


def files(workspace: Path) -> dict[str, str]:
    return {
        str(p.relative_to(workspace)): p.read_text()
        for p in sorted(workspace.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    (path / "notes.txt").write_text("the user's notes\n")
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def session_id(home: Path, workspace: Path) -> str:
    with turnback.open(home) as tb:
        return tb.create_session(workspace).id


# -- capture ------------------------------------------------------------------------------------


@pytest.mark.parametrize("point", CAPTURE)
@pytest.mark.parametrize(
    ("nth", "watch"), [(1, False), (2, False), (2, True)], ids=["baseline", "end", "watched-end"]
)
def test_killed_while_capturing(
    home: Path,
    workspace: Path,
    session_id: str,
    tmp_path: Path,
    point: str,
    nth: int,
    watch: bool,
) -> None:
    ack = tmp_path / "ack.jsonl"
    args = {
        "session": session_id,
        "ack": str(ack),
        "files": {"a.txt": "from the agent\n"},
        "watch": watch,
    }
    run_child(home, "edit", args, fault=f"{point}@{nth}")
    acks = Acks.read(ack)
    settle_and_check(home, session_id)  # recovers, twice; a new turn begins and completes
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        turns = session.turns()
        newest = turns[-1]
        assert newest.begin_checkpoint and newest.end_checkpoint, "captures fail after the crash"
        if nth == 1:  # killed before the turn's row: no turn, an unnamed ref at most
            assert acks.begun is None and len(turns) == 1
        else:  # killed capturing the end: recovered, with the end captured by recovery
            assert acks.begun and turns[0].token == acks.begun
            assert turns[0].status is turnback.TurnStatus.INTERRUPTED
            diff = session.diff(turns[0].token)
            assert diff.available
            assert [(f.path, f.kind) for f in diff.files] == [("a.txt", turnback.ChangeKind.ADDED)]


# -- revert and undo ----------------------------------------------------------------------------


def three_turns(home: Path, workspace: Path, session_id: str) -> dict[str, Any]:
    """Three turns of edits and a hand edit; returns the files after turn 1 and after turn 3."""
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        with session.turn("turn one"):
            (workspace / "a.txt").write_text("one\ntwo\nthree\n")
        after_one = files(workspace)
        with session.turn("turn two"):
            (workspace / "a.txt").write_text("one\nTWO\nthree\n")
            (workspace / "b.txt").write_text("b\n")
        with session.turn("turn three"):
            (workspace / "b.txt").unlink()
            for i in range(6):
                (workspace / f"c{i}.txt").write_text(f"c{i}\n")
        (workspace / "sub").mkdir()
        (workspace / "sub" / "later.txt").write_text("made by hand after turn three\n")
        heads = [t.token for t in session.turns()]
    return {"after_one": after_one, "before": files(workspace), "heads": heads}


def assert_consistent(home: Path, workspace: Path, session_id: str, state: dict[str, Any]) -> str:
    """Files and conversation agree with one checkpoint; returns which: 'reverted' or 'before'."""
    with turnback.open(home) as tb:
        head = tb.session(session_id).record.head
        reverts = tb.session(session_id).reverts()
    now = files(workspace)
    assert not [r for r in reverts if r.state in ("started", "files_restored", "undoing")]
    if head == state["heads"][0]:
        # a plain revert to turn 1 keeps nothing made after turn 2 began (the README's "Workspace
        # checkpoints": only files that existed before the undone turns are kept), so the files
        # are exactly turn 1's
        assert now == state["after_one"], "head is at turn 1 but the files are not"
        return "reverted"
    assert head == state["heads"][-1]
    assert now == state["before"], "head is at turn 3 but the files are not as before the revert"
    return "before"


@pytest.mark.parametrize("point", REVERT + [f"{p}@1" for p in RESTORE])
def test_killed_while_reverting(home: Path, workspace: Path, session_id: str, point: str) -> None:
    state = three_turns(home, workspace, session_id)
    run_child(home, "revert", {"session": session_id, "to": 1}, fault=point)
    settle_and_check_revert(home, session_id)
    outcome = assert_consistent(home, workspace, session_id, state)
    committed = point in ("revert.done",)
    assert outcome == ("reverted" if committed else "before")
    if outcome == "reverted":  # the revert can still be undone
        with turnback.open(home) as tb:
            tb.session(session_id).undo_revert()
        assert files(workspace) == state["before"]


def killed_reverting(home: Path, session_id: str, point: str) -> None:
    """A revert to turn 1 (or, for an ``undo.*`` point, the undo of one) killed at ``point``."""
    if point.startswith("undo"):
        with turnback.open(home) as tb:
            tb.session(session_id).revert(1)
        run_child(home, "undo", {"session": session_id}, fault=point)
    else:
        run_child(home, "revert", {"session": session_id, "to": 1}, fault=point)


def settle_and_check_revert(home: Path, session_id: str) -> None:
    """Recovery settles the revert, and is idempotent (the turn checks run after)."""
    with turnback.open(home) as tb:
        first = tb.recover()
        second = tb.recover()
    assert not second.reverts, "a second recovery found more to do"
    assert all(r.state in ("rolled_back", "undone") for r in first.reverts)


def test_killed_while_rolling_back_a_revert(home: Path, workspace: Path, session_id: str) -> None:
    state = three_turns(home, workspace, session_id)
    run_child(home, "revert", {"session": session_id, "to": 1}, fault="revert.files")
    assert files(workspace) == state["after_one"]  # files moved, conversation not yet
    run_child(home, "recover", {}, fault="revert.rollback.files")
    settle_and_check_revert(home, session_id)
    assert assert_consistent(home, workspace, session_id, state) == "before"


@pytest.mark.parametrize("left", ["revert.files", "undo.files"])
def test_killed_just_after_taking_a_dead_revert_over(
    home: Path, workspace: Path, session_id: str, left: str
) -> None:
    """A recovery killed once it has moved a dead process's revert to itself leaves a revert
    whose owner is dead again: the next recovery takes it over from that one and settles it."""
    state = three_turns(home, workspace, session_id)
    killed_reverting(home, session_id, left)
    with turnback.open(home) as tb:
        (before,) = [
            r for r in tb.session(session_id).reverts() if r.state in ("started", "undoing")
        ]
    run_child(home, "recover", {}, fault="revert.takeover")
    with turnback.open(home) as tb:
        taken = tb.session(session_id).reverts()[-1]
    assert taken.state == before.state, "the takeover settled nothing by itself"
    assert taken.owner_id not in (None, before.owner_id), "the takeover did not move the revert"
    settle_and_check_revert(home, session_id)
    assert assert_consistent(home, workspace, session_id, state) == "before"


def test_a_dead_revert_whose_settling_fails_is_taken_over_again(
    home: Path, workspace: Path, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovery that takes a dead process's revert over and then fails to settle it (its
    restore incomplete, its store gone) gives it back: the next recovery, in the same live
    process, takes it over again and settles it, and the workspace is free for a turn."""
    state = three_turns(home, workspace, session_id)
    killed_reverting(home, session_id, "revert.files")
    real = Snapshots.restore
    failures = [RestoreIncomplete("the disk is full", ("a.txt",)), StoreUnavailable("gone")]

    def failing(self: Snapshots, *args: Any, **kwargs: Any) -> list[str]:
        if failures:
            raise failures.pop(0)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Snapshots, "restore", failing)
    with turnback.open(home) as tb:
        assert not tb.recover().reverts  # restore incomplete
        assert not tb.recover().reverts  # the store failed
        [settled] = tb.recover().reverts
        assert settled.state == "rolled_back"
        codes = [a.code for a in tb.session(session_id).activities()]
        assert "checkpoint.revert.unsettled" in codes, codes
    assert assert_consistent(home, workspace, session_id, state) == "before"
    with turnback.open(home) as tb, tb.session(session_id).turn("the workspace is free"):
        pass


def test_killed_while_reverting_with_hand_edits_kept(
    home: Path, workspace: Path, session_id: str
) -> None:
    state = three_turns(home, workspace, session_id)
    args = {"session": session_id, "to": 1, "keep_user_edits": True}
    run_child(home, "revert", args, fault="restore.file@2")
    settle_and_check_revert(home, session_id)
    assert assert_consistent(home, workspace, session_id, state) == "before"
    run_child(home, "revert", args, expect_kill=False)
    assert files(workspace) == {
        **state["after_one"],
        "sub/later.txt": state["before"]["sub/later.txt"],
    }


@pytest.mark.parametrize("point", UNDO)
def test_killed_while_undoing_a_revert(
    home: Path, workspace: Path, session_id: str, point: str
) -> None:
    state = three_turns(home, workspace, session_id)
    with turnback.open(home) as tb:
        tb.session(session_id).revert(1)
    run_child(home, "undo", {"session": session_id}, fault=point)
    settle_and_check_revert(home, session_id)
    outcome = assert_consistent(home, workspace, session_id, state)
    assert outcome == "before", "an undo that began is finished by recovery"
    settle_and_check(home, session_id)


@pytest.mark.parametrize("point", ["revert.started", "revert.files", "undo.files"])
def test_a_killed_revert_holds_its_workspace_until_it_is_settled(
    home: Path, workspace: Path, session_id: str, point: str
) -> None:
    state = three_turns(home, workspace, session_id)
    killed_reverting(home, session_id, point)
    with turnback.open(home) as tb:
        with pytest.raises(turnback.RevertInProgress) as held:  # the hold outlives its process
            begin(tb.store, session_id, "a turn on a half-moved workspace", lease=tb.lease)
        assert "was interrupted midway and its process is gone" in str(held.value)
        assert held.value.remedy == "recover"
        with tb.session(session_id).turn("a turn once the revert is settled") as turn:
            pass  # turn() settled the dead revert first
        reverts = tb.session(session_id).reverts()
    assert reverts[-1].state == ("undone" if point.startswith("undo") else "rolled_back")
    with turnback.open(home) as tb:
        newest = tb.session(session_id).get_turn(turn.token)
    assert newest.parent == state["heads"][-1] and newest.status.ended
