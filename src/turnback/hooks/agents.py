"""The terminal agents turnback's hooks serve, and which process a hook runs for (the
standard library only: every hook imports it)."""

from __future__ import annotations

import os

AGENTS = ("claude", "codex", "gemini")

#: Shells a hook command is run through: the agent is the first ancestor that is not one.
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "busybox", "env", "timeout"})


def _parent(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/stat") as file:
            stat = file.read()
    except OSError:
        return None
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    return int(stat[stat.rindex(")") + 2 :].split()[1]), name


def agent_process(agent: str, environ: dict[str, str] | None = None) -> int:
    """The agent process this hook runs for: Claude Code names itself (``CLAUDE_PID``); else
    the nearest ancestor of this process that is not a shell."""
    env = os.environ if environ is None else environ
    named = env.get("CLAUDE_PID") if agent == "claude" else None
    if named and named.isdigit():
        return int(named)
    pid = os.getppid()
    for _ in range(8):
        found = _parent(pid)
        if found is None:
            break
        parent, name = found
        if name not in _SHELLS or parent <= 1:
            return pid
        pid = parent
    return os.getppid()
