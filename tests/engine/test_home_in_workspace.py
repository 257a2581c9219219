"""turnback never snapshots its own home, wherever the home sits in the workspace (bug: with the
workspace as the home the shadow repository doubled every turn and the diffs blamed turnback's
own files on the agent)."""

from __future__ import annotations

from pathlib import Path

import pytest

import turnback


@pytest.mark.parametrize("where", ["the workspace itself", "inside it", "deep inside it"])
def test_the_home_is_never_captured(tmp_path: Path, where: str) -> None:
    workspace = tmp_path / "workspace"
    home = {
        "the workspace itself": workspace,
        "inside it": workspace / ".turnback",
        "deep inside it": workspace / "a" / "b" / "home",
    }[where]
    workspace.mkdir()
    with turnback.open(home) as tb:
        session = tb.create_session(workspace)
        for number in range(3):
            with session.turn(f"turn {number}"):
                (workspace / f"file{number}.txt").write_text(f"{number}\n")
        for number in (2, 3):
            diff = session.diff(number)
            assert [f.path for f in diff.files] == [f"file{number - 1}.txt"]
            assert diff.outside == ()
        assert session.changes_since_head() == []
        checks = {c.name: c for c in tb.doctor()}
    warning = checks["home"]
    assert "inside the workspace" in warning.detail and workspace.as_posix() in warning.detail
    assert warning.ok  # a warning: captures leave the home out
