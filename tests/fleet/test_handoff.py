"""Handing a session off to another machine: a fenced transfer in the store, the workspace there
brought to the session's head from the checkpoint remote, a divergent workspace refused. Two
machines are two homes sharing one store and one remote (``Machines``, as in
test_checkpoint_remote.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import turnback

from .test_checkpoint_remote import (
    CHUNK,
    Machines,
    bare,
    store_url,
    wait_pushed,
    write_turn,
)

__all__ = ["store_url"]  # the fixture, for pytest


@pytest.fixture
def machines(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Machines:
    """The remote lets a machine fetch checkpoints without their files (a partial clone)."""
    remote = bare(tmp_path / "checkpoints.git")
    subprocess.run(
        ["git", "-C", str(remote), "config", "uploadpack.allowFilter", "true"], check=True
    )
    return Machines(tmp_path, store_url, str(remote), monkeypatch)


def two_turns_on_a(machines: Machines) -> str:
    with machines.on("a") as tb:
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {"a.txt": "one\n"})
        write_turn(tb, session, {"a.txt": "two\n", "b.txt": "new\n"})
        wait_pushed(tb)
        return session.id


def test_a_fresh_machine_takes_a_session_over_and_the_old_one_is_fenced_off(
    machines: Machines,
) -> None:
    session_id = two_turns_on_a(machines)
    with machines.on("b") as tb:  # b's workspace is empty: a fresh machine
        done = tb.session(session_id).handoff("b")
        assert (done.from_host, done.to_host, done.turn) == ("a", "b", 2)
        assert sorted(done.written) == ["a.txt", "b.txt"]
        assert (machines.workspace / "a.txt").read_text() == "two\n"
        assert (machines.workspace / "b.txt").read_text() == "new\n"
        session = tb.session(session_id)
        assert session.record.host == "b" and session.record.host_fence == done.fence
        write_turn(tb, session, {"c.txt": "from b\n"})  # b runs the next turn
        wait_pushed(tb)
        activity = [a for a in session.activities() if a.code == "session.handoff"]
        assert activity and activity[0].data["to"] == "b" and activity[0].data["turn"] == 2
    with machines.on("a") as tb:
        session = tb.session(session_id)
        with pytest.raises(turnback.SessionElsewhere, match="handed off to host b") as refused:
            session.turn("a writes again")
        assert refused.value.host == "b" and refused.value.exit_code == 3
        assert [t.number for t in session.turns()] == [1, 2, 3], "a's begin left nothing"
        assert "+from b" in (session.diff(3, patch=True).patch or ""), "b's turn reads on a"
        back = session.handoff("a")  # and a takes it back: its workspace is at turn 2
        assert back.from_host == "b" and back.written == ("c.txt",)
        assert (machines.workspace / "c.txt").read_text() == "from b\n"
        write_turn(tb, session, {"d.txt": "a again\n"})


def test_a_workspace_with_changes_of_its_own_is_refused_and_left_alone(
    machines: Machines,
) -> None:
    session_id = two_turns_on_a(machines)
    with machines.on("b") as tb:
        (machines.workspace / "a.txt").write_text("b's own work\n")
        (machines.workspace / "notes.txt").write_text("b's notes\n")
        session = tb.session(session_id)
        with pytest.raises(turnback.WorkspaceDiverged) as refused:
            session.handoff("b")
        assert set(refused.value.paths) == {"a.txt", "b.txt", "notes.txt"}
        assert "modified a.txt" in str(refused.value) and "added notes.txt" in str(refused.value)
        assert refused.value.exit_code == 3
        assert (machines.workspace / "a.txt").read_text() == "b's own work\n"
        assert not (machines.workspace / "b.txt").exists()
        assert session.record.host is None, "the session stayed where it was"
        assert not [a for a in session.activities() if a.code == "session.handoff"]


def test_a_workspace_at_an_earlier_turn_is_brought_forward(machines: Machines) -> None:
    with machines.on("a") as tb:
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {"a.txt": "one\n"})
    with machines.on("b") as tb:  # b's copy: as after turn 1, by its own sync
        (machines.workspace / "a.txt").write_text("one\n")
    with machines.on("a") as tb:
        write_turn(tb, tb.session(session.id), {"a.txt": "two\n"})
        wait_pushed(tb)
    with machines.on("b") as tb:
        done = tb.session(session.id).handoff("b")
        assert done.written == ("a.txt",)
        assert (machines.workspace / "a.txt").read_text() == "two\n"


def test_a_running_turn_refuses_a_handoff(machines: Machines) -> None:
    with machines.on("a") as tb:
        session = tb.create_session(machines.workspace)
        running = session.turn("still going")
        with pytest.raises(turnback.TurnInProgress, match="is running on host a"):
            session.handoff("a")
        running.complete()


def test_a_dead_machines_turn_is_recovered_and_its_last_checkpoint_taken_over(
    machines: Machines,
) -> None:
    with machines.on("a", lease_seconds=0.5) as tb:
        session = tb.create_session(machines.workspace)
        write_turn(tb, session, {"a.txt": "one\n"})
        running = session.turn("a dies in this one")
        (machines.workspace / "a.txt").write_text("half done\n")
        running.record(CHUNK)
        wait_pushed(tb)
        tb.lease.close()  # its heartbeat stops, as a dead machine's does
        time.sleep(1.0)
    with machines.on("b") as tb:
        session = tb.session(session.id)
        done = session.handoff("b")
        assert (done.turn, done.moment) == (2, "begin"), "its end was never captured"
        assert (machines.workspace / "a.txt").read_text() == "one\n"
        assert session.get_turn(2).status == "interrupted"
        activity = [a for a in session.activities() if a.code == "session.handoff"][-1]
        assert "at turn 2" in activity.message and "that turn's begin" in activity.message
    with machines.on("a") as tb, pytest.raises(turnback.SessionElsewhere):
        tb.session(session.id).reopen(2)


def test_a_handoff_runs_on_the_machine_it_names(machines: Machines) -> None:
    session_id = two_turns_on_a(machines)
    with (
        machines.on("a") as tb,
        pytest.raises(turnback.InvalidOption, match="this one is a, not b"),
    ):
        tb.session(session_id).handoff("b")


def cli(
    machines: Machines, host: str, *args: str, remote: str | None = None, fault: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNBACK_")}
    env.update(
        TURNBACK_HOST=host,
        TURNBACK_HOME=str(machines.root / f"home-{host}"),
        TURNBACK_DATABASE_URL=machines.url,
        TURNBACK_CHECKPOINT_REMOTE=remote or machines.remote,
        TURNBACK_FAULT=fault,
    )
    return subprocess.run(
        [sys.executable, "-m", "turnback", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_command_line_hands_off_and_says_what_differs(machines: Machines) -> None:
    session_id = two_turns_on_a(machines)
    with machines.on("b"):
        (machines.workspace / "mine.txt").write_text("b's own\n")
    refused = cli(machines, "b", "handoff", session_id[:8], "--to", "b", "--json")
    assert refused.returncode == 3, refused.stderr
    assert "mine.txt" in json.loads(refused.stdout)["conflicts"]
    (machines.workspace / "mine.txt").unlink()
    done = cli(machines, "b", "handoff", session_id[:8], "--to", "b", "--json")
    assert done.returncode == 0, done.stderr
    shape = json.loads(done.stdout)
    assert (shape["session"], shape["from"], shape["to"], shape["turn"], shape["moment"]) == (
        session_id,
        "a",
        "b",
        2,
        "end",
    )
    human = cli(machines, "b", "handoff", session_id[:8], "--to", "b")
    assert human.returncode == 0 and "handed off from host b to host b at turn 2" in human.stdout
    usage = cli(machines, "b", "handoff", session_id[:8])
    assert usage.returncode == 2 and "--to" in usage.stderr
    helped = cli(machines, "b", "handoff", "--help")
    assert "diverg" not in helped.stdout and "Move SESSION to this machine" in helped.stdout


@pytest.mark.parametrize(
    "fault",
    ["handoff.accepted", "restore.file@1", "restore.done", "handoff.inside", "handoff.after"],
)
def test_a_handoff_killed_at_each_step_is_run_again_to_the_end(
    machines: Machines, fault: str
) -> None:
    """Files first, then the transfer: a handoff killed (SIGKILL) anywhere leaves the session
    where it was until the transfer commits, and b's workspace with each path as it was or as
    the head has it -- which the handoff run again accepts and finishes, though it is no state
    the session has been in."""
    session_id = two_turns_on_a(machines)
    with machines.on("b"):
        pass  # b's workspace is empty: both files of the head are to be written
    killed = cli(machines, "b", "handoff", session_id, "--to", "b", fault=fault)
    assert killed.returncode == -9, killed.stderr
    head = {"a.txt": "two\n", "b.txt": "new\n"}
    for name, text in head.items():
        path = machines.workspace / name
        assert not path.exists() or path.read_text() == text
    moved = fault == "handoff.after"
    with machines.on("b") as tb:
        assert tb.session(session_id).record.host == ("b" if moved else None)
    again = cli(machines, "b", "handoff", session_id, "--to", "b", "--json")
    assert again.returncode == 0, again.stderr
    assert {p.name: p.read_text() for p in machines.workspace.iterdir()} == head
    with machines.on("b") as tb:
        session = tb.session(session_id)
        assert session.record.host == "b"
        write_turn(tb, session, {"c.txt": "b goes on\n"})


def test_after_a_killed_handoff_a_change_of_the_users_own_is_still_refused(
    machines: Machines,
) -> None:
    """The workspace a killed handoff leaves is accepted only where each path is as it was or
    as the head has it: the user's own edit of a path in between is refused, and kept."""
    session_id = two_turns_on_a(machines)
    with machines.on("b"):
        pass
    killed = cli(machines, "b", "handoff", session_id, "--to", "b", fault="restore.file@1")
    assert killed.returncode == -9, killed.stderr
    [written] = [p for p in machines.workspace.iterdir() if p.name.endswith(".txt")]
    written.write_text("the user's own, on b\n")
    refused = cli(machines, "b", "handoff", session_id, "--to", "b", "--json")
    assert refused.returncode == 3, refused.stderr
    assert json.loads(refused.stdout)["conflicts"] == [written.name]
    assert written.read_text() == "the user's own, on b\n"


def test_after_a_handoff_the_old_machine_can_neither_revert_nor_undo(
    machines: Machines,
) -> None:
    """A revert moves the session's head, shared by every machine, and the files of the machine
    that runs it: after a handoff only the new machine, whose workspace the head describes, may
    revert the session or undo its revert."""
    session_id = two_turns_on_a(machines)
    with machines.on("a") as tb:
        tb.session(session_id).revert(1)  # still a's: a revert it may undo later
    with machines.on("b") as tb:
        tb.session(session_id).handoff("b")
        head = tb.session(session_id).record.head
    with machines.on("a") as tb:
        session = tb.session(session_id)
        with pytest.raises(turnback.SessionElsewhere, match="first to undo its revert here"):
            session.undo_revert()
        with pytest.raises(turnback.SessionElsewhere, match="first to revert it here"):
            session.revert(0)
        assert session.record.head == head
        assert (machines.workspace / "a.txt").read_text() == "one\n"
    with machines.on("b") as tb:
        tb.session(session_id).undo_revert()  # b's, now
        assert (machines.workspace / "a.txt").read_text() == "two\n"
