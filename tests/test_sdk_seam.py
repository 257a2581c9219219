"""turnback owns the ACP wire: serving a session imports no ACP SDK (nor pydantic), and its own
JSON-RPC connection interoperates with the SDK's over real pipes. The SDK stays the counterpart
"from elsewhere" of the tests and of the bundled scripted agent, which use only its public
names: no private module (``acp._transport``), no internal package (``acp.task``), no private
attribute of its objects (``_conn``)."""

from __future__ import annotations

import ast
import asyncio
import os
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.connection import Connection as SdkConnection

from tests.acp.harness import CAPABILITIES, SCRIPTED, Editor, proxy_command, run
from turnback.runtime.rpc import CLIENT_METHODS, PROTOCOL_VERSION, RequestError
from turnback.runtime.rpc import Connection as Ours
from turnback.runtime.wire import Rejected, Wire

ROOT = Path(__file__).resolve().parents[1]
#: SDK packages that are internal although their names are not underscored.
INTERNAL = {"acp.task", "acp.router", "acp.telemetry"}
#: The only part of turnback that may import the SDK: the bundled agent is an ordinary agent.
SDK_USERS = ("src/turnback/agents/",)


def sources() -> list[Path]:
    """turnback's Python files: not the packages npm installs for the tests (node_modules)."""
    found = []
    for top in ("src", "tests", "bench"):
        for directory, subdirectories, files in os.walk(ROOT / top):
            subdirectories[:] = [d for d in subdirectories if d != "node_modules"]
            found += [Path(directory) / f for f in files if f.endswith(".py")]
    return sorted(found)


def sdk_imports(tree: ast.AST) -> list[tuple[int, str, list[str]]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
    return [(line, module, names) for line, module, names in found if module.split(".")[0] == "acp"]


def private_uses(text: str, where: str, ours: bool = True) -> list[str]:
    """What ``text`` uses of the SDK's private names; ``ours``: turnback's own code, where
    reading any object's private attributes by name is refused too."""
    tree = ast.parse(text, where)
    found = []
    for line, module, names in sdk_imports(tree):
        parts = module.split(".")
        internal = any(module == m or module.startswith(m + ".") for m in INTERNAL)
        if (
            internal
            or any(p.startswith("_") for p in parts)
            or any(n.startswith("_") for n in names)
        ):
            found.append(f"{where}:{line} imports {module} {names}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
            and ours
        ):
            found.append(f"{where}:{node.lineno} reads {node.args[1].value}")
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "_conn"
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
            and ours
        ):
            found.append(f"{where}:{node.lineno} reads ._conn")
    return found


def test_no_module_uses_a_private_name_of_the_sdk() -> None:
    problems = [
        problem
        for path in sources()
        for problem in private_uses(
            path.read_text(), str(path.relative_to(ROOT)), "src" in path.relative_to(ROOT).parts
        )
    ]
    assert problems == []


@pytest.mark.parametrize(
    "source",
    [
        "from acp._transport import NdjsonTransport",
        "import acp.task.supervisor",
        "from acp.task import MessageSender",
        "from acp import _cookies",
        "rpc = getattr(conn, '_conn')",
        "rpc = client._conn",
    ],
)
def test_the_check_catches_each_kind_of_private_use(source: str) -> None:
    assert private_uses(source, "probe.py")
    assert not private_uses("from acp.connection import Connection", "probe.py")


def test_only_the_bundled_agent_imports_the_sdk() -> None:
    importers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "src").rglob("*.py")
        if sdk_imports(ast.parse(path.read_text()))
    )
    assert importers, "the bundled agent is an SDK agent: the check must see its imports"
    assert [p for p in importers if not p.startswith(SDK_USERS)] == []


def test_the_acp_names_turnback_keeps_are_the_sdks() -> None:
    assert PROTOCOL_VERSION == acp.PROTOCOL_VERSION
    assert set(acp.CLIENT_METHODS.values()) == CLIENT_METHODS


def test_serving_a_session_imports_no_sdk_and_no_pydantic(home: Path, tmp_path: Path) -> None:
    """``turnback acp`` under ``python -X importtime``: initialize, session/new and a turn
    served, then the editor leaves; the proxy's own imports (not the agent's) are listed."""
    log = tmp_path / "imports.txt"
    command = proxy_command(home, SCRIPTED)
    command[1:1] = ["-X", "importtime"]

    async def scenario() -> str:
        with log.open("wb") as stderr:
            async with acp.spawn_agent_process(
                Editor(),
                *command,
                env=dict(os.environ),
                cwd=tmp_path,
                transport_kwargs={"stderr": stderr},
            ) as (conn, _):
                await conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES
                )
                session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
                answer = await conn.prompt(
                    session_id=session.session_id, prompt=[acp.text_block("write a.txt hi")]
                )
                return str(answer.stop_reason)

    assert run(scenario()) == "end_turn"
    assert (tmp_path / "a.txt").read_text() == "hi\n"
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in log.read_text(errors="replace").splitlines()
        if line.startswith("import time:") and "|" in line
    }
    # (what the start imports with importlib, like turnback.acp.proxy itself, is not listed:
    # the modules it imports are)
    assert {"turnback.acp.wire", "turnback.runtime.rpc", "turnback.engine.turns"} <= imported
    assert sorted(m for m in imported if m.split(".")[0] in {"acp", "pydantic"}) == []


# -- turnback's connection and the SDK's, over real pipes --------------------------------------


async def _pipe() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    read, write = os.pipe()
    reader = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read, "rb", 0)
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(write, "wb", 0)
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


class Peer:
    """A handler that records what it is given and answers by method name."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any, bool]] = []

    async def __call__(self, method: str, params: Any, is_notification: bool) -> Any:
        self.seen.append((method, params, is_notification))
        if method == "echo":
            return params
        if method == "refuse":
            raise (acp.RequestError if params.get("sdk") else RequestError)(
                params["code"], params["message"], params.get("data")
            )
        if method == "slow":
            await asyncio.sleep(30)
        raise ValueError(f"no {method} here")


async def _pair() -> tuple[Ours, Peer, SdkConnection, Peer, list[Rejected]]:
    """Our connection and the SDK's, each end on its own pair of real pipes."""
    (ours_in, sdk_out), (sdk_in, ours_out) = await _pipe(), await _pipe()
    rejected: list[Rejected] = []
    ours_peer, sdk_peer = Peer(), Peer()
    ours = Ours(ours_peer, Wire(ours_in, ours_out, 2**20, rejected=rejected.append))
    sdk = SdkConnection(sdk_peer, sdk_out, sdk_in)
    return ours, ours_peer, sdk, sdk_peer, rejected


def test_requests_answers_and_notifications_cross_both_ways() -> None:
    async def scenario() -> None:
        ours, ours_peer, sdk, sdk_peer, rejected = await _pair()
        params = {"text": "żółw 😀", "nested": {"n": [1, 2.5, None, True]}}
        assert await ours.send_request("echo", params) == params
        assert await sdk.send_request("echo", params) == params
        await ours.send_notification("note", {"k": 1})
        await sdk.send_notification("$/cancel_request", {"requestId": 7})
        await asyncio.sleep(0.2)
        assert ("note", {"k": 1}, True) in sdk_peer.seen
        assert ("$/cancel_request", {"requestId": 7}, True) in ours_peer.seen
        assert rejected == []
        await ours.close()
        await sdk.close()

    run(scenario(), 30)


@pytest.mark.parametrize(
    "error",
    [
        {"code": -32000, "message": "Authentication required", "data": None},
        {"code": -32602, "message": "Invalid params", "data": {"cwd": ["not allowed"]}},
        {"code": -32099, "message": "Vendor trouble", "data": "plain text"},
    ],
)
def test_error_objects_pass_through_unchanged(error: dict[str, Any]) -> None:
    async def scenario() -> None:
        ours, _, sdk, _, _ = await _pair()
        # the SDK's error, as ours receives it, and given back by a handler of ours
        with pytest.raises(RequestError) as raised:
            await ours.send_request("refuse", {**error, "sdk": True})
        assert raised.value.to_error_obj() == error
        assert (raised.value.code, raised.value.data) == (error["code"], error["data"])
        # ours, as the SDK receives it
        with pytest.raises(acp.RequestError) as theirs:
            await sdk.send_request("refuse", error)
        assert (theirs.value.code, str(theirs.value), theirs.value.data) == tuple(error.values())
        await ours.close()
        await sdk.close()

    run(scenario(), 30)


def test_a_failing_handler_answers_an_internal_error_and_the_loop_goes_on() -> None:
    async def scenario() -> None:
        ours, _, sdk, _, _ = await _pair()
        with pytest.raises(acp.RequestError) as failed:
            await sdk.send_request("nothing", {})
        assert failed.value.code == -32603
        assert failed.value.data == {"details": "no nothing here"}
        # an answer to no request, and a bad line: neither ends ours
        await sdk.send_notification("still", {})
        assert await sdk.send_request("echo", {"after": 1}) == {"after": 1}
        await ours.close()
        await sdk.close()

    run(scenario(), 30)


def test_a_line_that_is_no_message_and_a_stray_answer_leave_the_loop_running() -> None:
    async def scenario() -> None:
        (ours_in, writer), (reader, ours_out) = await _pipe(), await _pipe()
        rejected: list[Rejected] = []
        peer = Peer()
        ours = Ours(peer, Wire(ours_in, ours_out, 2**20, rejected=rejected.append))
        writer.write(b'{"jsonrpc":"2.0","id":99,"result":{}}\n')  # answers no request
        writer.write(b"not json\n")
        writer.write(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":1}}\n')
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 10)
        assert line == b'{"jsonrpc":"2.0","id":1,"result":{"x":1}}\n'
        assert [r.code for r in rejected] == [-32700]
        await ours.close()
        writer.close()

    run(scenario(), 30)


def test_requests_waiting_fail_when_the_far_side_goes_and_later_ones_at_once() -> None:
    async def scenario() -> None:
        (ours_in, far_out), (_, ours_out) = await _pipe(), await _pipe()
        ours = Ours(Peer(), Wire(ours_in, ours_out, 2**20, rejected=lambda _: None))
        waiting = asyncio.ensure_future(ours.send_request("slow", {}))
        await asyncio.sleep(0.2)
        far_out.close()  # the far side's output ends
        with pytest.raises(ConnectionError, match="Connection closed"):
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(ConnectionError):
            await ours.send_request("echo", {})
        await ours.close()

    run(scenario(), 30)
