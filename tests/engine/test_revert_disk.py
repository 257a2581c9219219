"""A revert on a full disk: the files it cannot write are named, and it is rolled back, never
reported as committed with a file left unrestored."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import turnback
from turnback.errors import RestoreIncomplete

from ..cli.test_cli import run
from ..conftest import fill
from .test_revert import files


def test_a_revert_that_cannot_write_a_file_is_rolled_back_and_names_it(
    tb: turnback.Turnback, home: Path, small_disk: Callable[[int], Path]
) -> None:
    workspace = small_disk(2**20)
    (workspace / ".gitignore").write_text("filler.bin\n")
    session = tb.create_session(workspace)
    with session.turn("make a big file"):
        (workspace / "big.txt").write_text("x" * 300_000)
        (workspace / "a.txt").write_text("one\n")
    with session.turn("drop it"):
        (workspace / "big.txt").unlink()
        (workspace / "a.txt").write_text("two\n")
        (workspace / "c.txt").write_text("c\n")
    fill(workspace, leave=64 * 1024)
    before = files(workspace)

    try:
        session.revert(1)
    except RestoreIncomplete as error:
        assert error.paths == ("big.txt",) and "rolled back" in str(error)
    else:
        raise AssertionError("the revert reported success with big.txt unwritten")
    assert files(workspace) == before
    assert [r.state for r in session.reverts()] == [turnback.RevertState.ROLLED_BACK]
    assert [t.number for t in session.turns() if t.in_conversation] == [1, 2]
    failed = [a for a in session.activities() if a.code == "checkpoint.revert.failed"]
    assert failed and failed[-1].data["paths"] == ["big.txt"]

    result = run(home, "revert", session.id, "1", "--yes", "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["paths"] == ["big.txt"]
    assert files(workspace) == before

    (workspace / "filler.bin").unlink()  # space again: the revert goes through
    session.revert(1)
    assert (workspace / "big.txt").read_text() == "x" * 300_000
