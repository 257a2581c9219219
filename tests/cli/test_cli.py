"""The command line, run as a user runs it: the installed ``turnback`` script in a subprocess
(``--help`` for every command runs in-process through click's CliRunner)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import turnback
from turnback.cli import cli

AbandonTurn = Callable[..., turnback.Turn]


def _script() -> str:
    beside = Path(sys.executable).parent / "turnback"
    if beside.is_file():
        return str(beside)
    found = shutil.which("turnback")
    assert found, "the turnback console script is not installed"
    return found


TURNBACK = _script()


def run(home: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    command = [TURNBACK, *(["--home", str(home)] if home is not None else []), *args]
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


def ok(home: Path | None, *args: str) -> str:
    result = run(home, *args)
    assert result.returncode == 0, result
    assert result.stderr == "", result
    return result.stdout


def ok_json(home: Path | None, *args: str) -> Any:
    return json.loads(ok(home, *args, "--json"))


def chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


TURN_KEYS = {"token", "number", "parent", "status", "prompt", "started_at", "ended_at", "events"}


@pytest.fixture
def completed(session: turnback.Session) -> turnback.Turn:
    """Turn 1 of ``session``: a short conversation with a tool call."""
    with session.turn("explain the code") as turn:
        turn.record(chunk("It "))
        turn.record(chunk("works."))
        turn.record(
            {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read a.py", "status": "x"}
        )
        turn.record(
            {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}
        )
    return turn.turn


@pytest.fixture
def set_aside(
    tb: turnback.Turnback,
    home: Path,
    session: turnback.Session,
    completed: turnback.Turn,
    abandoned_turn: AbandonTurn,
) -> turnback.Turn:
    """A turn of ``session`` that recovery set aside (a journal row it cannot read)."""
    turn = abandoned_turn(session, [chunk("half"), chunk(" done")], prompt="crashed")
    conn = sqlite3.connect(home / "turnback.db")
    with conn:
        conn.execute(
            "UPDATE events SET payload = '{' "
            "WHERE id / 4294967296 = (SELECT id FROM turns WHERE token = ?) "
            "AND id - id / 4294967296 * 4294967296 = 2",
            (turn.token,),
        )
    conn.close()
    [aside] = tb.recover().set_aside
    return aside.turn


# -- sessions ----------------------------------------------------------------------------------


def test_sessions_when_there_are_none(home: Path) -> None:
    assert "No sessions yet" in ok(home, "sessions")
    assert ok_json(home, "sessions") == []


def test_sessions(home: Path, session: turnback.Session, completed: turnback.Turn) -> None:
    text = ok(home, "sessions")
    assert session.id[:12] in text
    assert "test" in text  # the title
    assert str(session.workspace) in text
    [listed] = ok_json(home, "sessions")
    assert listed["id"] == session.id
    assert listed["turns"] == 1
    assert listed["head"] == completed.token
    assert listed["workspace"] == str(session.workspace)
    assert listed["pending_requests"] == []


def test_home_from_the_environment(home: Path, session: turnback.Session) -> None:
    env = {**os.environ, "TURNBACK_HOME": str(home)}
    result = subprocess.run(
        [TURNBACK, "sessions", "--json"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result
    assert [s["id"] for s in json.loads(result.stdout)] == [session.id]


# -- log and show ------------------------------------------------------------------------------


def test_log(home: Path, session: turnback.Session, completed: turnback.Turn) -> None:
    text = ok(home, "log", session.id[:6])
    assert session.id in text
    assert completed.token[:12] in text
    assert "completed" in text
    assert "explain the code" in text
    data = ok_json(home, "log", session.id[:6])
    assert data["session"]["id"] == session.id
    [turn] = data["turns"]
    assert set(turn) >= TURN_KEYS
    assert (turn["token"], turn["number"], turn["status"], turn["events"]) == (
        completed.token,
        1,
        "completed",
        4,
    )


def test_log_names_set_aside_turns(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    text = ok(home, "log", session.id)
    assert "  set aside  " in text, text  # the status in words
    assert "unrecovered" in text
    statuses = [t["status"] for t in ok_json(home, "log", session.id)["turns"]]
    assert statuses == ["completed", "set_aside"]


def test_show_events_of_a_set_aside_turn(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    text = ok(home, "show", session.id, set_aside.token[:8], "--events")
    assert "its events are still in the journal" in text
    first, second = text.splitlines()[-2:]
    assert first.startswith("    1 agent_message_chunk") and '"half"' in first
    assert second.startswith("    2 agent_message_chunk") and "_turnback/unreadable" in second
    events = ok_json(home, "show", session.id, set_aside.token[:8])["events"]
    assert [e["seq"] for e in events] == [1, 2]
    assert events[0]["event"] == chunk("half")
    assert events[1]["event"]["_turnback/unreadable"] == "{"


def test_doctor_names_an_unreadable_row_of_a_set_aside_turn(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    doctor = run(home, "doctor")
    assert doctor.returncode == 1
    assert f"session {session.id[:12]} turn 2 (set_aside): event 2" in doctor.stdout
    ok(home, "unrecovered", session.id, "apply", set_aside.token[:8])
    doctor = run(home, "doctor")
    assert doctor.returncode == 1
    assert f"session {session.id[:12]} turn 2: message 2" in doctor.stdout


def test_a_set_aside_turn_is_reached_by_its_number(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    assert set_aside.token in ok(home, "show", session.id, "2")
    assert ok_json(home, "show", session.id, "2")["turn"]["token"] == set_aside.token
    missing = run(home, "show", session.id, "3")
    assert missing.returncode == 1 and "has no turn 3 (it has 2)" in missing.stderr
    assert f"applied turn {set_aside.token[:12]}" in ok(
        home, "unrecovered", session.id, "apply", "2"
    )


def test_an_unreadable_journal_row_shows_as_an_unreadable_message(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    def shown_as_unreadable() -> None:
        text = ok(home, "show", session.id, set_aside.token[:8])
        assert "[agent] half\n[unreadable message]\n" in text and "[other]" not in text
        messages = ok_json(home, "show", session.id, set_aside.token[:8])["messages"]
        assert [m["kind"] for m in messages][:3] == ["user", "agent", "unreadable"]
        assert messages[2]["data"]["sessionUpdate"] == "_turnback/unreadable"

    shown_as_unreadable()
    ok(home, "unrecovered", session.id, "apply", set_aside.token[:8])
    shown_as_unreadable()


def test_log_of_a_session_without_turns(home: Path, session: turnback.Session) -> None:
    assert "No turns yet" in ok(home, "log", session.id)
    assert ok_json(home, "log", session.id)["turns"] == []


def test_show(home: Path, session: turnback.Session, completed: turnback.Turn) -> None:
    text = ok(home, "show", session.id, "1")
    assert completed.token in text
    assert "[user] explain the code" in text
    assert "[agent] It works." in text
    assert "Read a.py (completed)" in text
    assert "tool_call_update" not in text
    with_events = ok(home, "show", session.id, completed.token[:8], "--events")
    assert "tool_call_update" in with_events
    data = ok_json(home, "show", session.id, "1")
    assert data["session"] == session.id
    assert data["turn"]["token"] == completed.token
    assert [(m["kind"], m["text"]) for m in data["messages"]][:2] == [
        ("user", "explain the code"),
        ("agent", "It works."),
    ]
    assert [e["seq"] for e in data["events"]] == [1, 2, 3, 4]
    assert data["events"][0]["event"] == chunk("It ")


def test_a_lone_surrogate_is_printed_as_its_escape(home: Path, session: turnback.Session) -> None:
    """JavaScript and Python agents can send a string with an unpaired UTF-16 surrogate; the
    proxy stores it as it came. Printing it must not fail on a UTF-8 standard output: --json
    writes it as the JSON escape it was sent as (the same value), people read the escape."""
    with session.turn("fix the \ud83d emoji") as turn:
        turn.record(chunk("half a pair: \ud800 here"))

    for args in (("log", session.id), ("show", session.id, "1", "--events")):
        text = ok(home, *args)
        assert "\\ud83d" in text
    assert "half a pair: \\ud800 here" in ok(home, "show", session.id, "1")
    log = ok_json(home, "log", session.id)
    shown = ok_json(home, "show", session.id, "1", "--events")
    assert log["turns"][0]["prompt"] == "fix the \ud83d emoji"  # read back as the same value
    assert shown["messages"][1]["text"] == "half a pair: \ud800 here"
    assert shown["events"][0]["event"] == chunk("half a pair: \ud800 here")


# -- recover, unrecovered, activities ----------------------------------------------------------


def test_recover_with_nothing_to_do(home: Path, session: turnback.Session) -> None:
    assert "Nothing to recover" in ok(home, "recover")
    assert ok_json(home, "recover") == {
        "recovered": [],
        "set_aside": [],
        "live": [],
        "reverts": [],
    }


def test_recover_applies_a_dead_owners_turn(
    home: Path,
    session: turnback.Session,
    completed: turnback.Turn,
    abandoned_turn: AbandonTurn,
) -> None:
    dead = abandoned_turn(session, [chunk("partial")])
    text = ok(home, "recover")
    assert f"recovered turn 2 of session {session.id[:12]} as interrupted (1 event)" in text
    assert "Nothing to recover" in ok(home, "recover")
    assert [t["token"] for t in ok_json(home, "log", session.id)["turns"]] == [
        completed.token,
        dead.token,
    ]


def test_recover_json(
    home: Path, session: turnback.Session, completed: turnback.Turn, abandoned_turn: AbandonTurn
) -> None:
    dead = abandoned_turn(session, [chunk("partial")])
    data = ok_json(home, "recover")
    [recovered] = data["recovered"]
    assert set(recovered) >= TURN_KEYS
    assert (recovered["token"], recovered["session"], recovered["status"]) == (
        dead.token,
        session.id,
        "interrupted",
    )
    assert (data["set_aside"], data["live"]) == ([], [])


def test_recover_reports_set_aside_and_live_turns(
    home: Path, session: turnback.Session, set_aside: turnback.Turn, tb: turnback.Turnback
) -> None:
    other = tb.create_session(session.workspace)
    with other.turn("still going") as running:  # owned by this (live) test process
        text = ok(home, "recover")
        assert f"set aside: turn {set_aside.token[:12]}" in text
        assert "left alone: turn 1" in text
        assert "turnback unrecovered" in text
        data = ok_json(home, "recover")
        assert [(t["token"], t["reason"]) for t in data["set_aside"]] == [
            (set_aside.token, set_aside.detail)
        ]
        assert [t["token"] for t in data["live"]] == [running.token]
        assert data["recovered"] == []
        assert other.running() is not None


def test_unrecovered_lists_and_applies(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    text = ok(home, "unrecovered", session.id)
    assert set_aside.token[:12] in text
    assert "reason: journal entry 2" in text
    [listed] = ok_json(home, "unrecovered", session.id)
    assert (listed["token"], listed["session"], listed["status"]) == (
        set_aside.token,
        session.id,
        "set_aside",
    )
    assert listed["reason"].startswith("journal entry 2")

    applied = ok(home, "unrecovered", session.id, "apply", set_aside.token[:10])
    assert f"applied turn {set_aside.token[:12]} as turn 2" in applied
    assert "No set-aside turns" in ok(home, "unrecovered", session.id)
    assert ok_json(home, "unrecovered", session.id) == []
    assert [t.status for t in session.turns()] == ["completed", "interrupted"]


def test_unrecovered_apply_json(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    data = ok_json(home, "unrecovered", session.id, "apply", set_aside.token)
    assert data["applied"]["token"] == set_aside.token
    assert data["applied"]["status"] == "interrupted"
    assert data["applied"]["number"] == 2


def test_unrecovered_discard(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    text = ok(home, "unrecovered", session.id, "discard", set_aside.token[:10])
    assert "discarded" in text and "2 events" in text
    assert session.unrecovered() == []
    assert [t.token for t in session.turns()] == [session.turns()[0].token]


def test_unrecovered_discard_json(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    data = ok_json(home, "unrecovered", session.id, "discard", set_aside.token)
    assert data == {"discarded": set_aside.token, "events": 2}


def test_activities(home: Path, session: turnback.Session, set_aside: turnback.Turn) -> None:
    text = ok(home, "activities", session.id)
    assert "warning" in text and "turn.set_aside" in text
    [activity] = ok_json(home, "activities", session.id)
    assert (activity["level"], activity["code"], activity["turn"]) == (
        "warning",
        "turn.set_aside",
        set_aside.token,
    )
    assert set(activity) == {"level", "code", "message", "turn", "data", "at"}


def test_activities_when_there_are_none(home: Path, session: turnback.Session) -> None:
    assert "No activities" in ok(home, "activities", session.id)
    assert ok_json(home, "activities", session.id) == []


# -- sweep -------------------------------------------------------------------------------------


def test_sweep(
    home: Path, tb: turnback.Turnback, session: turnback.Session, completed: turnback.Turn
) -> None:
    with tb.store.atomic() as tx:  # a leftover step checkpoint of an ended turn
        tx.insert_step_checkpoint(
            turnback.model.StepCheckpoint(completed.token, 1, "c", 1, None, None, 1.0)
        )
    assert ok(home, "sweep").startswith("removed 1 step checkpoints and 0 dead owners")
    assert ok_json(home, "sweep") == {"step_checkpoints": 0, "owners": 0}


# -- demo --------------------------------------------------------------------------------------


def test_demo(tmp_path: Path) -> None:
    """The demo runs to the end, in under 30 seconds, and says what happened at each step."""
    started = time.monotonic()
    text = ok(None, "demo", "--workspace", str(tmp_path / "ws"))
    assert time.monotonic() - started < 30
    assert "Turn 2 completed, although the agent process was killed with SIGKILL" in text
    assert "applied turn 3 as interrupted" in text and "Recovery" in text
    assert re.search(
        r"Turn 3 went on from its step checkpoint and completed, in its own place", text
    )
    assert "your hand edit is still there (True)" in text
    assert "Undid the revert" in text and "(test_greet.py back: True)" in text
    assert (tmp_path / "ws" / "greet.py").is_file()
    assert "Removed the demo's home; its workspace" in text  # not "and workspace": it stays


def test_demo_refuses_a_workspace_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "greet.py").write_text("the user's own\n")
    refused = run(None, "demo", "--workspace", str(tmp_path))
    assert refused.returncode == 2 and "not empty" in refused.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["greet.py"]
    assert (tmp_path / "greet.py").read_text() == "the user's own\n"


def test_demo_json() -> None:
    """Every command takes --json (README, cli.py): the demo too."""
    json.loads(ok(None, "demo", "--json"))


def test_the_commands_the_demo_suggests_work() -> None:
    """The demo tells a newcomer which commands show what it did; they must work. Without --keep
    it names no home it is about to remove."""
    assert "--home" not in ok(None, "demo")
    text = ok(None, "demo", "--keep")
    suggested = [command.split()[1:] for command in re.findall(r"`(turnback [^`]+)`", text)]
    assert suggested
    homes = {Path(args[args.index("--home") + 1]) for args in suggested if "--home" in args}
    try:
        for args in suggested:
            result = run(None, *args)
            assert result.returncode == 0, (args, result)
    finally:
        for home in homes:
            shutil.rmtree(home, ignore_errors=True)


def test_demo_keep_keeps_a_home_that_works(tmp_path: Path) -> None:
    text = ok(None, "demo", "--keep", "--workspace", str(tmp_path / "ws"))
    home = Path(re.findall(r"Kept the demo's home (\S+) ", text)[0])
    try:
        [listed] = ok_json(home, "sessions")
        assert listed["turns"] == 3
        statuses = [t["status"] for t in ok_json(home, "log", listed["id"])["turns"]]
        assert statuses == ["completed", "completed", "completed"]  # turn 3 was continued
    finally:
        shutil.rmtree(home)


# -- exit codes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["log", "abcdef0123"],
        ["log", "not-an-id"],
        ["show", "abcdef0123", "1"],
        ["activities", "abcdef0123"],
        ["unrecovered", "abcdef0123"],
        ["log", "abcdef0123", "--json"],
    ],
)
def test_errors_exit_1(home: Path, session: turnback.Session, args: list[str]) -> None:
    args = [a.replace("abcdef0123", "f" * 32 if session.id[0] != "f" else "e" * 32) for a in args]
    result = run(home, *args)
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr


def test_a_missing_turn_exits_1(
    home: Path, session: turnback.Session, completed: turnback.Turn
) -> None:
    result = run(home, "show", session.id, "7")
    assert result.returncode == 1
    assert "no turn 7" in result.stderr


def test_a_bad_database_exits_1(home: Path) -> None:
    home.mkdir()
    (home / "turnback.db").write_bytes(b"\x00garbage" * 1000)
    result = run(home, "sessions")
    assert result.returncode == 1
    assert "error: " in result.stderr and "turnback.db" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["sessions", "--bogus"],
        ["--bogus"],
        ["no-such-command"],
        ["log"],
        ["show", "abc"],
        ["unrecovered", "abc", "frobnicate", "def"],
    ],
)
def test_usage_errors_exit_2(home: Path, args: list[str]) -> None:
    result = run(home, *args)
    assert result.returncode == 2, result
    assert result.stdout == ""
    assert "Usage" in result.stderr or "Error" in result.stderr


def test_usage_error_for_apply_without_a_turn(home: Path, session: turnback.Session) -> None:
    result = run(home, "unrecovered", session.id, "apply")
    assert result.returncode == 2, result
    assert "TURN" in result.stderr


def test_applying_a_turn_that_is_not_set_aside_exits_3(
    home: Path, session: turnback.Session, completed: turnback.Turn
) -> None:
    for action in ("apply", "discard"):
        result = run(home, "unrecovered", session.id, action, completed.token[:10])
        assert result.returncode == 3, result
        assert "not set aside" in result.stderr
        assert result.stdout == ""
    assert session.turns()[0].status == "completed"


def test_applying_while_a_turn_runs_exits_3(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    with session.turn("busy") as running:
        result = run(home, "unrecovered", session.id, "apply", set_aside.token)
        assert result.returncode == 3, result
        assert running.token in result.stderr
    assert [u.turn.token for u in session.unrecovered()] == [set_aside.token]


# -- help --------------------------------------------------------------------------------------


def test_top_level_help_lists_every_command(home: Path) -> None:
    text = ok(None, "--help")
    for name in cli.commands:
        assert name in text
    assert ok(None, "-h") == text


def test_version() -> None:
    assert turnback.__version__ in ok(None, "--version")


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_command_has_help(name: str) -> None:
    command = cli.commands[name]
    assert command.help and command.help.strip(), name
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert f"Usage: cli {name}" in result.output or f"Usage: turnback {name}" in result.output
    assert " ".join(command.help.split()[:8]) in " ".join(result.output.split())
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, (name, param.name)
            assert param.opts[0] in result.output


def test_help_runs_without_opening_a_home(tmp_path: Path) -> None:
    home = tmp_path / "never"
    for name in cli.commands:
        assert run(home, name, "--help").returncode == 0
    assert not home.exists()


def test_python_dash_m_turnback(home: Path, session: turnback.Session) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "turnback", "--home", str(home), "sessions", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result
    assert [s["id"] for s in json.loads(result.stdout)] == [session.id]


# -- a home with nothing in it -----------------------------------------------------------------


def test_a_mistyped_home_is_reported_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-home"
    assert ok(missing, "sessions").startswith("No sessions yet")
    assert ok_json(missing, "sessions") == []
    result = run(missing, "log", "abc")
    assert result.returncode == 1
    assert "no turnback database" in result.stderr and str(missing) in result.stderr
    assert run(missing, "recover").returncode == 1
    assert not missing.exists(), "a read-only command created the home"


def test_the_engine_names_no_command_and_the_cli_words_each_remedy(
    home: Path,
    tb: turnback.Turnback,
    session: turnback.Session,
    completed: turnback.Turn,
    set_aside: turnback.Turn,
) -> None:
    """The engine says what happened, with the remedy as a field; the CLI names commands."""
    with pytest.raises(turnback.SessionNotFound) as missing:
        tb.session("feedface")
    with pytest.raises(turnback.TurnNotFound) as no_turn:
        session.get_turn(9)
    assert (missing.value.remedy, no_turn.value.remedy) == ("sessions", "turns")
    assert no_turn.value.session == session.id
    for error in (missing.value, no_turn.value):
        assert "`" not in str(error) and "turnback " not in str(error)
    [notice] = [a for a in session.activities() if a.code == "turn.set_aside"]
    assert "`" not in notice.message and notice.data["remedy"] == "decide"

    assert "`turnback sessions` lists the sessions" in run(home, "log", "feedface").stderr
    short = session.id[:12]
    assert f"`turnback log {short}` lists its turns" in run(home, "diff", session.id, "9").stderr
    shown = ok(home, "activities", session.id)
    assert f"it is kept until it is applied or discarded; `turnback unrecovered {short}`" in shown
    doctor = run(home, "doctor").stdout
    assert f"apply or discard each; `turnback unrecovered {short}` lists them" in doctor
