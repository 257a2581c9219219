"""The draft ACP ``session/rewind`` and its ``_session/rewind`` extension form, served by
`turnback acp` for an agent that knows nothing of them, driven by an SDK editor over real pipes
as an editor's "restore checkpoint" on a message would drive it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.core import ClientSideConnection

import turnback
from tests.acp.harness import (
    SCRIPTED,
    Recording,
    connect,
    proxy_command,
    request,
    run,
    ts_agent,
    wait_for,
)

TURNS = (
    "write a.txt one\nwrite keep.txt k\nsay first",
    "write a.txt two\nwrite b.txt bee\nsay second",
    "write c.txt sea\nsay third",
)

FS = {"clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}}}


async def opened(conn: ClientSideConnection, editor: Recording, cwd: Path) -> tuple[dict, str]:
    editor.listen(conn)
    init = await request(conn, "initialize", {"protocolVersion": acp.PROTOCOL_VERSION, **FS})
    session = await request(conn, "session/new", {"cwd": str(cwd), "mcpServers": []})
    return init, session["sessionId"]


async def prompted(conn: ClientSideConnection, session_id: str, text: str) -> dict[str, Any]:
    blocks = [{"type": "text", "text": text}]
    answer: dict[str, Any] = await request(
        conn, "session/prompt", {"sessionId": session_id, "prompt": blocks}
    )
    return answer


async def refused(conn: ClientSideConnection, method: str, params: dict[str, Any]) -> Any:
    with pytest.raises(acp.RequestError) as caught:
        await request(conn, method, params)
    return caught.value


def files(workspace: Path) -> dict[str, str]:
    return {
        p.name: p.read_text()
        for p in sorted(workspace.iterdir())
        if p.is_file() and not p.name.startswith(".")
    }


async def loaded(
    home: Path, workspace: Path, session_id: str, agent: Sequence[str] = SCRIPTED
) -> list[dict[str, Any]]:
    """The conversation a fresh editor is shown by session/load, through another proxy."""
    again = Recording()
    async with connect(again, proxy_command(home, agent), workspace) as (conn, _):
        again.listen(conn)
        await request(conn, "initialize", {"protocolVersion": acp.PROTOCOL_VERSION})
        await request(
            conn,
            "session/load",
            {"sessionId": session_id, "cwd": str(workspace), "mcpServers": []},
        )
    return [u for u in again.raw if u["sessionUpdate"].endswith("_message_chunk")]


def said(updates: list[dict[str, Any]], kind: str) -> list[str]:
    return [u["content"]["text"] for u in updates if u["sessionUpdate"] == kind]


#: What a scenario does after the turns: with the connection, the editor, the session's id and
#: what it saw so far (``init``: the initialize answer; ``answers``: the prompts' answers).
Body = Callable[[ClientSideConnection, Recording, str, dict[str, Any]], Awaitable[None]]


def drive(
    home: Path, workspace: Path, turns: int, body: Body, agent: Sequence[str] = SCRIPTED
) -> tuple[Recording, str, dict[str, Any]]:
    """Open a session through the proxy (on ``agent``), run the first ``turns`` of ``TURNS``,
    then ``body``."""
    editor = Recording()
    seen: dict[str, Any] = {}

    async def scenario() -> str:
        async with connect(editor, proxy_command(home, agent), workspace) as (conn, _):
            seen["init"], session_id = await opened(conn, editor, workspace)
            seen["answers"] = [await prompted(conn, session_id, t) for t in TURNS[:turns]]
            await body(conn, editor, session_id, seen)
            return session_id

    return editor, run(scenario()), seen


@pytest.mark.parametrize("agent", ["scripted", "typescript"])
def test_restoring_a_prompt_rewinds_files_and_conversation_keeps_hand_edits_and_undoes(
    home: Path, workspace: Path, agent: str
) -> None:
    """What an editor's "restore checkpoint" on the second prompt does, for the scripted agent
    (which writes files itself) and one on the TypeScript SDK (which asks the editor to)."""
    command = SCRIPTED if agent == "scripted" else ts_agent()

    async def body(
        conn: ClientSideConnection, editor: Recording, session_id: str, seen: dict[str, Any]
    ) -> None:
        (workspace / "keep.txt").write_text("edited by hand\n")
        (workspace / "notes.txt").write_text("mine\n")
        seen["before"] = files(workspace)
        second = seen["answers"][1]["userMessageId"]
        seen["rewound"] = await request(
            conn, "session/rewind", {"sessionId": session_id, "toMessageId": second}
        )
        seen["after"] = files(workspace)
        seen["truncated"] = editor.kind("history_truncated")
        seen["loaded"] = await loaded(home, workspace, session_id, command)
        seen["gone"] = await refused(
            conn, "session/rewind", {"sessionId": session_id, "toMessageId": second}
        )
        editor.clear()
        await prompted(conn, session_id, "/undo-rewind")
        seen["undo"] = editor.text(session_id)
        seen["undone"] = files(workspace)

    _, session_id, seen = drive(home, workspace, 3, body, command)
    capabilities = seen["init"]["agentCapabilities"]
    assert capabilities["session"]["rewind"] == {}
    ids = [answer["userMessageId"] for answer in seen["answers"]]
    assert len(set(ids)) == 3
    # files: back to the end of turn 1; the hand edit and the hand-made file stay
    hand = {"keep.txt": "edited by hand\n", "notes.txt": "mine\n"}
    assert seen["after"] == {"a.txt": "one\n", **hand}
    rewound = seen["rewound"]
    assert rewound["remainingMessageCount"] == 2  # turn 1's prompt and the agent's answer
    assert rewound["_meta"]["turnback"]["toTurn"] == 1
    assert rewound["_meta"]["turnback"]["laterTurns"] == 2
    [truncated] = seen["truncated"]
    assert truncated["lastMessageId"] == rewound["lastMessageId"] != ids[0]
    # session/load: the truncated conversation, each message with its id
    shown = seen["loaded"]
    assert "".join(said(shown, "user_message_chunk")) == TURNS[0]
    assert "first" in "".join(said(shown, "agent_message_chunk"))
    assert "second" not in "".join(said(shown, "agent_message_chunk"))
    assert [u["messageId"] for u in shown if u["sessionUpdate"] == "user_message_chunk"] == [ids[0]]
    assert rewound["lastMessageId"] in {u.get("messageId") for u in shown}
    # a message rewound away is not in the conversation any more
    assert seen["gone"].code == -32602 and "no message" in str(seen["gone"].data)
    # /undo-rewind puts everything back, the hand edits with it
    assert "Undid the last rewind" in seen["undo"]
    assert seen["undone"] == seen["before"]
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        assert [t.number for t in session.conversation()] == [1, 2, 3]


def test_an_agent_message_keeps_its_turn_and_files_only_keeps_the_conversation(
    home: Path, workspace: Path
) -> None:
    async def body(
        conn: ClientSideConnection, editor: Recording, session_id: str, seen: dict[str, Any]
    ) -> None:
        shown = await loaded(home, workspace, session_id)
        first_answer = next(
            u["messageId"]
            for u in shown
            if u["sessionUpdate"] == "agent_message_chunk" and "first" in u["content"]["text"]
        )
        ask = {"sessionId": session_id, "messageId": first_answer}
        seen["plan"] = await request(conn, "_session/rewind", {**ask, "dryRun": True})
        seen["planned"] = files(workspace)
        seen["files"] = await request(conn, "_session/rewind", {**ask, "mode": "files"})
        seen["truncated"] = editor.kind("history_truncated")

    _, session_id, seen = drive(home, workspace, 2, body)
    plan = seen["plan"]
    assert plan["dryRun"] is True and plan["mode"] == "both" and plan["turnsUndone"] == 1
    assert plan["files"]["restore"] == ["a.txt"] and plan["files"]["delete"] == ["b.txt"]
    assert plan["_meta"]["turnback"]["toTurn"] == 1
    # the plan changed nothing
    assert seen["planned"] == {"a.txt": "two\n", "b.txt": "bee\n", "keep.txt": "k\n"}
    # files only: back to turn 1; the conversation keeps both turns, no truncation sent
    assert seen["files"]["turnsUndone"] == 0
    assert seen["files"]["remainingMessageCount"] == 4
    assert seen["truncated"] == []
    assert files(workspace) == {"a.txt": "one\n", "keep.txt": "k\n"}
    with turnback.open(home) as tb:
        assert [t.number for t in tb.session(session_id).conversation()] == [1, 2]


def test_bad_ids_running_turns_and_hand_edits_in_the_way_change_nothing(
    home: Path, workspace: Path
) -> None:
    async def body(
        conn: ClientSideConnection, editor: Recording, session_id: str, seen: dict[str, Any]
    ) -> None:
        first = seen["answers"][0]["userMessageId"]
        ask = {"sessionId": session_id}
        seen["unknown"] = await refused(conn, "session/rewind", {**ask, "toMessageId": "m?"})
        seen["missing"] = await refused(conn, "session/rewind", ask)
        seen["mode"] = await refused(
            conn, "_session/rewind", {**ask, "messageId": first, "mode": "sideways"}
        )
        seen["session"] = await refused(
            conn, "session/rewind", {"sessionId": "nope", "toMessageId": first}
        )
        (workspace / "a.txt").write_text("my own a\n")  # a file the rewind would restore
        seen["edits"] = await refused(conn, "session/rewind", {**ask, "toMessageId": first})
        seen["kept"] = files(workspace)
        running = asyncio.ensure_future(prompted(conn, session_id, "say waiting\nsleep 30"))
        await wait_for(lambda: "waiting" in editor.text(session_id))
        seen["running"] = await refused(conn, "session/rewind", {**ask, "toMessageId": first})
        await conn.cancel(session_id=session_id)
        await running

    editor, _, seen = drive(home, workspace, 2, body)
    for name in ("unknown", "missing", "mode", "session"):
        assert seen[name].code == -32602, name
    assert "no message 'm?'" in str(seen["unknown"].data)
    assert "toMessageId is required" in str(seen["missing"].data)
    assert "not one of files, conversation, both" in str(seen["mode"].data)
    edits = seen["edits"]
    assert edits.data["error"] == "UserEditsInTheWay" and edits.data["paths"] == ["a.txt"]
    assert seen["kept"] == {"a.txt": "my own a\n", "b.txt": "bee\n", "keep.txt": "k\n"}
    assert seen["running"].data["error"] == "TurnRunning"
    assert "still running" in seen["running"].data["details"]
    assert editor.kind("history_truncated") == []
    assert files(workspace) == seen["kept"]


def test_edit_prompt_rewinds_to_before_the_prompt_and_runs_the_new_one(
    home: Path, workspace: Path
) -> None:
    edited = "write b.txt edited\nsay edited"

    async def body(
        conn: ClientSideConnection, editor: Recording, session_id: str, seen: dict[str, Any]
    ) -> None:
        (workspace / "keep.txt").write_text("edited by hand\n")
        shown = await loaded(home, workspace, session_id)
        answer_id = next(
            u["messageId"] for u in shown if u["sessionUpdate"] == "agent_message_chunk"
        )
        second = {"sessionId": session_id, "messageId": seen["answers"][1]["userMessageId"]}
        content = [{"type": "text", "text": edited}]
        seen["not a prompt"] = await refused(
            conn,
            "session/edit_prompt",
            {"sessionId": session_id, "messageId": answer_id, "content": content},
        )
        seen["no content"] = await refused(conn, "session/edit_prompt", second)
        editor.clear()
        seen["edited"] = await request(conn, "session/edit_prompt", {**second, "content": content})
        seen["said"] = editor.text(session_id)
        seen["truncated"] = editor.kind("history_truncated")
        seen["loaded"] = await loaded(home, workspace, session_id)

    _, session_id, seen = drive(home, workspace, 2, body)
    assert seen["not a prompt"].code == -32602
    assert "only a user message can be edited" in str(seen["not a prompt"].data)
    assert seen["no content"].code == -32602
    assert seen["edited"]["stopReason"] == "end_turn"
    # the edited prompt keeps the id the editor knows it by
    assert seen["edited"]["userMessageId"] == seen["answers"][1]["userMessageId"]
    assert "edited" in seen["said"]
    assert [t["remainingMessageCount"] for t in seen["truncated"]] == [2]
    # turn 2 undone (a.txt back to one), the edited prompt run instead; the hand edit kept
    assert files(workspace) == {
        "a.txt": "one\n",
        "b.txt": "edited\n",
        "keep.txt": "edited by hand\n",
    }
    assert said(seen["loaded"], "user_message_chunk") == [TURNS[0], edited]
    with turnback.open(home) as tb:
        conversation = tb.session(session_id).conversation()
        assert [t.prompt_text for t in conversation] == [TURNS[0], edited]


def test_restoring_the_first_prompt_empties_the_conversation(home: Path, workspace: Path) -> None:
    async def body(
        conn: ClientSideConnection, editor: Recording, session_id: str, seen: dict[str, Any]
    ) -> None:
        first = seen["answers"][0]["userMessageId"]
        seen["rewound"] = await request(
            conn, "session/rewind", {"sessionId": session_id, "toMessageId": first}
        )
        seen["truncated"] = editor.kind("history_truncated")
        seen["again"] = await prompted(conn, session_id, "write d.txt dee\nsay again")

    _, session_id, seen = drive(home, workspace, 1, body)
    assert seen["rewound"]["remainingMessageCount"] == 0
    assert seen["rewound"]["lastMessageId"] is None
    assert seen["rewound"]["_meta"]["turnback"]["toTurn"] == 0
    assert [t["lastMessageId"] for t in seen["truncated"]] == [None]
    # the next prompt starts the conversation afresh
    assert seen["again"]["stopReason"] == "end_turn"
    assert files(workspace) == {"d.txt": "dee\n"}
    with turnback.open(home) as tb:
        conversation = tb.session(session_id).conversation()
        assert [t.prompt_text for t in conversation] == ["write d.txt dee\nsay again"]


def test_a_prompt_the_editor_named_is_rewound_by_its_own_id(home: Path, workspace: Path) -> None:
    async def body(
        conn: ClientSideConnection, editor: Recording, session_id: str, seen: dict[str, Any]
    ) -> None:
        blocks = [{"type": "text", "text": "write e.txt eee"}]
        seen["named"] = await request(
            conn,
            "session/prompt",
            {"sessionId": session_id, "prompt": blocks, "messageId": "editor-msg-7"},
        )
        seen["rewound"] = await request(
            conn, "session/rewind", {"sessionId": session_id, "toMessageId": "editor-msg-7"}
        )

    _, _, seen = drive(home, workspace, 1, body)
    assert seen["named"]["userMessageId"] == "editor-msg-7"
    assert seen["rewound"]["_meta"]["turnback"]["toTurn"] == 1
    assert files(workspace) == {"a.txt": "one\n", "keep.txt": "k\n"}
