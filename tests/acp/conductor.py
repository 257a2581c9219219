"""A conductor of an ACP proxy chain with one proxy, as the draft RFD "Agent Extensions via ACP
Proxies" describes one, for the proxy-chain tests (no conductor can be installed from a
registry here: the reference one is a Rust crate). Run as::

    python tests/acp/conductor.py LOG PROXY_JSON AGENT_JSON

where PROXY_JSON and AGENT_JSON are the two commands as JSON lists. It is an agent on its stdin
and stdout; it starts the proxy and the agent, initializes the proxy with ``_proxy/initialize``
and the agent with ``initialize`` (when the proxy forwards one), and passes every message on,
in order, under ids of its own on each connection -- counted from 0 on each, so they collide
with everyone else's. What the proxy wraps in ``_proxy/successor`` goes to the agent; what the
agent sends goes to the proxy wrapped the same way; anything else from the proxy goes to the
editor. A ``$/cancel_request`` names the id the receiver was sent. Each message it reads is
appended to LOG as a JSON line ``[from, to, message]``. With ``CONDUCTOR_SPELLING=rfd`` in its
environment it uses the RFD text's names, ``proxy/initialize`` and ``proxy/successor``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

PREFIX = "" if os.environ.get("CONDUCTOR_SPELLING") == "rfd" else "_"
INITIALIZE, ENVELOPE = f"{PREFIX}proxy/initialize", f"{PREFIX}proxy/successor"
CANCEL = "$/cancel_request"


class Peer:
    def __init__(self, name: str, writer: Any) -> None:
        self.name = name
        self._writer = writer
        self._next = 0
        #: our requests to this peer: our id -> (the peer that asked, its id)
        self.asked: dict[int, tuple[Peer, Any]] = {}

    def send(self, message: dict[str, Any]) -> None:
        self._writer.write(json.dumps(message).encode() + b"\n")

    def request(self, origin: Peer, origin_id: Any, method: str, params: Any) -> None:
        rpc_id, self._next = self._next, self._next + 1
        self.asked[rpc_id] = (origin, origin_id)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def ours(self, origin: Peer, origin_id: Any) -> int | None:
        """Our id for the request ``origin`` sent under ``origin_id``, if it is waiting."""
        for rpc_id, asked in self.asked.items():
            if asked == (origin, origin_id):
                return rpc_id
        return None


class Conductor:
    def __init__(self, log: str, editor: Peer, proxy: Peer, agent: Peer) -> None:
        self.log = open(log, "a")  # noqa: SIM115 - for the life of the process
        self.editor, self.proxy, self.agent = editor, proxy, agent

    def note(self, source: Peer, target: str, message: dict[str, Any]) -> None:
        self.log.write(json.dumps([source.name, target, message]) + "\n")
        self.log.flush()

    def answer(self, source: Peer, message: dict[str, Any]) -> None:
        """An answer from ``source`` to one of our requests: to whoever asked, under its id."""
        origin, origin_id = source.asked.pop(message["id"])
        self.note(source, origin.name, message)
        origin.send({**message, "id": origin_id})

    def cancel(self, source: Peer, params: Any, *targets: Peer) -> None:
        request = params.get("requestId") if isinstance(params, dict) else None
        for target in targets:
            ours = target.ours(source, request)
            if ours is not None:
                self.note(source, target.name, {"method": CANCEL, "params": params})
                target.send({"jsonrpc": "2.0", "method": CANCEL, "params": {"requestId": ours}})

    def from_editor(self, message: dict[str, Any]) -> None:
        if "method" not in message:
            return self.answer(self.editor, message)
        self.note(self.editor, "proxy", message)
        if "id" not in message:
            if message["method"] == CANCEL:
                return self.cancel(self.editor, message.get("params"), self.proxy)
            return self.proxy.send(message)
        method = INITIALIZE if message["method"] == "initialize" else message["method"]
        self.proxy.request(self.editor, message["id"], method, message.get("params"))

    def from_proxy(self, message: dict[str, Any]) -> None:
        if "method" not in message:
            return self.answer(self.proxy, message)
        method, params = message["method"], message.get("params")
        if method == ENVELOPE:
            self.note(self.proxy, "agent", message)
            inner: dict[str, Any] = {"jsonrpc": "2.0", "method": params["method"]}
            if "params" in params:
                inner["params"] = params["params"]
            if "id" in message:
                self.agent.request(self.proxy, message["id"], inner["method"], inner.get("params"))
            else:
                self.agent.send(inner)
            return None
        if method == CANCEL and "id" not in message:  # of a request to the agent or the editor
            return self.cancel(self.proxy, params, self.agent, self.editor)
        self.note(self.proxy, "editor", message)
        if "id" in message:
            self.editor.request(self.proxy, message["id"], method, params)
        else:
            self.editor.send(message)
        return None

    def from_agent(self, message: dict[str, Any]) -> None:
        if "method" not in message:
            return self.answer(self.agent, message)
        self.note(self.agent, "proxy", message)
        if message["method"] == CANCEL and "id" not in message:
            return self.cancel(self.agent, message.get("params"), self.proxy)
        wrapped = {"method": message["method"]}
        if "params" in message:
            wrapped["params"] = message["params"]
        if "id" in message:
            self.proxy.request(self.agent, message["id"], ENVELOPE, wrapped)
        else:
            self.proxy.send({"jsonrpc": "2.0", "method": ENVELOPE, "params": wrapped})
        return None


async def pump(reader: asyncio.StreamReader, handle: Any) -> None:
    while line := await reader.readline():
        if line.strip():
            handle(json.loads(line))


async def main() -> None:
    log, proxy_command, agent_command = (
        sys.argv[1],
        json.loads(sys.argv[2]),
        json.loads(sys.argv[3]),
    )
    pipes = {"stdin": asyncio.subprocess.PIPE, "stdout": asyncio.subprocess.PIPE, "limit": 2**24}
    proxy_process = await asyncio.create_subprocess_exec(*proxy_command, **pipes)
    agent_process = await asyncio.create_subprocess_exec(*agent_command, **pipes)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)

    class Stdout:
        def write(self, data: bytes) -> None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    conductor = Conductor(
        log,
        Peer("editor", Stdout()),
        Peer("proxy", proxy_process.stdin),
        Peer("agent", agent_process.stdin),
    )
    assert proxy_process.stdout is not None and agent_process.stdout is not None
    pumps = [
        asyncio.ensure_future(pump(stdin, conductor.from_editor)),
        asyncio.ensure_future(pump(proxy_process.stdout, conductor.from_proxy)),
        asyncio.ensure_future(pump(agent_process.stdout, conductor.from_agent)),
    ]
    await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)  # any end ends the chain
    for process in (proxy_process, agent_process):
        assert process.stdin is not None
        process.stdin.close()
    for process in (proxy_process, agent_process):
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()


if __name__ == "__main__":
    asyncio.run(main())
