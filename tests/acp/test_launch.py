"""`turnback acp`'s start (turnback.acp.launch): its command line, and initialize relayed before
the proxy has loaded -- answered there, or handed over to the proxy in flight."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

import turnback.acp
from tests.acp.harness import SCRIPTED, held_at_the_door, run
from turnback.acp import launch
from turnback.cli import cli
from turnback.errors import AgentUnavailable
from turnback.runtime.policy import ResumePolicy
from turnback.runtime.rpc import RequestError
from turnback.runtime.sidecar import Sidecar, Started

#: An agent that answers the first line it reads (an initialize) after ``BEFORE`` lines of its
#: own, with ``ANSWER`` (``{}`` becomes the request's id), then stays until its stdin closes.
TOY = (
    "import json, os, sys, time\n"
    "request = json.loads(sys.stdin.readline())\n"
    "time.sleep(float(os.environ.get('DELAY', '0')))\n"
    "sys.stdout.write(os.environ.get('BEFORE', ''))\n"
    "answer = json.loads(os.environ['ANSWER'])\n"
    "sys.stdout.write(json.dumps({'jsonrpc': '2.0', 'id': request['id'], **answer}) + '\\n')\n"
    "sys.stdout.flush()\n"
    "sys.stdin.read()\n"
)
INITIALIZE = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"protocolVersion": 1}}
NEXT = b'{"jsonrpc":"2.0","id":8,"method":"session/list","params":{}}\n'
RESULT = {"result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": False}}}
NOTE = '{"jsonrpc":"2.0","method":"_toy/hello","params":{}}\n'


def relayed(
    answer: dict[str, Any],
    *,
    timeout: float | None = None,
    delay: float = 0,
    gone: bool = False,
    before: str = NOTE,
) -> tuple[Any, ...]:
    """The start's relay between an editor (pipes) and the toy agent, which answers after
    ``delay`` seconds; ``timeout``: the agent's ``--initialize-timeout``; ``gone``: the editor
    closes its end once it has written. Returns what was handed over and what the editor was
    sent."""
    env = {**os.environ, "ANSWER": json.dumps(answer), "BEFORE": before, "DELAY": str(delay)}
    process = subprocess.Popen(
        [sys.executable, "-c", TOY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    editor_in, to_proxy = os.pipe()
    from_proxy, editor_out = os.pipe()
    os.write(to_proxy, json.dumps(INITIALIZE).encode() + b"\n" + NEXT)
    if gone:
        os.close(to_proxy)
    launched = launch.Launched(process)
    launch.relay(launched, (editor_in, editor_out), timeout)
    os.close(editor_out)
    with os.fdopen(from_proxy, "rb") as sent:
        written = sent.read()
    for fd in (editor_in, *(() if gone else (to_proxy,))):
        os.close(fd)
    return launched, written


async def take_over(launched: launch.Launched) -> Sidecar:
    """A sidecar carrying on from the start, as the proxy's does."""

    async def handler(method: str, params: Any, is_notification: bool) -> Any:
        return None

    assert launched.process is not None
    seen: list[str] = []

    def watch(frame: dict[str, Any], line: bytes) -> bool:
        seen.append(str(frame.get("method")))
        return True

    sidecar = Sidecar(
        ("toy",),
        cwd=Path.cwd(),
        env=None,
        handler=handler,
        watch=watch,
        rejected=lambda rejected: None,
    )
    sidecar.seen = seen  # type: ignore[attr-defined]
    await sidecar.spawn(
        Started(
            launched.process, launched.agent, launched.sent, launch.INITIALIZE_ID, launched.answer
        )
    )
    return sidecar


def test_an_answer_before_the_proxy_is_ready_goes_to_the_editor_at_once() -> None:
    launched, written = relayed(RESULT)
    answer = json.loads(written)
    assert answer["id"] == 7  # the editor's id, not the one the agent was asked with
    capabilities = answer["result"]["agentCapabilities"]
    assert capabilities["loadSession"] is True  # turnback's additions
    assert answer["result"]["_meta"]["turnback"]["commands"]
    assert launched.answer == RESULT["result"] and launched.params == INITIALIZE["params"]
    assert launched.editor == NEXT  # the editor's next message is the proxy's to read
    assert launched.agent == NOTE.encode()  # what the agent said first, kept in order
    assert launched.sent is not None and launched.sent["clientInfo"]["name"] == "turnback"

    async def scenario() -> None:
        sidecar = await take_over(launched)
        features = await sidecar.open(5.0)
        assert sidecar.initialize_response == RESULT["result"] and not features.load_session
        await asyncio.sleep(0.1)
        assert sidecar.seen == ["_toy/hello"]  # type: ignore[attr-defined]
        await sidecar.close()

    run(scenario())


def test_a_line_too_deep_to_parse_before_the_answer_is_left_for_the_proxy() -> None:
    deep = "[" * 100_000 + "\n"
    launched, written = relayed(RESULT, before=deep)
    assert json.loads(written)["result"]["agentCapabilities"]["loadSession"] is True
    assert launched.agent == deep.encode()  # the proxy's wire reports it, as any bad line


def test_an_error_answer_is_left_for_the_proxy_to_give_as_it_would() -> None:
    error = {"error": {"code": -32000, "message": "no key", "data": {"why": "none"}}}
    launched, written = relayed(error)
    assert written == b"" and launched.answer is None and launched.params is None
    assert launched.editor.startswith(json.dumps(INITIALIZE).encode())

    async def scenario() -> None:
        sidecar = await take_over(launched)
        with pytest.raises(AgentUnavailable, match="refused initialize") as refused:
            await sidecar.open(5.0)
        cause = refused.value.__cause__
        assert isinstance(cause, RequestError) and cause.code == -32000
        assert cause.data == {"why": "none"}
        assert cause.to_error_obj() == error["error"]  # passed on as the agent wrote it

    run(scenario())


def test_an_answer_later_than_the_timeout_is_the_proxys_to_take_over_in_flight() -> None:
    launched, written = relayed(RESULT, timeout=0.1, delay=0.5)
    assert written == b"" and launched.sent is not None and launched.answer is None

    async def scenario() -> None:
        sidecar = await take_over(launched)
        await sidecar.open(5.0)
        assert sidecar.initialize_response == RESULT["result"]
        await sidecar.close()

    run(scenario())


def test_an_editor_gone_while_the_agent_starts_is_the_proxys_to_find_at_once() -> None:
    """Not a minute's wait for an agent that does not answer, for an editor no longer there."""
    launched, written = relayed(RESULT, delay=60, gone=True)
    assert written == b"" and launched.sent is not None and launched.answer is None
    assert launched.editor == json.dumps(INITIALIZE).encode() + b"\n" + NEXT  # all of it kept
    launched.process.kill()
    launched.process.wait()


def test_an_agent_gone_before_answering_is_an_error_naming_it() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    process.wait()
    launched = launch.Launched(process, sent={"protocolVersion": 1})

    async def scenario() -> None:
        sidecar = await take_over(launched)
        with pytest.raises(AgentUnavailable, match=r"exited \(exit status 0\) during initialize"):
            await sidecar.open(5.0)

    run(scenario())


def line(agent: list[str], **options: Any) -> launch.AcpLine:
    return launch.AcpLine(agent, **options)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["acp", "--", "agent", "--flag"], line(["agent", "--flag"])),
        (
            ["--home", "h", "--no-pager", "acp", "--max-frame", "9999", "--", "a"],
            line(["a"], home="h", max_frame=9999),
        ),
        (
            ["--home=h", "acp", "--restart-attempts=1", "--", "a", "--", "b"],
            line(["a", "--", "b"], home="h", restart_attempts=1),
        ),
        (
            ["--home", "h", "acp", "--home", "i", "--on-agent-crash", "stop", "--", "a"],
            line(["a"], home="i", on_agent_crash="stop"),
        ),
        (["acp", "--initialize-timeout", "2.5", "--", "a"], line(["a"], initialize_timeout=2.5)),
        # the CLI says what is wrong with each of these
        (["acp", "--initialize-timeout=soon", "--", "a"], None),
        (["acp", "--initialize-timeout=0", "--", "a"], None),
        (["acp", "--initialize-timeout=inf", "--", "a"], None),
        (["acp", "--max-frame", "10", "--", "a"], None),
        (["acp", "--restart-attempts", "-1", "--", "a"], None),
        (["acp", "--on-agent-crash", "panic", "--", "a"], None),
        (["acp", "--home", "", "--", "a"], None),
        (["acp", "--bogus", "--", "a"], None),
        (["acp", "agent"], None),
        (["acp", "--"], None),
        (["acp", "--max-frame"], None),
        (["sessions"], None),
        (["--json", "acp", "--", "a"], None),
    ],
)
def test_only_a_plain_command_line_with_valid_values_is_read_before_the_cli(
    argv: list[str], expected: launch.AcpLine | None
) -> None:
    assert launch.command_line(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["acp", "--", "true", "x"],
        ["--home", "h", "acp", "--max-frame=4096", "--initialize-timeout", "0.5", "--", "true"],
        ["--home=h", "acp", "--home", "i", "--restart-attempts", "0", "--", "true"],
        ["acp", "--on-agent-crash=stop", "--", "true", "--", "y"],
    ],
)
def test_the_cli_serves_a_plain_command_line_as_the_start_does(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain command line is served without the CLI; the CLI must serve it alike."""
    monkeypatch.delenv("TURNBACK_HOME", raising=False)
    served: list[launch.AcpLine] = []

    def serve(line: launch.AcpLine, early: launch.Launched | None) -> int:
        if early is not None and early.process is not None:
            early.process.kill()
            early.process.wait()
        served.append(line)
        return 0

    monkeypatch.setattr(turnback.acp, "run", serve)
    with pytest.raises(SystemExit) as exited:
        cli.main(args=argv, prog_name="turnback")
    assert exited.value.code == 0
    assert served == [launch.command_line(argv)]


def test_a_home_that_is_a_file_is_refused_by_the_cli(tmp_path: Path) -> None:
    (home := tmp_path / "home").write_text("a file")
    assert launch.command_line(["acp", "--home", str(home), "--", "a"]) is None
    done = turnback_acp("--home", str(home), "--", sys.executable, "-c", "pass")
    assert done.returncode == 2 and b"is a file" in done.stderr


def test_the_start_knows_every_option_of_turnback_acp() -> None:
    command = cli.commands["acp"]
    options = {
        name
        for param in command.params
        if isinstance(param, click.Option)
        for name in param.opts
        if name.startswith("--")
    }
    assert options - {"--help"} == launch.ACP_OPTIONS


def test_the_starts_default_attempts_are_the_resume_policys() -> None:
    # the start holds its own copy, to answer before the runtime is loaded
    assert ResumePolicy().attempts == launch.DEFAULT_RESTART_ATTEMPTS


def turnback_acp(*args: str, editor: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "turnback", "acp", *args],
        input=editor,
        capture_output=True,
        timeout=60,
    )


def test_an_unknown_option_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    agent = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    done = turnback_acp("--bogus", "--", *agent)
    assert done.returncode == 2
    assert b"No such option '--bogus'" in done.stderr and done.stdout == b""
    assert not marker.exists()  # the agent was not started
    done = turnback_acp("--restart-attempts", "many", "--", *agent)
    assert done.returncode == 2 and b"--restart-attempts" in done.stderr


def test_without_an_agent_command_only_a_conductor_is_served() -> None:
    """With no agent command, turnback acp is a conductor's proxy component: a plain
    ``initialize`` is answered with an error that says what to do, and nothing is started."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "initialize",
        "params": {"protocolVersion": 1},
    }
    for args in ((), ("--",)):
        done = turnback_acp(*args, editor=json.dumps(initialize).encode() + b"\n")
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["id"] == 7 and answer["error"]["code"] == -32600
        assert "give it after `--`" in answer["error"]["message"]


def test_the_agent_command_may_come_without_a_double_dash(home: Path, tmp_path: Path) -> None:
    """Everything from the first word that is not an option is the agent's, its options too."""
    proxy = subprocess.Popen(
        [sys.executable, "-m", "turnback", "--home", str(home), "acp", *SCRIPTED, "--no-such"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert proxy.stdin is not None and proxy.stdout is not None
    # The editor stays until it has its answer, however slow the agent is to start (a proxy
    # whose editor has gone stops its agent without waiting long for it).
    proxy.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    proxy.stdin.flush()
    first = proxy.stdout.readline()
    _, stderr = proxy.communicate(timeout=60)  # the editor leaves: stdin is closed
    assert proxy.returncode == 0, stderr
    answer = json.loads(first)
    assert answer["id"] == 7 and answer["result"]["agentCapabilities"]["loadSession"] is True


def test_a_store_that_cannot_open_fails_the_first_session_method_and_is_left_intact(
    home: Path, tmp_path: Path
) -> None:
    """initialize is answered before the store opens; what needs the store gets its error."""
    home.mkdir()
    damaged = home / "turnback.db"
    damaged.write_bytes(b"not a database, and not to be touched " * 100)
    new = {"cwd": str(tmp_path), "mcpServers": []}
    editor = json.dumps(INITIALIZE) + "\n"
    editor += json.dumps({"jsonrpc": "2.0", "id": 8, "method": "session/new", "params": new})
    proxy = subprocess.Popen(
        [sys.executable, "-m", "turnback", "--home", str(home), "acp", "--", *SCRIPTED],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert proxy.stdin is not None and proxy.stdout is not None
    proxy.stdin.write(editor.encode() + b"\n")
    proxy.stdin.flush()  # and kept open: the editor is still there when the answers come
    answers: dict[int, Any] = {}
    while len(answers) < 2 and (line := proxy.stdout.readline()):
        answer = json.loads(line)
        answers.setdefault(answer.get("id"), answer)
    proxy.stdin.close()
    assert proxy.stderr is not None
    stderr = proxy.stderr.read()
    proxy.wait(timeout=60)
    assert "result" in answers[7]
    assert answers[8]["error"]["data"]["error"] == "StoreCorrupt"
    assert "damaged" in answers[8]["error"]["message"]
    assert proxy.returncode == 1 and b"damaged" in stderr
    assert damaged.read_bytes() == b"not a database, and not to be touched " * 100


#: What the answer to initialize must never wait for: the proxy and everything it loads.
HEAVY = (
    "asyncio",
    "sqlite3",
    "click",
    "turnback.cli",
    "turnback.acp.proxy",
    "turnback.acp.commands",
    "turnback.engine",
    "turnback.store",
    "turnback.workspace",
    "turnback.runtime",
    "turnback.model",  # its dataclasses: the answer needs only plain data (turnback.handshake)
)
#: What :class:`Gated` holds the first of those with: until the test closes the ``gate`` pipe,
#: having named the module on the ``said`` pipe.
HOLD_ON_A_PIPE = """
def opened(name):
    os.write({said}, name.encode() + b"\\n")
    os.read({gate}, 1)
"""


def _line(fd: int) -> bytes:
    """A line from ``fd``; fails the test when none comes in a minute (something is stuck)."""
    line = b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], 60)
        assert ready, f"nothing but {line!r} came"
        data = os.read(fd, 1)
        assert data, f"the pipe ended after {line!r}"
        line += data
    return line


class Gated:
    """``turnback --home HOME acp -- SCRIPTED`` run with ``held`` modules held at the door
    (:data:`HOLD_ON_A_PIPE`) until :meth:`let_in`; the editor's side of its pipes."""

    def __init__(
        self,
        home: Path,
        cwd: Path,
        held: tuple[str, ...],
        agent: tuple[str, ...] = SCRIPTED,
        options: tuple[str, ...] = (),
    ) -> None:
        gate, self.opener = os.pipe()
        self.heard, said = os.pipe()
        self.notes: list[dict[str, Any]] = []  # the proxy's notifications, as they came
        argv = ["--home", str(home), "acp", *options, "--", *agent]
        code = held_at_the_door(held, HOLD_ON_A_PIPE.format(gate=gate, said=said), argv)
        self.proxy = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=cwd,
            pass_fds=(gate, said),
        )
        os.close(gate)
        os.close(said)

    def let_in(self) -> None:
        os.close(self.opener)
        self.opener = -1

    def send(self, rpc_id: int, method: str, params: dict[str, Any]) -> None:
        assert self.proxy.stdin is not None
        request = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
        self.proxy.stdin.write(json.dumps(request).encode() + b"\n")
        self.proxy.stdin.flush()

    def answer(self, rpc_id: int) -> dict[str, Any]:
        """The answer to request ``rpc_id``, a result (the proxy's notifications skipped)."""
        assert self.proxy.stdout is not None
        while (message := json.loads(_line(self.proxy.stdout.fileno()))).get("id") != rpc_id:
            if "method" in message and "id" not in message:
                self.notes.append(message)
        assert "result" in message, message
        return dict(message["result"])

    def ended(self) -> int:
        assert self.proxy.stdin is not None
        self.proxy.stdin.close()
        return self.proxy.wait(timeout=60)

    def __enter__(self) -> Gated:
        return self

    def __exit__(self, *_: object) -> None:
        self.proxy.kill()
        for fd in (self.opener, self.heard):
            if fd >= 0:
                os.close(fd)


def test_initialize_and_session_new_are_answered_while_the_proxy_is_still_loading(
    home: Path, tmp_path: Path
) -> None:
    """The proxy's modules (engine, store, workspace, runtime, asyncio, the CLI) are held at
    the door: ``initialize`` and the ``session/new`` sent with it are answered anyway, the
    session kept in the home before its id is given. Let in, the proxy makes the session a row
    and serves its prompt as ever."""
    with Gated(home, tmp_path, HEAVY) as gated:
        held = _line(gated.heard).decode().strip()  # the proxy has begun to load, and is held
        assert held.startswith(HEAVY)
        gated.send(7, "initialize", INITIALIZE["params"])
        gated.send(8, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        answer = gated.answer(7)
        assert answer["agentCapabilities"]["loadSession"] is True
        assert answer["_meta"]["turnback"]["commands"]
        session = gated.answer(8)["sessionId"]
        (kept,) = (home / launch.ANSWERED).iterdir()  # durable before the editor had it
        assert json.loads(kept.read_text())["session"] == session
        gated.let_in()
        prompt = [{"type": "text", "text": "write a.txt hello"}]
        gated.send(9, "session/prompt", {"sessionId": session, "prompt": prompt})
        assert gated.answer(9)["stopReason"] == "end_turn"
        assert gated.ended() == 0
    assert list((home / launch.ANSWERED).iterdir()) == []  # a row now: the file is gone
    with turnback.open(home, create=False) as tb:
        (turn,) = tb.session(session).turns()
        assert turn.status.value == "completed"


def test_the_start_imports_only_what_starting_a_process_needs() -> None:
    """Everything ``turnback`` imports before the agent starts costs the editor its time."""
    # the launcher itself imports nothing: a terminal agent's hook takes another way
    alone = "import sys, turnback.launcher; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", alone], capture_output=True, check=True, text=True
    ).stdout.split()
    assert [m for m in loaded if m.startswith("turnback")] == ["turnback", "turnback.launcher"]
    code = (
        "import sys, turnback.launcher, turnback.acp.launch; print(' '.join(sorted(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, text=True
    ).stdout.split()
    heavy = ("typing", "dataclasses", "inspect", "json", "subprocess", "re", "enum", "locale")
    assert [m for m in heavy if m in loaded] == []
    assert [m for m in loaded if m.startswith("turnback")] == [
        "turnback",
        "turnback.acp",
        "turnback.acp.launch",
        "turnback.launcher",
    ]


#: What the proxy loads only when it first needs it, never to serve ``initialize`` and
#: ``session/new``: the workspace (git, captures: a session's first prompt), the CLI and its
#: views (only for a command line it cannot serve itself).
NOT_TO_OPEN_A_SESSION = ("turnback.workspace", "turnback.cli", "turnback.views", "click")


def test_the_agent_starts_before_subprocess_is_imported() -> None:
    """Its import costs 12 ms, and twice that on a busy machine, before the agent could start."""
    code = (
        "import sys\n"
        "from turnback.acp import launch\n"
        "launched = launch.started(['true'])\n"
        "print(' '.join(m for m in ('subprocess', 'selectors', 'locale') if m in sys.modules))\n"
        "print(launched.process.wait())\n"
    )
    printed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, text=True
    ).stdout
    assert printed.split("\n")[:2] == ["", "0"]


def _child(script: str) -> launch.Child:
    return launch.Child([sys.executable, "-c", script])


def test_the_agent_is_started_as_popen_would_start_it(tmp_path: Path) -> None:
    """Its own process group, SIGPIPE and SIGXFSZ at their defaults (Python ignores them), its
    stdin and stdout the pipes, stderr shared, and none of the start's other descriptors."""
    kept, spare = os.pipe()
    os.set_inheritable(spare, True)  # as an editor's descriptor would be
    try:
        child = launch.Child(
            [
                "sh",
                "-c",
                "read line; echo \"$line\"; cut -d' ' -f5 /proc/self/stat; "
                "grep SigIgn /proc/self/status; ls /proc/self/fd",
            ]
        )
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(b"hello\n")
        child.stdin.close()
        said = child.stdout.read().decode().split("\n")
        assert child.wait() == 0
    finally:
        os.close(kept)
        os.close(spare)
    assert said[0] == "hello"
    assert int(said[1]) == child.pid  # a group of its own
    ignored = int(said[2].split()[1], 16)
    assert ignored & (1 << (signal.SIGPIPE - 1)) == 0
    assert ignored & (1 << (signal.SIGXFSZ - 1)) == 0
    descriptors = {int(fd) for fd in said[3:] if fd}
    assert spare not in descriptors
    assert descriptors <= {0, 1, 2, 3}  # 3: the listing's own


def test_the_agents_exit_is_seen_by_every_thread_that_waits_for_it() -> None:
    child = _child("import sys; sys.stdin.read(); sys.exit(3)")
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.05)

    async def both() -> list[int]:
        waits = [asyncio.to_thread(child.wait), asyncio.to_thread(child.wait, 10.0)]
        await asyncio.sleep(0.05)  # both waiting
        assert child.stdin is not None
        child.stdin.close()
        return await asyncio.gather(*waits)

    assert asyncio.run(both()) == [3, 3]
    assert child.poll() == 3
    child.kill()  # gone already: nothing is signalled


def test_a_killed_agent_exits_with_the_signal_negated() -> None:
    child = _child("import time; time.sleep(60)")
    child.kill()
    assert child.wait(10.0) == -signal.SIGKILL


def test_an_agent_command_that_does_not_exist_starts_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        launch.Child([str(tmp_path / "no-such-agent")])
    assert launch.started([str(tmp_path / "no-such-agent")]).process is None


def test_a_session_is_opened_without_the_modules_a_prompt_needs(home: Path, tmp_path: Path) -> None:
    """``initialize`` and ``session/new``, sent at once, are both answered while the workspace,
    the CLI and the views are held at the door -- their loading is not on an editor's way to a
    session. Let in, the prompt that follows is a durable turn as ever."""
    with Gated(home, tmp_path, NOT_TO_OPEN_A_SESSION) as gated:
        gated.send(7, "initialize", INITIALIZE["params"])
        gated.send(8, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        gated.answer(7)
        session = gated.answer(8)["sessionId"]
        gated.let_in()  # whatever was held goes on
        prompt = [{"type": "text", "text": "write a.txt hello"}]  # a capture's work
        gated.send(9, "session/prompt", {"sessionId": session, "prompt": prompt})
        assert gated.answer(9)["stopReason"] == "end_turn"
        assert gated.ended() == 0
    with turnback.open(home, create=False) as tb:
        (turn,) = tb.session(session).turns()
        assert turn.status.value == "completed"
        assert [change.path for change in tb.session(session).diff(turn.number).files] == ["a.txt"]


# -- a session/new answered by the start (step 5) ---------------------------------------------


def loaded_and_prompted(home: Path, tmp_path: Path, session: str) -> None:
    """A next proxy on ``home``, as any other (nothing held), loads ``session`` and runs a turn."""
    with Gated(home, tmp_path, ()) as gated:
        gated.send(1, "initialize", INITIALIZE["params"])
        gated.send(
            2, "session/load", {"sessionId": session, "cwd": str(tmp_path), "mcpServers": []}
        )
        gated.answer(2)
        prompt = [{"type": "text", "text": "write a.txt hello"}]
        gated.send(3, "session/prompt", {"sessionId": session, "prompt": prompt})
        assert gated.answer(3)["stopReason"] == "end_turn"
        assert gated.ended() == 0


def test_a_proxy_killed_before_it_took_its_session_on_leaves_it_to_the_next(
    home: Path, tmp_path: Path
) -> None:
    """The editor was given the session's id, then the proxy was killed (SIGKILL) before it had
    loaded, let alone made the session a row: the next proxy on the home does, and loads it,
    and the session works as any other."""
    with Gated(home, tmp_path, HEAVY) as gated:
        gated.send(7, "initialize", INITIALIZE["params"])
        gated.send(8, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session = gated.answer(8)["sessionId"]
        _line(gated.heard)  # beginning to load, and held there
        gated.proxy.kill()
        gated.proxy.wait()
    (kept,) = (home / launch.ANSWERED).iterdir()
    loaded_and_prompted(home, tmp_path, session)
    assert not kept.exists()
    with turnback.open(home, create=False) as tb:
        (turn,) = tb.session(session).turns()
        assert turn.status.value == "completed"
        assert [s.id for s in tb.sessions()] == [session]


def test_a_proxy_killed_once_its_session_was_a_row_leaves_one_session(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed (SIGKILL) after the answered session became a row and before its file went: the
    next proxy makes the row again -- the same one -- and the session loads and takes prompts."""
    monkeypatch.setenv("TURNBACK_FAULT", "answered.row")
    with Gated(home, tmp_path, HEAVY) as gated:
        gated.send(7, "initialize", INITIALIZE["params"])
        gated.send(8, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session = gated.answer(8)["sessionId"]
        gated.let_in()
        assert gated.proxy.wait(timeout=60) == -signal.SIGKILL
    (kept,) = (home / launch.ANSWERED).iterdir()  # the file still there, beside its row
    with turnback.open(home, create=False) as tb:
        assert tb.session(session).id == session
    monkeypatch.delenv("TURNBACK_FAULT")
    loaded_and_prompted(home, tmp_path, session)
    assert not kept.exists()
    with turnback.open(home, create=False) as tb:
        assert [s.id for s in tb.sessions()] == [session]
        assert [t.status.value for t in tb.session(session).turns()] == ["completed"]


def _kept(home: Path, workspace: Path) -> dict[str, Any]:
    session = {
        "session": os.urandom(16).hex(),
        "workspace": str(workspace),
        "agent": "an agent",
        "agentSession": "its-1",
        "mcpServers": [],
        "response": {"sessionId": "its-1"},
    }
    home.mkdir(exist_ok=True)
    session["marker"] = launch.keep_answered(str(home), session)
    return session


def test_a_kept_session_becomes_one_row_however_often_it_is_kept(
    home: Path, tmp_path: Path
) -> None:
    """Kept again (a proxy killed after the row, before the file went), or by two proxies on
    one home, a session answered by the start is one row, and its file goes."""
    session = _kept(home, tmp_path)
    marker = Path(session["marker"])
    assert json.loads(marker.read_text())["session"] == session["session"]
    with turnback.open(home) as tb:
        first = launch.keep_session(tb, str(marker))
        assert first.id == session["session"] and not marker.exists()
        again = launch.keep_session(tb, str(marker), session)  # the file gone, the row there
        assert again.id == first.id
        second = _kept(home, tmp_path)  # a row already, and its file still there
        launch.keep_session(tb, second["marker"])
        launch.keep_session(tb, second["marker"], second)
        assert sorted(s.id for s in tb.sessions()) == sorted([first.id, second["session"]])
        assert tb.session(first.id).record.workspace == str(tmp_path.resolve())
    assert list((home / launch.ANSWERED).iterdir()) == []


def test_a_kept_session_that_cannot_be_read_is_left_and_said_at_each_start(
    home: Path, tmp_path: Path
) -> None:
    good = _kept(home, tmp_path)
    bad = home / launch.ANSWERED / "damaged.json"
    bad.write_text('{"session": "not a session')
    for _ in range(2):
        tb = launch.open_store(str(home))
        tb.close()
    assert bad.read_text() == '{"session": "not a session'  # left for a person to look at
    with turnback.open(home) as tb:
        assert [s.id for s in tb.sessions()] == [good["session"]]  # the good one is a row


def test_a_damaged_kept_session_is_said_on_the_proxys_stderr(home: Path, tmp_path: Path) -> None:
    home.mkdir()
    (home / launch.ANSWERED).mkdir()
    (home / launch.ANSWERED / "damaged.json").write_text("[")
    done = turnback_acp(
        "--home", str(home), "acp", "--", *SCRIPTED, editor=json.dumps(INITIALIZE).encode() + b"\n"
    )
    assert done.returncode == 0
    assert b"damaged.json names no session it can keep" in done.stderr
    assert (home / launch.ANSWERED / "damaged.json").exists()


#: An agent answering ``initialize`` with RESULT, then ``session/new`` with ``NEW`` (its
#: request's id filled in), then staying until its stdin closes.
TWO = f"""
import json, os, sys
for answer in ({json.dumps(RESULT)!r}, os.environ["NEW"]):
    request = json.loads(sys.stdin.readline())
    answered = {{"jsonrpc": "2.0", "id": request["id"], **json.loads(answer)}}
    sys.stdout.write(json.dumps(answered) + "\\n")
    sys.stdout.flush()
sys.stdin.read()
"""


def relayed_session(
    home: Path, new_answer: dict[str, Any], editor: bytes, answers: int
) -> tuple[launch.Launched, list[dict[str, Any]]]:
    """The start's relay, in a thread as it runs, between an editor that sent ``editor`` and
    the agent :data:`TWO`; the proxy wakes it once the editor has ``answers`` answers. Returns
    what was handed over and what the editor was sent."""
    import threading

    process = subprocess.Popen(
        [sys.executable, "-c", TWO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "NEW": json.dumps(new_answer)},
    )
    editor_in, to_proxy = os.pipe()
    from_proxy, editor_out = os.pipe()
    os.write(to_proxy, editor)
    launched = launch.Launched(process, command=["an", "agent"], home=str(home))
    launched.wake = os.pipe()
    launched.relaying = threading.Thread(
        target=launch.relay, args=(launched, (editor_in, editor_out), 10.0)
    )
    launched.relaying.start()
    written = [json.loads(_line(from_proxy)) for _ in range(answers)]
    launched.settled()  # the proxy is ready: it wakes the relay if it still waits
    os.close(editor_out)
    with os.fdopen(from_proxy, "rb") as sent:
        written += [json.loads(line) for line in sent.read().splitlines()]
    for fd in (editor_in, to_proxy):
        os.close(fd)
    process.kill()
    process.wait()
    return launched, written


def _request(rpc_id: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}).encode()


def test_the_start_answers_session_new_with_turnbacks_id_and_keeps_it(
    home: Path, tmp_path: Path
) -> None:
    new = _request(8, "session/new", {"cwd": str(tmp_path), "mcpServers": [{"name": "m"}]})
    answer = {"result": {"sessionId": "its-1", "modes": {"currentModeId": "ask"}}}
    launched, written = relayed_session(
        home, answer, json.dumps(INITIALIZE).encode() + b"\n" + new + b"\n", 2
    )
    assert [message["id"] for message in written] == [7, 8]
    assert launched.session is not None
    session = launched.session["session"]
    assert written[1]["result"] == {"sessionId": session, "modes": {"currentModeId": "ask"}}
    kept = json.loads(Path(launched.session["marker"]).read_text())
    assert kept["agentSession"] == "its-1" and kept["workspace"] == str(tmp_path)
    assert kept["mcpServers"] == [{"name": "m"}] and kept["agent"] == "an agent"
    assert launched.editor == b"" and launched.agent == b""  # nothing left for the proxy


@pytest.mark.parametrize(
    "editor_next",
    [
        _request(8, "session/list", {}),  # not a session/new
        _request(8, "session/new", {"cwd": "relative", "mcpServers": []}),  # the proxy refuses it
        b"",  # nothing more: the proxy, ready, wakes the relay
    ],
)
def test_the_start_leaves_anything_but_a_plain_session_new_to_the_proxy(
    home: Path, tmp_path: Path, editor_next: bytes
) -> None:
    sent = json.dumps(INITIALIZE).encode() + b"\n" + (editor_next + b"\n" if editor_next else b"")
    launched, written = relayed_session(home, {"result": {"sessionId": "its-1"}}, sent, 1)
    assert [message["id"] for message in written] == [7]
    assert launched.session is None and not (home / launch.ANSWERED).exists()
    assert launched.editor == (editor_next + b"\n" if editor_next else b"")


def test_an_agent_refusing_the_starts_session_new_leaves_it_to_the_proxy(
    home: Path, tmp_path: Path
) -> None:
    """The proxy asks again and gives the editor what the agent answers, as it would; the
    start's own answer is not left for the proxy to take for one of its requests."""
    new = _request(8, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
    refused = {"error": {"code": -32000, "message": "Authentication required"}}
    launched, written = relayed_session(
        home, refused, json.dumps(INITIALIZE).encode() + b"\n" + new + b"\n", 1
    )
    assert [message["id"] for message in written] == [7]
    assert launched.session is None and launched.editor == new + b"\n"
    assert launched.agent == b""


def test_a_damaged_store_or_one_elsewhere_is_opened_before_a_session_is_answered(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnback.store import DEFAULT_DATABASE

    assert launch.DATABASE == DEFAULT_DATABASE
    assert launch._store_ahead(str(home))  # a new home
    home.mkdir()
    with turnback.open(home):
        pass
    assert launch._store_ahead(str(home))
    monkeypatch.setenv("TURNBACK_DATABASE_URL", "postgresql://somewhere/turnback")
    assert not launch._store_ahead(str(home))
    monkeypatch.delenv("TURNBACK_DATABASE_URL")
    (home / DEFAULT_DATABASE).write_bytes(b"")  # emptied: the store says what that means
    assert not launch._store_ahead(str(home))


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as file:
        return [int(child) for child in file.read().split()]


def test_an_agent_dead_before_the_proxy_took_its_session_on_is_started_again(
    home: Path, tmp_path: Path
) -> None:
    """The agent that opened the session for the start is killed before the proxy loads: the
    proxy opens the session in a new agent process, and its prompt is a turn."""
    with Gated(home, tmp_path, HEAVY) as gated:
        gated.send(7, "initialize", INITIALIZE["params"])
        gated.send(8, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session = gated.answer(8)["sessionId"]
        (agent,) = _children(gated.proxy.pid)
        os.kill(agent, 9)
        gated.let_in()
        prompt = [{"type": "text", "text": "write a.txt hello"}]
        gated.send(9, "session/prompt", {"sessionId": session, "prompt": prompt})
        assert gated.answer(9)["stopReason"] == "end_turn"
        assert _children(gated.proxy.pid) != [agent]
        assert gated.ended() == 0
    with turnback.open(home, create=False) as tb:
        (turn,) = tb.session(session).turns()
        assert turn.status.value == "completed"
        assert (tmp_path / "a.txt").read_text() == "hello\n"


TS_AGENT = ("node", str(Path(__file__).with_name("ts_agent") / "agent.mjs"))


def test_the_agent_session_the_start_opened_is_the_one_the_proxy_uses(
    home: Path, tmp_path: Path
) -> None:
    """An agent on the TypeScript SDK: the session the start opened for the editor is the one
    its prompts reach -- the agent opened no other -- and the editor has the agent's own
    commands with turnback's, once, under turnback's session id."""
    with Gated(home, tmp_path, HEAVY, TS_AGENT) as gated:
        gated.send(7, "initialize", INITIALIZE["params"])
        gated.send(8, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session = gated.answer(8)["sessionId"]
        assert (home / launch.ANSWERED).is_dir()  # the start's, not the proxy's
        gated.let_in()
        prompt = [{"type": "text", "text": "hello"}]
        gated.send(9, "session/prompt", {"sessionId": session, "prompt": prompt})
        assert gated.answer(9)["stopReason"] == "end_turn"
        gated.send(10, "_ts/state", {"sessionId": session})
        state = gated.answer(10)
        assert state["opened"] == 1 and state["session"]["turns"] == 1
        listed = [
            note["params"]
            for note in gated.notes
            if note["params"].get("update", {}).get("sessionUpdate") == "available_commands_update"
        ]
        assert [p["sessionId"] for p in listed] == [session]
        names = {c["name"] for c in listed[0]["update"]["availableCommands"]}
        assert {"ts-help", "ts-count", "checkpoints", "rewind"} <= names
        assert gated.ended() == 0


#: An agent that answers ``initialize`` at once and ``session/new`` after ``NEW_DELAY`` seconds,
#: with the ``cwd`` it was given in its ``_meta`` and ``NEW_EXTRA`` (JSON) merged in; with
#: ``NEW_ASKS``, it first asks the editor to read a file and waits for the answer; with
#: ``INIT_ASKS``, it does so with its answer to ``initialize``, reading nothing else meanwhile.
SLOW_NEW = """
import json, os, sys, time
asked = 0
for line in sys.stdin:
    message = json.loads(line)
    if "method" not in message:
        continue
    answer = {"jsonrpc": "2.0", "id": message["id"]}
    if message["method"] == "initialize":
        answer["result"] = {"protocolVersion": 1, "agentCapabilities": {}}
        if os.environ.get("INIT_ASKS"):  # and, in the same write, a request it waits on
            ask = {"jsonrpc": "2.0", "id": "ask-0", "method": "fs/read_text_file"}
            read = {"sessionId": "slow-0", "path": "/etc/hostname"}
            sys.stdout.write(json.dumps(answer) + "\\n" + json.dumps({**ask, "params": read}))
            sys.stdout.write("\\n")
            sys.stdout.flush()
            while "method" in json.loads(sys.stdin.readline()):
                pass  # what comes before the request's answer waits: a session/new is lost
            continue
    elif message["method"] == "session/new":
        if os.environ.get("NEW_ASKS"):
            asked += 1
            read = {"sessionId": "slow-1", "path": "/etc/hostname"}
            ask = {"jsonrpc": "2.0", "id": f"ask-{asked}", "method": "fs/read_text_file"}
            sys.stdout.write(json.dumps({**ask, "params": read}) + "\\n")
            sys.stdout.flush()
            json.loads(sys.stdin.readline())  # its answer, whatever it is
        time.sleep(float(os.environ.get("NEW_DELAY", "0")))
        result = {"sessionId": "slow-1", "_meta": {"cwd": message["params"]["cwd"]}}
        answer["result"] = {**result, **json.loads(os.environ.get("NEW_EXTRA", "{}"))}
    else:
        answer["error"] = {"code": -32601, "message": "Method not found"}
    sys.stdout.write(json.dumps(answer) + "\\n")
    sys.stdout.flush()
"""


def started_at_once(
    home: Path, cwd: str, *options: str, **env: str
) -> tuple[dict[str, Any], bytes, float]:
    """``turnback acp`` on :data:`SLOW_NEW`, sent ``initialize`` and ``session/new`` at once:
    the answer to the ``session/new``, what the proxy wrote on stderr, and the seconds it took."""
    import time

    started = time.monotonic()
    argv = ["--home", str(home), "acp", *options, "--", sys.executable, "-c", SLOW_NEW]
    proxy = subprocess.Popen(
        [sys.executable, "-m", "turnback", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )
    assert proxy.stdin is not None and proxy.stdout is not None and proxy.stderr is not None
    proxy.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    proxy.stdin.write(_request(8, "session/new", {"cwd": cwd, "mcpServers": []}) + b"\n")
    proxy.stdin.flush()
    try:
        while (message := json.loads(_line(proxy.stdout.fileno()))).get("id") != 8:
            if message.get("method") == "fs/read_text_file":  # an editor answers it
                answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"content": "h"}}
                proxy.stdin.write(json.dumps(answer).encode() + b"\n")
                proxy.stdin.flush()
        took = time.monotonic() - started
    finally:
        proxy.stdin.close()
        proxy.wait(timeout=60)
    return message, proxy.stderr.read(), took


def test_a_session_new_answered_later_than_the_initialize_timeout_keeps_the_agent(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start waited for the agent's ``session/new`` past ``--initialize-timeout`` from its
    ``initialize``: the agent had answered ``initialize``, so the proxy takes it on as it is,
    rather than killing it for not answering."""
    monkeypatch.setenv("NEW_DELAY", "1.5")
    agent = (sys.executable, "-c", SLOW_NEW)
    with Gated(home, tmp_path, HEAVY, agent, ("--initialize-timeout", "1")) as gated:
        gated.send(7, "initialize", INITIALIZE["params"])
        gated.send(8, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert gated.answer(8)["sessionId"]  # the start's: as long as the agent takes
        (agent_pid,) = _children(gated.proxy.pid)
        gated.let_in()
        gated.send(9, "session/list", {})
        gated.answer(9)
        assert _children(gated.proxy.pid) == [agent_pid]  # the same agent, not killed
        assert gated.ended() == 0


def test_an_agent_asking_the_editor_during_the_starts_session_new_is_answered_at_once(
    home: Path, tmp_path: Path
) -> None:
    """The start cannot answer the agent's own requests: it hands over to the proxy, which
    does, rather than the agent waiting out the timeout."""
    message, stderr, took = started_at_once(
        home, str(tmp_path), "--initialize-timeout", "30", NEW_ASKS="1"
    )
    assert "result" in message, (message, stderr)
    assert took < 15, took


def test_an_agent_asking_the_editor_with_its_initialize_answer_is_answered_at_once(
    home: Path, tmp_path: Path
) -> None:
    """The request came in the same write as the ``initialize`` answer: the start leaves the
    ``session/new`` to the proxy, which answers the request, rather than the agent's first
    session waiting out a timeout."""
    message, stderr, took = started_at_once(
        home, str(tmp_path), "--initialize-timeout", "30", INIT_ASKS="1"
    )
    assert "result" in message, (message, stderr)
    assert took < 15, took
    assert not (home / launch.ANSWERED).exists()  # the proxy's session, not the start's


def test_a_lone_surrogate_in_the_agents_answer_reaches_the_editor(
    home: Path, tmp_path: Path
) -> None:
    extra = json.dumps({"modes": {"currentModeId": "x\ud800y"}})  # written escaped, as JSON
    message, stderr, _ = started_at_once(home, str(tmp_path), NEW_EXTRA=extra)
    assert message["result"]["modes"] == {"currentModeId": "x\ud800y"}, stderr


def test_the_start_gives_the_agent_the_workspace_as_the_proxy_records_it(
    home: Path, tmp_path: Path
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    message, stderr, _ = started_at_once(home, str(tmp_path / "link") + "/")
    real = str((tmp_path / "real").resolve())
    assert message["result"]["_meta"]["cwd"] == real, stderr
    with turnback.open(home, create=False) as tb:
        assert tb.session(message["result"]["sessionId"]).record.workspace == real


def test_a_kept_session_another_proxy_made_a_row_meanwhile_is_passed_over(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _kept(home, tmp_path)
    listdir = os.listdir

    def gone_meanwhile(path: Any) -> list[str]:
        names = listdir(path)
        if str(path).endswith(launch.ANSWERED):
            os.unlink(session["marker"])  # another proxy made it a row, between two calls
        return names

    monkeypatch.setattr(os, "listdir", gone_meanwhile)
    assert launch.answered(str(home)) == []
    monkeypatch.setattr(os, "listdir", listdir)
    with turnback.open(home) as tb:
        assert launch.keep_session(tb, session["marker"]) is None  # read after it went
