"""The real agents the tests drive, as npm installed them (``package.json`` pins them; ``make``
runs ``npm ci`` here), and the world each one runs in: a home of its own with its settings, an
environment that sends its model calls to the scripted endpoint and turns telemetry, update
checks and other outside calls off, and, when asked, hooks that record what the agent gives them.

Some facts about the agents that this module depends on (the versions in package.json):

- Claude Code (``claude``) is a native binary. It reads ``ANTHROPIC_BASE_URL`` and
  ``ANTHROPIC_API_KEY``; run as root it refuses ``--permission-mode bypassPermissions`` unless
  ``IS_SANDBOX=1``. Its settings and hooks are in ``~/.claude/settings.json``.
- claude-agent-acp does not run that binary: it runs the Claude Code bundled in its own
  ``@anthropic-ai/claude-agent-sdk`` (a ``cli.js`` run by node), with the same environment.
- Codex (``codex``, native) takes its provider from ``$CODEX_HOME/config.toml``: a
  ``model_providers`` entry with ``base_url`` and ``wire_api = "responses"``. A model slug its
  catalogue knows (``gpt-5.5``) gets the free-form ``apply_patch`` tool; an unknown one gets only
  ``exec_command``. Without bubblewrap only ``sandbox_mode = "danger-full-access"`` runs commands.
  Hooks are in ``$CODEX_HOME/hooks.json``; ``[features] hooks`` (``codex_hooks`` is its old
  name) is on by default, and a hook runs only once trusted: ``codex exec
  --dangerously-bypass-hook-trust`` skips that for one run.
- codex-acp is a native binary behind a node shim (``bin/codex-acp.js``) that runs it with
  ``spawnSync``: a signal to the shim leaves the binary running, and the binary does not exit
  when its stdin closes (it does on SIGTERM). The tests run the binary itself, as Zed does.
- gemini-cli (``gemini``, node) reads ``GEMINI_API_KEY`` and ``GOOGLE_GEMINI_BASE_URL``; it
  refuses an untrusted folder in headless mode unless ``GEMINI_CLI_TRUST_WORKSPACE=true``, and
  re-executes itself with a larger heap unless ``GEMINI_CLI_NO_RELAUNCH=true``. Settings and
  hooks are in ``~/.gemini/settings.json``. ``--acp`` starts it as an ACP agent.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
NODE_MODULES = HERE / "node_modules"
RECORD_HOOK = HERE / "record_hook.py"

#: The events each CLI's hooks are configured for: every event the agent documents.
CLAUDE_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PostToolUseFailure",
    "Notification",
    "Stop",
    "StopFailure",
    "SubagentStop",
    "PreCompact",
    "SessionEnd",
)
CODEX_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PreCompact",
    "PostCompact",
    "SubagentStart",
    "SubagentStop",
    "Stop",
    "Interrupt",
    "SessionEnd",
)
GEMINI_EVENTS = (
    "SessionStart",
    "BeforeAgent",
    "BeforeModel",
    "BeforeToolSelection",
    "AfterModel",
    "BeforeTool",
    "AfterTool",
    "AfterAgent",
    "PreCompress",
    "Notification",
    "SessionEnd",
)
#: Codex clamps these events' hook timeouts to 3 s, and warns when a longer one is asked for.
CODEX_CLAMPED = ("SessionEnd", "Interrupt")
#: A model slug Codex's catalogue knows: it is offered apply_patch as a free-form tool.
CODEX_MODEL = "gpt-5.5"


def installed(relative: str) -> Path:
    """The path of an installed agent's file under node_modules, or a clear error."""
    path = NODE_MODULES / relative
    if not path.exists():
        raise RuntimeError(
            f"the real agents are not installed ({path} is missing): run `make pytest` (or "
            f"`npm ci` in {HERE}) first"
        )
    return path


def claude() -> list[str]:
    return [str(installed(".bin/claude"))]


def codex() -> list[str]:
    return [str(installed(".bin/codex"))]


def gemini() -> list[str]:
    return [str(installed(".bin/gemini"))]


def claude_agent_acp() -> list[str]:
    return [str(installed(".bin/claude-agent-acp"))]


def gemini_acp() -> list[str]:
    return [*gemini(), "--acp"]


def codex_acp() -> list[str]:
    """The codex-acp binary itself, not its node shim (see the module's facts)."""
    arch = {"x86_64": "x64", "aarch64": "arm64", "arm64": "arm64"}[platform.machine()]
    return [str(installed(f"@zed-industries/codex-acp-linux-{arch}/bin/codex-acp"))]


@dataclass(frozen=True)
class Answer:
    """A hook's configuration for one event: the tools it matches, its timeout in seconds,
    and record_hook.py's options (``--sleep``, ``--exit``, ``--stderr``, ``--stdout``)."""

    matcher: str = "*"
    timeout: int = 30
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class World:
    """One agent run's surroundings: ``home`` (its HOME, settings and transcripts),
    ``workspace`` (a git repository it edits), ``hooks`` (where recording hooks write)."""

    home: Path
    workspace: Path
    hooks: Path
    model_url: str

    @property
    def codex_home(self) -> Path:
        return self.home / ".codex"

    def env(self) -> dict[str, str]:
        """The environment of an agent: nothing of the test runner's but the basics."""
        kept = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TZ") if k in os.environ}
        return {
            **kept,
            "HOME": str(self.home),
            "USER": "tester",
            "SHELL": "/bin/bash",
            "TERM": "dumb",
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "NO_COLOR": "1",
            # npm and node: no update notices
            "NO_UPDATE_NOTIFIER": "1",
            "npm_config_update_notifier": "false",
            # Claude Code and claude-agent-acp
            "ANTHROPIC_BASE_URL": self.model_url,
            "ANTHROPIC_API_KEY": "sk-ant-scripted",
            "IS_SANDBOX": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_BUG_COMMAND": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            # Codex and codex-acp
            "CODEX_HOME": str(self.codex_home),
            # gemini-cli
            "GEMINI_API_KEY": "scripted",
            "GOOGLE_GEMINI_BASE_URL": self.model_url,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "GEMINI_CLI_NO_RELAUNCH": "true",
        }

    def hook_command(self, event: str, *options: str) -> str:
        return shlex.join([sys.executable, str(RECORD_HOOK), str(self.hooks), event, *options])

    def configure(
        self,
        *,
        hooks: bool = False,
        answers: Mapping[str, Answer] | None = None,
        codex_approval: str = "never",
    ) -> None:
        """Write each agent's settings into the home, with recording hooks when asked, and for
        the events in ``answers`` a hook that answers so; ``codex_approval`` is Codex's
        ``approval_policy``."""
        (self.home / ".claude").mkdir(parents=True, exist_ok=True)
        (self.home / ".gemini").mkdir(parents=True, exist_ok=True)
        self.codex_home.mkdir(parents=True, exist_ok=True)
        claude_settings: dict[str, Any] = {}
        gemini_settings: dict[str, Any] = {
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "security": {"auth": {"selectedType": "gemini-api-key"}},
        }
        if hooks:
            answers = answers or {}
            claude_settings["hooks"] = self._hooks(CLAUDE_EVENTS, answers, seconds=1)
            # gemini-cli's timeouts are in milliseconds
            gemini_settings["hooks"] = self._hooks(GEMINI_EVENTS, answers, seconds=1000)
            hooks_json = {
                "hooks": self._hooks(CODEX_EVENTS, answers, seconds=1, clamped=CODEX_CLAMPED)
            }
            (self.codex_home / "hooks.json").write_text(json.dumps(hooks_json, indent=1))
        (self.home / ".claude" / "settings.json").write_text(json.dumps(claude_settings))
        (self.home / ".gemini" / "settings.json").write_text(json.dumps(gemini_settings))
        (self.codex_home / "config.toml").write_text(
            f'model = "{CODEX_MODEL}"\n'
            'model_provider = "scripted"\n'
            f'approval_policy = "{codex_approval}"\n'
            'sandbox_mode = "danger-full-access"\n'
            "check_for_update_on_startup = false\n"
            "[features]\n"
            "hooks = true\n"
            "[analytics]\n"
            "enabled = false\n"
            "[model_providers.scripted]\n"
            'name = "Scripted"\n'
            f'base_url = "{self.model_url}/v1"\n'
            'wire_api = "responses"\n'
        )

    def _hooks(
        self,
        events: Sequence[str],
        answers: Mapping[str, Answer],
        *,
        seconds: int,
        clamped: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Each event's hook configuration, as Claude Code, Codex and gemini-cli all take it:
        matcher groups of command handlers, timeouts in the agent's unit (``seconds``), none
        for the ``clamped`` events."""
        hooks: dict[str, Any] = {}
        for event in events:
            answer = answers.get(event, Answer())
            handler: dict[str, Any] = {
                "type": "command",
                "command": self.hook_command(event, *answer.options),
            }
            if event not in clamped:
                handler["timeout"] = answer.timeout * seconds
            hooks[event] = [{"matcher": answer.matcher, "hooks": [handler]}]
        return hooks

    def recorded_hooks(self) -> list[dict[str, Any]]:
        """What the hooks recorded, in the order they ran."""
        if not self.hooks.is_dir():
            return []
        return [json.loads(p.read_text()) for p in sorted(self.hooks.glob("[0-9]*.json"))]


def git(workspace: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(workspace), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def make_workspace(path: Path) -> None:
    """A git repository as a user leaves it: a committed README edited since, and an
    untracked file of the user's own."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "tester@example.com")
    git(path, "config", "user.name", "Tester")
    (path / "README").write_text("committed\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "initial")
    (path / "README").write_text("committed\nedited by hand\n")
    (path / "scratch.txt").write_text("the user's own notes\n")


# -- processes --------------------------------------------------------------------------------


def in_own_session(command: Sequence[str]) -> list[str]:
    """``command`` run as the leader of a new session (and process group), so that it and
    everything it starts -- in process groups of their own too -- can be found and ended
    together."""
    return ["setsid", *command]


def session_members(sid: int) -> list[tuple[int, str]]:
    """The live processes of the session ``sid`` leads (:func:`in_own_session`), whatever process
    group each is in: (pid, command line)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] == "Z" or int(fields[3]) != sid:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, ValueError):
            continue
        members.append((int(entry.name), cmdline))
    return members


def descendants(pid: int) -> list[int]:
    """The live processes ``pid`` started, and theirs, whatever group they are in."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def parent_of(pid: int) -> int | None:
    """The parent's process id of ``pid``, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def end_session(sid: int) -> list[tuple[int, str]]:
    """Kill what is left of the session ``sid`` leads; returns what was left."""
    left = session_members(sid)
    for pid, _ in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left
