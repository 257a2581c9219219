"""A fleet: processes standing in for several machines (``TURNBACK_HOST``) share one store, on
both backends. Owners on another host are judged by their lease alone, so one machine can play
them all; the writes of a process whose turn was taken over are fenced off (docs/design.md,
invariants 5 and 8)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

import turnback
from turnback.model import UNFINISHED_REVERTS

WORKER = Path(__file__).with_name("worker.py")
LEASE = 2.0

#: what a host is told of turn 1, whose workspace checkpoints host "a" took
AWAY = "of turn 1 are on host a, not on this one"


@pytest.fixture(params=["sqlite", "postgresql"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """Where the fleet keeps its state: ``home`` (SQLite) or ``url`` (PostgreSQL)."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    return {"home": str(tmp_path / "home"), "url": url}


def open_as(fleet: dict[str, Any], host: str, monkeypatch: pytest.MonkeyPatch) -> turnback.Turnback:
    monkeypatch.setenv("TURNBACK_HOST", host)
    return turnback.open(fleet["home"], database_url=fleet["url"], checkpoints=False)


def start(
    scenario: str, args: dict[str, Any], host: str, lease: float = LEASE, fault: str = ""
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNBACK_")}
    env.update(TURNBACK_HOST=host, TURNBACK_LEASE_SECONDS=str(lease))
    if fault:
        env["TURNBACK_FAULT"] = fault
    return subprocess.Popen(
        [sys.executable, str(WORKER), scenario, json.dumps(args)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def said(stream: IO[str]) -> dict[str, Any]:
    line = stream.readline()
    assert line, "the worker exited early"
    record: dict[str, Any] = json.loads(line)
    return record


def stored(tb: turnback.Turnback, session_id: str) -> list[Any]:
    """What the store holds of a session: turns, their timelines, messages, activities."""
    session = tb.session(session_id)
    turns = session.turns()
    return [
        [(t.token, t.status, t.event_count, t.detail) for t in turns],
        [[(e.seq, e.kind, e.event) for e in session.run_events(t.token)] for t in turns],
        [(m.turn, m.kind, m.data) for m in session.messages()],
        [(a.code, a.turn) for a in session.activities()],
    ]


@pytest.fixture
def stopped() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes the test stopped: resumed and killed if it fails half way."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait()


def test_a_machine_stopped_past_its_lease_is_taken_over_and_fenced_off(
    fleet: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stopped: list[subprocess.Popen[str]],
) -> None:
    with open_as(fleet, "b", monkeypatch) as tb:
        session_id = tb.create_session(tmp_path).id
    writer = start("writer", {**fleet, "session": session_id, "events": 5}, host="a")
    stopped.append(writer)
    assert writer.stdout is not None and writer.stdin is not None
    ready = said(writer.stdout)
    token = ready["token"]

    with open_as(fleet, "b", monkeypatch) as tb:
        early = tb.recover()
        assert [t.token for t in early.live] == [token], "a live lease's turn must be left alone"
        assert not early.recovered

    writer.send_signal(signal.SIGSTOP)
    time.sleep(LEASE + 0.5)
    recoverer = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, turnback; turnback.open(sys.argv[1], "
            "database_url=sys.argv[2] or None, checkpoints=False).recover()",
            fleet["home"],
            fleet["url"] or "",
        ],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("TURNBACK_")},
            "TURNBACK_HOST": "b",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert recoverer.returncode == 0, recoverer.stderr
    with open_as(fleet, "b", monkeypatch) as tb:
        turn = tb.session(session_id).get_turn(token)
        assert turn.status is turnback.TurnStatus.INTERRUPTED
        assert turn.event_count == 5, "the acknowledged events were not all kept"
        before = stored(tb, session_id)

    writer.send_signal(signal.SIGCONT)
    writer.stdin.write("go\n")
    writer.stdin.flush()
    record, complete = said(writer.stdout), said(writer.stdout)
    assert (record["what"], record["error"]) == ("record", "OwnershipLost")
    assert (complete["what"], complete["error"]) == ("complete", "OwnershipLost")
    assert record["token"] == token and "taken over" in record["message"]
    assert writer.wait(timeout=60) == 0, writer.stderr.read() if writer.stderr else ""

    with open_as(fleet, "b", monkeypatch) as tb:
        assert stored(tb, session_id) == before, "a write of the fenced-off writer landed"
        codes = [a.code for a in tb.session(session_id).activities()]
        assert codes.count("turn.recovered") == 1, "the turn was recovered more than once"
        assert not tb.recover().recovered


def test_a_lost_lease_stops_the_turns_of_its_process(
    fleet: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}
    with open_as(fleet, "a", monkeypatch) as tb:
        session = tb.create_session(tmp_path)
        turn = session.turn("work")
        turn.record(chunk)
        turn.sync()
        first_owner = turn.turn.owner_id
        assert first_owner is not None
        with tb.store.atomic() as tx:
            tx.delete_owner(first_owner)  # as an operator cleaning up would
        tb.lease.renew()  # the heartbeat finds its lease gone
        with pytest.raises(turnback.OwnershipLost, match="owner record was removed"):
            turn.record(chunk)
        with pytest.raises(turnback.OwnershipLost):
            turn.complete()
        assert session.running() is not None, "the turn is left to recovery, not ended here"
        # a running turn counts its journal: the chunk acknowledged before the loss, not after
        assert session.get_turn(turn.token).event_count == 1
        later = tb.create_session(tmp_path).turn("later work")
        assert later.turn.owner_id not in (None, first_owner), "a lost lease's owner is retired"
        later.complete()


def test_eight_processes_on_three_hosts_keep_one_running_turn_per_session(
    fleet: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_as(fleet, "z", monkeypatch) as tb:
        shared = [tb.create_session(tmp_path / "shared").id for _ in range(2)]
    hosts = ["a", "a", "a", "b", "b", "b", "c", "c"]
    workers = [
        start(
            "hammer",
            {
                **fleet,
                "seed": i,
                "shared": shared,
                "workspace": str(tmp_path / f"own{i}"),
                "seconds": 6,
                "crash_at": 2 if i in (1, 5) else None,
            },
            host=host,
            lease=3.0,  # on SQLite a heartbeat waits its turn for the one write lock
        )
        for i, host in enumerate(hosts)
    ]
    acks: list[dict[str, Any]] = []
    for i, worker in enumerate(workers):
        out, err = worker.communicate(timeout=240)
        acks += [json.loads(line) for line in out.splitlines()]
        expected = -signal.SIGKILL if i in (1, 5) else 0
        assert worker.returncode == expected, err[-3000:]

    assert not [a for a in acks if a["what"] == "lost"], "a live owner's turn was taken over"
    time.sleep(3.5)  # the crashed workers' leases run out
    with open_as(fleet, "z", monkeypatch) as tb:
        tb.recover()
        crashed = {a["token"] for a in acks if a["what"] == "crash"}
        completed = {a["token"] for a in acks if a["what"] == "complete"}
        assert len(crashed) == 2 and len(completed) > 10
        assert {"recover", "revert"} <= {a["what"] for a in acks}, "the mix was not exercised"
        recovered: list[str] = []
        for record in tb.sessions():
            session = tb.session(record.id)
            turns = session.turns()
            assert not [t for t in turns if t.status is turnback.TurnStatus.RUNNING]
            for turn in turns:
                if turn.token in completed:
                    assert turn.status is turnback.TurnStatus.COMPLETED
                if turn.token in crashed:
                    assert turn.status in (
                        turnback.TurnStatus.INTERRUPTED,
                        turnback.TurnStatus.SET_ASIDE,
                    )
            chain = sorted((t for t in turns if t.in_conversation), key=lambda t: t.number)
            assert [t.number for t in chain] == list(range(1, len(chain) + 1)), (
                "two turns ran at once in one session"
            )
            assert [t.parent for t in chain] == [None, *(t.token for t in chain)][: len(chain)]
            assert record.head == (chain[-1].token if chain else None)
            recovered += [a.turn for a in session.activities() if a.code == "turn.recovered"]
        assert len(recovered) == len(set(recovered)), "a turn was recovered twice"
        assert crashed <= set(recovered) | {u.turn.token for u in tb.unrecovered()}


def test_checkpoints_are_answered_for_only_on_the_host_that_took_them(
    fleet: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.setenv("TURNBACK_HOST", "a")
    with turnback.open(fleet["home"], database_url=fleet["url"]) as tb:
        session = tb.create_session(workspace)
        with session.turn("write it") as turn:
            (workspace / "a.txt").write_text("from host a\n")
            turn.record({"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}})
        assert session.diff(1, patch=True).patch
    monkeypatch.setenv("TURNBACK_HOST", "b")
    with turnback.open(fleet["home"], database_url=fleet["url"]) as tb:
        session = tb.session(session.id)
        assert [f.path for f in session.diff(1).files] == ["a.txt"], "the stored rows still answer"
        with pytest.raises(turnback.CheckpointUnavailable, match=AWAY) as error:
            session.diff(1, patch=True)
        assert error.value.hosts == ("a",)
        with pytest.raises(turnback.CheckpointUnavailable, match=AWAY):
            session.range_diff(0, 1)
        with pytest.raises(turnback.CheckpointUnavailable, match=AWAY):
            session.revert_plan(0)
        assert session.changes_since_head() is None, "this host's workspace is not the one seen"
        with pytest.raises(turnback.CheckpointUnavailable, match=AWAY):
            session.revert(0)
        assert (workspace / "a.txt").read_text() == "from host a\n"
        assert session.reverts() == []
        session.revert(0, files=False)  # the conversation is the store's: any host may
        assert session.messages() == []


def stopped_at_fault(process: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait until ``process`` stopped itself (SIGSTOP) at the fault point it was armed with."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        stat = Path(f"/proc/{process.pid}/stat").read_text()
        if stat[stat.rindex(")") + 2] == "T":
            return
        time.sleep(0.02)
    raise AssertionError("the process never reached its fault point")


def two_turns(tb: turnback.Turnback, workspace: Path) -> str:
    session = tb.create_session(workspace)
    for prompt in ("one", "two"):
        session.turn(prompt).complete()
    return session.id


def test_a_revert_left_by_a_killed_machine_is_settled_by_another(
    fleet: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stopped: list[subprocess.Popen[str]],
) -> None:
    """Host a is SIGKILLed in the middle of a revert; host b leaves the revert alone while a's
    lease runs, then rolls it back, and the workspace is free again."""
    lease = 4.0
    with open_as(fleet, "b", monkeypatch) as tb:
        session_id = two_turns(tb, tmp_path)
        head = tb.session(session_id).record.head
    reverting = start(
        "reverter", {**fleet, "session": session_id, "to": 1}, "a", lease, "revert.started:stop"
    )
    stopped.append(reverting)
    stopped_at_fault(reverting)
    reverting.kill()  # SIGKILL, in the middle of the revert: its row is written, nothing more
    reverting.wait()
    with open_as(fleet, "b", monkeypatch) as tb:
        session = tb.session(session_id)
        (record,) = session.reverts()
        assert record.state == "started"
        early = tb.recover()
        assert not early.reverts, "a revert whose owner's lease runs was taken over"
        with pytest.raises(turnback.RevertInProgress, match="is moving the files"):
            session.turn("too early")
        time.sleep(lease + 0.5)
        late = tb.recover()
        assert [(r.id, r.state) for r in late.reverts] == [(record.id, "rolled_back")]
        assert not tb.recover().reverts, "a second recovery found more to do"
        assert tb.session(session_id).record.head == head, "a rolled back revert moved the head"
        tb.session(session_id).turn("three").complete()  # the workspace is free again
        codes = [a.code for a in tb.session(session_id).activities()]
        assert codes.count("checkpoint.revert.failed") == 1


def test_a_machine_stopped_in_a_revert_past_its_lease_is_fenced_off(
    fleet: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stopped: list[subprocess.Popen[str]],
) -> None:
    """Host a is stopped in the middle of a revert past its lease; host b takes the revert over
    and rolls it back; a, continued, finds it taken and writes nothing."""
    with open_as(fleet, "b", monkeypatch) as tb:
        session_id = two_turns(tb, tmp_path)
    reverting = start(
        "reverter", {**fleet, "session": session_id, "to": 1}, "a", LEASE, "revert.started:stop"
    )
    stopped.append(reverting)
    stopped_at_fault(reverting)
    time.sleep(LEASE + 0.5)
    with open_as(fleet, "b", monkeypatch) as tb:
        (settled,) = tb.recover().reverts
        assert settled.state == "rolled_back"
        before = stored(tb, session_id), tb.session(session_id).reverts()
    reverting.send_signal(signal.SIGCONT)
    out, err = reverting.communicate(timeout=60)
    assert reverting.returncode == 0, err
    said_ = json.loads(out.splitlines()[-1])
    assert (said_["what"], said_["error"]) == ("revert", "OwnershipLost")
    assert "settled by another process" in said_["message"]
    with open_as(fleet, "b", monkeypatch) as tb:
        after = stored(tb, session_id), tb.session(session_id).reverts()
    assert after == before, "a write of the fenced-off revert landed"


@pytest.mark.parametrize("swept", [False, True], ids=["owner", "owner-swept"])
def test_a_files_revert_left_by_a_killed_machine_is_settled_on_that_machine(
    fleet: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stopped: list[subprocess.Popen[str]],
    swept: bool,
) -> None:
    """The workspace and checkpoints of a files revert are on its own machine: another leaves it
    holding the workspace and says where it is recovered; its own machine rolls it back. So
    too when the revert's owner row is gone (swept by a version before reverts held leases):
    the machine is then the one its session's head turn ran on."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.setenv("TURNBACK_HOST", "a")
    with turnback.open(fleet["home"], database_url=fleet["url"]) as tb:
        session = tb.create_session(workspace)
        for text in ("one\n", "two\n"):
            with session.turn(f"write {text.strip()}"):
                (workspace / "file.txt").write_text(text)
    reverting = start(
        "reverter",
        {**fleet, "session": session.id, "to": 1, "files": True, "checkpoints": True},
        "a",
        LEASE,
        "revert.started:stop",
    )
    stopped.append(reverting)
    stopped_at_fault(reverting)
    reverting.kill()
    reverting.wait()
    time.sleep(LEASE + 0.5)
    if swept:
        with open_as(fleet, "c", monkeypatch) as tb, tb.store.atomic() as tx:
            [record] = tx.reverts(session.id, UNFINISHED_REVERTS)
            assert record.owner_id and tx.delete_owner(record.owner_id)
    with open_as(fleet, "b", monkeypatch) as tb:
        assert not tb.recover().reverts, "another machine settled a files revert"
        where = "until recovery rolls" if swept else "until recovery on host a rolls"
        with pytest.raises(turnback.RevertInProgress, match=where):
            tb.session(session.id).turn("from b")
    monkeypatch.setenv("TURNBACK_HOST", "a")
    with turnback.open(fleet["home"], database_url=fleet["url"]) as tb:
        (settled,) = tb.recover().reverts
        assert settled.state == "rolled_back"
    assert (workspace / "file.txt").read_text() == "two\n"
