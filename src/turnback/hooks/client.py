"""``turnback hook AGENT EVENT`` as the agent runs it: the standard library only.

A hook runs on every prompt and tool call, and the agent waits for it. Starting Python and
importing the engine costs far more than the work (about 100 ms against a few), so a hook hands
its event to the home's helper (:mod:`turnback.hooks.helper`), a process that keeps the engine
imported, the store open and a file watcher on each workspace, over a unix socket; it answers
once the event is applied and durable. Where no helper answers, the hook applies the event in
its own process (:mod:`turnback.hooks.events`), then starts a helper for the next one.

Some facts this depends on:

- The helper is only a faster way to the same work: it keeps no turn in memory that a later
  event needs (each event reads its turn back from the store, as a hook process does), so a
  helper that dies loses nothing acknowledged and the next hook runs in its own process.
- An event the helper was given but did not answer (it died in the middle) is not applied
  again by the hook: it may have been, and a prompt applied twice would begin two turns. The
  hook reports it and the agent goes on.
- The helper's address is in Linux's abstract socket namespace, named by the home and by this
  code's version, so nothing is left on disk and a new turnback never talks to an old helper.
  An abstract address has no file permissions, so each side checks the other's user id
  (``SO_PEERCRED``): a hook tells nothing to another user's process that took the name, and
  the helper applies nothing another user sends.
  Elsewhere every hook runs in its own process. ``TURNBACK_HOOK_HELPER=0`` turns the helper off.
"""

from __future__ import annotations

import os
import socket
import sys

from turnback.home import home_of
from turnback.hooks.agents import agent_process

#: How long a hook waits for the helper's answer: longer than any agent waits for the hook.
ANSWER_TIMEOUT = 300.0


def enabled() -> bool:
    return sys.platform == "linux" and os.environ.get("TURNBACK_HOOK_HELPER", "1") != "0"


def address(home: str) -> str:
    """The helper's socket: abstract (a leading NUL), named by the home and this code's
    version (its files' last change)."""
    here = os.path.dirname(os.path.abspath(__file__))
    version = max(
        os.stat(os.path.join(here, name)).st_mtime_ns
        for name in ("client.py", "events.py", "helper.py")
    )
    name = f"\0turnback-hooks-{version:x}-{os.path.realpath(home)}"
    if len(name.encode()) <= 107:  # what an address holds
        return name
    import hashlib  # ~3 ms, only for a home whose path is too long to name it

    key = hashlib.sha256(name.encode()).hexdigest()[:32]
    return f"\0turnback-hooks-{key}"


def peer_uid(connection: socket.socket) -> int:
    """The user id of the process at the other end of a unix socket (Linux's
    ``SO_PEERCRED``: pid, uid and gid, three C ints)."""
    import struct

    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return int(struct.unpack("3i", credentials)[1])


def request(agent: str, event: str, owner_pid: int, stdin: str) -> bytes:
    """What a hook sends its helper: three lines (agent, event, the agent's pid), then the
    event's JSON as the agent gave it. JSON is not parsed here: that alone would cost a hook
    more time than its helper's work."""
    return f"{agent}\n{event}\n{owner_pid}\n{stdin}".encode("utf-8", "surrogateescape")


def ask_helper(home: str, message: bytes) -> str | None:
    """The helper's answer (empty: applied; else what went wrong); None when no helper
    listens (then nothing was sent)."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.settimeout(1.0)
        try:
            client.connect(address(home))
        except OSError:
            return None
        if peer_uid(client) != os.getuid():
            return None  # someone else's process took the name: tell it nothing
        client.settimeout(ANSWER_TIMEOUT)
        try:
            client.sendall(message)
            client.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
        except OSError as error:
            return f"the hook helper did not answer ({error}); the event may be lost"
        if not answer.startswith(b"done\n"):
            return "the hook helper did not answer; the event may be lost"
        return answer[5:].decode("utf-8", "replace")
    finally:
        client.close()


def start_helper(home: str) -> None:
    """Start the home's helper, on its own: it outlives this hook and its agent, and ends
    after a while with nothing to do (a second one finds the address taken and ends)."""
    import subprocess  # only here: a hook that reaches its helper never needs it

    try:
        subprocess.Popen(
            [sys.executable, "-m", "turnback.hooks.helper", home],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return  # the hooks run in their own processes instead


def read_stdin() -> str:
    """The hook's standard input, whatever it holds: bytes that are not UTF-8 are replaced, and
    an input that cannot be read is empty (the event is then refused, as any bad one is)."""
    try:
        return sys.stdin.buffer.read().decode("utf-8", "replace")
    except BaseException:  # a hook must never break its agent
        return ""


def run(
    agent: str, event: str, stdin: str, *, home: str | os.PathLike[str] | None = None
) -> str | None:
    """Apply a hook event, through the helper when one runs; never raises. Returns what went
    wrong, if anything (the session's activities say it too, where there is a session)."""
    try:
        place = home_of(home)
        owner = agent_process(agent)
        if enabled():
            answer = ask_helper(place, request(agent, event, owner, stdin))
            if answer is not None:
                return answer or None
        from turnback.hooks.events import run as in_process

        problem = in_process(agent, event, stdin, home=place, owner_pid=owner)
        if enabled():
            start_helper(place)
        return problem
    except BaseException as error:  # a hook must never hold up or break its agent
        return f"{type(error).__name__}: {error}"
