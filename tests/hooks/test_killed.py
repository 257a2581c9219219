"""A hook process killed (SIGKILL) in the middle of its work, at the engine's fault points: the
agent goes on without it (a hook that dies is a non-blocking error to every agent), and the
turn and the user's files come out whole."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import turnback
from turnback.hooks.events import session_id_for

from .feed import Agent, make_workspace


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
