"""A hook process killed (SIGKILL) in the middle of its work, at the engine's fault points: the
agent goes on without it (a hook that dies is a non-blocking error to every agent), and the
turn and the user's files come out whole."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import turnback
from turnback.hooks.events import session_id_for

from .feed import TURNBACK, Agent, make_workspace


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    make_workspace(tmp_path / "workspace")
    return Agent("claude", tmp_path / "workspace", tmp_path / "home")


@pytest.mark.parametrize(
    "point", ["turn.begin.before", "turn.begin.inside", "turn.begin.after", "capture.commit"]
)
def test_a_prompt_hook_killed_mid_begin(agent: Agent, point: str) -> None:
    agent.send("SessionStart")
    agent.env["TURNBACK_FAULT"] = point
    agent.send("UserPromptSubmit", killed=True)
    del agent.env["TURNBACK_FAULT"]
    # the agent goes on: its shell command still gets its checkpoint, in the turn if it was
    # begun, else in one begun for it
    agent.send("PreToolUse Bash")
    subprocess.run("rm scratch.txt", shell=True, cwd=agent.workspace, check=True)
    agent.send("PostToolUse Bash")
    agent.send("Stop")
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("claude", agent.session))
        [turn] = session.turns()
        assert turn.status == "completed"
        assert "scratch.txt" in [c.path for c in session.diff(1).files]
        session.rescue(["scratch.txt"], 1, before_tool=1)
    assert (agent.workspace / "scratch.txt").read_text() == "the user's own notes\n"


@pytest.mark.parametrize("point", ["capture.commit", "capture.ref", "turn.end.inside"])
def test_a_tool_or_stop_hook_killed_mid_capture(agent: Agent, point: str) -> None:
    agent.send("SessionStart")
    agent.send("UserPromptSubmit")
    event = "Stop" if point.startswith("turn.end") else "PreToolUse Bash"
    if event == "Stop":
        agent.send("PreToolUse Bash")
    agent.env["TURNBACK_FAULT"] = point
    agent.send(event, killed=True)
    del agent.env["TURNBACK_FAULT"]
    subprocess.run("rm scratch.txt", shell=True, cwd=agent.workspace, check=True)
    agent.send("PostToolUse Bash")
    agent.prompt_id = "prompt-2"
    agent.send("UserPromptSubmit", prompt="next")  # closes what the killed hook left running
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("claude", agent.session))
        first, second = session.turns()
        assert first.status in ("interrupted", "completed") and second.status == "running"
        # the user's file is there in the turn's begin, whatever the killed hook left
        session.rescue(["scratch.txt"], 1, before_tool=0)
    assert (agent.workspace / "scratch.txt").read_text() == "the user's own notes\n"


@pytest.mark.parametrize("point", ["capture.ref", "rescue.recorded", "restore.done", "rescue.done"])
def test_a_rescue_killed_midway_loses_nothing_and_can_be_run_again(
    agent: Agent, point: str
) -> None:
    """Rescue order: the undo capture, then its row, then the files. Killed at any step, the
    user's files are either as they were or rescued, never partly lost, and the rescue runs
    again to the end."""
    agent.send("SessionStart")
    agent.send("UserPromptSubmit")
    agent.send("PreToolUse Bash")
    subprocess.run("rm scratch.txt", shell=True, cwd=agent.workspace, check=True)
    agent.send("PostToolUse Bash")
    agent.send("Stop")
    readme = (agent.workspace / "README").read_bytes()
    session_id = session_id_for("claude", agent.session)
    args = ["--home", str(agent.home / "turnback"), "rescue", session_id, "scratch.txt"]
    env = {"TURNBACK_FAULT": point, "TURNBACK_HOOK_HELPER": "0"}
    killed = subprocess.run(
        [*TURNBACK, *args, "--turn", "1", "--before-tool", "1"],
        cwd=agent.workspace, env={**os.environ, **env}, capture_output=True, text=True,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    scratch = agent.workspace / "scratch.txt"
    assert not scratch.exists() or scratch.read_text() == "the user's own notes\n"
    assert (agent.workspace / "README").read_bytes() == readme  # nothing else touched
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id)
        if not scratch.exists():
            session.rescue(["scratch.txt"], 1, before_tool=1)
    assert scratch.read_text() == "the user's own notes\n"
    assert (agent.workspace / "README").read_bytes() == readme
