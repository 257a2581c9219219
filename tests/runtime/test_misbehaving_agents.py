"""Agents that misbehave: garbage on stdout, unknown methods, silence, a missing program."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import turnback
from tests.runtime.harness import run, text_of
from turnback.model import TurnStatus
from turnback.runtime import AgentRuntime, AgentUnavailable, ResumePolicy

GARBAGE_AGENT = """
    import asyncio, os, sys
    import acp
    from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse

    class Garbage:
        def on_connect(self, conn):
            self.conn = conn

        async def initialize(self, protocol_version, **_):
            return InitializeResponse(protocol_version=protocol_version)

        async def new_session(self, cwd, **_):
            self.cwd = cwd
            return NewSessionResponse(session_id="s1")

        async def prompt(self, prompt, session_id, **_):
            say = lambda text: self.conn.session_update(
                session_id=session_id, update=acp.update_agent_message_text(text)
            )
            await say("before\\n")
            await asyncio.sleep(0.05)
            os.write(1, b"this is not json\\n")
            os.write(1, b"[1, 2, 3]\\n")
            os.write(1, b'{"jsonrpc": "2.0", "method": "weird/notify", "params": {}}\\n')
            os.write(1, b'{"jsonrpc": "2.0", "id": 9999, "method": "weird/ask", "params": {}}\\n')
            try:
                await self.conn.ext_method("weird/thing", {})
            except acp.RequestError:
                pass
            await self.conn.ext_notification(
                "turnback/checkpoint",
                {"sessionId": session_id, "checkpointId": "c1", "step": 1, "storePath": self.cwd},
            )
            await say("after\\n")
            return PromptResponse(stop_reason="end_turn")

    async def main():
        reader, writer = await acp.stdio_streams()
        await acp.run_agent(Garbage(), writer, reader)

    asyncio.run(main())
"""


def test_malformed_frames_and_unknown_methods_are_activities_not_crashes(
    tb: turnback.Turnback,
    session: turnback.Session,
    workspace: Path,
    write_agent: Callable[[str, str], tuple[str, ...]],
) -> None:
    command = write_agent("garbage_agent", GARBAGE_AGENT)

    async def scenario() -> tuple[turnback.Turn, turnback.Turn]:
        async with await AgentRuntime.start(tb, session, command) as rt:
            first = await rt.prompt("go")
            return first, await rt.prompt("again")

    first, second = run(scenario())
    assert first.status is TurnStatus.COMPLETED and second.status is TurnStatus.COMPLETED
    assert text_of(session.turn_messages(first.number)) == "before\nafter\n"
    activities = session.activities()
    malformed = [a for a in activities if a.code == "agent.frame.malformed"]
    assert [a.data["frame"] for a in malformed[:2]] == ["this is not json", "[1, 2, 3]"]
    unknown = [a.data["method"] for a in activities if a.code == "agent.method.unknown"]
    assert unknown[:3] == ["weird/notify", "weird/ask", "_weird/thing"]
    # The agent named the workspace as its checkpoint store: it is refused, not deleted.
    refused = [a for a in activities if a.code == "checkpoint.store.remove.failed"]
    assert refused and refused[0].data["storePath"] == str(workspace)
    assert workspace.is_dir()


def test_an_agent_that_never_answers_initialize_times_out_with_a_clear_error(
    tb: turnback.Turnback,
    session: turnback.Session,
    write_agent: Callable[[str, str], tuple[str, ...]],
) -> None:
    command = write_agent("silent_agent", "import time\ntime.sleep(60)\n")
    started = time.monotonic()
    with pytest.raises(AgentUnavailable) as error:
        run(AgentRuntime.start(tb, session, command, policy=ResumePolicy(initialize_timeout=0.5)))
    assert time.monotonic() - started < 5
    assert "did not answer initialize within 0.5 s" in str(error.value)
    assert "silent_agent.py" in str(error.value)


def test_an_agent_that_cannot_start_names_the_command(
    tb: turnback.Turnback, session: turnback.Session
) -> None:
    with pytest.raises(AgentUnavailable, match="no-such-agent-program"):
        run(AgentRuntime.start(tb, session, ["no-such-agent-program", "--acp"]))


def test_a_frame_turnback_fails_on_is_answered_and_the_receive_loop_goes_on() -> None:
    """Whatever the wire's watch raises for one message, that message is rejected (a request
    answered with an error) and the next one is read."""
    import asyncio
    import io
    from typing import Any

    from turnback.runtime.wire import INTERNAL_ERROR, Rejected, Wire

    class Sink(io.BytesIO):
        async def drain(self) -> None:
            pass

        def is_closing(self) -> bool:
            return False

    def watch(frame: dict[str, Any], line: bytes) -> bool:
        if frame.get("id") == 5:
            raise RuntimeError("a bug in turnback")
        return False

    async def scenario() -> tuple[list[Any], list[Rejected]]:
        reader = asyncio.StreamReader()
        ask = b'{"jsonrpc":"2.0","id":5,"method":"session/request_permission","params":{}}\n'
        reader.feed_data(ask + b'{"jsonrpc":"2.0","id":6,"method":"fs/read_text_file"}\n')
        reader.feed_eof()
        rejected: list[Rejected] = []
        wire = Wire(reader, Sink(), 4096, rejected=rejected.append, watch=watch)
        return [await wire.receive(), await wire.receive()], rejected

    (read, end), rejected = asyncio.run(scenario())
    assert read is not None and read["id"] == 6 and end is None
    [refused] = rejected
    assert (refused.rpc_id, refused.code, refused.request) == (5, INTERNAL_ERROR, True)
    assert "a bug in turnback" in refused.message

    # ... and the activity it leaves says turnback failed, not that the agent wrote nonsense
    from turnback.runtime.reactor import Notice
    from turnback.runtime.recording import Recorder

    class Reactor(list[Notice]):
        def post(self, notice: Notice) -> None:
            self.append(notice)

    reactor = Reactor()
    Recorder(reactor, None, relayed=True).rejected(refused)  # type: ignore[arg-type]
    [notice] = reactor
    assert notice.code == "agent.frame.failed" and "turnback could not handle" in notice.message


MUTE_AGENT = """
    import asyncio, os, sys, time
    import acp
    from acp.schema import InitializeResponse, NewSessionResponse

    class Mute:
        async def initialize(self, protocol_version, **_):
            return InitializeResponse(protocol_version=protocol_version)

        async def new_session(self, cwd, **_):
            return NewSessionResponse(session_id="s1")

        async def prompt(self, prompt, session_id, **_):
            os.close(1)  # closes its output and goes on running
            time.sleep(30)

    async def main():
        reader, writer = await acp.stdio_streams()
        await acp.run_agent(Mute(), writer, reader)

    asyncio.run(main())
"""


def test_an_agent_that_closes_its_output_is_not_said_to_have_exited(
    tb: turnback.Turnback,
    session: turnback.Session,
    write_agent: Callable[[str, str], tuple[str, ...]],
) -> None:
    """Bug: 'exited (still running)'. A process that closed its standard output and still
    runs is said to have closed its output."""
    command = write_agent("mute_agent", MUTE_AGENT)

    async def scenario() -> turnback.Turn:
        policy = ResumePolicy(attempts=0, exit_grace=0.2)
        async with await AgentRuntime.start(tb, session, command, policy=policy) as rt:
            return await rt.prompt("go")

    started = time.monotonic()
    turn = run(scenario())
    assert time.monotonic() - started < 20
    assert turn.status is TurnStatus.FAILED
    said = " ".join([turn.detail or "", *(a.message for a in session.activities())])
    assert "closed its output" in said, said
    assert "still running" not in said and "exited" not in said, said


LAUNCHER = """
    import os, subprocess, sys
    from pathlib import Path

    # what an agent may start and never stop: a helper that outlives it, on no pipe of ours
    helper = subprocess.Popen(
        ["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    Path(os.environ["HELPER_PID"]).write_text(str(helper.pid))
    # the agent itself, run the way an npm shim runs a binary: wait for it, then exit
    sys.exit(subprocess.run([sys.executable, "-m", "turnback.agents.scripted"]).returncode)
"""


def test_an_agent_is_stopped_with_everything_it_started(
    tb: turnback.Turnback,
    session: turnback.Session,
    write_agent: Callable[[str, str], tuple[str, ...]],
    tmp_path: Path,
) -> None:
    command = write_agent("launcher", LAUNCHER)
    pid_file = tmp_path / "helper.pid"

    async def scenario() -> turnback.Turn:
        env = {"HELPER_PID": str(pid_file)}
        async with await AgentRuntime.start(tb, session, command, env=env) as rt:
            return await rt.prompt("say hi")

    assert run(scenario()).status is TurnStatus.COMPLETED
    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not _alive(helper), "the agent's helper process outlived it"
    finally:
        if _alive(helper):
            with contextlib.suppress(ProcessLookupError):
                os.kill(helper, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended and not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"
