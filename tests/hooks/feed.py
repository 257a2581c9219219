"""Feeding the hook payloads the real agents sent (``tests/realagents/hooks/*.json``) to
``turnback hook AGENT EVENT`` as the agent does: one real process per event, the event's JSON
on stdin, in the workspace, with the workspace's real files changed in between as the agent's
tools changed them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.realagents.agents import git, make_workspace

__all__ = ["Agent", "git", "make_workspace", "payloads"]

FIXTURES = Path(__file__).parents[1] / "realagents" / "hooks"
TURNBACK = [sys.executable, "-c", "from turnback.launcher import main; main()"]


def payloads(agent: str) -> dict[str, dict[str, Any]]:
    """The recorded payload of each event (per tool, for tool events) of ``agent``."""
    recorded = json.loads((FIXTURES / f"{agent}.json").read_text())
    return {label: record["stdin"] for label, record in recorded.items()}


@dataclass
class Agent:
    """One agent's session as its hooks see it: ``send`` runs ``turnback hook`` for an event
    with the recorded payload, made this workspace's, this session's and this turn's."""

    name: str
    workspace: Path
    home: Path
    session: str = "4f1c2a4e-0000-4000-8000-000000000001"
    prompt_id: str = "prompt-1"
    env: dict[str, str] = field(default_factory=dict)
    took: list[float] = field(default_factory=list)

    def payload(self, label: str, **changes: Any) -> dict[str, Any]:
        text = json.dumps(payloads(self.name)[label])
        text = text.replace("<workspace>", str(self.workspace)).replace("<home>", str(self.home))
        data: dict[str, Any] = json.loads(text)
        data["session_id"] = self.session
        for key in ("prompt_id", "turn_id"):
            if key in data:
                data[key] = self.prompt_id
        data.update(changes)
        return data

    def send(
        self, label: str, *, killed: bool = False, **changes: Any
    ) -> subprocess.CompletedProcess[str]:
        stdin = json.dumps(self.payload(label, **changes))
        return self.send_text(label.split()[0], stdin, killed=killed)

    def send_text(
        self, event: str, stdin: str, *, killed: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run the hook; it must exit 0, or with ``killed`` die of SIGKILL (a fault point)."""
        env = {k: v for k, v in os.environ.items() if k != "CLAUDE_PID"}
        # each hook in its own process, unless a test asks for the helper
        env.update({"TURNBACK_HOME": str(self.home / "turnback"), "TURNBACK_HOOK_HELPER": "0"})
        env.update(self.env)
        started = time.monotonic()
        done = subprocess.run(
            [*TURNBACK, "hook", self.name, event],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=self.workspace,
            env=env,
            timeout=60,
        )
        self.took.append(time.monotonic() - started)
        assert done.returncode == (-9 if killed else 0), done.stderr
        return done
