"""``turnback rescue`` and ``turnback hooks install|uninstall`` as a person runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from turnback.hooks.events import session_id_for

from .feed import TURNBACK, Agent, make_workspace
from .test_hooks import _a_turn


def turnback(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TURNBACK, *args],
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1", "TURNBACK_HOOK_HELPER": "0", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    make_workspace(tmp_path / "workspace")
    done = Agent("claude", tmp_path / "workspace", tmp_path / "home")
    _a_turn(done)
    return done


def test_rescue_lists_the_points_and_brings_every_byte_back(agent: Agent) -> None:
    workspace = agent.workspace
    env = {"TURNBACK_HOME": str(agent.home / "turnback")}
    session = session_id_for("claude", agent.session)[:12]

    listed = turnback("rescue", session, cwd=workspace, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "1  before Write" in listed.stdout and "2  before Bash: rm scratch.txt" in listed.stdout
    assert "refs, stash and reflog kept" in listed.stdout
    points = json.loads(turnback("rescue", session, "--json", cwd=workspace, env=env).stdout)
    assert [p["tool"] for p in points["tools"]] == ["Write", "Bash"]
    assert points["tools"][1]["git_state"]["refs"]

    done = turnback(
        "rescue", session, "--before-tool", "2", "scratch.txt", "README", "--json",
        cwd=workspace, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["written"] == ["README", "scratch.txt"]
    assert (workspace / "scratch.txt").read_text() == "the user's own notes\n"
    assert (workspace / "README").read_text() == "committed\nedited by hand\n"

    undone = turnback("rescue", "--undo", session, cwd=workspace, env=env)
    assert undone.returncode == 0 and "undid rescue" in undone.stdout, undone.stderr
    assert not (workspace / "scratch.txt").exists()

    # a hand edit since the turn ended is kept: exit 3, nothing written
    (workspace / "README").write_text("mine now\n")
    refused = turnback(
        "rescue", session, "--before-tool", "2", "README", "scratch.txt", "--json",
        cwd=workspace, env=env,
    )  # fmt: skip
    assert refused.returncode == 3
    assert json.loads(refused.stdout)["conflicts"] == ["README"]
    assert (workspace / "README").read_text() == "mine now\n"
    assert not (workspace / "scratch.txt").exists()


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--before-tool", "9", "README"], 1, "--before-tool is 0 (its begin) to 2"),
        (["../elsewhere"], 1, "outside the workspace"),
        ([".git/config"], 1, "inside .git"),
        (["--turn", "7", "README"], 1, "turn"),
        (["--undo", "README"], 2, "takes no PATH"),
        (["--before-tool", "2", "NOTES"], 3, "already are as they were"),
    ],
)
def test_rescue_refuses_bad_input_clearly(
    agent: Agent, args: list[str], code: int, said: str
) -> None:
    session = session_id_for("claude", agent.session)[:12]
    before = {p.name: p.read_bytes() for p in agent.workspace.iterdir() if p.is_file()}
    done = turnback(
        "rescue", session, *args, cwd=agent.workspace,
        env={"TURNBACK_HOME": str(agent.home / "turnback")},
    )  # fmt: skip
    assert done.returncode == code, (done.stdout, done.stderr)
    assert said in done.stderr, done.stderr
    assert {p.name: p.read_bytes() for p in agent.workspace.iterdir() if p.is_file()} == before


# -- hooks install ---------------------------------------------------------------------------

USERS: dict[str, dict[str, Any]] = {
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "my-guard"}]}],
    "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
}


def _config(agent: str, home: Path, project: Path | None = None) -> Path:
    base = project or home
    return {
        "claude": base / ".claude" / "settings.json",
        "codex": (project / ".codex" if project else home / ".codex") / "hooks.json",
        "gemini": base / ".gemini" / "settings.json",
    }[agent]


@pytest.mark.parametrize("agent_name", ["claude", "codex", "gemini"])
@pytest.mark.parametrize("scope", ["--user", "--project"])
def test_install_keeps_the_users_hooks_and_uninstall_removes_only_turnbacks(
    agent_name: str, scope: str, tmp_path: Path
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    env = {"HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    config = _config(agent_name, home, project if scope == "--project" else None)
    config.parent.mkdir(parents=True)
    original = {"theme": "dark", "hooks": USERS}
    config.write_text(json.dumps(original))

    for _ in range(2):  # installing again replaces turnback's hooks, never doubles them
        done = turnback("hooks", "install", agent_name, scope, "--json", cwd=project, env=env)
        assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert str(config) in report["files"]
    data = json.loads(config.read_text())
    assert data["theme"] == "dark"
    ours = [
        handler["command"]
        for groups in data["hooks"].values()
        for group in groups
        for handler in group["hooks"]
        if f" hook {agent_name} " in handler["command"]
    ]
    assert len(ours) == len(report["events"]) == len(set(ours))
    assert data["hooks"]["PreToolUse"][0] == USERS["PreToolUse"][0]
    assert any(g == USERS["Stop"][0] for g in data["hooks"].get("Stop", []))
    # the command installed runs turnback's hook
    command = next(c for c in ours if c.endswith(" SessionStart"))
    ran = subprocess.run(
        command,
        shell=True,
        input="{}",
        capture_output=True,
        text=True,
        env={**os.environ, **env, "TURNBACK_HOOK_HELPER": "0"},
    )
    assert ran.returncode == 0 and ran.stdout == "", ran

    done = turnback("hooks", "uninstall", agent_name, scope, cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(config.read_text()) == original


def test_install_turns_codex_hooks_on_and_leaves_a_users_choice(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('model = "gpt-5.5"\n\n[features]\nweb_search = true\n\n[analytics]\nx = 1\n')
    env = {"HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    assert turnback("hooks", "install", "codex", cwd=tmp_path, env=env).returncode == 0
    import tomllib

    parsed = tomllib.loads(config.read_text())
    assert parsed["features"] == {"web_search": True, "hooks": True}
    assert parsed["analytics"] == {"x": 1} and parsed["model"] == "gpt-5.5"
    # a user who turned hooks off keeps that choice
    config.write_text("[features]\ncodex_hooks = false\n")
    assert turnback("hooks", "install", "codex", cwd=tmp_path, env=env).returncode == 0
    assert config.read_text() == "[features]\ncodex_hooks = false\n"
    # no config.toml at all: one is written with hooks on
    config.unlink()
    assert turnback("hooks", "install", "codex", cwd=tmp_path, env=env).returncode == 0
    assert tomllib.loads(config.read_text()) == {"features": {"hooks": True}}


def test_install_refuses_a_broken_configuration_and_leaves_it(tmp_path: Path) -> None:
    config = tmp_path / "home" / ".claude" / "settings.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"hooks": {')
    done = turnback(
        "hooks", "install", "claude", cwd=tmp_path, env={"HOME": str(tmp_path / "home")}
    )
    assert done.returncode == 1 and "not valid JSON" in done.stderr, done.stderr
    assert config.read_text() == '{"hooks": {'
    bad = turnback("hooks", "install", "vim", cwd=tmp_path, env={"HOME": str(tmp_path)})
    assert bad.returncode == 2


def test_hook_help_and_the_cli_form(tmp_path: Path) -> None:
    done = turnback("hook", "--help", cwd=tmp_path, env={})
    assert done.returncode == 0 and "always" in done.stdout
    # through the command line too (an option before the command): exits 0 on garbage
    done = subprocess.run(
        [sys.executable, "-m", "turnback", "--no-pager", "hook", "claude", "Stop"],
        input="garbage", capture_output=True, text=True, env={**os.environ,
        "TURNBACK_HOME": str(tmp_path / "home"), "TURNBACK_HOOK_HELPER": "0"},
    )  # fmt: skip
    assert done.returncode == 0 and "JSONDecodeError" in done.stderr and done.stdout == ""
    # bytes that are not UTF-8, and an agent it does not know: said, and still exit 0
    env = {**os.environ, "TURNBACK_HOME": str(tmp_path / "home"), "TURNBACK_HOOK_HELPER": "0"}
    for front in ([], ["--no-pager"]):
        for agent, stdin in (("claude", b"\xff\xfe{"), ("nobody", b"{}")):
            done = subprocess.run(
                [sys.executable, "-m", "turnback", *front, "hook", agent, "Stop"],
                input=stdin, capture_output=True, env=env,
            )  # fmt: skip
            assert done.returncode == 0 and done.stdout == b"", (front, agent, done.stderr)
            assert b"turnback hook" in done.stderr and b"Traceback" not in done.stderr


def test_install_names_the_home_it_was_given(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    make_workspace(workspace)
    chosen = tmp_path / "chosen home"
    env = {"HOME": str(home), "TURNBACK_HOME": ""}
    done = turnback("--home", str(chosen), "hooks", "install", "claude", cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    [group] = settings["hooks"]["SessionStart"]
    command = group["hooks"][0]["command"]
    assert f"--home '{chosen}' hook claude SessionStart" in command
    ran = subprocess.run(
        command,
        shell=True,
        input=json.dumps({"session_id": "s", "cwd": str(workspace)}),
        capture_output=True,
        text=True,
        cwd=workspace,
        env={**os.environ, "TURNBACK_HOOK_HELPER": "0", "TURNBACK_HOME": str(tmp_path / "other")},
    )
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    assert (chosen / "turnback.db").exists() and not (tmp_path / "other").exists()
    # uninstall finds them all the same
    done = turnback("hooks", "uninstall", "claude", cwd=workspace, env=env)
    assert "hooks" not in json.loads((home / ".claude" / "settings.json").read_text())
