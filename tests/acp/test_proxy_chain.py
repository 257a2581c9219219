"""turnback acp as a correct link: ids mapped per hop, ``$/cancel_request`` translated both ways,
any method and its ``_meta`` forwarded both ways, errors relayed as written -- and, under a
conductor (the draft proxy-chains RFD), a proxy component whose agent is its successor.

The agent is the TypeScript SDK's (``ts_agent``); the editor is the Python SDK's, or raw lines
where a test needs ids and cancels no SDK lets it choose. The conductor is
``tests/acp/conductor.py`` (none can be installed here).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import acp
import pytest

import turnback
from tests.acp.harness import CAPABILITIES, DiskEditor, connect, prompt, run, ts_agent
from tests.acp.test_wedges import ROUGH
from turnback.acp.chain import Successor
from turnback.model import TurnStatus

CONDUCTOR = Path(__file__).with_name("conductor.py")
CANCEL = "$/cancel_request"
TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x": [1.5, 2]}


class Raw:
    """An editor on raw lines: chooses its ids, and keeps every message it is sent."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.received: list[dict[str, Any]] = []
        self._taken: set[int] = set()
        self._reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            self.received.append(json.loads(line))

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        await self.process.stdin.drain()

    async def next(self, match: Any, timeout: float = 30) -> dict[str, Any]:
        """The first message received that ``match`` accepts and no call returned before
        (waiting for it)."""
        deadline = time.monotonic() + timeout
        while True:
            for at, message in enumerate(self.received):
                if at not in self._taken and match(message):
                    self._taken.add(at)
                    return message
            assert time.monotonic() < deadline, f"nothing matched in {self.received}"
            await asyncio.sleep(0.02)

    async def answer(self, rpc_id: Any) -> dict[str, Any]:
        return await self.next(lambda m: "method" not in m and m.get("id") == rpc_id)

    async def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = await asyncio.wait_for(self.process.wait(), 20)
        await self._reading
        return code


async def spawn(command: list[str], cwd: Path) -> Raw:
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=cwd,
        limit=2**24,
    )
    return Raw(process)


def proxy(home: Path, *agent: str) -> list[str]:
    command = [sys.executable, "-m", "turnback", "--home", str(home), "acp"]
    return [*command, "--", *agent] if agent else command


def conductor(log: Path, home: Path, *own: str, agent: tuple[str, ...] | None = None) -> list[str]:
    """The conductor running ``turnback acp`` (with the agent command ``own``, none by default)
    before ``agent`` (the TS agent by default)."""
    chain = [json.dumps(proxy(home, *own)), json.dumps(list(agent or ts_agent()))]
    return [sys.executable, str(CONDUCTOR), str(log), *chain]


def conducted(log: Path) -> list[tuple[str, str, dict[str, Any]]]:
    return [tuple(json.loads(line)) for line in log.read_text().splitlines()]  # type: ignore[misc]


def text(raw: Raw, session_id: str) -> str:
    return "".join(
        m["params"]["update"]["content"]["text"]
        for m in raw.received
        if m.get("method") == "session/update"
        and m["params"]["sessionId"] == session_id
        and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    )


async def _opened(raw: Raw, workspace: Path) -> str:
    """initialize (id 0) and session/new (id 1): the ids turnback's own first requests have."""
    init = {"protocolVersion": 1, "clientCapabilities": {}}
    await raw.send({"id": 0, "method": "initialize", "params": init})
    assert "result" in await raw.answer(0)
    await raw.send(
        {"id": 1, "method": "session/new", "params": {"cwd": str(workspace), "mcpServers": []}}
    )
    session_id: str = (await raw.answer(1))["result"]["sessionId"]
    return session_id


@pytest.mark.parametrize("chained", [False, True], ids=["agent command", "under a conductor"])
def test_ids_collide_on_every_hop_yet_each_answer_and_cancel_finds_its_request(
    home: Path, workspace: Path, tmp_path: Path, chained: bool
) -> None:
    """The editor numbers its requests 0, 1, 2… as turnback numbers its own to the editor and
    to the agent, and as the agent numbers its own: while the agent's request (forwarded to the
    editor as turnback's id 0) waits, the editor sends its own request 0, which is forwarded to
    the agent, and cancels it. The cancel reaches the agent under the agent's id for it (the
    SDK aborts nothing else), its error comes back with its data as the agent wrote it, the
    editor's answer to turnback's request 0 reaches the agent's request, and every ``_meta``
    arrives as it was sent."""
    log = tmp_path / "conductor.log"
    ext = json.dumps({"_meta": TRACE})

    async def scenario() -> dict[str, Any]:
        command = conductor(log, home) if chained else proxy(home, *ts_agent())
        raw = await spawn(command, workspace)
        session_id = await _opened(raw, workspace)
        script = {"sessionId": session_id, "prompt": [{"type": "text", "text": f"ext {ext}"}]}
        await raw.send({"id": 2, "method": "session/prompt", "params": script})
        asked = await raw.next(lambda m: m.get("method") == "_ts/echo")
        # the editor's own request 0, in flight with turnback's request 0 to the editor
        wait = {"ms": 20000, "_meta": TRACE}
        await raw.send({"id": 0, "method": "_ts/wait", "params": wait})
        await asyncio.sleep(0.5)  # at the agent by now
        started = time.monotonic()
        await raw.send({"method": "$/cancel_request", "params": {"requestId": 0}})
        cancelled = await raw.answer(0)
        took = time.monotonic() - started
        await raw.send({"id": asked["id"], "result": {"fromEditor": True, "_meta": TRACE}})
        done = await raw.answer(2)
        # a method no ACP schema names, and an extension the agent does not have
        await raw.send({"id": 3, "method": "vendor/frobnicate", "params": {"_meta": TRACE}})
        await raw.send({"id": 4, "method": "_nobody/here", "params": {}})
        unknown, extension = await raw.answer(3), await raw.answer(4)
        await raw.close()
        return {
            "asked": asked,
            "ping": await raw.next(lambda m: m.get("method") == "_ts/ping"),
            "cancelled": cancelled,
            "took": took,
            "done": done,
            "said": text(raw, session_id),
            "unknown": unknown,
            "extension": extension,
        }

    seen = run(scenario())
    assert seen["asked"]["id"] == 0  # turnback's own id towards the editor, like the editor's
    assert seen["asked"]["params"] == {"turn": 1, "_meta": TRACE}
    assert seen["ping"]["params"]["_meta"] == TRACE
    error = seen["cancelled"]["error"]
    assert error["code"] == -32800 and seen["took"] < 10
    agent_id = error["data"]["requestId"]  # the agent's id for it, which the cancel named
    assert isinstance(agent_id, int) and error["data"]["meta"] == TRACE
    assert seen["done"]["result"]["stopReason"] == "end_turn"
    assert (
        f"echo {json.dumps({'fromEditor': True, '_meta': TRACE}, separators=(',', ':'))}"
        in (seen["said"])
    )
    # both go to the agent, whose own error answers are relayed as it wrote them
    for answer, method in (
        (seen["unknown"], "vendor/frobnicate"),
        (seen["extension"], "_nobody/here"),
    ):
        assert answer["error"] == {  # the TypeScript SDK's words, not turnback's
            "code": -32601,
            "message": f'"Method not found": {method}',
            "data": {"method": method},
        }
    if chained:
        hops = conducted(log)
        to_agent = [m for source, _, m in hops if source == "proxy" and m.get("method")]
        waits = [m for m in to_agent if m["params"].get("method") == "_ts/wait"]
        assert len(waits) == 1 and waits[0]["method"] == "_proxy/successor"
        cancels = [m for source, _, m in hops if source == "proxy" and m.get("method") == CANCEL]
        assert [c["params"]["requestId"] for c in cancels] == [waits[0]["id"]]


@pytest.mark.parametrize(
    ("own", "spelling"),
    [((), "_"), (ROUGH, "_"), ((), "")],
    ids=["no agent command", "an agent command too", "the RFD text's spelling"],
)
def test_a_conductor_runs_turnback_as_a_proxy_component(
    home: Path,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    own: tuple[str, ...],
    spelling: str,
) -> None:
    """Started by a conductor, turnback acp is initialized with _proxy/initialize (or the RFD
    text's proxy/initialize), reaches its successor (here the agent) in the envelope that
    spelling names -- an agent command of its own, if it was given one, is stopped unused --
    and its turns are as durable as with an agent of its own: the editor -- the SDK's client --
    sees one ordinary agent."""
    if not spelling:
        monkeypatch.setenv("CONDUCTOR_SPELLING", "rfd")
    log = tmp_path / "conductor.log"
    editor = DiskEditor(["allow"])
    script = "say hello there\nwrite notes.txt hi\nask edit notes\next"

    async def scenario() -> dict[str, Any]:
        async with connect(editor, conductor(log, home, *own), workspace) as (conn, _):
            init = await conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES
            )
            new = await conn.new_session(cwd=str(workspace), mcp_servers=[])
            stop = await prompt(conn, new.session_id, script, **TRACE)
            said = editor.text(new.session_id)
            state = await conn.ext_method("ts/state", {"sessionId": new.session_id})
            editor.clear()
            await prompt(conn, new.session_id, "/checkpoints")
            return {
                "said": said,
                "checkpoints": editor.text(new.session_id),
                "init": init.model_dump(mode="json", by_alias=True, exclude_none=True),
                "session": new.session_id,
                "stop": stop,
                "state": state,
            }

    seen = run(scenario())
    hops = conducted(log)
    to_proxy = [m for source, target, m in hops if source == "editor"]
    assert to_proxy[0]["method"] == "initialize"  # sent to turnback as _proxy/initialize
    wrapped = [m for source, target, m in hops if source == "proxy" and target == "agent"]
    assert {m.get("method") for m in wrapped} == {f"{spelling}proxy/successor", None}  # or answers
    assert wrapped[0]["params"]["method"] == "initialize"
    agents = [m for source, _, m in hops if source == "agent" and "result" in m]
    agent_init = agents[0]["result"]
    # the successor's answer, plus only what turnback serves
    init = seen["init"]
    assert init["agentInfo"] == agent_init["agentInfo"]
    assert init["_meta"]["tsAgent"] == agent_init["_meta"]["tsAgent"]
    assert set(init["_meta"]) == {"tsAgent", "turnback"}
    assert "mcpCapabilities" not in agent_init["agentCapabilities"]
    assert init["agentCapabilities"].get("mcpCapabilities", {}).get("acp") in (None, False)

    assert seen["stop"] == "end_turn"
    said = seen["said"]
    assert "hello there" in said and "permission edit notes: allowed" in said
    assert (workspace / "notes.txt").read_text() == "hi\n"
    assert [m for m, _ in editor.extensions] == ["ts/ping", "ts/echo"]
    assert seen["state"]["session"]["promptMeta"] == TRACE  # the prompt's _meta, as sent
    assert "notes.txt" in seen["checkpoints"]  # answered by turnback, from its store
    with turnback.open(home) as tb:
        (stored,) = tb.sessions()
        (turn,) = tb.session(stored.id).turns()
    assert stored.id == seen["session"] and turn.status == TurnStatus.COMPLETED


def test_without_an_agent_command_turnback_acp_waits_for_a_conductor(
    home: Path, workspace: Path
) -> None:
    """``turnback acp`` with no agent command answers a plain initialize with why it cannot
    serve it; an agent-mode proxy refuses a successor envelope it was not set up for."""

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], int]:
        alone = await spawn(proxy(home), workspace)
        await alone.send({"id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
        refused = await alone.answer(0)
        code = await alone.close()
        agent = await spawn(proxy(home, *ts_agent()), workspace)
        await _opened(agent, workspace)
        envelope = {"method": "_ts/echo", "params": {}}
        await agent.send({"id": 2, "method": "_proxy/successor", "params": envelope})
        misplaced = await agent.answer(2)
        await agent.close()
        return refused, misplaced, code

    refused, misplaced, code = run(scenario())
    assert refused["error"]["code"] == -32600
    assert "without an agent command" in refused["error"]["message"]
    assert "_proxy/initialize" in refused["error"]["message"]
    assert code == 0
    assert misplaced["error"]["code"] == -32601


def test_under_a_conductor_the_successors_cancel_reaches_the_editor_by_its_id(
    home: Path, workspace: Path, tmp_path: Path
) -> None:
    """The agent asks the editor something and cancels it: through the conductor (which
    numbers its own requests) and turnback (which numbers its own), the editor is told to
    cancel the request by the id it was sent it under, once."""
    log = tmp_path / "conductor.log"
    ask = {"jsonrpc": "2.0", "id": "ask-7", "method": "fs/read_text_file"}
    ask["params"] = {"sessionId": "whatever", "path": "/x"}
    cancel = {"jsonrpc": "2.0", "method": CANCEL, "params": {"requestId": "ask-7"}}
    script = "\n".join(
        [f"raw {json.dumps(json.dumps(ask))}", f"raw {json.dumps(json.dumps(cancel))}", "sleep 1"]
    )

    async def scenario() -> tuple[Raw, dict[str, Any], dict[str, Any]]:
        raw = await spawn(conductor(log, home, agent=ROUGH), workspace)
        session_id = await _opened(raw, workspace)
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": script}]}
        await raw.send({"id": 2, "method": "session/prompt", "params": prompt})
        done = await raw.answer(2)
        # an envelope with no inner method: refused, and the chain goes on
        await raw.send({"id": 3, "method": "_proxy/successor", "params": {"params": {}}})
        malformed = await raw.answer(3)
        await raw.send({"id": 4, "method": "session/list", "params": {}})
        assert "result" in await raw.answer(4)
        await raw.close()
        return raw, done, malformed

    raw, done, malformed = run(scenario())
    assert malformed["error"]["code"] == -32602
    assert "method" in malformed["error"]["message"]
    assert done["result"]["stopReason"] == "end_turn"
    asked = [m for m in raw.received if m.get("method") == "fs/read_text_file"]
    cancels = [m for m in raw.received if m.get("method") == CANCEL]
    assert len(asked) == 1 and asked[0]["params"]["path"] == "/x"
    assert cancels == [
        {"jsonrpc": "2.0", "method": CANCEL, "params": {"requestId": asked[0]["id"]}}
    ]
    hops = conducted(log)
    delivered = [m for source, _, m in hops if source == "agent" and m.get("id") == "ask-7"]
    assert len(delivered) == 1  # wrapped for turnback, which saw it under an id of its own


class _Wire:
    """What the link writes towards the conductor, kept."""

    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []
        self.taken: Any = None

    def post(self, frame: dict[str, Any]) -> None:
        self.posted.append(frame)

    def error(self, *args: Any) -> None:
        self.posted.append({"error": args})


def test_a_cancel_of_a_request_already_answered_crosses_no_hop() -> None:
    """Ids are each hop's own: a cancel whose request was answered (the answer and the cancel
    crossed) names no request of the other side, and is dropped, not passed on with an id that
    may be another live request's there."""

    async def scenario() -> tuple[list[dict[str, Any]], bytes]:
        wire = _Wire()
        link = Successor(wire, "_proxy/successor")  # type: ignore[arg-type]
        reader, _input, _ = await link.open()
        # the runtime's request 1 goes out wrapped, is answered, then the runtime cancels it
        link.sent({"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {}})
        outer = wire.posted[-1]["id"]
        link.take({"jsonrpc": "2.0", "id": outer, "result": {}}, b"")
        link.sent({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}})
        # the successor cancels a request the runtime never saw
        notice = {"method": "$/cancel_request", "params": {"requestId": 1}}
        link.take({"jsonrpc": "2.0", "method": "_proxy/successor", "params": notice}, b"")
        await link.close()
        return wire.posted, await reader.read()

    posted, fed = asyncio.run(scenario())
    assert [p.get("method") for p in posted] == ["_proxy/successor"], posted  # the prompt alone
    assert b"cancel_request" not in fed and fed.count(b"\n") == 1, fed  # the answer alone
