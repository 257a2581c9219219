"""``turnback acp``'s start: the agent started, and its ``initialize`` answered, before the
proxy has loaded.

An editor waits from starting ``turnback acp`` until ``initialize`` is answered. The proxy's
own start-up (turnback's engine and runtime, the store, asyncio, the CLI) costs as much CPU as
some agents' start-up; done before the agent starts it adds all of that to the wait, and on the
answer's path it makes the answer wait for modules the answer does not need. So:

1. the command line is read with nothing imported (:func:`command_line`; anything but a plain
   ``turnback [--home H] acp [--option VALUE]… -- AGENT…`` with valid values goes the ordinary
   way, through the CLI, which says what is wrong with it), and nothing but what starting a
   process needs is imported before the agent starts (not even ``typing``, ``dataclasses`` or
   ``subprocess``: :class:`Child` spawns it);
   a plain command line is then served without the CLI (:func:`turnback.acp.run`, by
   :mod:`turnback.launcher`), whose loading (click, every command) would only take CPU from the
   agent's start-up;
2. the agent is started at once, and a thread relays ``initialize`` (:func:`relay`) while the
   proxy loads and opens its store as usual, so both are ready by the time the editor's next
   request comes;
3. the editor's first message, when it is ``initialize``, is sent to the agent as it is (the
   proxy would send the same), and when the agent's answer is a result the editor gets it at
   once with turnback's additions (:func:`initialized`), whether the proxy has loaded or not:
   the answer's path is this module, :mod:`turnback.handshake` and :mod:`turnback.acp.offered`
   (plain data), never the engine, the store, the workspace, asyncio or the CLI;
4. when the editor's next message, sent before the proxy is ready, is a ``session/new`` the
   proxy would send on as it is (its ``cwd`` an absolute directory, into a home whose store
   is a SQLite file that is new or reads as one), it is asked of the agent here too
   (:func:`early_session`), and the agent's session kept durably in the home, a file synced
   with its directory (:func:`keep_answered`), before the editor is given turnback's id for
   it: neither the proxy's loading nor opening the store is on the way to a session. The proxy
   makes that file a row of its store before it serves anything else, and takes the agent
   session on as the session's (:meth:`turnback.acp.sessions.Sessions.adopt`); a proxy killed
   before it did leaves the file, which the next proxy on the home makes a row when it opens
   the store (:func:`keep_session`), so the session the editor was given is never lost;
5. the proxy, loaded, wakes the relay if it waits for the editor (:meth:`Launched.settled`),
   waits for it to stop, then takes over (:class:`Launched`): the pipes, the bytes read from
   each side and not yet handled, the ``initialize`` answered -- or still in flight, when
   anything else happened (another first message, an error answer, the agent gone,
   ``--initialize-timeout`` spent), in which case the proxy handles the editor's
   ``initialize`` as though it had sent it itself -- and the session answered, if one was.

The proxy opens its store and recovers while ``initialize`` is relayed and before it serves
any other method, as it does without this start, so what is durable, and when, does not change:
in a thread of its own (:func:`opening`), begun before the proxy loads, whose SQLite calls wait
on the disk while the proxy's imports use the CPU.

This module imports only the standard library at its top: it runs before anything else.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: importing ``typing`` takes longer than starting the agent
    import subprocess
    import threading
    from collections.abc import Sequence
    from typing import Any

#: The options ``turnback acp`` takes, each with a value (a test checks the CLI's are these).
ACP_OPTIONS = frozenset(
    {"--home", "--max-frame", "--initialize-timeout", "--restart-attempts", "--on-agent-crash"}
)
#: The id of the ``initialize`` sent ahead; the proxy's own requests to the agent start at 0.
INITIALIZE_ID = "turnback-initialize"
#: The id of a ``session/new`` sent ahead (step 4).
SESSION_NEW_ID = "turnback-session-new"
#: ``--initialize-timeout``'s default: generous, since some agents take seconds to start.
DEFAULT_INITIALIZE_TIMEOUT = 60.0
#: ``--max-frame``'s default and least value, in bytes.
DEFAULT_MAX_FRAME, LEAST_MAX_FRAME = 32 * 2**20, 1024
#: ``--restart-attempts``'s default.
DEFAULT_RESTART_ATTEMPTS = 2
#: ``--on-agent-crash``'s choices, the default first.
ON_AGENT_CRASH = ("continue", "stop")


class AcpLine:
    """A plain ``turnback acp`` command line, read (:func:`command_line`): the agent command and
    every option's value, defaults filled in."""

    __slots__ = (
        "agent",
        "home",
        "initialize_timeout",
        "max_frame",
        "on_agent_crash",
        "restart_attempts",
    )

    def __init__(
        self,
        agent: list[str],
        *,
        home: str | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
        initialize_timeout: float = DEFAULT_INITIALIZE_TIMEOUT,
        restart_attempts: int = DEFAULT_RESTART_ATTEMPTS,
        on_agent_crash: str = ON_AGENT_CRASH[0],
    ) -> None:
        self.agent = agent
        self.home = home
        self.max_frame = max_frame
        self.initialize_timeout = initialize_timeout
        self.restart_attempts = restart_attempts
        self.on_agent_crash = on_agent_crash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AcpLine) and repr(self) == repr(other)

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"AcpLine({values})"


class Launched:
    """What the start hands the proxy (see the module docstring). A plain class, not a
    dataclass: ``dataclasses`` imports ``inspect``, which the start cannot wait for."""

    __slots__ = (
        "agent",
        "answer",
        "command",
        "editor",
        "ended",
        "home",
        "params",
        "process",
        "relaying",
        "sent",
        "sent_at",
        "session",
        "switch",
        "wake",
    )

    def __init__(
        self,
        process: Child | subprocess.Popen[bytes] | None,
        *,
        sent: dict[str, Any] | None = None,
        command: Sequence[str] = (),
        home: str | os.PathLike[str] | None = None,
    ) -> None:
        self.process = process
        #: the agent command, and the home (``--home``; None: the default) the proxy serves
        self.command = list(command)
        self.home = home
        #: read from the editor and not handled: the proxy reads these first
        self.editor = b""
        #: the editor's input was read to its end (a terminal shows its end only once)
        self.ended = False
        #: read from the agent and not handled: the proxy's connection to it reads these first
        self.agent = b""
        #: the ``initialize`` params sent to the agent under :data:`INITIALIZE_ID`, if it was sent
        self.sent = sent
        #: the editor's ``initialize`` params, when its answer was given here
        self.params: dict[str, Any] | None = None
        #: the agent's answer to it (as it wrote it), when the editor has been given it
        self.answer: dict[str, Any] | None = None
        #: when it was sent (``time.monotonic()``): its ``--initialize-timeout`` runs from then
        self.sent_at: float | None = None
        #: the thread relaying ``initialize``, while it may
        self.relaying: threading.Thread | None = None
        #: a pipe whose writing wakes the relay waiting for a ``session/new`` (step 4): the
        #: proxy is ready, and reads the editor itself
        self.wake: tuple[int, int] | None = None
        #: the ``session/new`` answered here, as :func:`keep_answered` kept it (its path under
        #: ``marker``), for the proxy to take on
        self.session: dict[str, Any] | None = None
        #: the interpreter's switch interval before the start made it short (see :func:`start`)
        self.switch: float | None = None

    def settled(self) -> None:
        """Wait until the relay has stopped: from then on, the pipes and what is left here are
        the proxy's."""
        if self.wake is not None:
            os.write(self.wake[1], b"\0")
        if self.relaying is not None:
            self.relaying.join()
        if self.wake is not None:
            for fd in self.wake:
                os.close(fd)
            self.wake = None
        if self.switch is not None:
            sys.setswitchinterval(self.switch)
            self.switch = None


def command_line(argv: Sequence[str]) -> AcpLine | None:
    """A plain ``[--home H] [--no-pager] acp [--option VALUE]… -- AGENT…`` command line whose
    values are all valid; None for any other command line (the CLI then says what is wrong)."""
    args = list(argv)
    at = 0
    home: str | None = None
    while at < len(args) and args[at] != "acp":
        if args[at] == "--no-pager":
            at += 1
        elif args[at].startswith("--home="):
            home = args[at].partition("=")[2]
            at += 1
        elif args[at] == "--home" and at + 1 < len(args):
            home = args[at + 1]
            at += 2
        else:
            return None
    at += 1
    options: dict[str, str] = {}
    while at < len(args) and args[at] != "--":
        name, equals, value = args[at].partition("=")
        if name not in ACP_OPTIONS or (not equals and at + 1 >= len(args)):
            return None
        options[name] = value if equals else args[at + 1]
        at += 1 if equals else 2
    agent = args[at + 1 :]
    if at >= len(args) or not agent:
        return None
    home = options.get("--home", home)
    on_agent_crash = options.get("--on-agent-crash", ON_AGENT_CRASH[0])
    try:
        line = AcpLine(
            agent,
            home=home,
            max_frame=int(options.get("--max-frame", DEFAULT_MAX_FRAME)),
            initialize_timeout=float(
                options.get("--initialize-timeout", DEFAULT_INITIALIZE_TIMEOUT)
            ),
            restart_attempts=int(options.get("--restart-attempts", DEFAULT_RESTART_ATTEMPTS)),
            on_agent_crash=on_agent_crash,
        )
    except ValueError:
        return None
    if (
        (home is not None and (not home or os.path.isfile(home)))  # the CLI says why
        or line.max_frame < LEAST_MAX_FRAME
        or not 0 < line.initialize_timeout < float("inf")
        or line.restart_attempts < 0
        or on_agent_crash not in ON_AGENT_CRASH
    ):
        return None
    return line


def initialized(agent: dict[str, Any]) -> dict[str, Any]:
    """The editor's ``initialize`` answer: the agent's, as it wrote it, plus only turnback's
    documented additions -- the session methods it serves from its store (``loadSession`` and
    ``sessionCapabilities`` ``list``, ``resume``, ``close``, ``delete`` and the unstable
    ``fork``), the draft ``session.rewind``, and its ``_meta.turnback`` key. The agent's own
    ``_meta.turnback`` (its checkpoint and rollback extensions) is turnback's to use, not the
    editor's."""
    import copy

    import turnback
    from turnback.acp.offered import NAMES

    response = copy.deepcopy(agent)
    capabilities = response.get("agentCapabilities")
    if not isinstance(capabilities, dict):
        capabilities = response["agentCapabilities"] = {}
    capabilities["loadSession"] = True
    sessions = capabilities.get("sessionCapabilities")
    if not isinstance(sessions, dict):
        sessions = capabilities["sessionCapabilities"] = {}
    for feature in ("list", "resume", "close", "delete", "fork"):
        if not isinstance(sessions.get(feature), dict):
            sessions[feature] = {}
    # The draft session/rewind (RFD "Session Rewind"), served for every agent.
    session = capabilities.get("session")
    if not isinstance(session, dict):
        session = capabilities["session"] = {}
    session["rewind"] = {}
    for holder in (capabilities, response):
        meta = holder.get("_meta")
        if isinstance(meta, dict) and "turnback" in meta:
            del meta["turnback"]
            if not meta:
                del holder["_meta"]
    meta = response.get("_meta")
    if not isinstance(meta, dict):
        meta = response["_meta"] = {}
    meta["turnback"] = {"proxy": turnback.__version__, "commands": sorted(NAMES)}
    return response


def _ready(fds: tuple[int, ...], deadline: float | None = None) -> list[int]:
    """Those of ``fds`` that have something to read (or are at their end); none when the
    ``deadline`` (of ``time.monotonic()``) comes first."""
    import select
    import time

    wait = None if deadline is None else max(0.0, deadline - time.monotonic())
    return select.select(fds, [], [], wait)[0]


def relay(
    launched: Launched, editor: tuple[int, int] = (0, 1), initialize_timeout: float | None = None
) -> None:
    """Steps 3 and 4 of the module docstring, between the editor (``editor``: the descriptors to
    read it and write to it) and the agent, until the editor has its answer, the agent has had
    ``initialize_timeout`` seconds to answer, or either side is gone; leaves in ``launched``
    where it stopped. It imports nothing the proxy would make it wait for."""
    import json
    import time

    process = launched.process
    assert process is not None and process.stdin is not None
    line = _editor_line(launched, editor[0], launched.wake[0] if launched.wake else None)
    if line is None:
        return
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # the proxy's to refuse, as it would
        return
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return
    params = message.get("params")
    if not isinstance(params, dict) or "protocolVersion" not in params or "id" not in message:
        return
    from turnback.handshake import agent_initialize

    launched.sent = agent_initialize(params, params["protocolVersion"])
    request = {"jsonrpc": "2.0", "id": INITIALIZE_ID, "method": "initialize"}
    try:
        launched.sent_at = time.monotonic()
        _write(process.stdin.fileno(), _line({**request, "params": launched.sent}))
    except OSError:
        return  # the agent is gone: the proxy finds out and says so
    deadline = None if initialize_timeout is None else launched.sent_at + initialize_timeout
    answer = _awaited(launched, editor[0], INITIALIZE_ID, deadline)
    if answer is None or not isinstance(answer[0].get("result"), dict):
        return  # an error is the proxy's to give, as it would
    result = answer[0]["result"]
    _write(editor[1], _line({"jsonrpc": "2.0", "id": message["id"], "result": initialized(result)}))
    launched.params, launched.answer = params, result
    launched.editor = launched.editor[len(line) + 1 :]
    launched.agent = launched.agent[: answer[1]] + launched.agent[answer[2] :]
    if launched.wake is None or any(map(_asks, launched.agent.split(b"\n"))):
        return  # no thread of the start's, or a request of the agent's came: the proxy's
    early_session(launched, editor)


def _editor_line(launched: Launched, fd: int, wake: int | None = None) -> bytes | None:
    """The editor's next line, read into ``launched.editor`` (which keeps it); None when the
    editor's input ended first, or the proxy woke the relay (``wake``) to take over."""
    while b"\n" not in launched.editor:
        ready = _ready((fd,) if wake is None else (fd, wake))
        if wake in ready:
            return None
        data = os.read(fd, 1 << 16)
        if not data:
            launched.ended = True
            return None
        launched.editor += data
    return launched.editor.partition(b"\n")[0]


def _awaited(
    launched: Launched, fd: int, rpc_id: str, deadline: float | None
) -> tuple[dict[str, Any], int, int] | None:
    """The agent's answer to the request ``rpc_id`` just sent it, and where its line is in
    ``launched.agent`` (start, end past its newline), which holds all the agent wrote meanwhile;
    the editor's input is kept in ``launched.editor`` while it waits. None when the agent
    gives no answer by ``deadline`` (of ``time.monotonic()``), or either side is gone."""
    process = launched.process
    assert process is not None and process.stdout is not None
    agent = process.stdout.fileno()
    start = launched.agent.rfind(b"\n") + 1  # what came before was read before it was sent
    while True:
        ready = _ready((agent, fd), deadline)
        if fd in ready:  # kept for the proxy; at its end, the editor is gone
            data = os.read(fd, 1 << 16)
            launched.editor += data
            if not data:
                launched.ended, ready = True, []
        if not ready:
            return None
        if agent not in ready:
            continue
        data = os.read(agent, 1 << 16)
        if not data:
            return None
        launched.agent += data
        while (end := launched.agent.find(b"\n", start)) >= 0:
            answer = _answer(launched.agent[start:end], rpc_id)
            if answer is None and _asks(launched.agent[start:end]):
                return None  # a request of the agent's: the proxy's to answer, at once
            if answer is not None:
                return answer, start, end + 1
            start = end + 1


def early_session(launched: Launched, editor: tuple[int, int]) -> None:
    """Step 4 of the module docstring: the editor's ``session/new``, when it is the next thing
    it sends before the proxy is ready, opened here -- the agent asked as the proxy would ask
    it, the answer kept durably in the home (:func:`keep_answered`) and given to the editor
    with turnback's session id -- and left in ``launched.session`` for the proxy to take on.
    Anything else, an agent's error, or nothing kept, is left to the proxy, as it would be."""
    from turnback.home import home_of

    process = launched.process
    assert process is not None and process.stdin is not None and launched.wake is not None
    line = _editor_line(launched, editor[0], launched.wake[0])
    asked = None if line is None else _session_new(line)
    home = home_of(launched.home)
    if asked is None or not _store_ahead(home):
        return
    rpc_id, cwd, servers = asked
    cwd = os.path.realpath(os.path.expanduser(cwd))  # as the proxy records its workspace
    params = {"cwd": cwd, "mcpServers": servers}
    request = {"jsonrpc": "2.0", "id": SESSION_NEW_ID, "method": "session/new", "params": params}
    try:
        _write(process.stdin.fileno(), _line(request))
    except OSError:
        return
    # As long as the agent takes (the proxy's own session/new waits as long): asked again, it
    # would open a second session beside the first, whose answer no one waits for.
    answer = _awaited(launched, editor[0], SESSION_NEW_ID, None)
    if answer is None:
        return  # gone, or a request of the agent's: the proxy asks again
    launched.agent = launched.agent[: answer[1]] + launched.agent[answer[2] :]
    result = answer[0].get("result")
    if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
        return  # the proxy asks again, and gives the editor the agent's error as it would
    assert line is not None
    session = {
        "session": os.urandom(16).hex(),
        "workspace": cwd,
        "agent": " ".join(launched.command),
        "agentSession": result["sessionId"],
        "mcpServers": servers,
        "response": result,
    }
    answered = {k: v for k, v in result.items() if k != "sessionId"}
    answered["sessionId"] = session["session"]
    answer_line = _line({"jsonrpc": "2.0", "id": rpc_id, "result": answered})
    try:
        session["marker"] = keep_answered(home, session)
    except (OSError, ValueError) as error:  # the proxy opens a session of its own, and says why
        print(
            f"turnback acp: a new session could not be kept in the home: {error}", file=sys.stderr
        )
        return
    launched.session = session
    launched.editor = launched.editor[len(line) + 1 :]
    _write(editor[1], answer_line)


#: The home's SQLite database (``turnback.store.DEFAULT_DATABASE``), and how such a file begins.
DATABASE, SQLITE_HEADER = "turnback.db", b"SQLite format 3\x00"


def _store_ahead(home: str) -> bool:
    """Whether a ``session/new`` may be answered before the store is open: the home's store is
    a SQLite file that is yet to be made or begins as one does. A damaged file, as a database
    elsewhere (``TURNBACK_DATABASE_URL``) that only opening it shows is reachable, is the
    proxy's to open first, so that what is wrong is the answer to the ``session/new``."""
    if os.environ.get("TURNBACK_DATABASE_URL"):
        return False
    try:
        with open(os.path.join(home, DATABASE), "rb") as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _session_new(line: bytes) -> tuple[Any, str, list[Any]] | None:
    """(id, cwd, mcpServers) of a ``session/new`` request the proxy would send on as it is
    (a ``cwd`` that is an absolute directory); None for anything else."""
    import json

    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("method") != "session/new":
        return None
    params = message.get("params")
    if "id" not in message or not isinstance(params, dict):
        return None
    cwd, servers = params.get("cwd"), params.get("mcpServers") or []
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or not os.path.isdir(cwd):
        return None
    if not isinstance(servers, list):
        return None
    return message["id"], cwd, servers


def _asks(line: bytes) -> bool:
    """Whether ``line`` is a request (not a notification) from the agent."""
    if b'"method"' not in line:  # most lines are updates and answers: no parse for them
        return False
    import json

    try:
        frame = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(frame, dict) and "method" in frame and "id" in frame


def _answer(line: bytes, rpc_id: str) -> dict[str, Any] | None:
    import json

    try:
        frame = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if isinstance(frame, dict) and frame.get("id") == rpc_id and "method" not in frame:
        return frame
    return None


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _line(frame: dict[str, Any]) -> bytes:
    import json

    try:
        return json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    except UnicodeEncodeError:  # a lone surrogate the agent escaped: escaped again, as it came
        return json.dumps(frame, separators=(",", ":")).encode() + b"\n"


class Child:
    """The agent's process, started by :func:`started` with ``os.posix_spawnp`` rather than
    ``subprocess.Popen``, whose import (``signal``, ``threading``, ``locale``, ``selectors`` and
    more) would come before the agent starts: 12 ms here against ``signal``'s 5, added to every
    ``initialize``. It starts the agent as Popen would for ``turnback acp`` (its stdin and stdout
    pipes, stderr shared, a process group of its own, the signals Python ignores back to their
    defaults, this process's other descriptors not passed on) and has as much of Popen's
    interface as turnback uses: ``args``, ``pid``, ``stdin``, ``stdout``, ``returncode``,
    :meth:`poll`, :meth:`wait` (from any thread, as the sidecar does), :meth:`kill`."""

    __slots__ = ("_reaping", "args", "pid", "returncode", "stdin", "stdout")

    def __init__(self, command: Sequence[str]) -> None:
        import signal

        self.args = list(command)
        self.returncode: int | None = None
        agent_in, stdin = os.pipe()
        stdout, agent_out = os.pipe()
        ignored = ("SIGPIPE", "SIGXFZ", "SIGXFSZ")  # Python ignores them; Popen restores them
        try:
            self.pid = os.posix_spawnp(
                self.args[0],
                self.args,
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, agent_in, 0),
                    (os.POSIX_SPAWN_DUP2, agent_out, 1),
                    *((os.POSIX_SPAWN_CLOSE, fd) for fd in _passed_on()),
                ],
                setpgroup=0,  # a process group of its own, stopped whole (runtime.sidecar)
                setsigdef=[getattr(signal, name) for name in ignored if hasattr(signal, name)],
            )
        except BaseException:
            os.close(stdin)
            os.close(stdout)
            raise
        finally:
            os.close(agent_in)
            os.close(agent_out)
        self.stdin = open(stdin, "wb")  # noqa: SIM115  # the caller's, as Popen's pipes are
        self.stdout = open(stdout, "rb")  # noqa: SIM115
        import threading  # once the agent is on its way

        self._reaping = threading.Lock()  # held by whoever waits for the exit status

    def poll(self) -> int | None:
        """The exit status (a signal's negated number) once the agent has exited; None until."""
        if self.returncode is None and self._reaping.acquire(blocking=False):
            try:
                self._reap(os.WNOHANG)
            finally:
                self._reaping.release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status, once the agent has exited; ``subprocess.TimeoutExpired`` when
        ``timeout`` seconds pass first. A thread that waits while another does sees the status
        the other read."""
        if timeout is None:
            with self._reaping:
                while self.returncode is None:
                    self._reap(0)
            return self.returncode
        import time

        deadline, pause = time.monotonic() + timeout, 0.0005
        while (returncode := self.poll()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                import subprocess

                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)
        return returncode

    def kill(self) -> None:
        """SIGKILL, unless it has exited (its pid may be another process's by then)."""
        import signal

        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def _reap(self, options: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, options)
        except ChildProcessError:  # reaped by someone else: its status is lost, as Popen says
            pid, status = self.pid, 0
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)


def _passed_on() -> list[int]:
    """This process's descriptors above stderr that a child would inherit (an editor's, say):
    Popen closes them in the agent, and so does :class:`Child`."""
    try:
        names = os.listdir("/dev/fd")
    except OSError:
        return []
    passed = []
    for name in names:
        try:
            if int(name) > 2 and os.get_inheritable(int(name)):
                passed.append(int(name))
        except (ValueError, OSError):  # not a descriptor, or the listing's own, closed
            continue
    return passed


def started(command: Sequence[str], home: str | os.PathLike[str] | None = None) -> Launched:
    """The agent command started (:class:`Child`), with pipes for stdin and stdout."""
    try:
        process = Child(command)
    except OSError:
        return Launched(None)  # the proxy answers initialize with why it cannot start it
    return Launched(process, command=command, home=home)


def start(
    agent: Sequence[str],
    initialize_timeout: float | None = None,
    home: str | os.PathLike[str] | None = None,
) -> Launched:
    """Start the agent, and relay ``initialize`` and a ``session/new`` in a thread (steps 2 to
    4) while the caller goes on to load the proxy (``home``: the one it serves)."""
    import threading

    launched = started(agent, home)
    if launched.process is not None:
        launched.wake = os.pipe()
        # The proxy loads meanwhile, on the same interpreter: its imports give way to the relay
        # within 0.5 ms when the relay has something to do, not the 5 ms that would add up
        # over the reads and writes of an answer. As it was once the proxy takes over.
        launched.switch = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        timeout = DEFAULT_INITIALIZE_TIMEOUT if initialize_timeout is None else initialize_timeout
        launched.relaying = threading.Thread(
            target=_relay, args=(launched, timeout), name="turnback-initialize", daemon=True
        )
        launched.relaying.start()
    return launched


class Opening:
    """turnback's store opened and recovered in a thread of its own (:func:`opening`) while the
    proxy loads: its SQLite calls wait on the disk with the interpreter's lock released, so the
    proxy's imports go on meanwhile. Every method but ``initialize`` waits for :meth:`result`."""

    __slots__ = ("_error", "_tb", "_thread")

    def __init__(self, home: str | os.PathLike[str] | None) -> None:
        import threading

        self._tb: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._open, args=(home,), name="turnback-open", daemon=True
        )
        self._thread.start()

    def _open(self, home: str | os.PathLike[str] | None) -> None:
        try:
            self._tb = open_store(home)
        except BaseException as error:  # the proxy's to report, from the thread that waits
            self._error = error

    def result(self) -> Any:
        """The open :class:`~turnback.Turnback`, once it is; what stopped it, raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._tb


def opening(home: str | os.PathLike[str] | None) -> Opening:
    """Open the store at ``home`` beside the caller (:class:`Opening`). The engine is imported
    first, here, so the thread imports little beside the caller's imports."""
    import turnback.engine.handle  # noqa: F401

    return Opening(home)


def open_store(home: str | os.PathLike[str] | None) -> Any:
    """turnback opened on ``home`` and recovered (turns a killed proxy left running), as the
    proxy serves it; closed again when recovery fails."""
    import turnback

    tb = turnback.open(home)
    try:
        tb.recover()
        for marker in answered(tb.home):
            try:
                keep_session(tb, marker)
            except (OSError, ValueError, KeyError, TypeError) as error:  # left, said each start
                print(
                    f"turnback acp: {marker} names no session it can keep: {error}", file=sys.stderr
                )
    except BaseException:
        tb.close()
        raise
    return tb


#: The home's directory of sessions answered (step 4) and not yet rows of the store.
ANSWERED = "answered-sessions"


def keep_answered(home: str, session: dict[str, Any]) -> str:
    """Keep ``session`` (a ``session/new`` answered before the store was open) durably in
    ``home``, before the editor is given its id: a file per session, synced with its directory,
    which the proxy makes a row of the store once it has opened it (:func:`keep_session`),
    and so does every later proxy on the home. Returns its path."""
    import json

    from turnback.durable import make_directories, sync_directory

    directory = os.path.join(home, ANSWERED)
    make_directories(directory)
    path = os.path.join(directory, session["session"] + ".json")
    aside = path + ".tmp"
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _write(fd, json.dumps(session).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(aside, path)
    sync_directory(directory)
    return path


def answered(home: str | os.PathLike[str]) -> list[str]:
    """The sessions kept by :func:`keep_answered` in ``home`` that are not rows yet: their
    files, oldest first (files left half-written, a minute old, removed on the way)."""
    import contextlib
    import time

    directory = os.path.join(os.fspath(home), ANSWERED)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if name.endswith(".tmp"):  # a start killed while it wrote one: no editor was answered
            with contextlib.suppress(OSError):
                aside = os.path.join(directory, name)
                if time.time() - os.stat(aside).st_mtime > 60:  # not one being written now
                    os.unlink(aside)
        if name.endswith(".json"):
            path = os.path.join(directory, name)
            try:
                found.append((os.stat(path).st_mtime_ns, path))
            except FileNotFoundError:  # made a row meanwhile, by another proxy on the home
                continue
    return [path for _, path in sorted(found)]


def keep_session(tb: Any, marker: str, kept: dict[str, Any] | None = None) -> Any:
    """The session kept in ``marker`` (:func:`keep_answered`; ``kept``: what it holds, when
    the caller has it) made a row of ``tb``'s store, unless it is one already (the store's
    opening, or another proxy on the home, made it), then the file removed; returns the
    session (None when the file went before it was read: another proxy made the row). Applied
    twice, or by two proxies at once, it ends the same."""
    import json

    from turnback.durable import sync_directory
    from turnback.service import CreateSession, Service

    if kept is None:
        try:
            with open(marker, "rb") as file:
                kept = json.load(file)
        except FileNotFoundError:  # made a row meanwhile, by another proxy on the home
            return None
    from turnback import faults

    made = CreateSession(kept["workspace"], None, kept["agent"], kept["session"], existing=True)
    session = Service.of(tb).run(made)
    faults.point("answered.row")  # a row, and the file still there: made a row again, the same
    try:
        os.unlink(marker)
    except FileNotFoundError:
        pass
    else:
        sync_directory(os.path.dirname(marker))
    return session


def _relay(launched: Launched, initialize_timeout: float) -> None:
    import contextlib

    with contextlib.suppress(OSError):  # the editor is gone: the proxy finds out and ends
        relay(launched, initialize_timeout=initialize_timeout)
