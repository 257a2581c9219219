"""An agent turnback did not write -- a scripted agent on the TypeScript SDK
(``ts_agent/agent.mjs``) -- driven by the same Python SDK client directly and through
``turnback acp``: everything the editor sees matches, apart from turnback's documented additions
(its session ids, its slash commands, its ``_meta.turnback`` and session capabilities in
``initialize``, the conversation a ``session/load`` replays from its store)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.schema import ClientCapabilities, FileSystemCapabilities

import turnback
from tests.acp.harness import (
    DiskEditor,
    Editor,
    connect,
    dump,
    proxy_command,
    run,
    ts_agent,
    wait_for,
)
from turnback.model import TurnStatus

CAPABILITIES = ClientCapabilities(
    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
)
TURNBACK_COMMANDS = {"checkpoints", "diff", "rewind", "undo-rewind"}
TS_COMMANDS = {"ts-help", "ts-count"}
FIRST = """say hello streaming world
think about the plan
plan read the readme | write notes | run a command
tool README.md
ask Write notes
write notes.txt some notes
run echo the terminal says hi
ext"""
SECOND = "ask Write more\nsay bye\nstop max_tokens"


def commands(editor: Editor, session_id: str) -> set[str]:
    offered = editor.of(session_id, "available_commands_update")
    return {c["name"] for c in offered[-1]["availableCommands"]} if offered else set()


async def session(editor: Editor, command: list[str], cwd: Path) -> dict[str, Any]:
    """Two turns with every kind of exchange, then the agent's extensions; returns what the
    editor was answered, with the workspace's path written as <cwd>."""
    seen: dict[str, Any] = {}
    async with connect(editor, command, cwd) as (conn, _):
        init = await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES
        )
        seen["initialize"] = dump(init)
        new = await conn.new_session(cwd=str(cwd), mcp_servers=[])
        sid = seen["session"] = new.session_id
        seen["new"] = {k: v for k, v in dump(new).items() if k != "sessionId"}
        await wait_for(lambda: editor.of(sid, "available_commands_update"))
        seen["prompts"] = [dump(await conn.prompt(session_id=sid, prompt=[acp.text_block(FIRST)]))]
        # the SDK runs handlers concurrently: a whole turn gives the note time to land
        await conn.ext_notification("ts/note", {"sessionId": sid})
        seen["prompts"].append(
            dump(await conn.prompt(session_id=sid, prompt=[acp.text_block(SECOND)]))
        )
        # the agent's own slash command: through the proxy, forwarded to it as a prompt
        seen["prompts"].append(
            dump(
                await conn.prompt(
                    session_id=sid, prompt=[acp.text_block("/ts-count")], ide={"l": 3}
                )
            )
        )
        state = await conn.ext_method("ts/state", {"sessionId": sid})
        seen["state"] = {k: v for k, v in state.items() if k != "pid"}
        seen["echo"] = await conn.ext_method("ts/echo", {"no": "session"})
    return json.loads(json.dumps(seen).replace(str(cwd), "<cwd>"))


_TURNBACKS_OWN = frozenset({"available_commands_update", "session_info_update"})


def wire(editor: Editor, cwd: Path) -> dict[str, Any]:
    """What the agent sent the editor, turnback's own updates (commands offered, session info)
    aside, with ids made neutral."""
    seen = {
        "updates": [u for _, u in editor.updates if u["sessionUpdate"] not in _TURNBACKS_OWN],
        "permissions": editor.permissions,
        "files": {Path(p).name: text for p, text in editor.files.items()},
        "terminals": [argv for argv, _, _ in editor.terminals.values()],
        "extensions": [
            (m, {k: v for k, v in p.items() if k != "sessionId"}) for m, p in editor.extensions
        ],
    }
    return json.loads(json.dumps(seen).replace(str(cwd), "<cwd>"))


def test_the_ts_agent_through_the_proxy_matches_it_directly(home: Path, tmp_path: Path) -> None:
    agent = list(ts_agent())
    (direct_cwd := tmp_path / "direct").mkdir()
    (proxied_cwd := tmp_path / "proxied").mkdir()
    direct_editor = DiskEditor(answers=["allow", "reject"])
    proxied_editor = DiskEditor(answers=["allow", "reject"])
    direct = run(session(direct_editor, agent, direct_cwd))
    proxied = run(session(proxied_editor, proxy_command(home, agent), proxied_cwd))

    # initialize: the agent's answer, plus turnback's session capabilities and _meta
    added, agents = proxied.pop("initialize"), direct.pop("initialize")
    assert added["_meta"].pop("turnback")["commands"] == sorted(TURNBACK_COMMANDS)
    sessions = added["agentCapabilities"].pop("sessionCapabilities")
    assert sessions == {
        **agents["agentCapabilities"].pop("sessionCapabilities"),
        "list": {},
        "resume": {},
        "close": {},
        "delete": {},
        "fork": {},
    }
    assert added == agents
    assert agents["agentInfo"]["name"] == "ts-scripted-agent"
    assert agents["agentCapabilities"]["loadSession"] is True
    # everything else the editor was answered: identical
    sid = proxied.pop("session")
    assert direct.pop("session") != sid
    assert proxied == direct
    assert direct["prompts"] == [
        {"stopReason": "end_turn"},
        {"stopReason": "max_tokens"},
        {"stopReason": "end_turn"},
    ]
    assert direct["state"] == {
        "opened": 1,
        "extCalls": 1,
        "notes": 1,
        "session": {"turns": 2, "notes": 1, "promptMeta": {"ide": {"l": 3}}},
    }
    assert direct["echo"] == {"echo": {"no": "session"}}
    # and everything the agent sent it
    theirs, ours = wire(direct_editor, direct_cwd), wire(proxied_editor, proxied_cwd)
    assert ours == theirs
    kinds = [u["sessionUpdate"] for u in theirs["updates"]]
    for kind in (
        "agent_message_chunk",
        "agent_thought_chunk",
        "plan",
        "tool_call",
        "tool_call_update",
    ):
        assert kind in kinds, kind
    said = "".join(
        u["content"]["text"]
        for u in theirs["updates"]
        if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert said.startswith("hello streaming world\npermission Write notes: allowed\n")
    assert "ran echo: exit 0: the terminal says hi\n" in said
    assert 'echo {"echo":{"turn":1}}\n' in said
    assert said.endswith("permission Write more: rejected\nbye\n2 turns so far\n")
    assert [p["toolCall"]["title"] for p in theirs["permissions"]] == ["Write notes", "Write more"]
    assert theirs["files"] == {"notes.txt": "some notes\n"}
    assert theirs["terminals"] == [["echo", "the", "terminal", "says", "hi"]]
    assert theirs["extensions"] == [["ts/ping", {"turn": 1}], ["ts/echo", {"turn": 1}]]
    # the agent's own commands reach the editor next to turnback's
    assert commands(direct_editor, direct_editor.updates[-1][0]) == TS_COMMANDS
    assert commands(proxied_editor, sid) == TURNBACK_COMMANDS | TS_COMMANDS
    # and through the proxy each prompt was a turn, with the file the editor wrote in its diff
    with turnback.open(home) as tb:
        stored = tb.session(sid)
        turns = stored.turns()
        assert [(t.prompt_text, t.status) for t in turns] == [
            (FIRST, TurnStatus.COMPLETED),
            (SECOND, TurnStatus.COMPLETED),
            ("/ts-count", TurnStatus.COMPLETED),
        ]
        assert [c.path for c in stored.diff(1).files] == ["notes.txt"]
        assert (proxied_cwd / "notes.txt").read_text() == "some notes\n"


def test_a_cancelled_prompt_ends_alike_directly_and_through_the_proxy(
    home: Path, tmp_path: Path
) -> None:
    agent = list(ts_agent())

    async def cancelled(command: list[str], cwd: Path) -> tuple[str, list[str], str]:
        editor = Editor()
        async with connect(editor, command, cwd) as (conn, _):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id
            running = asyncio.ensure_future(
                conn.prompt(session_id=sid, prompt=[acp.text_block("say working\nsleep 30000")])
            )
            await wait_for(lambda: "working" in editor.text(sid))
            await conn.cancel(session_id=sid)
            reason = str((await running).stop_reason)
            after = await conn.prompt(session_id=sid, prompt=[acp.text_block("say after")])
            return sid, [reason, str(after.stop_reason)], editor.text(sid)

    (direct_cwd := tmp_path / "direct").mkdir()
    (proxied_cwd := tmp_path / "proxied").mkdir()
    _, direct, direct_text = run(cancelled(agent, direct_cwd))
    sid, proxied, proxied_text = run(cancelled(proxy_command(home, agent), proxied_cwd))
    assert proxied == direct == ["cancelled", "end_turn"]
    assert proxied_text == direct_text == "working\nafter\n"
    with turnback.open(home) as tb:
        assert [t.status for t in tb.session(sid).turns()] == [
            TurnStatus.CANCELLED,
            TurnStatus.COMPLETED,
        ]


@pytest.mark.parametrize("ms", ["0", "-1"])
def test_updates_sent_right_behind_session_new_reach_the_editor_after_its_answer(
    home: Path, tmp_path: Path, ms: str
) -> None:
    """An agent may offer its commands in the same breath as it answers session/new (gemini-cli
    does); the proxy answers the editor later. Directly and through the proxy alike, the editor
    is answered first, then offered the commands (through the proxy, turnback's may come on
    their own first, as for an agent that offers none). An agent that offers them even ahead of
    its answer (``ms`` -1) is the editor's to see so directly; through the proxy, whose session
    id the editor learns from its answer, they come after it."""
    agent = list(ts_agent())
    env = {**os.environ, "TS_AGENT_COMMANDS_MS": ms}
    commands = "session/update available_commands_update"

    async def frames(command: list[str], cwd: Path) -> tuple[list[str], set[str]]:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
        )
        assert process.stdin is not None and process.stdout is not None
        seen: list[str] = []
        offered: list[set[str]] = []

        async def read() -> str:
            assert process.stdout is not None
            frame = json.loads(await asyncio.wait_for(process.stdout.readline(), 30))
            if "method" in frame:
                update = frame["params"].get("update", {})
                said = f"{frame['method']} {update.get('sessionUpdate')}"
                offered.append({c["name"] for c in update.get("availableCommands", [])})
            else:
                said = f"answer {frame['id']}"
            seen.append(said)
            return said

        async def ask(rpc_id: int, method: str, params: dict[str, Any]) -> None:
            assert process.stdin is not None
            request = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
            process.stdin.write(json.dumps(request).encode() + b"\n")
            while await read() != f"answer {rpc_id}":
                pass

        try:
            await ask(1, "initialize", {"protocolVersion": 1})
            await ask(2, "session/new", {"cwd": str(cwd), "mcpServers": []})
            while not offered or not offered[-1] & TS_COMMANDS:
                await read()
            await ask(3, "_ts/echo", {})  # answered after whatever came before it
        finally:
            process.stdin.close()
            await asyncio.wait_for(process.wait(), 15)
        return seen, offered[-1]

    (direct_cwd := tmp_path / "direct").mkdir()
    (proxied_cwd := tmp_path / "proxied").mkdir()
    seen, offered = run(frames(agent, direct_cwd))
    if ms == "0":
        assert seen == ["answer 1", "answer 2", commands, "answer 3"]
    else:
        assert seen == ["answer 1", commands, "answer 2", "answer 3"]
    assert offered == TS_COMMANDS
    seen, offered = run(frames(proxy_command(home, agent), proxied_cwd))
    assert seen[:2] == ["answer 1", "answer 2"]  # nothing about the session before its answer
    assert set(seen[2:-1]) == {commands} and seen[-1] == "answer 3"
    assert offered == TS_COMMANDS | TURNBACK_COMMANDS
