"""Where the README and the program disagreed, they now agree (each case as the README states
it)."""

from __future__ import annotations

from pathlib import Path

import turnback

from .test_cli import completed, ok, ok_json, run, set_aside
from .test_cli_workspace import session_id, workspace

__all__ = ["completed", "session_id", "set_aside", "workspace"]  # fixtures


def test_discard_names_the_whole_token(
    home: Path, session: turnback.Session, set_aside: turnback.Turn
) -> None:
    data = ok_json(home, "unrecovered", session.id, "discard", set_aside.token[:8])
    assert data["discarded"] == set_aside.token


def test_diff_stat_json_carries_no_patch(home: Path, session_id: str) -> None:
    assert ok_json(home, "diff", session_id, "2", "--stat")["patch"] is None
    assert "+TWO" in ok_json(home, "diff", session_id, "2")["patch"]


def test_an_unavailable_diff_exits_1_with_or_without_stat(home: Path, tmp_path: Path) -> None:
    with turnback.open(home, checkpoints=False) as tb:  # no checkpoint: the diff is unavailable
        session = tb.create_session(tmp_path)
        with session.turn("no checkpoints"):
            pass
    for args in ([], ["--stat"]):
        result = run(home, "diff", session.id, "1", *args)
        assert result.returncode == 1 and "unavailable" in result.stderr, result
    assert ok_json(home, "diff", session.id, "1")["available"] is False


def test_home_works_after_the_command(home: Path, session_id: str) -> None:
    assert [s["id"] for s in ok_json(None, "sessions", "--home", str(home))] == [session_id]


def test_revert_takes_a_token_prefix_and_an_ambiguous_one_lists_the_matches(
    home: Path, workspace: Path, session_id: str
) -> None:
    first = ok_json(home, "log", session_id)["turns"][0]["token"]
    # a TURN of digits only is a number (the README), which a random token may start with
    prefix = next(first[:n] for n in range(10, len(first) + 1) if not first[:n].isdigit())
    data = ok_json(home, "revert", session_id, prefix, "--yes")
    assert data["state"] == "committed" and data["to_turn"] == first


def test_an_ambiguous_turn_prefix_lists_the_matches(home: Path, tmp_path: Path) -> None:
    from turnback.engine.turns import RunningTurn, begin

    with turnback.open(home, checkpoints=False) as tb:
        session = tb.create_session(tmp_path)
        for token in ("abc1" + "0" * 28, "abc2" + "0" * 28):
            RunningTurn(
                tb.store, tb.journal, begin(tb.store, session.id, "x", lease=tb.lease, token=token)
            ).complete()
    result = run(home, "show", session.id, "abc")
    assert result.returncode == 1 and "matches 2 turns" in result.stderr
    assert "abc100000000 (turn 1" in result.stderr and "abc200000000 (turn 2" in result.stderr


def test_turnback_without_a_command_prints_its_help(home: Path) -> None:
    result = run(home)
    assert result.returncode == 0 and "Commands:" in result.stdout
    assert "sessions" in ok(home, "--help")
