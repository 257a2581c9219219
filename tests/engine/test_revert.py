"""Workspace checkpoints of turns, diffs, reverts and their undo, through the public API on real
git and real files (docs/design.md, invariants 4, 9 and 10)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback import ChangeKind, MessageKind, RevertConflict, TurnStatus
from turnback.errors import (
    CheckpointUnavailable,
    NothingToRevert,
    TurnbackError,
    TurnInProgress,
    TurnNotFound,
)


def files(workspace: Path) -> dict[str, str]:
    return {
        str(p.relative_to(workspace)): p.read_text()
        for p in sorted(workspace.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(workspace).parts
    }


def say(turn: turnback.RunningTurn, text: str) -> None:
    turn.record({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    (path / ".gitignore").write_text("*.log\n")
    (path / "notes.txt").write_text("mine\n")
    return path


@pytest.fixture
def session(tb: turnback.Turnback, workspace: Path) -> turnback.Session:
    return tb.create_session(workspace)


def run_turns(session: turnback.Session, workspace: Path) -> dict[str, Any]:
    with session.turn("create a") as turn:
        (workspace / "a.py").write_text("one\ntwo\nthree\n")
        say(turn, "created a")
    after_one = files(workspace)
    (workspace / "between.txt").write_text("made by hand before turn two\n")
    with session.turn("edit a, add b") as turn:
        (workspace / "a.py").write_text("one\nTWO\nthree\n")
        (workspace / "b.py").write_text("b\n")
        say(turn, "edited")
    with session.turn("drop b, add c") as turn:
        (workspace / "b.py").unlink()
        (workspace / "c.py").write_text("c\n")
        say(turn, "dropped")
    return {"after_one": after_one, "before": files(workspace)}


def test_each_turn_records_its_own_changes(session: turnback.Session, workspace: Path) -> None:
    run_turns(session, workspace)
    first, second, third = session.turns()
    assert [(f.path, f.kind, f.additions) for f in session.diff(1).files] == [
        ("a.py", ChangeKind.ADDED, 3)
    ]
    two = session.diff(2)
    assert [(f.path, f.kind, f.additions, f.deletions) for f in two.files] == [
        ("a.py", ChangeKind.MODIFIED, 1, 1),
        ("b.py", ChangeKind.ADDED, 1, 0),
    ]
    # the hand edit between turns is not blamed on turn two: it is a change outside any turn
    assert [(f.path, f.kind) for f in two.outside] == [("between.txt", ChangeKind.ADDED)]
    assert "+TWO" in (session.diff(2, patch=True).patch or "")
    assert [(f.path, f.kind) for f in session.diff(3).files] == [
        ("b.py", ChangeKind.DELETED),
        ("c.py", ChangeKind.ADDED),
    ]
    assert all(t.begin_checkpoint and t.end_checkpoint for t in (first, second, third))
    assert second.begin_checkpoint != first.end_checkpoint  # between.txt came in between


def test_revert_rewinds_files_and_conversation_and_keeps_history(
    session: turnback.Session, workspace: Path
) -> None:
    state = run_turns(session, workspace)
    (workspace / "debug.log").write_text("ignored, never touched\n")
    revert = session.revert(1)
    assert revert.state == "committed"
    # turn one's files, plus what existed before turn two began (never deleted), plus ignored
    assert files(workspace) == {
        **state["after_one"],
        "between.txt": "made by hand before turn two\n",
        "debug.log": "ignored, never touched\n",
    }
    turns = session.turns()
    assert session.record.head == turns[0].token
    assert [t.reverted_by for t in turns] == [None, revert.id, revert.id]
    assert [m.text for m in session.messages() if m.kind is MessageKind.AGENT] == ["created a"]
    with session.turn("after the revert") as turn:
        say(turn, "continuing")
    assert session.get_turn(2).token == turn.token and turn.turn.parent == turns[0].token


def test_undo_revert_puts_everything_back(session: turnback.Session, workspace: Path) -> None:
    state = run_turns(session, workspace)
    head = session.record.head
    session.revert(1)
    session.undo_revert()
    assert files(workspace) == state["before"]
    assert session.record.head == head
    assert all(t.reverted_by is None for t in session.turns())
    assert [a.code for a in session.activities()][-2:] == ["turn.reverted", "turn.revert.undone"]
    with pytest.raises(NothingToRevert):
        session.undo_revert()


def test_undo_is_refused_once_new_turns_were_made(
    session: turnback.Session, workspace: Path
) -> None:
    run_turns(session, workspace)
    session.revert(1)
    with session.turn("new work"):
        (workspace / "new.py").write_text("new\n")
    with pytest.raises(NothingToRevert) as refused:
        session.undo_revert()
    # says which turn stands in the way, by its number and prompt, not the revert's row id
    assert str(refused.value).startswith(
        "the last revert can no longer be undone: turn 2 ('new work') began after it"
    ), refused.value
    assert (refused.value.remedy, refused.value.turn) == ("turns", 2)
    assert (workspace / "new.py").exists()


def test_revert_to_zero_goes_back_before_the_first_turn(
    session: turnback.Session, workspace: Path
) -> None:
    before = files(workspace)
    run_turns(session, workspace)
    session.revert(0)
    # between.txt was made after turn one began: only files older than the undone turns are kept
    assert files(workspace) == before
    assert session.record.head is None and session.messages() == []


def test_files_only_and_conversation_only(session: turnback.Session, workspace: Path) -> None:
    state = run_turns(session, workspace)
    head = session.record.head
    session.revert(1, conversation=False)
    assert session.record.head == head and (workspace / "a.py").read_text() == "one\ntwo\nthree\n"
    session.undo_revert()
    assert files(workspace) == state["before"]
    session.revert(1, files=False)
    assert files(workspace) == state["before"]
    assert session.record.head == session.turns()[0].token
    session.undo_revert()
    undone = [a.message for a in session.activities() if a.code == "turn.revert.undone"]
    assert undone == [
        "undid revert 1: the files are back",
        "undid revert 2: 2 turn(s) are back in the conversation",
    ]


def test_keep_user_edits_undoes_only_the_agents_changes(
    session: turnback.Session, workspace: Path
) -> None:
    run_turns(session, workspace)
    (workspace / "a.py").write_text("one\nTWO\nthree\nmy own line\n")
    (workspace / "later.txt").write_text("made by hand after the turns\n")
    session.revert(1, keep_user_edits=True)
    assert (workspace / "a.py").read_text() == "one\ntwo\nthree\nmy own line\n"
    assert (workspace / "later.txt").exists() and (workspace / "between.txt").exists()
    assert not (workspace / "b.py").exists() and not (workspace / "c.py").exists()


def test_a_conflict_writes_nothing_and_changes_nothing(
    session: turnback.Session, workspace: Path
) -> None:
    run_turns(session, workspace)
    (workspace / "a.py").write_text("one\nMINE\nthree\n")  # the line turn two changed
    before, head = files(workspace), session.record.head
    with pytest.raises(RevertConflict) as raised:
        session.revert(1, keep_user_edits=True)
    assert raised.value.paths == ("a.py",)
    assert files(workspace) == before and session.record.head == head
    [refused] = session.reverts()
    assert refused.state == "rolled_back" and refused.refused
    [activity] = [a for a in session.activities() if a.code.startswith("checkpoint.revert")]
    assert (activity.code, activity.level) == ("checkpoint.revert.refused", "warning")
    assert "changed nothing" in activity.message and "rolled back" not in activity.message


def test_revert_is_refused_while_a_turn_runs_on_the_workspace(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    state = run_turns(session, workspace)
    other = tb.create_session(workspace)
    with other.turn("busy elsewhere") as running:
        with pytest.raises(TurnInProgress, match="running") as raised:
            session.revert(1)
        assert raised.value.running_token == running.token
    assert files(workspace) == state["before"] and session.reverts() == []


@pytest.mark.parametrize("to", [-1, 4])
def test_a_turn_that_does_not_exist(session: turnback.Session, workspace: Path, to: int) -> None:
    run_turns(session, workspace)
    with pytest.raises(TurnNotFound, match="turns 1 to 3"):
        session.revert(to)
    with pytest.raises(NothingToRevert):
        session.revert(3)


def test_a_missing_checkpoint_refuses_a_files_revert_before_anything_moves(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    state = run_turns(session, workspace)
    first = session.turns()[0].token
    with tb.store.atomic() as tx:
        tx.release_checkpoints([first])
    with pytest.raises(CheckpointUnavailable, match="conversation only") as refused:
        session.revert(1)
    assert "`" not in str(refused.value)  # the engine names no command; each surface words one
    assert files(workspace) == state["before"] and session.reverts() == []
    session.revert(1, files=False)  # the conversation can still be rewound
    [reverted] = [a for a in session.activities() if a.code == "turn.reverted"]
    assert "undoing the revert puts them back" in reverted.message and "`" not in reverted.message
    assert session.record.head == session.turns()[0].token


class Rollback:
    def __init__(self, refuse: bool = False, fail: bool = False) -> None:
        self.refuse, self.fail = refuse, fail
        self.calls: list[tuple[int, list[str]]] = []

    def check(self, turns: int) -> None:
        if self.refuse:
            raise TurnbackError("this agent cannot roll back its conversation")

    def apply(self, turns: int, transcript: list[turnback.Message]) -> None:
        self.calls.append((turns, [m.text for m in transcript]))
        if self.fail:
            raise TurnbackError("the agent went away")


def test_the_agents_rollback_is_checked_first_and_applied(
    session: turnback.Session, workspace: Path
) -> None:
    state = run_turns(session, workspace)
    with pytest.raises(TurnbackError, match="cannot roll back"):
        session.revert(1, rollback=Rollback(refuse=True))
    assert files(workspace) == state["before"] and session.reverts() == []
    failing = Rollback(fail=True)
    with pytest.raises(TurnbackError, match="went away"):
        session.revert(1, rollback=failing)
    assert files(workspace) == state["before"], "files moved although the rollback failed"
    assert session.record.head == session.turns()[-1].token
    working = Rollback()
    session.revert(1, rollback=working)
    assert working.calls == [(2, ["create a", "created a"])]


def test_capture_failures_never_block_a_turn(
    tb: turnback.Turnback, session: turnback.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no git
    for _ in range(4):
        with session.turn("no git here") as turn:
            say(turn, "still works")
    turns = session.turns()
    assert [t.status for t in turns] == [TurnStatus.COMPLETED] * 4
    assert not any(t.begin_checkpoint or t.end_checkpoint for t in turns)
    codes = [a.code for a in session.activities()]
    assert "checkpoint.capture.failed" in codes and "checkpoint.capture.skipped" in codes
    assert any("git" in a.message for a in session.activities() if a.level == "error")
    assert not session.diff(1).available
    with pytest.raises(CheckpointUnavailable, match="unavailable"):
        session.diff(1, patch=True)


def test_gc_releases_old_checkpoints_and_frees_space(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    for i in range(4):
        with session.turn(f"turn {i}"):
            (workspace / f"big{i}.bin").write_bytes(bytes([i + 1]) * 500_000)
            if i:
                (workspace / f"big{i - 1}.bin").unlink()
    report = tb.gc(keep=1, older_than=0)
    assert report.checkpoints_released == 3 and report.refs_removed >= 5
    assert report.bytes_freed > 0
    turns = session.turns()
    assert not session.diff(turns[0].token).available
    assert session.diff(turns[-1].token, patch=True).patch is not None
    assert tb.gc(keep=1, older_than=0).checkpoints_released == 0


def test_gc_releases_the_checkpoints_of_reverts_that_can_no_longer_be_undone(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    run_turns(session, workspace)
    first = session.revert(1)
    with session.turn("after the revert") as turn:  # undoing `first` would drop this turn
        (workspace / "d.py").write_text("d\n")
        say(turn, "new work")
    before_second = files(workspace)
    second = session.revert(1)

    report = tb.gc(older_than=0)
    assert report.checkpoints_released == 1  # first's; second can still be undone
    with tb.store.read() as tx:
        kept = {r.id: (r.target, r.undo_checkpoint) for r in tx.reverts(session.id)}
    assert kept[first.id] == (None, None)
    assert all(kept[second.id])
    assert session.undo_revert().id == second.id  # its undo checkpoint survived the prune
    assert files(workspace) == before_second
    assert tb.gc(older_than=0).checkpoints_released == 1  # second, now undone


def test_a_git_workspace_is_left_exactly_as_it_was(tb: turnback.Turnback, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "tracked.py").write_text("v1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    dot_git = {
        str(p.relative_to(repo)): p.read_bytes() for p in (repo / ".git").rglob("*") if p.is_file()
    }
    session = tb.create_session(repo)
    with session.turn("edit"):
        (repo / "tracked.py").write_text("v2\n")
    session.revert(0)
    session.undo_revert()
    tb.gc(keep=0, older_than=0)
    after = {
        str(p.relative_to(repo)): p.read_bytes() for p in (repo / ".git").rglob("*") if p.is_file()
    }
    assert after == dot_git, "turnback changed the user's .git"
    assert (repo / "tracked.py").read_text() == "v2\n"


def test_fork_copies_the_conversation_in_one_go(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path, tmp_path: Path
) -> None:
    run_turns(session, workspace)
    session.revert(2, files=False)  # turn three is reverted history: not part of the copy
    fork = session.fork()
    turns = fork.turns()
    assert [t.number for t in turns] == [1, 2] and fork.record.head == turns[-1].token
    assert [t.parent for t in turns] == [None, turns[0].token]
    assert [(m.kind, m.data) for m in fork.messages()] == [
        (m.kind, m.data) for m in session.messages()
    ]
    assert [f.path for f in fork.diff(2).files] == ["a.py", "b.py"]
    assert fork.diff(2, patch=True).patch == session.diff(2, patch=True).patch
    elsewhere = session.fork(tmp_path / "other")
    assert not elsewhere.diff(2).available  # another workspace: no checkpoints of its own
    with fork.turn("continue in the fork") as turn:
        say(turn, "forked")
    assert fork.get_turn(3).token == turn.token and len(session.turns()) == 3


def test_gc_reports_the_space_a_killed_process_left_in_the_database_log(home: Path) -> None:
    script = (
        "import os, sys, turnback\n"
        "tb = turnback.open(sys.argv[1], durability='strict', checkpoints=False)\n"
        "s = tb.create_session('.')\n"
        "with s.turn('fill the log') as t:\n"
        "    for i in range(300):\n"
        "        t.record({'sessionUpdate': 'agent_message_chunk',\n"
        "                  'content': {'type': 'text', 'text': 'x' * 8000}})\n"
        "os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(home)], check=False, timeout=120)
    wal = home / "turnback.db-wal"
    left = wal.stat().st_size
    database = home / "turnback.db"
    before = database.stat().st_size
    assert left > 2**20, "the killed process left no log to give back"
    with turnback.open(home) as tb:
        report = tb.gc()
    assert not wal.exists() or wal.stat().st_size == 0
    # the log is given back, less what of it the database file took in
    assert report.bytes_freed == left - (database.stat().st_size - before) > left // 2


def test_the_conversation_is_the_turns_neither_reverted_nor_unfinished_in_order(
    session: turnback.Session, workspace: Path
) -> None:
    run_turns(session, workspace)
    session.revert(2)
    running = session.turn("still running")
    assert [t.number for t in session.conversation()] == [1, 2]
    assert [t.number for t in session.turns()] == [1, 2, 3, 3]  # reverted 3, running 3
    running.complete()
    assert [t.prompt_text for t in session.conversation()] == [
        "create a",
        "edit a, add b",
        "still running",
    ]
