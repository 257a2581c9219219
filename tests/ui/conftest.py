"""What the review page's tests share: a home with a reviewable session, and a real
``turnback ui`` server in a subprocess."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import turnback
from turnback.model import ChangeKind, FileChange, Turn, TurnStatus

TURNBACK = str(Path(sys.executable).parent / "turnback")


def say(turn: turnback.RunningTurn, text: str) -> None:
    turn.record({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


@dataclass
class Reviewed:
    home: Path
    workspace: Path
    session: str


def build_session(home: Path, workspace: Path) -> Reviewed:
    """Three turns of real edits on real files, with a hand edit between turns 1 and 2."""
    workspace.mkdir()
    (workspace / "notes.txt").write_text("mine\n")
    with turnback.open(home) as tb:
        session = tb.create_session(workspace, title="review me", agent="test-agent")
        with session.turn("create the app") as turn:
            (workspace / "app.py").write_text('def main():\n    return "one"\n')
            say(turn, "Created app.py.")
        (workspace / "by-hand.txt").write_text("typed by a person\n")
        with session.turn("change the app, add a helper") as turn:
            turn.record(
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "t1",
                    "title": "Edit app.py",
                    "kind": "edit",
                    "status": "in_progress",
                }
            )
            (workspace / "app.py").write_text('def main():\n    return "two"\n')
            (workspace / "helper.py").write_text("HELP = 1\n")
            turn.record(
                {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}
            )
            say(turn, "Changed the app.")
        with session.turn("drop the helper, start a changelog") as turn:
            (workspace / "helper.py").unlink()
            (workspace / "CHANGES.md").write_text("# Changes\n")
            say(turn, "Dropped it.")
        return Reviewed(home, workspace, session.id)


def long_session(home: Path, workspace: Path, turns: int) -> str:
    """A session of ``turns`` completed turns of three changed files each, written through the
    store as a long-lived session leaves them (real captures of hundreds of turns take minutes)."""
    workspace.mkdir()
    now = time.time()
    with turnback.open(home) as tb:
        session = tb.create_session(workspace, title=f"{turns} turns", agent="test-agent")
        parent: str | None = None
        with tb.store.atomic() as tx:
            for number in range(1, turns + 1):
                token = uuid.uuid4().hex
                tx.insert_turn(
                    Turn(
                        token=token,
                        session_id=session.id,
                        number=number,
                        parent=parent,
                        owner_id=None,
                        status=TurnStatus.COMPLETED,
                        prompt=f"step {number}: change the parser and write it down",
                        started_at=now - turns + number,
                        ended_at=now - turns + number + 0.5,
                        event_count=4,
                    )
                )
                changes = [
                    FileChange(f"src/module_{number % 10}.py", ChangeKind.MODIFIED, 3, 1),
                    FileChange(f"docs/step_{number}.md", ChangeKind.ADDED, 5, 0),
                ]
                tx.insert_file_changes(token, "turn", changes)
                parent = token
            tx.set_head(session.id, parent, now)
        return session.id


@pytest.fixture
def reviewed(tmp_path: Path) -> Reviewed:
    return build_session(tmp_path / "home", tmp_path / "workspace")


def cli_json(home: Path, *args: str) -> object:
    done = subprocess.run(
        [TURNBACK, "--home", str(home), *args, "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


@dataclass
class Server:
    url: str  # with its token
    base: str
    process: subprocess.Popen[str]

    @property
    def token(self) -> str:
        return re.split(r"[?#]token=", self.url)[1]

    def key(self) -> str:
        """Log in with the printed token, as the page's script does: a key for the API."""
        answer = httpx.post(f"{self.base}/api/login", json={"token": self.token})
        answer.raise_for_status()
        return str(answer.json()["key"])

    def stop(self) -> int:
        """SIGTERM, as a user's Ctrl-C or a service manager would; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=20)


StartServer = Callable[..., Server]


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """Start ``turnback --home HOME ui --no-open [ARGS]`` and read its address from the first
    line of its standard output; each is stopped with SIGTERM at the end and must exit 0."""
    started: list[Server] = []

    def start(home: Path, *args: str, env: dict[str, str] | None = None) -> Server:
        env = {k: v for k, v in (env or os.environ).items() if k != "TURNBACK_HOME"}
        process = subprocess.Popen(
            [TURNBACK, "--home", str(home), "ui", "--no-open", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url:
            process.wait(timeout=10)
            assert process.stderr is not None
            raise AssertionError(f"turnback ui printed no address: {process.stderr.read()}")
        server = Server(url, re.split(r"/[?#]token=", url)[0], process)
        started.append(server)
        return server

    yield start
    for server in started:
        code = server.stop()
        assert code == 0, f"turnback ui exited {code} on SIGTERM"
