"""What the editor gets for what should not happen: a clear JSON-RPC error, never a hang."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import acp
import pytest

from tests.acp.harness import SCRIPTED, Editor, connect, proxy_command, run


class RawEditor:
    """The proxy on raw pipes, for lines no SDK client would write."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        await self.process.stdin.drain()

    async def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            line = await asyncio.wait_for(self.process.stdout.readline(), 30)
            assert line, "the proxy closed its output"
            message: dict[str, Any] = json.loads(line)
            if "method" not in message:  # skip notifications
                return message


async def raw_proxy(
    home: Path, cwd: Path, *options: str, agent: tuple[str, ...] = SCRIPTED
) -> RawEditor:
    command = proxy_command(home, agent, *options)
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=dict(os.environ),
        limit=2**24,
    )
    return RawEditor(process)


async def finish(editor: RawEditor) -> int:
    assert editor.process.stdin is not None
    editor.process.stdin.close()
    return await asyncio.wait_for(editor.process.wait(), 15)


def test_malformed_lines_unknown_methods_and_oversized_frames_get_clear_errors(
    home: Path, tmp_path: Path
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], int]:
        editor = await raw_proxy(home, tmp_path, "--max-frame", "4096")
        answers = []
        await editor.send(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}'
        )
        answers.append(await editor.answer())
        for line in (
            b"this is not json",
            b"[1, 2]",
            b'{"jsonrpc":"2.0","id":2,"method":"frobnicate/now","params":{}}',
            b'{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":'
            + json.dumps(
                {"sessionId": "x", "prompt": [{"type": "text", "text": "y" * 10000}]}
            ).encode()
            + b"}",
            b'{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"nope","prompt":[]}}',
            b'{"jsonrpc":"2.0","id":5,"method":"_vendor/unknown","params":{}}',
            b'{"jsonrpc":"2.0","id":6,"method":"session/list","params":{}}',
        ):
            await editor.send(line)
            answers.append(await editor.answer())
        return answers, await finish(editor)

    answers, code = run(scenario())
    assert code == 0
    init, not_json, batch, unknown, oversized, not_open, extension, listed = answers
    assert init["id"] == 1 and init["result"]["agentCapabilities"]["loadSession"] is True
    assert not_json["id"] is None and not_json["error"]["code"] == -32700
    assert "not JSON" in not_json["error"]["message"]
    assert batch["error"]["code"] == -32600 and "batch" in batch["error"]["message"]
    # a method no ACP schema names is the agent's to answer, as any other
    assert unknown["id"] == 2 and unknown["error"]["code"] == -32601
    assert "turnback" not in unknown["error"]["message"]
    assert oversized["id"] == 3 and oversized["error"]["code"] == -32600
    assert "limit of 4096 bytes" in oversized["error"]["message"]
    assert "put `--max-frame BYTES` between `acp` and `--`" in oversized["error"]["message"]
    assert not_open["id"] == 4 and "is not open" in str(not_open["error"]["data"])
    assert extension["id"] == 5 and extension["error"]["code"] == -32601  # the agent's answer
    assert listed["id"] == 6 and listed["result"] == {"sessions": []}  # still serving


def test_a_missing_agent_command_is_a_clear_error_not_a_hang(home: Path, tmp_path: Path) -> None:
    missing = ("turnback-no-such-agent-command",)

    async def scenario() -> tuple[str, str, int | None]:
        async with connect(Editor(), proxy_command(home, missing), tmp_path) as (conn, process):
            with pytest.raises(acp.RequestError) as initialize:
                await conn.initialize(protocol_version=1)
            with pytest.raises(acp.RequestError) as new:
                await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            assert process.stdin is not None
            process.stdin.close()
            code = await asyncio.wait_for(process.wait(), 15)
            return str(initialize.value), str(new.value), code

    initialize, new, code = run(scenario(), timeout=30)
    assert "could not start the agent" in initialize
    assert "turnback-no-such-agent-command" in initialize
    assert "turnback-no-such-agent-command" in new
    assert code == 0


INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'


@pytest.mark.parametrize("stdin", ["devnull", "file", "pipe", "socket", "tty"])
def test_the_editor_gone_ends_the_proxy_whatever_its_stdin_and_stdout_are(
    home: Path, tmp_path: Path, stdin: str
) -> None:
    """End of input, whatever the input is, means the editor has gone: the proxy stops the agent
    and exits at once, saying so. Its output here is a regular file."""
    pidfile = tmp_path / "agent.pid"
    agent = ("sh", "-c", f'echo $$ > "{pidfile}"; exec "$@"', "agent", *SCRIPTED)
    out = tmp_path / "out.jsonl"
    with out.open("wb") as output:
        if stdin == "devnull":
            source: Any = subprocess.DEVNULL
        elif stdin == "file":
            (tmp_path / "in.jsonl").write_bytes(INITIALIZE)
            source = (tmp_path / "in.jsonl").open("rb")
        elif stdin == "pipe":
            source = subprocess.PIPE
        elif stdin == "socket":
            ours, source = socket.socketpair()
        else:
            terminal, source = os.openpty()
        proxy = subprocess.Popen(
            proxy_command(home, agent),
            stdin=source,
            stdout=output,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
        )
        if stdin == "socket":
            source.close()
            ours.sendall(INITIALIZE)
            ours.shutdown(socket.SHUT_WR)
        elif stdin == "tty":
            os.close(source)
            os.write(terminal, INITIALIZE + b"\x04")  # a line, then end of file (Ctrl-D)
        elif stdin == "file":
            source.close()
        try:
            sent = INITIALIZE if stdin == "pipe" else None  # then its end
            _, stderr = proxy.communicate(sent, timeout=30)
        finally:
            proxy.kill()
        if stdin == "socket":
            ours.close()
        elif stdin == "tty":
            os.close(terminal)
    assert proxy.returncode == 0, stderr
    assert b"the editor has gone" in stderr
    if stdin != "devnull":  # what it had been sent ahead of its end is answered
        answer = json.loads(out.read_bytes().splitlines()[0])
        assert answer["id"] == 1 and answer["result"]["protocolVersion"] == 1
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid), "the agent outlived the proxy"


def _running(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"
