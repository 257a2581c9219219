"""Two sessions in one workspace whose turns run at the same time, as two editor sessions on one
folder do: through one handle from two threads, and through two handles of one process. Every
turn's checkpoints are taken (none fails on a lock another capture holds) and every turn's diff
shows what it wrote."""

from __future__ import annotations

from pathlib import Path

import turnback
from tests.conftest import at_once
from turnback.model import ChangeKind

TURNS = 12


def turns(session: turnback.Session, workspace: Path, name: str) -> list[str]:
    """Run turns that each rewrite ``<name>.txt``; returns what went wrong."""
    wrong: list[str] = []
    for number in range(1, TURNS + 1):
        with session.turn(f"{name} {number}"):
            (workspace / f"{name}.txt").write_text(f"{name} {number}\n")
        diff = session.diff(number)
        mine = [change for change in diff.files if change.path == f"{name}.txt"]
        kind = ChangeKind.ADDED if number == 1 else ChangeKind.MODIFIED
        if not diff.available or [change.kind for change in mine] != [kind]:
            wrong.append(f"turn {number} of {name}: {diff.available}, {diff.files}")
    failed = [a.message for a in session.activities() if a.code.startswith("checkpoint.")]
    return wrong + failed


def test_two_sessions_of_one_handle_in_one_workspace_from_two_threads(
    tb: turnback.Turnback, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    one = tb.create_session(workspace=workspace, title="one")
    two = tb.create_session(workspace=workspace, title="two")
    assert at_once(lambda: turns(one, workspace, "one"), lambda: turns(two, workspace, "two")) == []


def test_two_handles_of_one_process_in_one_workspace(home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with turnback.open(home=home) as first, turnback.open(home=home) as second:
        one = first.create_session(workspace=workspace, title="one")
        two = second.create_session(workspace=workspace, title="two")
        found = at_once(lambda: turns(one, workspace, "one"), lambda: turns(two, workspace, "two"))
    assert found == []
