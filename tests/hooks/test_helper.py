"""The hook helper: the same turn with each hook handed to the home's helper process, the
turn still the agent's; and a helper killed in the middle of a turn costs nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import turnback
from turnback.engine.owners import is_alive
from turnback.hooks.events import session_id_for

from .feed import Agent, make_workspace
from .test_hooks import _a_turn, check_the_turn_and_rescue


def helper_pid(agent: Agent, wait: float = 10.0, other_than: int = 0) -> int:
    """The pid of the helper a hook started, once it listens."""
    path = agent.home / "turnback" / "hooks" / "helper.pid"
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip() and int(path.read_text()) != other_than:
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError("no helper started")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    make_workspace(tmp_path / "workspace")
    made = Agent("claude", tmp_path / "workspace", tmp_path / "home")
    made.env.update({"TURNBACK_HOOK_HELPER": "1", "TURNBACK_HOOK_HELPER_IDLE": "5"})
    yield made
    pid_file = made.home / "turnback" / "hooks" / "helper.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_the_helper_serves_the_hooks_and_the_turn_stays_the_agents(agent: Agent) -> None:
    agent.send("SessionStart")  # in its own process: it starts the helper
    pid = helper_pid(agent)
    assert alive(pid)
    _a_turn(agent)
    check_the_turn_and_rescue(agent)
    with turnback.open(agent.home / "turnback") as tb:
        [turn] = tb.session(session_id_for("claude", agent.session)).turns()
        with tb.store.read() as tx:
            owner = tx.get_owner(turn.owner_id or "")
    # the turn was the agent's (this test's process), never the helper's
    assert owner is not None and owner.pid == os.getpid() != pid
    assert alive(pid)  # one helper served them all


def test_a_helper_killed_mid_turn_loses_nothing(agent: Agent) -> None:
    agent.send("SessionStart")
    pid = helper_pid(agent)
    agent.send("UserPromptSubmit")
    agent.send("PreToolUse Write")
    os.kill(pid, signal.SIGKILL)
    while alive(pid):
        time.sleep(0.01)
    (agent.workspace / "NOTES").write_text("hello from the agent\n")
    agent.send("PostToolUse Write")  # no helper: in its own process, and it starts another
    agent.send("Stop")
    assert alive(helper_pid(agent, other_than=pid))  # and a new helper took over
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("claude", agent.session))
        [turn] = session.turns()
        assert turn.status == "completed"
        assert [c.path for c in session.diff(1).files] == ["NOTES"]
        assert len(session.tool_checkpoints(1)) == 1
        with tb.store.read() as tx:
            assert is_alive(tx.get_owner(turn.owner_id or ""))


@pytest.mark.skipif(os.getuid() != 0, reason="needs another user's process: run as root")
def test_a_hook_tells_nothing_to_another_users_process_at_the_helpers_address(
    agent: Agent,
) -> None:
    """An abstract socket has no permissions: another user could take the helper's name."""
    import subprocess
    import sys

    from turnback.hooks.client import address

    name = address(str(agent.home / "turnback"))
    assert name.startswith("\0")
    squatter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, socket, sys\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "s = socket.socket(socket.AF_UNIX); s.bind('\\0' + sys.argv[1]); s.listen()\n"
            "print('ready', flush=True); s.settimeout(5)\n"
            "c, _ = s.accept(); c.settimeout(2)\n"
            "print(repr(c.recv(65536)), flush=True)\n",
            name[1:],
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert squatter.stdout is not None and squatter.stdout.readline() == "ready\n"
        agent.send("SessionStart")  # handled in its own process, not by the squatter
        heard = squatter.communicate(timeout=10)[0]
    finally:
        squatter.kill()
        squatter.wait()
    assert agent.session not in heard, heard  # it connected, and was told nothing
    with turnback.open(agent.home / "turnback") as tb:
        assert tb.session(session_id_for("claude", agent.session))
