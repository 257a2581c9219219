"""turnback's own hooks in the real agents: ``turnback hooks install AGENT`` configures
``claude -p``, ``codex exec`` and ``gemini -p``, which then do the turn every test here asks
for against the scripted model -- write NOTES, then remove the user's untracked file and run
``git reset --hard`` over the user's uncommitted edit -- and ``turnback log``, ``diff`` and
``rescue`` bring every byte back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .agents import World
from .conftest import MakeWorld
from .model import Model
from .test_terminal import TERMINALS, run
from .turn import ANSWER, NOTES, OPENING, PROMPT

TURNBACK = str(Path(sys.executable).parent / "turnback")


def turnback(world: World, *args: str, home: Path) -> Any:
    """``turnback … --json`` as the user runs it in the workspace, its answer read."""
    done = subprocess.run(
        [TURNBACK, *args, "--json"],
        cwd=world.workspace,
        env={**os.environ, **world.env(), "TURNBACK_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"turnback {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", sorted(TERMINALS))
def test_turnback_brings_back_what_the_agents_shell_destroyed(
    name: str, make_world: MakeWorld
) -> None:
    terminal = TERMINALS[name]
    with Model() as model:
        world = make_world(model.url)
        model.script = terminal.script(world)
        world.configure(hooks=False)  # the agent's settings, no hooks yet
        home = world.home / "turnback"
        installed = turnback(world, "hooks", "install", name, home=home)
        assert installed["events"], installed
        try:  # the hooks' helper serves all but the first hook (tests/hooks/test_helper.py)
            done = run(
                world,
                terminal.argv(),
                env={"TURNBACK_HOME": str(home), "TURNBACK_HOOK_HELPER_IDLE": "5"},
            )
        finally:
            helper = home / "hooks" / "helper.pid"
            if helper.exists():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(helper.read_text()), signal.SIGKILL)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    workspace = world.workspace
    # the agent really did it: the untracked file and the hand edit are gone
    assert (workspace / "NOTES").read_text() == NOTES
    assert not (workspace / "scratch.txt").exists()
    assert (workspace / "README").read_text() == "committed\n"
    assert "turnback hook" not in done.stderr, done.stderr  # no hook failed

    [session] = turnback(world, "sessions", home=home)
    assert session["agent"] == name and session["turns"] == 1
    assert Path(session["workspace"]) == workspace.resolve()
    activities = turnback(world, "activities", session["id"], home=home)
    assert not [a for a in activities if a["code"] == "hook.failed"], activities
    log = turnback(world, "log", session["id"], home=home)
    [turn] = log["turns"]
    assert turn["status"] == "completed" and turn["prompt"] == PROMPT, turn
    files = {f["path"]: f["kind"] for f in turn["files"]}
    assert files == {"NOTES": "added", "scratch.txt": "deleted", "README": "modified"}
    # the conversation: the prompt, what the agent said, its tools, in order (Claude Code's
    # from its transcript; the others' hooks give only the last answer)
    shown = turnback(world, "show", session["id"], "1", home=home)
    said = [(m["kind"], m["text"]) for m in shown["messages"]]
    kinds = [kind for kind, _ in said]
    assert said[0] == ("user", PROMPT) and kinds.count("tool_call") == 2, said
    assert said[-1] == ("agent", ANSWER) or name == "gemini", said  # gemini repeats pieces
    if name == "claude":
        assert kinds == ["user", "agent", "tool_call", "tool_call", "agent"], said
        assert said[1] == ("agent", OPENING), said
    diff = turnback(world, "diff", session["id"], "1", home=home)
    assert "-edited by hand" in diff["patch"] and "-the user's own notes" in diff["patch"]

    points = turnback(world, "rescue", session["id"], home=home)
    write, shell = points["tools"]
    assert "rm scratch.txt" in shell["summary"] and shell["git_state"]["refs"]
    assert write["git_state"] is None
    rescued = turnback(
        world, "rescue", session["id"], "--before-tool", "2", "scratch.txt", "README", home=home
    )
    assert rescued["written"] == ["README", "scratch.txt"]
    assert (workspace / "scratch.txt").read_text() == "the user's own notes\n"
    assert (workspace / "README").read_text() == "committed\nedited by hand\n"
    assert (workspace / "NOTES").read_text() == NOTES  # the agent's own work stays

    # the hooks come out as they went in
    turnback(world, "hooks", "uninstall", name, home=home)
    settings = {
        "claude": world.home / ".claude" / "settings.json",
        "codex": world.codex_home / "hooks.json",
        "gemini": world.home / ".gemini" / "settings.json",
    }[name]
    assert "turnback" not in settings.read_text()
