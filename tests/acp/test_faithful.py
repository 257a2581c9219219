"""The proxy says only what the agent said: ``initialize`` is the agent's answer plus turnback's
documented additions, and the agent's errors reach the editor unchanged."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.acp.harness import run
from tests.acp.test_wedges import ROUGH, _initialize, _request
from tests.acp.test_wire_errors import RawEditor, finish, raw_proxy


async def _raw_agent(cwd: Path, env: dict[str, str]) -> RawEditor:
    process = await asyncio.create_subprocess_exec(
        *ROUGH,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=cwd,
        env={**os.environ, **env},
        limit=2**24,
    )
    return RawEditor(process)


async def _exchange(editor: RawEditor, cwd: Path) -> list[dict[str, Any]]:
    await editor.send(_initialize())
    answers = [await editor.answer()]
    await editor.send(_request(2, "session/new", {"cwd": str(cwd), "mcpServers": []}))
    answers.append(await editor.answer())
    await finish(editor)
    return answers


def test_initialize_is_the_agents_answer_plus_turnbacks_additions(
    home: Path, tmp_path: Path
) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        direct = (await _exchange(await _raw_agent(tmp_path, {}), tmp_path))[0]
        proxied = (await _exchange(await raw_proxy(home, tmp_path, agent=ROUGH), tmp_path))[0]
        return direct["result"], proxied["result"]

    direct, proxied = run(scenario())
    assert direct["agentCapabilities"]["_meta"] == {"rough": {"level": 3}}
    added = {
        "agentCapabilities": {
            **direct["agentCapabilities"],
            "loadSession": True,
            "sessionCapabilities": {
                **direct["agentCapabilities"].get("sessionCapabilities", {}),
                **{name: {} for name in ("list", "resume", "close", "delete", "fork")},
            },
            "session": {"rewind": {}},  # the draft session/rewind
        },
        "_meta": {"turnback": proxied["_meta"]["turnback"]},
    }
    assert proxied == {**direct, **added}
    assert set(proxied["_meta"]["turnback"]) == {"proxy", "commands"}


@pytest.mark.parametrize(
    "error",
    [
        {"code": -32000, "message": "Gemini API key is missing", "data": None},
        {"code": -32603, "message": "Internal error", "data": {"details": "boom"}},
        {"code": -32602, "message": "Invalid params", "data": {"cwd": ["not allowed"]}},
        {"code": -32099, "message": "Vendor trouble", "data": "plain text"},
    ],
)
@pytest.mark.parametrize("method", ["initialize", "session/new"])
def test_an_agents_error_reaches_the_editor_unchanged(
    home: Path, tmp_path: Path, method: str, error: dict[str, Any]
) -> None:
    env = {"ROUGH_AGENT_FAIL": json.dumps({method: error})}

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        direct = await _exchange(await _raw_agent(tmp_path, env), tmp_path)
        os.environ.update(env)
        try:
            proxy = await raw_proxy(home, tmp_path, agent=ROUGH)
        finally:
            del os.environ["ROUGH_AGENT_FAIL"]
        return direct, await _exchange(proxy, tmp_path)

    direct, proxied = run(scenario())
    which = 0 if method == "initialize" else 1
    assert "error" in direct[which]
    assert proxied[which]["error"] == direct[which]["error"]


def test_turnbacks_own_errors_use_the_codes_an_agent_would(home: Path, tmp_path: Path) -> None:
    async def scenario() -> list[dict[str, Any]]:
        editor = await raw_proxy(home, tmp_path, agent=ROUGH)
        await editor.send(_initialize())
        answers = [await editor.answer()]
        for rpc_id, (method, params) in enumerate(
            [
                ("session/load", {"sessionId": "0" * 32, "cwd": str(tmp_path), "mcpServers": []}),
                ("session/resume", {"sessionId": "zz!", "cwd": str(tmp_path)}),
                ("session/prompt", {"sessionId": "nope", "prompt": []}),
            ],
            start=2,
        ):
            await editor.send(_request(rpc_id, method, params))
            answers.append(await editor.answer())
        await finish(editor)
        return answers

    _, unknown, invalid, not_open = run(scenario())
    assert unknown["error"]["code"] == -32602
    assert unknown["error"]["data"]["error"] == "SessionNotFound"
    assert invalid["error"]["code"] == -32602
    assert not_open["error"]["code"] == -32602
