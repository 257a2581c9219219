"""The home's hook helper: ``python -m turnback.hooks.helper HOME``.

One process per home that keeps the engine imported, the store open and a file watcher on each
workspace its hooks came from, and applies the hook events :mod:`turnback.hooks.client` hands
it, one at a time, answering each once it is applied and durable. It holds no turn of its own:
each event's turn is its agent's (the lease names the agent's process, as a hook process's
does), read back from the store, so killing the helper loses nothing acknowledged. It ends when
nothing came for ``TURNBACK_HOOK_HELPER_IDLE`` seconds (600 by default) or its home is gone,
and at once when another helper already has the address.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from turnback.engine.handle import Turnback
from turnback.hooks import events
from turnback.hooks.agents import AGENTS
from turnback.hooks.client import address, peer_uid

#: The most a request may hold: a hook's JSON, with a tool's whole output.
MAX_REQUEST = 64 * 2**20


def _read(connection: socket.socket) -> tuple[str, str, int, str]:
    """A hook's request (see ``client.request``): agent, event, the agent's pid, its JSON."""
    data = b""
    while chunk := connection.recv(65536):
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError("the request is too large")
    agent, event, owner, stdin = data.decode("utf-8", "surrogateescape").split("\n", 3)
    return agent, event, int(owner), stdin


class Helper:
    """The helper of one home: ``serve`` until idle."""

    def __init__(self, home: Path, idle: float) -> None:
        self.home = home
        self.idle = idle
        self.tb = Turnback(home, owner_pid=os.getpid())

    def answer(self, agent: str, event: str, owner_pid: int, stdin: str) -> str | None:
        """Apply one event; what went wrong, if anything."""
        try:
            payload = json.loads(stdin)
            if not isinstance(payload, dict):
                raise ValueError("the hook's input is not a JSON object")
            self.tb.lease.process = owner_pid
            self._watch(self._workspace(agent, payload))
            events.apply(self.tb, agent, event, payload)
        except Exception as error:
            return events.problem(error)
        return None

    def _workspace(self, agent: str, payload: dict[str, Any]) -> str | None:
        """The workspace of the event's session: the one it was created in (a hook's ``cwd``
        moves with the agent's ``cd``), else the ``cwd`` it will be created in."""
        agent_session = payload.get("session_id")
        if isinstance(agent_session, str) and agent_session and agent in AGENTS:
            with self.tb.store.read() as tx:
                found = tx.get_session(events.session_id_for(agent, agent_session))
            if found is not None:
                return found.workspace
        cwd = payload.get("cwd")
        return cwd if isinstance(cwd, str) else None

    def _watch(self, workspace: str | None) -> None:
        """Watch the workspace from its first event on, so its captures need no scan."""
        if workspace is not None and self.tb.checkpoints is not None:
            self.tb.checkpoints.follow(workspace)

    def serve(self, server: socket.socket) -> None:
        server.settimeout(min(self.idle, 5.0))
        last = time.monotonic()
        while time.monotonic() - last < self.idle and self.home.is_dir():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            last = time.monotonic()
            with connection:
                if peer_uid(connection) != os.getuid():
                    continue  # another user's process: it may not write this user's turns
                connection.settimeout(30.0)
                try:
                    problem = self.answer(*_read(connection))
                except (OSError, ValueError) as error:
                    problem = events.problem(error)
                # a hook that gave up waiting: the event is applied all the same
                with contextlib.suppress(OSError):
                    connection.sendall(b"done\n" + (problem or "").encode())

    def close(self) -> None:
        self.tb.close()  # which stops its watchers


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m turnback.hooks.helper HOME", file=sys.stderr)
        return 2
    home = Path(argv[0])
    where = str(home)
    idle = float(os.environ.get("TURNBACK_HOOK_HELPER_IDLE") or 600)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(address(where))
    except OSError:
        return 0  # another helper serves this home
    server.listen(16)
    (home / "hooks").mkdir(parents=True, exist_ok=True)
    (home / "hooks" / "helper.pid").write_text(f"{os.getpid()}\n")
    helper = Helper(home, idle)
    try:
        helper.serve(server)
    finally:
        server.close()
        helper.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
