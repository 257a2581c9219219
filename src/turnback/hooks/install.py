"""``turnback hooks install|uninstall AGENT``: the agent's hook configuration, written and
removed, the user's own hooks left as they are.

Claude Code, Codex and Gemini CLI configure hooks in the same shape -- an event names matcher
groups, each with command handlers (``{"type": "command", "command": …, "timeout": …}``) -- in
their own files (tests/realagents/README.md, "Hooks"). A handler of turnback's is one whose
command ends in ``hook AGENT EVENT``; installing removes those first, so it can be run again, and
uninstalling removes only those (and a group or event left empty by it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from turnback.errors import InvalidOption
from turnback.hooks.agents import AGENTS
from turnback.records import record

#: The events installed for each agent, with the timeout each handler gets in the agent's unit
#: (None: the agent's own, where it clamps a longer one and warns).
_EVENTS: dict[str, tuple[tuple[str, int | None], ...]] = {
    "claude": (
        ("SessionStart", 30),
        ("UserPromptSubmit", 30),
        ("PreToolUse", 30),
        ("PostToolUse", 30),
        ("PostToolUseFailure", 30),
        ("Stop", 30),
        ("StopFailure", 30),
        ("SessionEnd", 30),
    ),
    "codex": (
        ("SessionStart", 30),
        ("UserPromptSubmit", 30),
        ("PreToolUse", 30),
        ("PostToolUse", 30),
        ("Stop", 30),
        ("SessionEnd", None),  # Codex clamps it to 3 s
    ),
    "gemini": (  # milliseconds
        ("SessionStart", 30_000),
        ("BeforeAgent", 30_000),
        ("BeforeTool", 30_000),
        ("AfterTool", 30_000),
        ("AfterAgent", 30_000),
        ("SessionEnd", 30_000),
    ),
}
assert tuple(_EVENTS) == AGENTS, "every agent's events, in the same order"

_OURS = re.compile(rf"(?:^|\s)hook\s+({'|'.join(AGENTS)})\s+[A-Za-z]+\s*$")


@record
class Installed:
    """What an install or uninstall changed: the files written, and the events."""

    agent: str
    files: tuple[str, ...]
    events: tuple[str, ...]
    notes: tuple[str, ...] = ()


def turnback_command() -> list[str]:
    """How the agent starts turnback: this ``turnback`` if it is one, else the one on PATH,
    else this Python with ``-m turnback``."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "turnback" and argv0.exists():
        return [str(argv0.resolve())]
    found = shutil.which("turnback")
    if found:
        return [found]
    return [sys.executable, "-m", "turnback"]


def config_file(agent: str, project: Path | None, home: Path) -> Path:
    """The file holding ``agent``'s hooks: the project's (``project``) or the user's."""
    if agent == "claude":
        return (project or home) / ".claude" / "settings.json"
    if agent == "gemini":
        return (project or home) / ".gemini" / "settings.json"
    if project is not None:
        return project / ".codex" / "hooks.json"
    return codex_home(home) / "hooks.json"


def codex_home(home: Path) -> Path:
    configured = os.environ.get("CODEX_HOME")
    return Path(configured) if configured else home / ".codex"


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidOption(
            f"{path} is not valid JSON ({error}); it was left as it is. Fix it, then install again"
        ) from None
    if not isinstance(data, dict):
        raise InvalidOption(f"{path} does not hold a JSON object; it was left as it is")
    return data


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a file beside it, renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _without_ours(hooks: dict[str, Any]) -> dict[str, Any]:
    """``hooks`` with turnback's handlers taken out, and what that leaves empty."""
    kept: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept[event] = groups
            continue
        left = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                handlers = [
                    h
                    for h in group["hooks"]
                    if not (isinstance(h, dict) and _OURS.search(str(h.get("command", ""))))
                ]
                if not handlers:
                    continue
                group = {**group, "hooks": handlers}
            left.append(group)
        if left:
            kept[event] = left
    return kept


def install(
    agent: str,
    *,
    project: Path | None = None,
    home: Path | None = None,
    turnback_home: str | None = None,
) -> Installed:
    """Add turnback's hooks to ``agent``'s configuration (the user's, or ``project``'s);
    ``turnback_home``, when given, is the home the hooks write to (else theirs: the
    ``TURNBACK_HOME`` the agent runs with, or the default)."""
    agent = _agent(agent)
    home = home or Path.home()
    path = config_file(agent, project, home)
    data = _read(path)
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise InvalidOption(f"{path}: its 'hooks' is not an object; it was left as it is")
    hooks = _without_ours(hooks)
    base = turnback_command()
    if turnback_home is not None:
        base += ["--home", os.path.abspath(os.path.expanduser(turnback_home))]
    for event, timeout in _EVENTS[agent]:
        handler: dict[str, Any] = {
            "type": "command",
            "command": shlex.join([*base, "hook", agent, event]),
        }
        if timeout is not None:
            handler["timeout"] = timeout
        hooks.setdefault(event, []).append({"matcher": "*", "hooks": [handler]})
    data["hooks"] = hooks
    _write(path, json.dumps(data, indent=2) + "\n")
    files, notes = [str(path)], []
    if agent == "codex":
        config = codex_home(home) / "config.toml"
        if _enable_codex_hooks(config):
            files.append(str(config))
        notes.append(
            "Codex runs a hook only once it is trusted: review and trust them in Codex's /hooks "
            "(`codex exec --dangerously-bypass-hook-trust` skips that for one run)"
        )
    return Installed(agent, tuple(files), tuple(e for e, _ in _EVENTS[agent]), tuple(notes))


def uninstall(agent: str, *, project: Path | None = None, home: Path | None = None) -> Installed:
    """Remove turnback's hooks from ``agent``'s configuration, and nothing else."""
    agent = _agent(agent)
    path = config_file(agent, project, home or Path.home())
    data = _read(path)
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return Installed(agent, (), ())
    kept = _without_ours(hooks)
    removed = tuple(
        e
        for e in hooks
        if json.dumps(hooks.get(e)) != json.dumps(kept.get(e, object()), default=str)
    )
    if kept:
        data["hooks"] = kept
    else:
        del data["hooks"]
    _write(path, json.dumps(data, indent=2) + "\n")
    return Installed(agent, (str(path),), removed)


def _agent(agent: str) -> str:
    if agent not in _EVENTS:
        raise InvalidOption(f"unknown agent {agent!r}: one of {', '.join(AGENTS)}")
    return agent


_TABLE = re.compile(r"^\s*\[([^\]]+)\]\s*(?:#.*)?$")


def _enable_codex_hooks(config: Path) -> bool:
    """Turn Codex's hooks on (``[features] hooks = true``) unless the file already says;
    returns whether it was written. A ``hooks`` or ``codex_hooks`` already set, either way, is
    the user's choice and stays."""
    text = config.read_text(encoding="utf-8") if config.exists() else ""
    lines = text.splitlines()
    table = features = None
    for number, line in enumerate(lines):
        found = _TABLE.match(line)
        if found:
            table = found.group(1).strip()
            if table == "features":
                features = number
        elif table == "features" and re.match(r"\s*(codex_)?hooks\s*=", line):
            return False
    if features is not None:
        lines.insert(features + 1, "hooks = true")
    else:
        if lines and lines[-1].strip():
            lines.append("")
        lines += ["[features]", "hooks = true"]
    _write(config, "\n".join(lines) + "\n")
    return True
