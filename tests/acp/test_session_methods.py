"""ACP's stable session methods through the proxy: session/close, session/delete and
session_info_update."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

import turnback
from tests.acp.harness import run, ts_agent
from tests.acp.test_wedges import ROUGH, _initialize, _request
from tests.acp.test_wire_errors import RawEditor, finish, raw_proxy
from turnback.errors import SessionNotFound
from turnback.model import EventKind


class Talk:
    """A raw editor that keeps the notifications it is sent."""

    def __init__(self, editor: RawEditor) -> None:
        self.editor = editor
        self.notes: list[dict[str, Any]] = []
        self.next_id = 1

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        rpc_id, self.next_id = self.next_id, self.next_id + 1
        line = _initialize(rpc_id) if method == "initialize" else _request(rpc_id, method, params)
        await self.editor.send(line)
        stdout = self.editor.process.stdout
        assert stdout is not None
        while True:
            message: dict[str, Any] = json.loads(await asyncio.wait_for(stdout.readline(), 30))
            if "method" not in message:
                assert message["id"] == rpc_id
                return message
            self.notes.append(message)

    def updates(self, kind: str) -> list[dict[str, Any]]:
        return [
            n["params"]["update"]
            for n in self.notes
            if n["method"] == "session/update" and n["params"]["update"]["sessionUpdate"] == kind
        ]


def test_close_info_and_delete(home: Path, workspace: Path, tmp_path: Path) -> None:
    agent_log = tmp_path / "agent.log"
    (workspace / "a.txt").write_text("one\n")

    async def scenario() -> tuple[Talk, dict[str, Any]]:
        os.environ["ROUGH_AGENT_LOG"] = str(agent_log)
        try:
            talk = Talk(await raw_proxy(home, workspace, agent=ROUGH))
        finally:
            del os.environ["ROUGH_AGENT_LOG"]
        got: dict[str, Any] = {}
        await talk.ask("initialize", {})
        new = {"cwd": str(workspace), "mcpServers": []}
        session_id = (await talk.ask("session/new", new))["result"]["sessionId"]
        got["id"] = session_id
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "say  hello\n"}]}
        got["prompt"] = await talk.ask("session/prompt", prompt)
        got["listed"] = await talk.ask("session/list", {})
        got["close"] = await talk.ask("session/close", {"sessionId": session_id})
        got["close again"] = await talk.ask("session/close", {"sessionId": session_id})
        got["closed prompt"] = await talk.ask("session/prompt", prompt)
        got["listed after close"] = await talk.ask("session/list", {})
        load = {"sessionId": session_id, **new}
        other = (await talk.ask("session/new", new))["result"]["sessionId"]
        got["other"] = other
        # an ACP session id is opaque: a prefix of one names no session
        got["load prefix"] = await talk.ask("session/load", {**load, "sessionId": other[:8]})
        got["delete prefix"] = await talk.ask("session/delete", {"sessionId": other[:8]})
        got["load"] = await talk.ask("session/load", load)
        got["prompt after load"] = await talk.ask("session/prompt", prompt)
        got["delete"] = await talk.ask("session/delete", {"sessionId": session_id})
        got["listed after delete"] = await talk.ask("session/list", {})
        got["delete again"] = await talk.ask("session/delete", {"sessionId": session_id})
        got["load deleted"] = await talk.ask("session/load", load)
        await finish(talk.editor)
        return talk, got

    talk, got = run(scenario())
    session_id = got["id"]
    assert got["prompt"]["result"].keys() == {"stopReason", "userMessageId"}
    assert got["prompt"]["result"]["stopReason"] == "end_turn"
    # session_info_update: turnback's title (the first prompt) and when the session last moved
    infos = talk.updates("session_info_update")
    assert infos and infos[0]["title"] == "say hello"
    assert infos[0]["updatedAt"].endswith("Z")
    assert got["listed"]["result"]["sessions"][0]["title"] == "say hello"
    # close: forwarded to the agent under its own session id; turnback's record is kept
    assert got["close"]["result"] == {} and got["close again"]["result"] == {}
    closes = [line.split() for line in agent_log.read_text().splitlines() if "close" in line]
    assert len(closes) == 1 and closes[0][1].startswith("rough-")  # the agent's own session id
    assert got["closed prompt"]["error"]["code"] == -32602
    assert [s["sessionId"] for s in got["listed after close"]["result"]["sessions"]] == [session_id]
    assert "result" in got["load"] and "result" in got["prompt after load"]
    assert got["load prefix"]["error"]["code"] == -32602
    assert got["delete prefix"]["result"] == {}  # as for any session that does not exist
    # delete: gone from the store; deleting it again succeeds silently (as ACP says); a load
    # of it is -32602
    assert got["delete"]["result"] == {}
    listed = [s["sessionId"] for s in got["listed after delete"]["result"]["sessions"]]
    assert listed == [got["other"]]  # the prefix deleted nothing
    assert got["delete again"]["result"] == {}
    assert got["load deleted"]["error"]["code"] == -32602
    with turnback.open(home) as tb:
        with pytest.raises(SessionNotFound):
            tb.session(session_id)
        assert tb.gc(older_than=0).refs_removed >= 2  # its checkpoints are garbage now


def test_a_load_replays_each_message_with_its_message_id(home: Path, workspace: Path) -> None:
    with turnback.open(home) as tb:
        session = tb.create_session(workspace=workspace)
        with session.turn("go") as turn:
            for text, message_id in (("a", "m1"), ("b", "m1"), ("c", "m2")):
                content = {"type": "text", "text": text}
                turn.record(
                    {
                        "sessionUpdate": "agent_message_chunk",
                        "content": content,
                        "messageId": message_id,
                    }
                )

    async def scenario() -> Talk:
        talk = Talk(await raw_proxy(home, workspace, agent=ROUGH))
        await talk.ask("initialize", {})
        load = {"sessionId": session.id, "cwd": str(workspace), "mcpServers": []}
        assert "result" in await talk.ask("session/load", load)
        await finish(talk.editor)
        return talk

    chunks = run(scenario()).updates("agent_message_chunk")
    assert [(c["content"]["text"], c["messageId"]) for c in chunks] == [("ab", "m1"), ("c", "m2")]


def test_cancel_request_is_forwarded_hop_by_hop(
    home: Path, workspace: Path, tmp_path: Path
) -> None:
    agent_log = tmp_path / "agent.log"
    ask = {"jsonrpc": "2.0", "id": "ask-7", "method": "fs/read_text_file"}
    cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "ask-7"}}

    async def scenario() -> tuple[Talk, str]:
        os.environ["ROUGH_AGENT_LOG"] = str(agent_log)
        try:
            talk = Talk(await raw_proxy(home, workspace, agent=ROUGH))
        finally:
            del os.environ["ROUGH_AGENT_LOG"]
        await talk.ask("initialize", {})
        new = {"cwd": str(workspace), "mcpServers": []}
        session_id = (await talk.ask("session/new", new))["result"]["sessionId"]
        # the agent asks the editor something, then cancels it
        ask["params"] = {"sessionId": "whatever", "path": "/x"}
        script = f"raw {json.dumps(json.dumps(ask))}\nraw {json.dumps(json.dumps(cancel))}"
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": script}]}
        assert "result" in await talk.ask("session/prompt", prompt)
        # the editor cancels a prompt the agent is still working on
        hang = {"sessionId": session_id, "prompt": [{"type": "text", "text": "hang"}]}
        await talk.editor.send(_request(700, "session/prompt", hang))
        deadline = asyncio.get_running_loop().time() + 10
        while agent_log.read_text().count("session/prompt") < 2:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        await talk.editor.send(
            json.dumps(
                {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 700}}
            ).encode()
        )
        while "$/cancel_request" not in agent_log.read_text():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        await finish(talk.editor)
        return talk, agent_log.read_text()

    talk, log = run(scenario())
    asked = [n for n in talk.notes if n.get("method") == "fs/read_text_file"]
    cancels = [n for n in talk.notes if n.get("method") == "$/cancel_request"]
    assert len(asked) == 1 and asked[0]["id"] != "ask-7"  # the proxy's own id towards the editor
    assert cancels == [
        {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": asked[0]["id"]}}
    ]
    prompts = [line.split()[1] for line in log.splitlines() if line.startswith("session/prompt")]
    cancelled = [line.split()[1] for line in log.splitlines() if line.startswith("$/cancel")]
    assert cancelled == [prompts[1]] and prompts[1] != "700"  # the agent's id for the prompt


def _permission(rpc_id: str) -> dict[str, Any]:
    option = {"optionId": "ok", "name": "OK", "kind": "allow_once"}
    call = {"toolCallId": f"call-{rpc_id}", "title": "edit", "status": "pending"}
    params = {"sessionId": "$SESSION", "toolCall": call, "options": [option]}
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "session/request_permission",
        "params": params,
    }


@pytest.mark.parametrize("how", ["the agent cancels it", "the turn ends"])
def test_a_permission_the_runtime_asks_is_cancelled_at_the_editor(
    home: Path, workspace: Path, how: str
) -> None:
    """The runtime asks the editor the agent's permission requests itself; when the agent
    cancels one, or its turn ends while the editor has not answered, the editor's request is
    cancelled too, by the id the editor saw, once."""
    lines = [f"raw {json.dumps(json.dumps(_permission('perm-1')))}", "sleep 0.5"]
    if how == "the agent cancels it":
        cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "perm-1"}}
        lines += [f"raw {json.dumps(json.dumps(cancel))}", "sleep 0.5"]

    async def scenario() -> tuple[Talk, dict[str, Any], dict[str, Any]]:
        talk = Talk(await raw_proxy(home, workspace, agent=ROUGH))
        await talk.ask("initialize", {})
        new = {"cwd": str(workspace), "mcpServers": []}
        session_id = (await talk.ask("session/new", new))["result"]["sessionId"]
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "\n".join(lines)}]}
        answered = await talk.ask("session/prompt", prompt)
        said = {"sessionId": session_id, "prompt": [{"type": "text", "text": "say next"}]}
        after = await talk.ask("session/prompt", said)
        await finish(talk.editor)
        return talk, answered, after

    talk, answered, after = run(scenario())
    assert answered["result"]["stopReason"] == "end_turn"
    assert after["result"]["stopReason"] == "end_turn"  # the session goes on
    asked = [n for n in talk.notes if n.get("method") == "session/request_permission"]
    cancels = [n for n in talk.notes if n.get("method") == "$/cancel_request"]
    assert len(asked) == 1 and asked[0]["id"] != "perm-1"
    assert cancels == [
        {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": asked[0]["id"]}}
    ]
    with turnback.open(home) as tb:
        (session,) = tb.sessions()
        events = tb.session(session.id).run_events(1)
    answers = [e.event for e in events if e.kind == EventKind.PERMISSION_ANSWERED]
    assert [a["outcome"] for a in answers] == ["cancelled"]


@pytest.mark.parametrize("supported", [True, False])
def test_session_delete_reaches_an_agent_that_supports_it(
    home: Path, workspace: Path, supported: bool
) -> None:
    """Against the TypeScript SDK's agent: session/delete is forwarded (with the agent's own
    session id) when the agent advertises it, and not sent when it does not; either way the
    editor's answer is ``{}`` and the session has left turnback's store."""
    saved = workspace / ".ts-agent"

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], list[str], list[str]]:
        os.environ["TS_AGENT_DELETE"] = "1" if supported else "0"
        try:
            talk = Talk(await raw_proxy(home, workspace, agent=ts_agent()))
        finally:
            del os.environ["TS_AGENT_DELETE"]
        initialized = await talk.ask("initialize", {})
        new = {"cwd": str(workspace), "mcpServers": []}
        session_id = (await talk.ask("session/new", new))["result"]["sessionId"]
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "say hi"}]}
        assert "result" in await talk.ask("session/prompt", prompt)
        before = sorted(p.name for p in saved.glob("ts-*.json"))
        deleted = await talk.ask("session/delete", {"sessionId": session_id})
        after = sorted(p.name for p in saved.glob("ts-*.json"))
        again = await talk.ask("session/delete", {"sessionId": session_id})
        await finish(talk.editor)
        assert again["result"] == {}  # gone: deleting it again succeeds silently, as ACP says
        return initialized, deleted, before, after

    initialized, deleted, before, after = run(scenario())
    capabilities = initialized["result"]["agentCapabilities"]["sessionCapabilities"]
    assert capabilities["delete"] == {}  # turnback deletes from its store either way
    assert deleted == {"jsonrpc": "2.0", "id": deleted["id"], "result": {}}
    assert len(before) == 1
    # the agent deleted its own session; not asked to (it would have), it kept it
    assert after == ([] if supported else before)
    with turnback.open(home) as tb:
        assert tb.sessions() == []
