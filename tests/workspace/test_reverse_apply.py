"""keep_user_edits reverts: undo only the agent's own changes, or write nothing at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnback.errors import RevertConflict
from turnback.workspace import Snapshots

from .conftest import Capture, tree_digest, write

LINES = "".join(f"line {i}\n" for i in range(1, 31))


def test_hand_edits_after_the_turn_survive(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    ws = any_workspace
    write(ws, "shared.txt", LINES)
    write(ws, "old.txt", "the agent deletes this\n")
    write(ws, "user.txt", "the user's file\n")
    begin = capture("1-begin")
    write(ws, "shared.txt", LINES.replace("line 2\n", "line 2 by the agent\n"))
    (ws / "old.txt").unlink()
    write(ws, "new.py", "made by the agent\n")
    (ws / "README.md").chmod(0o755)
    end = capture("1-end")
    # The user edits another region of the same file, and another file, after the turn.
    write(ws, "shared.txt", (ws / "shared.txt").read_text().replace("line 29\n", "line 29 (me)\n"))
    write(ws, "user.txt", "the user's file, edited\n")
    now = capture("now")

    done = snapshots.reverse_apply(ws, turns=[(begin, end)], current=now)
    assert done == ["README.md", "new.py", "old.txt", "shared.txt"]
    assert (ws / "shared.txt").read_text() == LINES.replace("line 29\n", "line 29 (me)\n")
    assert (ws / "old.txt").read_text() == "the agent deletes this\n"
    assert not (ws / "new.py").exists()
    assert not (ws / "README.md").stat().st_mode & 0o111
    assert (ws / "user.txt").read_text() == "the user's file, edited\n"


def test_hand_edits_between_turns_are_not_undone(
    snapshots: Snapshots, any_workspace: Path, capture: Capture
) -> None:
    ws = any_workspace
    write(ws, "a.txt", "a\n")
    write(ws, "pulled.txt", "v1\n")
    begin_1 = capture("1-begin")
    write(ws, "a.txt", "a by turn 1\n")
    end_1 = capture("1-end")
    write(ws, "pulled.txt", "v2 from a git pull between turns\n")
    begin_2 = capture("2-begin")
    write(ws, "a.txt", "a by turn 2\n")
    write(ws, "b.txt", "b by turn 2\n")
    end_2 = capture("2-end")

    snapshots.reverse_apply(ws, turns=[(begin_1, end_1), (begin_2, end_2)], current=end_2)
    assert (ws / "a.txt").read_text() == "a\n"
    assert not (ws / "b.txt").exists()
    assert (ws / "pulled.txt").read_text() == "v2 from a git pull between turns\n"


@pytest.mark.parametrize("case", ["same-line", "edited-new-file", "binary", "deleted-by-user"])
def test_conflicts_write_nothing(
    snapshots: Snapshots, any_workspace: Path, capture: Capture, case: str
) -> None:
    ws = any_workspace
    write(ws, "clean.txt", "the agent changes this cleanly\n")
    write(ws, "text.txt", LINES)
    write(ws, "data.bin", b"\0\1\2")
    begin = capture("begin")
    write(ws, "clean.txt", "changed by the agent\n")
    write(ws, "text.txt", LINES.replace("line 5\n", "line 5 agent\n"))
    write(ws, "created.txt", "agent\n")
    write(ws, "data.bin", b"\0\1\2\3")
    end = capture("end")
    conflicting = {
        "same-line": ("text.txt", lambda: write(ws, "text.txt", LINES.replace("line 5\n", "me\n"))),
        "edited-new-file": ("created.txt", lambda: write(ws, "created.txt", "agent and me\n")),
        "binary": ("data.bin", lambda: write(ws, "data.bin", b"\0\1\2\3\4")),
        "deleted-by-user": ("text.txt", lambda: (ws / "text.txt").unlink()),
    }
    path, edit = conflicting[case]
    edit()
    now = capture("now")
    before = tree_digest(ws)

    with pytest.raises(RevertConflict) as raised:
        snapshots.reverse_apply(ws, turns=[(begin, end)], current=now)
    assert raised.value.paths == (path,)
    assert path in str(raised.value) and "nothing was written" in str(raised.value)
    assert raised.value.exit_code == 3
    assert tree_digest(ws) == before


def test_a_blocked_path_is_a_conflict(home: Path, workspace: Path, tmp_path: Path) -> None:
    snapshots = Snapshots(home, max_file_bytes=100)
    write(workspace, "keep.txt", "k\n")
    begin = snapshots.capture(workspace, "begin").commit
    write(workspace, "keep.txt", "agent\n")
    (workspace / "keep.txt").unlink()  # the agent deleted it ...
    end = snapshots.capture(workspace, "end").commit
    write(workspace, "keep.txt", "x" * 500)  # ... and the user made a huge file there
    now = snapshots.capture(workspace, "now")
    assert now.skipped == ("keep.txt",)
    with pytest.raises(RevertConflict) as raised:
        snapshots.reverse_apply(workspace, turns=[(begin, end)], current=now.commit)
    assert raised.value.paths == ("keep.txt",)
    assert (workspace / "keep.txt").read_text() == "x" * 500
