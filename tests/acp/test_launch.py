"""`turnback acp`'s start (turnback.acp.launch): its command line, and initialize relayed before
the proxy has loaded -- answered there, or handed over to the proxy in flight."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from tests.acp.harness import SCRIPTED, run
from turnback.acp import launch
from turnback.cli import cli
from turnback.errors import AgentUnavailable
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


def relayed(answer: dict[str, Any], *, ready: bool = False, delay: float = 0) -> tuple[Any, ...]:
    """The start's relay between an editor (pipes) and the toy agent; ``ready``: the proxy is
    ready at once. Returns what was handed over and what the editor was sent."""
    env = {**os.environ, "ANSWER": json.dumps(answer), "BEFORE": NOTE, "DELAY": str(delay)}
    process = subprocess.Popen(
        [sys.executable, "-c", TOY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    editor_in, to_proxy = os.pipe()
    from_proxy, editor_out = os.pipe()
    wake_read, wake_write = os.pipe()
    os.write(to_proxy, json.dumps(INITIALIZE).encode() + b"\n" + NEXT)
    if ready:
        os.write(wake_write, b"!")
    launched = launch.Launched(process)
    launch.relay(launched, wake_read, (editor_in, editor_out))
    os.close(editor_out)
    with os.fdopen(from_proxy, "rb") as sent:
        written = sent.read()
    for fd in (editor_in, to_proxy, wake_read, wake_write):
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


def test_a_proxy_ready_first_takes_over_the_initialize_in_flight() -> None:
    launched, written = relayed(RESULT, ready=True, delay=0.5)
    assert written == b"" and launched.sent is not None and launched.answer is None

    async def scenario() -> None:
        sidecar = await take_over(launched)
        await sidecar.open(5.0)
        assert sidecar.initialize_response == RESULT["result"]
        await sidecar.close()

    run(scenario())


def test_an_agent_gone_before_answering_is_an_error_naming_it() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    process.wait()
    launched = launch.Launched(process, sent={"protocolVersion": 1})

    async def scenario() -> None:
        sidecar = await take_over(launched)
        with pytest.raises(AgentUnavailable, match="exited during initialize"):
            await sidecar.open(5.0)

    run(scenario())


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["acp", "--", "agent", "--flag"], launch.CommandLine(["agent", "--flag"])),
        (["--home", "h", "--no-pager", "acp", "--max-frame", "9999", "--", "a"], ["a"]),
        (["--home=h", "acp", "--restart-attempts=1", "--", "a", "--", "b"], ["a", "--", "b"]),
        (["acp", "--initialize-timeout", "2.5", "--", "a"], launch.CommandLine(["a"], 2.5)),
        (["acp", "--initialize-timeout=soon", "--", "a"], None),  # the CLI says what is wrong
        (["acp", "--bogus", "--", "a"], None),
        (["acp", "agent"], None),
        (["acp", "--"], None),
        (["acp", "--max-frame"], None),
        (["sessions"], None),
        (["--json", "acp", "--", "a"], None),
    ],
)
def test_only_a_plain_command_line_is_read_before_the_cli(
    argv: list[str], line: launch.CommandLine | list[str] | None
) -> None:
    expected = launch.CommandLine(line) if isinstance(line, list) else line
    assert launch.command_line(argv) == expected


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


def test_no_agent_command_is_a_usage_error() -> None:
    for args in ((), ("--",)):
        done = turnback_acp(*args)
        assert done.returncode == 2
        assert b"Missing argument 'AGENT_COMMAND...'" in done.stderr


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
