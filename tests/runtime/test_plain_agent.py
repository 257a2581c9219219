"""An agent written with the SDK alone -- no turnback extension, no session/load -- and the
runtime's fallbacks for it; and conversation rollback, by the agent or by a fresh session."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import turnback
from tests.runtime.harness import SCRIPTED, run, text_of
from turnback.errors import TurnInProgress
from turnback.model import TurnStatus
from turnback.runtime import AgentRuntime, OnCrash, ResumePolicy, RollbackUnavailable

PLAIN_AGENT = """
    import asyncio, json, os, signal, sys, uuid
    from pathlib import Path
    import acp
    from acp.schema import (
        AgentCapabilities, CloseSessionResponse, InitializeResponse, NewSessionResponse,
        PromptResponse, SessionCapabilities, SessionCloseCapabilities,
    )

    LOG = Path(os.environ["PLAIN_LOG"])

    def log(**entry):
        with LOG.open("a") as out:
            out.write(json.dumps(entry) + "\\n")

    class Plain:
        def on_connect(self, conn):
            self.conn = conn

        async def initialize(self, protocol_version, **_):
            if not os.environ.get("PLAIN_CLOSE"):
                return InitializeResponse(protocol_version=protocol_version)
            sessions = SessionCapabilities(close=SessionCloseCapabilities())
            capabilities = AgentCapabilities(session_capabilities=sessions)
            return InitializeResponse(
                protocol_version=protocol_version, agent_capabilities=capabilities
            )

        async def close_session(self, session_id, **_):
            log(event="close", session=session_id)
            return CloseSessionResponse()

        async def new_session(self, cwd, **meta):
            self.cwd = Path(cwd)
            session_id = uuid.uuid4().hex
            log(event="new", session=session_id, meta=meta.get("turnback"))
            return NewSessionResponse(session_id=session_id)

        lost = set()  # sessions it no longer has, as claude-agent-acp once Claude Code died

        async def prompt(self, prompt, session_id, **meta):
            texts = [getattr(block, "text", None) for block in prompt]
            log(event="prompt", session=session_id, texts=texts, meta=meta.get("turnback"))
            if session_id in self.lost:
                raise acp.RequestError(-32603, "Internal error", {"details": "Session not found"})
            for line in texts[-1].splitlines():
                verb, _, rest = line.partition(" ")
                if verb == "say":
                    await self.conn.session_update(
                        session_id=session_id, update=acp.update_agent_message_text(rest + "\\n")
                    )
                elif verb == "tool":  # a finished tool call whose result is a content list
                    title, _, result = rest.partition(": ")
                    await self.conn.session_update(
                        session_id=session_id,
                        update=acp.start_tool_call(
                            title, title, status="completed",
                            content=[acp.tool_content(acp.text_block(result))],
                        ),
                    )
                elif verb == "fail":  # as codex-acp fails: the reason only in data.message
                    raise acp.RequestError(-32603, "Internal error", {"message": rest})
                elif verb == "lose-session":
                    self.lost.add(session_id)
                elif verb == "crash-once":
                    marker = self.cwd / f".crashed-{rest}"
                    if not marker.exists():
                        marker.touch()
                        await asyncio.sleep(0.05)  # let the updates reach the pipe
                        os.kill(os.getpid(), signal.SIGKILL)
            return PromptResponse(stop_reason="end_turn")

    async def main():
        reader, writer = await acp.stdio_streams()
        # session/close is among the SDK's unstable methods
        await acp.run_agent(Plain(), writer, reader, use_unstable_protocol=True)

    asyncio.run(main())
"""

FAST = ResumePolicy(backoff=0.01)
REQUEST = "say hi\ntool Read app.py: 3 lines\ncrash-once a\nsay bye"


@pytest.fixture
def plain(
    tmp_path: Path, write_agent: Callable[[str, str], tuple[str, ...]]
) -> tuple[tuple[str, ...], dict[str, str], Path]:
    log = tmp_path / "plain.log"
    return write_agent("plain_agent", PLAIN_AGENT), {"PLAIN_LOG": str(log)}, log


def entries(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def opened(session: turnback.Session) -> list[str]:
    return [a.data["opened"] for a in session.activities() if a.code == "agent.session"]


def test_without_checkpoints_a_crash_is_continued_in_a_new_session_told_what_happened(
    tb: turnback.Turnback, session: turnback.Session, plain: Any
) -> None:
    command, env, log = plain

    async def scenario() -> tuple[turnback.Turn, Any]:
        async with await AgentRuntime.start(tb, session, command, env=env, policy=FAST) as rt:
            return await rt.prompt(REQUEST), rt.features

    turn, features = run(scenario())
    assert not (features.checkpoints or features.rollback or features.load_session)
    assert turn.status is TurnStatus.COMPLETED
    # what the first attempt reported stays; the continued attempt (this agent simply runs the
    # request again) adds its own
    assert text_of(session.turn_messages(turn.number)) == "hi\nhi\nbye\n"
    tools = [m for m in session.turn_messages(turn.number) if m.kind == "tool_call"]
    assert [(m.text, m.data["status"], m.result) for m in tools] == [
        ("Read app.py", "completed", "3 lines")
    ]  # run twice under one id: one message
    assert opened(session) == ["new", "new"]  # no session/load: a new session
    prompts = [e for e in entries(log) if e["event"] == "prompt"]
    assert len(prompts) == 2 and prompts[0]["session"] != prompts[1]["session"]
    assert prompts[1]["meta"] == {"resume": {"step": None, "attempt": 1}}
    note, request = prompts[1]["texts"]
    assert request == REQUEST
    assert "was interrupted" in note and "Agent: hi" in note and "workspace is as it" in note
    # which tools ran, with their title, status and result; and nothing of turnback's own
    assert "Tool call: Read app.py (completed)\n  3 lines\n" in note, note
    assert "Note:" not in note and "stopped unexpectedly" not in note, note
    codes = [a.code for a in session.activities()]
    assert codes.count("agent.crashed") == 1 and codes.count("turn.resuming") == 1


def test_a_failed_prompt_keeps_what_the_agent_said_went_wrong(
    tb: turnback.Turnback, session: turnback.Session, plain: Any
) -> None:
    command, env, _ = plain

    async def scenario() -> turnback.Turn:
        async with await AgentRuntime.start(tb, session, command, env=env, policy=FAST) as rt:
            return await rt.prompt("say hi\nfail stream disconnected before completion")

    turn = run(scenario())
    assert turn.status is TurnStatus.FAILED
    assert turn.detail == (
        "the agent failed the prompt: Internal error (stream disconnected before completion)"
    )


def test_a_session_the_agent_lost_is_opened_again_and_the_turn_goes_on(
    tb: turnback.Turnback, session: turnback.Session, plain: Any
) -> None:
    command, env, log = plain

    async def scenario() -> tuple[turnback.Turn, int | None, int | None]:
        async with await AgentRuntime.start(tb, session, command, env=env, policy=FAST) as rt:
            await rt.prompt("say one\nlose-session")
            pid = rt.agent_pid
            return await rt.prompt("say two"), pid, rt.agent_pid

    turn, before, after = run(scenario())
    assert turn.status is TurnStatus.COMPLETED, turn.detail
    assert before == after  # the agent ran on: only its session was opened again
    assert text_of(session.messages()) == "one\ntwo\n"
    codes = [a.code for a in session.activities()]
    assert "agent.session.lost" in codes and "agent.crashed" not in codes
    assert opened(session) == ["new", "new", "continued"]  # no session/load: a new one
    prompts = [e for e in entries(log) if e["event"] == "prompt"]
    assert prompts[-2]["session"] == prompts[0]["session"] != prompts[-1]["session"]
    context, _, request = prompts[-1]["texts"]
    assert "User: say one" in context and "Agent: one" in context and request == "say two"


def test_on_crash_stop_ends_the_turn_interrupted_and_resume_continues_it(
    tb: turnback.Turnback, session: turnback.Session, plain: Any
) -> None:
    command, env, log = plain
    policy = ResumePolicy(backoff=0.01, on_crash=OnCrash.STOP)

    async def scenario() -> tuple[turnback.Turn, turnback.Turn]:
        async with await AgentRuntime.start(tb, session, command, env=env, policy=policy) as rt:
            stopped = await rt.prompt("say hi\ncrash-once a\nsay bye")
        async with await AgentRuntime.start(tb, session, command, env=env, policy=FAST) as rt:
            return stopped, await rt.resume()

    stopped, continued = run(scenario())
    assert stopped.status is TurnStatus.INTERRUPTED
    assert "before saving a step checkpoint" in (stopped.detail or "")
    assert continued.number == stopped.number and continued.status is TurnStatus.COMPLETED
    assert "turn.interrupted" in [a.code for a in session.activities()]
    prompts = [e for e in entries(log) if e["event"] == "prompt"]
    assert len(prompts) == 2 and prompts[1]["meta"]["resume"]["step"] is None
    assert "Agent: hi" in prompts[1]["texts"][-2]


def test_a_new_agent_session_gets_the_conversation_so_far_ahead_of_the_next_prompt(
    tb: turnback.Turnback, session: turnback.Session, plain: Any
) -> None:
    command, env, log = plain

    async def scenario() -> turnback.Turn:
        async with await AgentRuntime.start(tb, session, command, env=env, policy=FAST) as rt:
            await rt.prompt("say one")
            pid = rt.agent_pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await asyncio.sleep(0.2)  # the agent dies between turns
            return await rt.prompt("say two")

    turn = run(scenario())
    assert turn.status is TurnStatus.COMPLETED
    assert "agent.exited" in [a.code for a in session.activities()]
    assert opened(session) == ["new", "new", "continued"]
    new = [e for e in entries(log) if e["event"] == "new"]
    assert new[0]["meta"] is None  # nothing to give it
    assert [m["kind"] for m in new[1]["meta"]["transcript"]] == ["user", "agent"]
    last = [e for e in entries(log) if e["event"] == "prompt"][-1]
    context, prompt = last["texts"]
    assert context.startswith("The conversation so far") and "User: say one" in context
    assert "Agent: one" in context and prompt == "say two"
    assert text_of(session.messages()) == "one\ntwo\n"


def test_rollback_by_a_fresh_session_with_the_transcript(
    tb: turnback.Turnback, session: turnback.Session, plain: Any
) -> None:
    command, env, log = plain

    async def scenario() -> None:
        async with await AgentRuntime.start(tb, session, command, env=env) as rt:
            await rt.prompt("say one")
            await rt.prompt("say two")
            kept = session.turn_messages(1)
            await asyncio.to_thread(rt.rollback.check, 1)  # from a worker, as the engine does
            # the engine's one-call revert, from a thread of its own, waits for the loop
            await asyncio.to_thread(rt.rollback.apply, 1, kept)
            await rt.prompt("say three")

    run(scenario())
    rolled = [a for a in session.activities() if a.code == "agent.rolled_back"]
    assert [a.data["how"] for a in rolled] == ["fresh-session"]
    last = [e for e in entries(log) if e["event"] == "prompt"][-1]
    context, prompt = last["texts"]
    assert "User: say one" in context and "two" not in context and prompt == "say three"


def test_undoing_a_revert_gives_a_fresh_session_the_whole_conversation(
    tb: turnback.Turnback, session: turnback.Session, plain: Any
) -> None:
    command, env, log = plain

    async def scenario() -> None:
        async with await AgentRuntime.start(tb, session, command, env=env) as rt:
            await rt.prompt("say one")
            await rt.prompt("say two")
            await rt.revert(1)
            undone = await rt.undo_revert()
            assert undone.conversation
            await rt.prompt("say three")

    run(scenario())
    forward = [a.data for a in session.activities() if a.code == "agent.rolled_forward"]
    assert [f["messages"] for f in forward] == [4]  # two prompts, two answers
    news = [e for e in entries(log) if e["event"] == "new"]
    assert len(news) == 3  # the first, the rollback's, the undo's
    assert len(news[-1]["meta"]["transcript"]) == 4
    context, prompt = [e for e in entries(log) if e["event"] == "prompt"][-1]["texts"]
    assert "User: say one" in context and "User: say two" in context and prompt == "say three"
    assert text_of(session.messages()) == "one\ntwo\nthree\n"


def test_a_fresh_session_closes_the_one_it_replaces_where_the_agent_can(
    tb: turnback.Turnback, session: turnback.Session, plain: Any
) -> None:
    command, env, log = plain

    async def scenario() -> None:
        async with await AgentRuntime.start(
            tb, session, command, env={**env, "PLAIN_CLOSE": "1"}
        ) as rt:
            await rt.prompt("say one")
            await rt.prompt("say two")
            await rt.revert(1)
            await rt.undo_revert()
            await rt.prompt("say three")

    run(scenario())
    opened = [e["session"] for e in entries(log) if e["event"] == "new"]
    closed = [e["session"] for e in entries(log) if e["event"] == "close"]
    assert len(opened) == 3  # the first, the rollback's, the undo's
    assert closed == opened[:2]  # each replaced one, once replaced; the one in use stays


def test_rollback_is_refused_before_anything_moves_when_it_cannot_be_done(
    tb: turnback.Turnback, session: turnback.Session, plain: Any
) -> None:
    command, env, _ = plain
    strict = ResumePolicy(fresh_session_rollback=False)

    async def scenario() -> None:
        async with await AgentRuntime.start(tb, session, command, env=env, policy=strict) as rt:
            await rt.prompt("say one")
            with pytest.raises(RollbackUnavailable, match="cannot roll its conversation back"):
                await asyncio.to_thread(rt.rollback.check, 1)
            rt.rollback.check(0)  # nothing to roll back is always possible

    run(scenario())


def test_rollback_through_the_agent_when_it_advertises_one(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path
) -> None:
    async def scenario() -> str | None:
        async with await AgentRuntime.start(tb, session, SCRIPTED) as rt:
            for word in ("one", "two", "three"):
                await rt.prompt(f"say {word}")
            kept = session.turn_messages(1)
            # apply waits on the loop: on the loop's own thread it is refused, doing nothing
            with pytest.raises(RuntimeError, match="loop's own thread"):
                rt.rollback.apply(2, kept)
            await rt.rollback.roll_back(2, kept)  # the runtime's way, on its loop
            return rt.agent_session_id

    agent_session = run(scenario())
    stored = workspace / ".scripted-agent" / "sessions" / f"{agent_session}.json"
    turns = json.loads(stored.read_text())["turns"]
    assert [t["prompt"] for t in turns] == ["say one"]
    rolled = [a.data for a in session.activities() if a.code == "agent.rolled_back"]
    assert rolled == [{"turns": 2, "how": "agent"}]


def test_revert_rolls_the_agent_back_and_a_refusal_is_an_activity(
    tb: turnback.Turnback, session: turnback.Session, workspace: Path, plain: Any
) -> None:
    command, env, log = plain

    async def scenario() -> None:
        async with await AgentRuntime.start(tb, session, command, env=env) as rt:
            await rt.prompt("say one")
            (workspace / "one.txt").write_text("1\n")  # stands in for the agent's edits
            await rt.prompt("say two")
            (workspace / "two.txt").write_text("2\n")
            running = asyncio.create_task(rt.prompt("say three\ncrash-once x"))
            while rt._current is None:
                await asyncio.sleep(0.005)
            with pytest.raises((RollbackUnavailable, TurnInProgress), match="running"):
                await rt.revert(1)
            await running
            await rt.revert(2)
            await rt.prompt("say four")

    run(scenario())
    failed = [a for a in session.activities() if a.code == "checkpoint.revert.failed"]
    assert len(failed) == 1 and "running" in failed[0].message
    rolled = [a.data for a in session.activities() if a.code == "agent.rolled_back"]
    assert [(r["how"], r["turns"]) for r in rolled] == [("fresh-session", 1)]
    last = [e for e in entries(log) if e["event"] == "prompt"][-1]
    context, prompt = last["texts"]
    assert prompt == "say four"
    assert "User: say one" in context and "User: say two" in context
    assert "three" not in context
    assert text_of(session.messages()) == "one\ntwo\nfour\n"
