"""The revert plan: what a revert would do, computed while writing nothing, and equal to what
the revert then does."""

from __future__ import annotations

from pathlib import Path

import pytest

import turnback
from turnback import ChangeKind, RevertConflict
from turnback.errors import NothingToRevert

from .test_revert import files, run_turns, workspace

__all__ = ["workspace"]  # the fixture


def _state(tb: turnback.Turnback, session: turnback.Session) -> tuple[object, ...]:
    refs = sorted(p.name for p in (tb.home / "shadow").rglob("refs/turnback/**/*") if p.is_file())
    return (session.turns(), session.reverts(), len(session.activities()), refs)


def test_the_plan_writes_nothing_and_foretells_the_revert(
    tb: turnback.Turnback, workspace: Path
) -> None:
    session = tb.create_session(workspace)
    run_turns(session, workspace)
    (workspace / "debug.log").write_text("ignored\n")
    (workspace / "c.py").write_text("c\nby hand\n")  # a hand edit on the agent's file
    before, state = files(workspace), _state(tb, session)

    plan = session.revert_plan(1)

    assert files(workspace) == before and _state(tb, session) == state
    assert [(c.path, c.kind, c.additions, c.deletions) for c in plan.restore] == [
        ("a.py", ChangeKind.MODIFIED, 1, 1)
    ]
    assert [c.path for c in plan.delete] == ["c.py"]
    # between.txt was made before turn two began: kept; the log file is ignored
    assert plan.kept_because == {"between.txt": "pre-existing", "debug.log": "ignored"}
    assert [c.path for c in plan.keep] == ["between.txt", "debug.log"]
    assert [c.path for c in plan.conflicts] == ["c.py"]  # the plain revert overwrites the edit

    session.revert(1)
    changed = {c.path for c in (*plan.restore, *plan.delete)}
    assert {
        p for p in set(before) | set(files(workspace)) if before.get(p) != files(workspace).get(p)
    } == changed


def test_keeping_user_edits_plans_what_it_keeps_and_where_it_clashes(
    tb: turnback.Turnback, workspace: Path
) -> None:
    session = tb.create_session(workspace)
    run_turns(session, workspace)
    (workspace / "notes.txt").write_text("mine, edited\n")  # a hand edit no turn touched
    kept = session.revert_plan(1, keep_user_edits=True)
    assert [c.path for c in kept.restore] == ["a.py"] and [c.path for c in kept.delete] == ["c.py"]
    assert kept.kept_because.get("notes.txt") == "user edit" and kept.conflicts == ()

    (workspace / "c.py").write_text("c\nby hand\n")  # clashes with the turn that created c.py
    clash = session.revert_plan(1, keep_user_edits=True)
    assert [c.path for c in clash.conflicts] == ["c.py"]
    with pytest.raises(RevertConflict) as raised:
        session.revert(1, keep_user_edits=True)
    assert raised.value.paths == ("c.py",)


def test_the_plan_refuses_what_the_revert_refuses(tb: turnback.Turnback, workspace: Path) -> None:
    session = tb.create_session(workspace)
    run_turns(session, workspace)
    with pytest.raises(NothingToRevert):
        session.revert_plan(3)
    assert session.revert_plan(1, files=False) == turnback.RevertPlan()


def test_a_plan_leaves_no_checkpoint_behind(tb: turnback.Turnback, workspace: Path) -> None:
    session = tb.create_session(workspace)
    run_turns(session, workspace)
    shadow = next((tb.home / "shadow").glob("*.git"))
    before = sorted(str(p) for p in shadow.rglob("refs/turnback/**/*"))
    session.revert_plan(0)
    assert sorted(str(p) for p in shadow.rglob("refs/turnback/**/*")) == before
