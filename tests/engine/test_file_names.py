"""A file whose name is not UTF-8 (a byte such as 0xff, which Linux allows in a name): the turn
that made it ends, its diff and log name it as ``\\xNN``, and a revert and its undo move the file
with its real name, on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
from pathlib import Path

import turnback
from turnback import ChangeKind, TurnStatus

NAME = b"bad\xff.txt"
SHOWN = "bad\\xff.txt"


def named(workspace: Path) -> Path:
    return workspace / os.fsdecode(NAME)


def exists(workspace: Path) -> bool:
    return NAME in os.listdir(os.fsencode(workspace))


def a_turn_makes_it(tb: turnback.Turnback, workspace: Path) -> turnback.Session:
    workspace.mkdir()
    (workspace / "plain.txt").write_text("plain\n")
    session = tb.create_session(workspace)
    with session.turn("make a file with a strange name"):
        named(workspace).write_bytes(b"strange\n")
        (workspace / "plain.txt").write_text("plain, edited\n")
    return session


def check(session: turnback.Session, workspace: Path) -> None:
    [turn] = session.turns()
    assert turn.status is TurnStatus.COMPLETED
    changes = {c.path: c.kind for c in session.diff(1).files}
    assert changes == {SHOWN: ChangeKind.ADDED, "plain.txt": ChangeKind.MODIFIED}
    patch = session.diff(1, patch=True).patch
    assert patch is not None and "+strange" in patch

    session.revert(0)
    assert not exists(workspace)
    assert (workspace / "plain.txt").read_text() == "plain\n"

    session.undo_revert()
    assert exists(workspace)
    assert named(workspace).read_bytes() == b"strange\n"
    assert (workspace / "plain.txt").read_text() == "plain, edited\n"


def test_a_name_that_is_not_utf8_on_sqlite(tb: turnback.Turnback, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    check(a_turn_makes_it(tb, workspace), workspace)


def test_a_name_that_is_not_utf8_on_postgres(postgres_url: str, home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    with turnback.open(home, database_url=postgres_url) as tb:
        check(a_turn_makes_it(tb, workspace), workspace)
