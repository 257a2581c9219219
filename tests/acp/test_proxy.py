"""`turnback acp -- python -m turnback.agents.scripted`, driven by an SDK editor over real pipes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import acp
from acp.schema import (
    AcceptElicitationResponse,
    CancelElicitationResponse,
    ClientCapabilities,
    DeclineElicitationResponse,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
)

import turnback
from tests.acp.harness import SCRIPTED, Editor, connect, prompt, proxy_command, run, start, wait_for
from turnback.model import EventKind, MessageKind, TurnStatus


def test_prompts_are_durable_turns_with_files_diffs_and_commands_offered(
    home: Path, workspace: Path
) -> None:
    editor = Editor()

    async def scenario() -> tuple[str, dict[str, Any], list[str]]:
        async with connect(editor, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            session_id = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            stops = [
                await prompt(conn, session_id, "write a.txt hello\nsay wrote a"),
                await prompt(conn, session_id, "append a.txt more\nwrite b/c.txt sea\nsay two"),
                await prompt(conn, session_id, "delete b/c.txt\nthink done\nsay three"),
            ]
            return session_id, init.model_dump(by_alias=True), stops

    session_id, init, stops = run(scenario())
    assert stops == ["end_turn"] * 3
    capabilities = init["agentCapabilities"]
    assert capabilities["loadSession"] is True
    sessions = capabilities["sessionCapabilities"]
    assert {"list", "resume", "fork"} <= {k for k, v in sessions.items() if v is not None}
    assert init["agentInfo"]["name"] == "turnback-scripted"  # the agent's own answer
    # the files, on disk
    assert (workspace / "a.txt").read_text() == "hello\nmore\n"
    assert not (workspace / "b" / "c.txt").exists()
    # the editor saw the agent's updates under turnback's session id, and turnback's commands
    assert editor.text(session_id) == "wrote a\ntwo\nthree\n"
    assert editor.text(session_id, "agent_thought_chunk") == "done\n"
    titles = [u["title"] for u in editor.of(session_id, "tool_call")]
    assert titles == ["write a.txt", "append a.txt", "write b/c.txt", "delete b/c.txt"]
    offered = editor.of(session_id, "available_commands_update")
    names = {c["name"] for c in offered[0]["availableCommands"]}
    assert {"checkpoints", "diff", "rewind", "undo-rewind"} <= names
    # turnback's store: three completed turns with their diffs
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        turns = session.turns()
        assert [t.status for t in turns] == [TurnStatus.COMPLETED] * 3
        assert session.workspace == workspace.resolve()
        changes = [sorted((c.path, c.kind.value) for c in session.diff(n).files) for n in (1, 2, 3)]
        assert changes == [
            [("a.txt", "added")],
            [("a.txt", "modified"), ("b/c.txt", "added")],
            [("b/c.txt", "deleted")],
        ]
        assert "wrote a" in "".join(m.text for m in session.messages())


def test_permission_round_trips_reach_the_editor_and_are_journaled(
    home: Path, workspace: Path
) -> None:
    editor = Editor(answers=["allow", "reject", None])

    async def scenario() -> tuple[str, list[str]]:
        async with connect(editor, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            session_id = await start(conn, workspace)
            stops = [
                await prompt(conn, session_id, "ask deploy\nask delete prod"),
                await prompt(conn, session_id, "ask again\nwrite never.txt x"),
            ]
            return session_id, stops

    session_id, stops = run(scenario())
    assert stops == ["end_turn", "cancelled"]  # a cancelled answer ends the scripted turn
    assert [p["toolCall"]["title"] for p in editor.permissions] == [
        "deploy",
        "delete prod",
        "again",
    ]
    assert [o["optionId"] for o in editor.permissions[0]["options"]] == ["allow", "reject"]
    assert editor.text(session_id) == (
        "permission deploy: allowed\npermission delete prod: rejected\n"
        "permission again: cancelled\n"
    )
    assert not (workspace / "never.txt").exists()
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        events = [e.event for e in session.run_events(1)]
        asked = [e for e in events if e["sessionUpdate"] == EventKind.PERMISSION_REQUESTED]
        answered = [e for e in events if e["sessionUpdate"] == EventKind.PERMISSION_ANSWERED]
        assert [e["toolCall"]["title"] for e in asked] == ["deploy", "delete prod"]
        assert [e.get("optionId") for e in answered] == ["allow", "reject"]
        second = [e.event for e in session.run_events(2)]
        assert [e.get("outcome") for e in second if e["sessionUpdate"].endswith("answered")] == [
            "cancelled"
        ]
        assert session.get_turn(2).status is TurnStatus.CANCELLED


def test_cancel_ends_the_turn_cancelled_and_captured(home: Path, workspace: Path) -> None:
    editor = Editor()

    async def scenario() -> tuple[str, str]:
        async with connect(editor, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            session_id = await start(conn, workspace)
            running = asyncio.ensure_future(
                prompt(
                    conn, session_id, "write early.txt x\nsay waiting\nsleep 30\nwrite late.txt y"
                )
            )
            await wait_for(lambda: "waiting" in editor.text(session_id))
            await conn.cancel(session_id=session_id)
            return session_id, await running

    session_id, stop = run(scenario())
    assert stop == "cancelled"
    assert (workspace / "early.txt").exists() and not (workspace / "late.txt").exists()
    with turnback.open(home) as tb:
        turn = tb.session(session_id).get_turn(1)
        assert turn.status is TurnStatus.CANCELLED
        assert turn.detail == "cancelled by the editor (session/cancel)"
        assert turn.end_checkpoint is not None  # the workspace was captured at the end
        assert [c.path for c in tb.session(session_id).diff(1).files] == ["early.txt"]


def test_slash_commands_are_answered_by_turnback_not_the_agent(home: Path, workspace: Path) -> None:
    editor = Editor()
    replies: dict[str, str] = {}

    async def scenario() -> str:
        async with connect(editor, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            session_id = await start(conn, workspace)
            await prompt(conn, session_id, "write a.txt one\nwrite keep.txt k")
            await prompt(conn, session_id, "write a.txt two\nwrite b.txt bee")
            for command in (
                "/checkpoints",
                "/diff 1",
                "/diff",
                "/rewind 1",
                "/rewind 1 confirm",
                "/checkpoints",
                "/undo-rewind",
                "/rewind 9",
                "/rewind 1 sideways",
                "/rewind 1 files keep-edits confirm",
            ):
                if command == "/rewind 1 confirm":  # the plan alone wrote nothing
                    assert (workspace / "a.txt").read_text() == "two\n"
                    assert (workspace / "b.txt").exists()
                if command == "/undo-rewind":
                    assert (workspace / "a.txt").read_text() == "one\n"
                    assert not (workspace / "b.txt").exists()
                if "keep-edits" in command:
                    (workspace / "keep.txt").write_text("edited by hand\n")
                editor.clear()
                assert await prompt(conn, session_id, command) == "end_turn"
                replies.setdefault(command, editor.text(session_id))
                replies["last " + command] = editor.text(session_id)
            return session_id

    session_id = run(scenario())
    listing = replies["/checkpoints"]
    # Markdown: a table of turns, a fenced patch, commands as code
    assert "| turn | status | prompt | files |" in listing
    assert "| 0 | | *before the first turn* | |" in listing
    assert (
        "| 1 | completed | write a.txt one write keep.txt k | A `a.txt` (+1 −0), A `keep.txt`"
        in listing
    )
    assert "| 2 | completed | write a.txt two write b.txt bee | M `a.txt` (+1 −1)" in listing
    assert "+one" in replies["/diff 1"] and "```diff\n" in replies["/diff 1"]
    assert "**Turn 2**:" in replies["/diff"] and "+bee" in replies["/diff"]
    # this editor offers no elicitation: the plan, and how to confirm it
    plan = replies["/rewind 1"]
    assert "**Rewind files and conversation to turn 1**: 1 later turn(s)" in plan
    assert "- Restored: M `a.txt` (+1 −1)" in plan and "- Deleted: D `b.txt` (+0 −1)" in plan
    assert "send `/rewind 1 confirm` to do it" in plan
    assert "Rewound files and conversation to turn 1" in replies["/rewind 1 confirm"]
    assert "1 rewound turn(s) kept as history" in replies["last /checkpoints"]
    assert "Undid the last rewind" in replies["/undo-rewind"]
    assert "could not do `/rewind`" in replies["/rewind 9"]
    assert (
        "Usage: `/rewind N [files|conversation|both] [keep-edits] [confirm]`"
        in replies["/rewind 1 sideways"]
    )
    assert (
        "Rewound the files to turn 1; the edits you made by hand were kept"
        in replies["/rewind 1 files keep-edits confirm"]
    )
    # a later session/load shows turnback's answers and rewinds again, after the turns
    again = Editor()

    async def load() -> None:
        async with connect(again, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            await conn.initialize(protocol_version=1)
            await conn.load_session(cwd=str(workspace), session_id=session_id, mcp_servers=[])

    run(load())
    replayed = again.text(session_id)
    updates = again.of(session_id)
    second = next(i for i, u in enumerate(updates) if "two" in str(u.get("content")))
    first_answer = next(i for i, u in enumerate(updates) if "Checkpoints" in str(u.get("content")))
    assert second < first_answer  # where it happened: after the turns, not before
    assert replayed.count("[turnback] **Checkpoints of this session**") == 2
    assert "[turnback] Rewound to turn 1; 1 later turn(s) kept as history." in replayed
    assert "[turnback] Undid a rewind: 1 turn(s) are back." in replayed
    marks = [u.get("_meta", {}).get("turnback", {}).get("notice") for u in again.of(session_id)]
    assert {"command", "rewind"} <= set(marks)
    # the undo put turn 2 back; the files-only rewind then undid it again, keeping the hand edit
    assert (workspace / "a.txt").read_text() == "one\n"
    assert not (workspace / "b.txt").exists()
    assert (workspace / "keep.txt").read_text() == "edited by hand\n"
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        assert [t.prompt_text[:7] for t in session.turns()] == ["write a", "write a"]  # no command
        assert [t.in_conversation for t in session.turns()] == [True, True]  # files-only rewind
    history = list((workspace / ".scripted-agent" / "sessions").glob("*.json"))
    assert history and not any("/checkpoints" in path.read_text() for path in history)


def test_agent_crash_mid_turn_is_a_short_message_and_the_turn_resumes(
    home: Path, workspace: Path
) -> None:
    editor, replayed = Editor(), Editor()

    async def scenario() -> tuple[str, str]:
        async with connect(editor, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            session_id = await start(conn, workspace)
            stop = await prompt(
                conn, session_id, "write a.txt one\ncrash-once\nwrite b.txt two\nsay finished"
            )
        async with connect(replayed, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            await conn.initialize(protocol_version=1)
            await conn.load_session(cwd=str(workspace), session_id=session_id, mcp_servers=[])
        return session_id, stop

    session_id, stop = run(scenario())
    assert stop == "end_turn"
    text = editor.text(session_id)
    assert text == (  # one notice for one recovery
        "\n[turnback] The agent stopped unexpectedly; it is being restarted and this turn goes "
        "on from step 1 (attempt 1).\nfinished\n"
    )
    # a load shows where the turn went on, inside the turn, marked as turnback's
    assert replayed.text(session_id).endswith(
        "\n[turnback] The agent stopped unexpectedly; the turn resumed from step 1.\nfinished\n"
    )
    assert (workspace / "a.txt").read_text() == "one\n"
    assert (workspace / "b.txt").read_text() == "two\n"
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        assert session.get_turn(1).status is TurnStatus.COMPLETED
        assert "agent.crashed" in [a.code for a in session.activities()]


class ConfirmingEditor(Editor):
    """An editor that offers form elicitation and answers each confirmation from a list."""

    def __init__(self, actions: list[str]) -> None:
        super().__init__()
        self.actions = actions
        self.asked: list[tuple[str, Any]] = []

    async def create_elicitation(self, message: str, mode: Any, **_: Any) -> Any:
        self.asked.append((message, mode))
        action = self.actions.pop(0)
        if action == "accept":
            return AcceptElicitationResponse(action="accept", content={})
        if action == "decline":
            return DeclineElicitationResponse(action="decline")
        return CancelElicitationResponse(action="cancel")


def test_rewind_shows_its_plan_and_asks_through_elicitation_before_writing(
    home: Path, workspace: Path
) -> None:
    editor = ConfirmingEditor(["decline", "cancel", "accept"])
    elicits = ClientCapabilities(
        elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities())
    )
    replies: list[str] = []
    reverts: list[int] = []

    async def scenario() -> str:
        command = proxy_command(home, SCRIPTED)
        async with connect(editor, command, workspace, unstable=True) as (conn, _):
            await conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION, client_capabilities=elicits
            )
            session_id = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await prompt(conn, session_id, "write a.txt one")
            await prompt(conn, session_id, "write a.txt two\nwrite b.txt bee")
            (workspace / "a.txt").write_text("by hand\n")
            for command in ("/rewind 1", "/rewind 0", "/rewind 1"):
                editor.clear()
                assert await prompt(conn, session_id, command) == "end_turn"
                replies.append(editor.text(session_id))
                if len(replies) < 3:  # declined, cancelled: nothing written
                    assert (workspace / "a.txt").read_text() == "by hand\n"
                    assert (workspace / "b.txt").read_text() == "bee\n"
                    with turnback.open(home) as tb:
                        reverts.append(len(tb.session(session_id).reverts()))
            return session_id

    session_id = run(scenario())
    assert reverts == [0, 0]
    assert [mode.session_id for _message, mode in editor.asked] == [session_id] * 3
    first, second, third = (message for message, _mode in editor.asked)
    assert first == third and "**Rewind files and conversation to turn 1**" in first
    assert "- Restored: M `a.txt` (+1 −1)" in first and "- Deleted: D `b.txt`" in first
    assert "- Your own edits it overwrites: `a.txt`" in first  # the hand edit, before asking
    assert "to turn 0**: 2 later turn(s)" in second
    assert "Rewind declined: nothing was changed." in replies[0]
    assert "Rewind declined: nothing was changed." in replies[1]
    assert "Rewound files and conversation to turn 1" in replies[2]
    assert (workspace / "a.txt").read_text() == "one\n" and not (workspace / "b.txt").exists()
    with turnback.open(home) as tb:
        [revert] = tb.session(session_id).reverts()
        assert revert.state is turnback.RevertState.COMMITTED


def test_a_streamed_message_reaches_the_editor_chunk_by_chunk_and_is_stored_whole(
    home: Path, workspace: Path
) -> None:
    editor = Editor()

    async def scenario() -> str:
        async with connect(editor, proxy_command(home, SCRIPTED), workspace) as (conn, _):
            session_id = await start(conn, workspace)
            assert await prompt(conn, session_id, "stream 2000\nsay done") == "end_turn"
            await wait_for(lambda: editor.text(session_id).endswith("done\n"))
            return session_id

    session_id = run(scenario())
    chunks = [f"chunk {index}\n" for index in range(1, 2001)]
    # every chunk forwarded as the agent wrote it, one update each, in order
    forwarded = [u["content"]["text"] for u in editor.of(session_id, "agent_message_chunk")]
    assert forwarded[:2000] == chunks
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        [message] = [m for m in session.turn_messages(1) if m.kind is MessageKind.AGENT]
        assert message.text == editor.text(session_id)
        # chunks read together were recorded together, their texts joined in order
        events = [e.event for e in session.run_events(1) if e.kind == "agent_message_chunk"]
        assert "".join(e["content"]["text"] for e in events) == editor.text(session_id)
        assert len(events) < len(forwarded)
