"""The proxy in front of an agent that knows nothing of turnback: a session through it behaves as
talking to the agent directly, apart from turnback's additions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import acp

import turnback
from tests.acp.harness import CAPABILITIES, Editor, connect, dump, proxy_command, run, wait_for
from turnback.model import TurnStatus

PLAIN = (sys.executable, str(Path(__file__).with_name("plain_agent.py")))
TURNBACK_COMMANDS = {"checkpoints", "diff", "rewind", "undo-rewind"}


async def session(editor: Editor, command: list[str], cwd: Path) -> dict[str, Any]:
    """One session with every kind of exchange; returns what the editor was answered."""
    seen: dict[str, Any] = {}
    async with connect(editor, command, cwd) as (conn, _):
        init = await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES
        )
        seen["initialize"] = dump(init)
        new = await conn.new_session(cwd=str(cwd), mcp_servers=[])
        seen["new"] = {k: v for k, v in dump(new).items() if k != "sessionId"}
        sid = new.session_id
        await wait_for(lambda: editor.of(sid, "available_commands_update"))
        prompts = []
        for text, meta in (("first", {"ide": {"line": 3}}), ("second", {})):
            response = await conn.prompt(session_id=sid, prompt=[acp.text_block(text)], **meta)
            prompts.append(dump(response))
        seen["prompts"] = prompts
        seen["mode"] = dump(await conn.set_session_mode(session_id=sid, mode_id="code"))
        seen["hello"] = await conn.ext_method("plain/hello", {"x": 1})
        seen["session"] = sid
    return seen


#: Updates turnback adds: its commands next to the agent's, and the session's title and time.
_ADDED = ("available_commands_update", "session_info_update")


def normalised(editor: Editor) -> list[dict[str, Any]]:
    return [u for _, u in editor.updates if u["sessionUpdate"] not in _ADDED]


def test_a_session_through_the_proxy_matches_one_with_the_agent_directly(
    home: Path, tmp_path: Path
) -> None:
    (direct_cwd := tmp_path / "direct").mkdir()
    (proxied_cwd := tmp_path / "proxied").mkdir()
    direct_editor = Editor(answers=["yes", "no"])
    proxied_editor = Editor(answers=["yes", "no"])
    direct = run(session(direct_editor, list(PLAIN), direct_cwd))
    proxied = run(session(proxied_editor, proxy_command(home, PLAIN), proxied_cwd))

    # initialize: the agent's answer, plus turnback's session capabilities and _meta
    added = proxied["initialize"]
    assert added["agentInfo"] == direct["initialize"]["agentInfo"]
    assert added["_meta"]["plain"] == {"build": 7}
    assert added["_meta"]["turnback"]["commands"] == sorted(TURNBACK_COMMANDS)
    assert added["agentCapabilities"]["loadSession"] is True
    assert direct["initialize"]["agentCapabilities"].get("loadSession") is False
    # everything else: identical
    for key in ("new", "prompts", "mode", "hello"):
        assert proxied[key] == direct[key], key
    assert direct["prompts"][0]["_meta"] == {"plain": {"tokens": 1}}
    assert normalised(proxied_editor) == normalised(direct_editor)
    assert "ide" in normalised(direct_editor)[0]["content"]["text"]  # the prompt's _meta arrived
    assert normalised(direct_editor)[0]["_meta"] == {"plain": {"n": 1}}
    assert proxied_editor.permissions == direct_editor.permissions
    assert [Path(p).name for p in proxied_editor.files] == ["notes-1.txt"]
    assert [Path(p).name for p in direct_editor.files] == ["notes-1.txt"]
    assert [
        (m, {k: v for k, v in p.items() if k != "sessionId"}) for m, p in proxied_editor.extensions
    ] == [
        (m, {k: v for k, v in p.items() if k != "sessionId"}) for m, p in direct_editor.extensions
    ]
    assert [m for m, _ in direct_editor.extensions] == ["plain/ping", "plain/echo"] * 2
    # the agent's own commands reach the editor next to turnback's
    offered = proxied_editor.of(proxied["session"], "available_commands_update")
    assert {c["name"] for c in offered[-1]["availableCommands"]} == TURNBACK_COMMANDS | {
        "plain-help"
    }
    infos = proxied_editor.of(proxied["session"], "session_info_update")
    assert [i["title"] for i in infos] == ["first", "first"]  # after each turn
    # and through the proxy each prompt was a turn
    with turnback.open(home) as tb:
        turns = tb.session(proxied["session"]).turns()
        assert [(t.prompt_text, t.status) for t in turns] == [
            ("first", TurnStatus.COMPLETED),
            ("second", TurnStatus.COMPLETED),
        ]
        text = "".join(m.text for m in tb.session(proxied["session"]).messages())
        assert "echo {'echo': {'n': 2}}" in text
