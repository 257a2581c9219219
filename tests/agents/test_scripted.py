"""The scripted agent over real pipes, driven by a bare SDK client as any editor would drive it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import acp
import pytest
from acp.core import ClientSideConnection
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AllowedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UserMessageChunk,
)

from turnback.agents.scripted import ScriptError, parse_script

T = TypeVar("T")
AGENT = "turnback.agents.scripted"


class Recorder:
    """A client that records every update and checkpoint and answers permissions from a list."""

    def __init__(self, answers: tuple[str, ...] = ()) -> None:
        self.updates: list[Any] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.permissions: list[tuple[ToolCallUpdate, list[PermissionOption]]] = []
        self.answers = list(answers)

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **_: Any
    ) -> RequestPermissionResponse:
        self.permissions.append((tool_call, options))
        choice = self.answers.pop(0)
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice)
        )

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "turnback/checkpoint":
            self.checkpoints.append(params)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise acp.RequestError.method_not_found(f"_{method}")

    def text(self, kind: type[Any] = AgentMessageChunk) -> str:
        return "".join(u.content.text for u in self.updates if isinstance(u, kind))

    def chunks(self, kind: type[Any] = AgentMessageChunk) -> list[str]:
        return [u.content.text for u in self.updates if isinstance(u, kind)]

    def of(self, kind: type[T]) -> list[T]:
        return [u for u in self.updates if isinstance(u, kind)]

    def steps(self) -> list[int]:
        return [checkpoint["step"] for checkpoint in self.checkpoints]


@asynccontextmanager
async def scripted_agent(
    client: Recorder, workspace: Path, env: Mapping[str, str] | None = None
) -> AsyncIterator[tuple[ClientSideConnection, asyncio.subprocess.Process]]:
    async with acp.spawn_agent_process(
        cast(acp.Client, client), sys.executable, "-m", AGENT, cwd=workspace, env=env
    ) as (conn, process):
        yield conn, process


def run(scenario: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(scenario, 15)

    return asyncio.run(bounded())


async def start(conn: ClientSideConnection, workspace: Path) -> str:
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
    return (await conn.new_session(cwd=str(workspace))).session_id


async def prompt(conn: ClientSideConnection, session_id: str, script: str, **meta: Any) -> str:
    response = await conn.prompt(session_id=session_id, prompt=[acp.text_block(script)], **meta)
    return response.stop_reason


def details(error: acp.RequestError) -> Any:
    assert isinstance(error.data, dict)
    return error.data["details"]


def resume_from(checkpoint: dict[str, Any]) -> dict[str, Any]:
    keys = ("checkpointId", "step", "state")
    return {"turnback": {"resume": {key: checkpoint[key] for key in keys}}}


def test_parse_script_counts_commands_as_steps_and_reads_heredocs() -> None:
    commands = parse_script("# setup\n\nwrite a.txt x\\ty\\n\nwrite b <<END\n  one\nEND\nsay hi")
    assert [(c.step, c.verb) for c in commands] == [(1, "write"), (2, "write"), (3, "say")]
    assert commands[0].text == "x\ty\n\n"
    assert commands[1].text == "  one\n"
    assert commands[1].paths == ("b",)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("say hi\nfrobnicate", "line 2: unknown command 'frobnicate'"),
        ("write ../outside x", "must be relative"),
        ("delete /etc/passwd", "must be relative"),
        ("rename a", "usage: rename OLD NEW"),
        ("write a <<END\nno end", "no line 'END'"),
        ("sleep soon", "sleep needs a number"),
        ("delete .scripted-agent/sessions", "agent's own state"),
        ("stop soon", "stop needs one of end_turn, max_tokens"),
    ],
)
def test_parse_script_rejects_bad_scripts(script: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        parse_script(script)


def test_file_commands_act_on_disk_and_report_tool_calls(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("moved\n")
    (tmp_path / "keep.txt").write_text("bye\n")
    client = Recorder()
    script = (
        "write notes/a.txt hello\\nworld\n"
        "append notes/a.txt more\n"
        "rename old.txt new.txt\n"
        "delete keep.txt\n"
        "delete missing.txt\n"
        "write b.txt <<END\nline 1\n  line 2\nEND\n"
    )

    async def scenario() -> tuple[Any, str]:
        async with scripted_agent(client, tmp_path) as (conn, _):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            session_id = (await conn.new_session(cwd=str(tmp_path))).session_id
            return init, await prompt(conn, session_id, script)

    init, stop = run(scenario())

    assert init.field_meta == {"turnback": {"checkpoints": True, "rollback": True}}
    assert init.agent_capabilities.load_session is True
    assert stop == "end_turn"
    assert (tmp_path / "notes/a.txt").read_text() == "hello\nworld\nmore\n"
    assert (tmp_path / "new.txt").read_text() == "moved\n"
    assert not (tmp_path / "old.txt").exists()
    assert not (tmp_path / "keep.txt").exists()
    assert (tmp_path / "b.txt").read_text() == "line 1\n  line 2\n"
    assert (tmp_path / ".scripted-agent/.gitignore").read_text() == "*\n"

    starts = client.of(ToolCallStart)
    assert [(s.kind, s.status) for s in starts] == [
        ("edit", "in_progress"),
        ("edit", "in_progress"),
        ("move", "in_progress"),
        ("delete", "in_progress"),
        ("delete", "in_progress"),
        ("edit", "in_progress"),
    ]
    ends = client.of(ToolCallProgress)
    assert [e.tool_call_id for e in ends] == [s.tool_call_id for s in starts]
    assert [e.status for e in ends] == ["completed"] * 4 + ["failed", "completed"]
    append = ends[1].model_dump(by_alias=True, exclude_none=True)["content"][0]
    assert append == {
        "type": "diff",
        "path": str(tmp_path / "notes/a.txt"),
        "oldText": "hello\nworld\n",
        "newText": "hello\nworld\nmore\n",
    }
    assert "oldText" not in ends[0].model_dump(by_alias=True, exclude_none=True)["content"][0]
    failure = ends[4].model_dump(by_alias=True, exclude_none=True)["content"][0]
    assert "missing.txt does not exist" in failure["content"]["text"]
    assert client.steps() == [1, 2, 3, 4, 5, 6]


def test_messages_thoughts_streams_and_checkpoints(tmp_path: Path) -> None:
    client = Recorder()
    script = "say hello brave world\nthink hmm ok\ncheckpoint\nstream 3\ncheckpoint"

    async def scenario() -> str:
        async with scripted_agent(client, tmp_path) as (conn, _):
            return await prompt(conn, await start(conn, tmp_path), script)

    assert run(scenario()) == "end_turn"
    assert client.chunks() == ["hello ", "brave ", "world\n", "chunk 1\n", "chunk 2\n", "chunk 3\n"]
    assert client.chunks(AgentThoughtChunk) == ["hmm ", "ok\n"]
    first, second = client.checkpoints
    assert (first["step"], second["step"]) == (3, 5)
    assert first["checkpointId"] != second["checkpointId"]
    assert first["state"]["turnId"] == second["state"]["turnId"]
    assert Path(first["storePath"]).is_file()
    assert set(first) == {"sessionId", "checkpointId", "step", "state", "storePath"}


def test_ask_requests_permission_and_records_the_answer(tmp_path: Path) -> None:
    client = Recorder(answers=("allow", "reject"))

    async def scenario() -> str:
        async with scripted_agent(client, tmp_path) as (conn, _):
            return await prompt(conn, await start(conn, tmp_path), "ask deploy\nask drop db")

    assert run(scenario()) == "end_turn"
    assert [call.title for call, _ in client.permissions] == ["deploy", "drop db"]
    assert [o.option_id for o in client.permissions[0][1]] == ["allow", "reject"]
    assert client.text() == "permission deploy: allowed\npermission drop db: rejected\n"


def test_crash_once_then_resume_applies_each_step_once_and_load_replays(tmp_path: Path) -> None:
    script = (
        "write a.txt one\n"
        "say before\n"
        "checkpoint\n"
        "crash-once\n"
        "append a.txt two\n"
        "rename a.txt b.txt\n"
        "say after\n"
    )
    crashed, resumed, loaded = Recorder(), Recorder(), Recorder()

    async def first_run() -> tuple[str, int | None]:
        async with scripted_agent(crashed, tmp_path) as (conn, process):
            session_id = await start(conn, tmp_path)
            with pytest.raises(ConnectionError):
                await prompt(conn, session_id, script)
            return session_id, await process.wait()

    session_id, status = run(first_run())
    assert status == -9
    assert crashed.steps() == [1, 3]
    assert crashed.text() == "before\n"
    assert (tmp_path / "a.txt").read_text() == "one\n"

    async def second_run() -> str:
        async with scripted_agent(resumed, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=session_id)
            assert resumed.updates == []  # the interrupted turn never ended
            return await prompt(conn, session_id, script, **resume_from(crashed.checkpoints[-1]))

    assert run(second_run()) == "end_turn"
    assert not (tmp_path / "a.txt").exists()
    assert (tmp_path / "b.txt").read_text() == "one\ntwo\n"
    assert resumed.text() == "after\n"
    assert [s.title for s in resumed.of(ToolCallStart)] == ["append a.txt", "rename a.txt b.txt"]
    assert resumed.steps() == [5, 6]

    async def third_run() -> None:
        async with scripted_agent(loaded, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=session_id)

    run(third_run())
    assert loaded.text(UserMessageChunk) == script
    assert loaded.text() == "before\nafter\n"
    assert [s.title for s in loaded.of(ToolCallStart)] == [
        "write a.txt",
        "append a.txt",
        "rename a.txt b.txt",
    ]
    assert len(loaded.of(ToolCallProgress)) == 3


def test_kill_between_effect_and_checkpoint_does_not_apply_it_twice(tmp_path: Path) -> None:
    script = "append log.txt one\nappend log.txt two\nappend log.txt three"
    env = {"TURNBACK_SCRIPTED_FAULT": "effect.applied@2"}
    crashed, resumed = Recorder(), Recorder()

    async def first_run() -> str:
        async with scripted_agent(crashed, tmp_path, env) as (conn, _):
            session_id = await start(conn, tmp_path)
            with pytest.raises(ConnectionError):
                await prompt(conn, session_id, script)
            return session_id

    session_id = run(first_run())
    assert crashed.steps() == [1]
    assert (tmp_path / "log.txt").read_text() == "one\ntwo\n"

    async def second_run() -> str:
        async with scripted_agent(resumed, tmp_path, env) as (conn, _):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=session_id)
            return await prompt(conn, session_id, script, **resume_from(crashed.checkpoints[-1]))

    assert run(second_run()) == "end_turn"
    assert (tmp_path / "log.txt").read_text() == "one\ntwo\nthree\n"
    replayed = resumed.of(ToolCallProgress)[0].model_dump(by_alias=True, exclude_none=True)
    assert (replayed["status"], replayed["content"][0]["newText"]) == ("completed", "one\ntwo\n")
    assert resumed.steps() == [2, 3]


def test_resume_from_an_older_checkpoint_skips_effects_already_checkpointed(
    tmp_path: Path,
) -> None:
    # Steps 2 and 3 both change x.txt, so only the store, not the disk, shows step 2 was done.
    script = "append x.txt one\nappend x.txt two\nappend x.txt three\ncrash-once\nappend x.txt four"
    crashed, resumed = Recorder(), Recorder()

    async def first_run() -> str:
        async with scripted_agent(crashed, tmp_path) as (conn, _):
            session_id = await start(conn, tmp_path)
            with pytest.raises(ConnectionError):
                await prompt(conn, session_id, script)
            return session_id

    session_id = run(first_run())
    assert crashed.steps() == [1, 2, 3]

    async def second_run() -> str:
        async with scripted_agent(resumed, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=session_id)
            return await prompt(conn, session_id, script, **resume_from(crashed.checkpoints[0]))

    assert run(second_run()) == "end_turn"
    assert (tmp_path / "x.txt").read_text() == "one\ntwo\nthree\nfour\n"
    assert resumed.steps() == [2, 3, 5]


def test_load_replays_history_after_restart_and_rollback_drops_turns(tmp_path: Path) -> None:
    first, second = Recorder(), Recorder()

    async def first_run() -> tuple[str, dict[str, Any]]:
        async with scripted_agent(first, tmp_path) as (conn, _):
            session_id = await start(conn, tmp_path)
            for word in ("one", "two", "three"):
                await prompt(conn, session_id, f"say {word}")
            with pytest.raises(acp.RequestError, match="Invalid params"):
                await conn.ext_method("turnback/rollback", {"sessionId": session_id, "turns": 4})
            with pytest.raises(acp.RequestError, match="Method not found"):
                await conn.ext_method("turnback/unknown", {})
            rolled = await conn.ext_method(
                "turnback/rollback", {"sessionId": session_id, "turns": 1}
            )
            return session_id, rolled

    session_id, rolled = run(first_run())
    assert rolled == {"turns": 2}

    async def second_run() -> None:
        async with scripted_agent(second, tmp_path) as (conn, _):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=session_id)

    run(second_run())
    assert second.chunks(UserMessageChunk) == ["say one", "say two"]
    assert second.text() == "one\ntwo\n"


def test_cancel_during_sleep_returns_cancelled_and_the_session_goes_on(tmp_path: Path) -> None:
    client = Recorder()

    async def scenario() -> tuple[str, str]:
        async with scripted_agent(client, tmp_path) as (conn, _):
            session_id = await start(conn, tmp_path)
            running = asyncio.create_task(
                prompt(conn, session_id, "say going\nsleep 30\nsay never")
            )
            while not client.updates:
                await asyncio.sleep(0.01)
            await conn.cancel(session_id=session_id)
            cancelled = await asyncio.wait_for(running, 5)
            return cancelled, await prompt(conn, session_id, "say again")

    assert run(scenario()) == ("cancelled", "end_turn")
    assert client.text() == "going\nagain\n"


def test_bad_prompts_fail_cleanly_without_effects_and_exit_leaves(tmp_path: Path) -> None:
    client = Recorder()

    async def scenario() -> int | None:
        async with scripted_agent(client, tmp_path) as (conn, process):
            session_id = await start(conn, tmp_path)
            with pytest.raises(acp.RequestError) as bad:
                await prompt(conn, session_id, "write a.txt x\nfrobnicate")
            assert "line 2: unknown command" in details(bad.value)
            with pytest.raises(acp.RequestError) as failed:
                await prompt(conn, session_id, "write c.txt x\nfail boom")
            assert details(failed.value) == "boom"
            with pytest.raises(acp.RequestError, match="Invalid params"):
                await prompt(conn, "no-such-session", "say hi")
            bogus = {"checkpointId": "nope", "step": 1}
            with pytest.raises(acp.RequestError, match="Invalid params"):
                await prompt(conn, session_id, "say hi", turnback={"resume": bogus})
            other = {"checkpointId": "abc:1", "step": 1, "state": {"sha256": "0" * 64}}
            with pytest.raises(acp.RequestError) as mismatch:
                await prompt(conn, session_id, "say hi", turnback={"resume": other})
            assert "different script" in details(mismatch.value)
            with pytest.raises(ConnectionError):
                await prompt(conn, session_id, "exit 3")
            return await process.wait()

    assert run(scenario()) == 3
    assert not (tmp_path / "a.txt").exists()
    assert (tmp_path / "c.txt").read_text() == "x\n"
