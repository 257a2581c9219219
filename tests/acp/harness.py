"""The acp suite's shared pieces: an editor built on the official SDK that drives `turnback acp`
(or an agent directly) over real pipes, and records everything it is sent."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import acp
from acp.core import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    FileSystemCapabilities,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

T = TypeVar("T")
SCRIPTED = (sys.executable, "-m", "turnback.agents.scripted")
CAPABILITIES = ClientCapabilities(
    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True)
)


def run(scenario: Awaitable[T], timeout: float = 120) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(scenario, timeout)

    return asyncio.run(bounded())


def dump(model: Any) -> dict[str, Any]:
    result: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return result


class Editor:
    """An ACP client as an editor is one: records updates, answers permissions from a list,
    keeps files it is asked to write, runs terminals as real processes, records extension
    traffic."""

    def __init__(self, answers: Sequence[str | None] = ()) -> None:
        self.updates: list[tuple[str, dict[str, Any]]] = []
        self.permissions: list[dict[str, Any]] = []
        self.answers = list(answers)
        self.files: dict[str, str] = {}
        self.extensions: list[tuple[str, dict[str, Any]]] = []
        self.terminals: dict[str, tuple[list[str], asyncio.subprocess.Process, bytearray]] = {}

    async def session_update(self, session_id: str, update: Any, **meta: Any) -> None:
        self.updates.append((session_id, dump(update)))

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **_: Any
    ) -> RequestPermissionResponse:
        self.permissions.append(
            {"toolCall": dump(tool_call), "options": [dump(o) for o in options]}
        )
        choice = self.answers.pop(0) if self.answers else None
        if choice is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice)
        )

    async def write_text_file(
        self, content: str, path: str, session_id: str, **_: Any
    ) -> WriteTextFileResponse:
        self.files[path] = content
        return WriteTextFileResponse()

    async def read_text_file(self, path: str, session_id: str, **_: Any) -> ReadTextFileResponse:
        return ReadTextFileResponse(content=self.files.get(path, ""))

    async def create_terminal(
        self,
        command: str,
        session_id: str,
        args: list[str] | None = None,
        cwd: str | None = None,
        **_: Any,
    ) -> CreateTerminalResponse:
        argv = [command, *(args or [])]
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        terminal_id = f"term-{len(self.terminals) + 1}"
        self.terminals[terminal_id] = (argv, process, bytearray())
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def _exited(self, terminal_id: str) -> TerminalExitStatus:
        _, process, output = self.terminals[terminal_id]
        assert process.stdout is not None
        output.extend(await process.stdout.read())
        code = await process.wait()
        if code < 0:
            return TerminalExitStatus(signal=f"signal {-code}")
        return TerminalExitStatus(exit_code=code)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> WaitForTerminalExitResponse:
        status = await self._exited(terminal_id)
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> TerminalOutputResponse:
        _, process, output = self.terminals[terminal_id]
        status = await self._exited(terminal_id) if process.returncode is not None else None
        return TerminalOutputResponse(
            output=output.decode(errors="replace"), truncated=False, exit_status=status
        )

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> KillTerminalResponse:
        _, process, _ = self.terminals[terminal_id]
        if process.returncode is None:
            process.kill()
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> ReleaseTerminalResponse:
        await self.kill_terminal(session_id, terminal_id)
        await self.terminals[terminal_id][1].wait()
        return ReleaseTerminalResponse()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.extensions.append((method, params))
        return {"echo": params}

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.extensions.append((method, params))

    # -- reading what arrived --------------------------------------------------------------

    def of(self, session_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            u
            for s, u in self.updates
            if s == session_id and (kind is None or u.get("sessionUpdate") == kind)
        ]

    def text(self, session_id: str, kind: str = "agent_message_chunk") -> str:
        return "".join(u["content"].get("text", "") for u in self.of(session_id, kind))

    def clear(self) -> None:
        self.updates.clear()


def proxy_command(home: Path, agent: Sequence[str], *options: str) -> list[str]:
    return [sys.executable, "-m", "turnback", "--home", str(home), "acp", *options, "--", *agent]


@asynccontextmanager
async def connect(
    editor: Editor,
    command: Sequence[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    *,
    unstable: bool = False,
) -> AsyncIterator[tuple[ClientSideConnection, asyncio.subprocess.Process]]:
    """Spawn ``command`` (the proxy, or an agent) and connect the editor to it; ``unstable``
    lets the editor answer the SDK's unstable methods (``elicitation/create``)."""
    environment = {**os.environ, **(env or {})}
    async with acp.spawn_agent_process(
        cast(acp.Client, editor),
        command[0],
        *command[1:],
        env=environment,
        cwd=cwd,
        transport_kwargs={"stderr": None},
        use_unstable_protocol=unstable,
    ) as (conn, process):
        yield conn, process


async def start(conn: ClientSideConnection, cwd: Path) -> str:
    [session_id] = await open_sessions(conn, cwd)
    return session_id


async def open_sessions(conn: ClientSideConnection, *cwds: Path) -> list[str]:
    """Initialize (as an editor able to read and write files), then a new session in each of
    ``cwds``; none opened when none are given."""
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES)
    return [(await conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id for cwd in cwds]


async def prompt(conn: ClientSideConnection, session_id: str, text: str, **meta: Any) -> str:
    response = await conn.prompt(session_id=session_id, prompt=[acp.text_block(text)], **meta)
    return str(response.stop_reason)


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out waiting for the condition")
        await asyncio.sleep(0.02)


class DiskEditor(Editor):
    """An editor that writes the files it is asked to write to disk, as editors do."""

    async def write_text_file(
        self, content: str, path: str, session_id: str, **meta: Any
    ) -> WriteTextFileResponse:
        Path(path).write_text(content)
        return await super().write_text_file(content, path, session_id, **meta)


class Recording(DiskEditor):
    """An editor (writing the files it is asked to write to disk) that also keeps every
    ``session/update`` as it came on the wire, kinds the SDK does not know yet
    (``history_truncated``) included."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[dict[str, Any]] = []

    def listen(self, conn: ClientSideConnection) -> None:
        inner = conn._conn._handler

        async def handler(method: str, params: Any, is_notification: bool) -> Any:
            if method == "session/update" and isinstance(params, dict):
                self.raw.append(params["update"])
                if params["update"].get("sessionUpdate") == "history_truncated":
                    return None  # a draft kind this SDK's models do not know yet
            return await inner(method, params, is_notification)

        conn._conn._handler = handler

    def kind(self, name: str) -> list[dict[str, Any]]:
        return [u for u in self.raw if u.get("sessionUpdate") == name]


async def request(conn: ClientSideConnection, method: str, params: dict[str, Any]) -> Any:
    return await conn._conn.send_request(method, params)


TS_AGENT_DIR = Path(__file__).with_name("ts_agent")


def ts_agent() -> tuple[str, ...]:
    """The command of the agent on the TypeScript SDK (``ts_agent/agent.mjs``)."""
    if not (TS_AGENT_DIR / "node_modules" / "@agentclientprotocol" / "sdk").is_dir():
        raise RuntimeError(
            f"the TypeScript agent's SDK is not installed: run `make pytest` (or `npm ci` in "
            f"{TS_AGENT_DIR}) first"
        )
    return ("node", str(TS_AGENT_DIR / "agent.mjs"))


#: ``turnback`` run with a gate in front of the import of some modules (and of what is under
#: them): the first to run is held until ``opened(name)``, defined in ``{wait}``, returns, then
#: nothing more is. (Held when it would run, not while it is looked for, when the interpreter's
#: import lock is held for every thread.) ``{argv}``: turnback's arguments, else the script's.
_HELD_AT_THE_DOOR = """
import os, sys, time
heavy = {heavy!r}
{wait}
class Held:
    open = False
    def __init__(self, loader):
        self.loader = loader
    def __getattr__(self, name):
        return getattr(self.loader, name)
    def create_module(self, spec):
        return self.loader.create_module(spec)
    def exec_module(self, module):
        if not Held.open:
            Held.open = opened(module.__name__) or True
        self.loader.exec_module(module)
class Gate:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if Held.open or not any(name == h or name.startswith(h + ".") for h in heavy):
            return None
        for finder in sys.meta_path[1:]:
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = Held(spec.loader)
                return spec
        return None
sys.meta_path.insert(0, Gate)
if {argv!r} is not None:
    sys.argv[1:] = {argv!r}
from turnback.launcher import main
main()
"""


def held_at_the_door(heavy: Sequence[str], wait: str, argv: Sequence[str] | None = None) -> str:
    """Python source (for ``python -c``) running ``turnback`` with the first of ``heavy``'s
    modules to load held until ``opened(name)``, a function ``wait`` defines, returns."""
    return _HELD_AT_THE_DOOR.format(
        heavy=tuple(heavy), wait=wait, argv=None if argv is None else list(argv)
    )
