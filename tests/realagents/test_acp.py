"""Real ACP agents -- claude-agent-acp, gemini-cli ``--acp`` and codex-acp -- each doing one full
turn on the scripted model, driven by an editor on the official Python SDK: streamed text, a
write tool whose permission request the editor answers "allow once", a shell tool that removes
the user's untracked file and resets the repository, and the final answer. The same turn runs
directly and through ``turnback acp -- AGENT``; the editor must be told the same things, update
by update, apart from what turnback documents that it adds (its slash commands), and turnback
must hold the turn with its whole diff."""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    FileSystemCapabilities,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)

import turnback
from tests.acp.harness import Recording, dump, held_at_the_door, request
from turnback.model import ChangeKind, TurnStatus

from . import agents, turn
from .agents import World
from .conftest import MakeWorld
from .model import Model, Reply, Text
from .turn import ANSWER, NOTES, OPENING, PROMPT

CAPABILITIES = ClientCapabilities(
    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
)
TURNBACK_COMMANDS = {"checkpoints", "diff", "rewind", "undo-rewind"}


@dataclass(frozen=True)
class AcpAgent:
    name: str
    command: Callable[[], list[str]]
    script: Callable[[World], list[Reply]]
    #: Codex's approval_policy: when codex-acp asks the editor
    codex_approval: str = "never"


AGENTS = {
    a.name: a
    for a in (
        AcpAgent("claude-agent-acp", agents.claude_agent_acp, turn.claude),
        AcpAgent("gemini", agents.gemini_acp, turn.gemini),
        AcpAgent("codex-acp", agents.codex_acp, turn.codex, codex_approval="untrusted"),
    )
}


class Editor(Recording):
    """An editor that answers every permission request with the agent's "allow once" (and
    keeps every update as it came, draft kinds included)."""

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **_: Any
    ) -> RequestPermissionResponse:
        self.permissions.append(
            {"toolCall": dump(tool_call), "options": [dump(o) for o in options]}
        )
        [once] = [o for o in options if o.kind == "allow_once"]
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=once.option_id)
        )


@dataclass
class Turn:
    """What the editor saw of one turn."""

    session_id: str = ""
    initialize: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = ""
    updates: list[dict[str, Any]] = field(default_factory=list)
    permissions: list[dict[str, Any]] = field(default_factory=list)
    left: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Opened:
    """An editor's connection, through ``command``, with one session open in the workspace."""

    conn: acp.ClientSideConnection
    pid: int  # the process the editor started
    editor: Editor
    initialize: dict[str, Any]
    session_id: str


@asynccontextmanager
async def opened(
    command: list[str], world: World, left: list[tuple[int, str]], load: str | None = None
) -> AsyncIterator[Opened]:
    """Initialize, open a session in the workspace (a new one, or ``load`` that one); on
    leaving, close the connection as an editor does (the SDK closes the agent's stdin, then
    terminates it after 2 s). What is left of the processes after that is added to ``left``,
    and killed."""
    editor = Editor()
    group = None
    try:
        async with acp.spawn_agent_process(
            editor,  # type: ignore[arg-type]
            *agents.in_own_session(command),
            env=world.env(),
            cwd=world.workspace,
            transport_kwargs={"stderr": None},
        ) as (conn, process):
            group = process.pid
            editor.listen(conn)
            init = await conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION, client_capabilities=CAPABILITIES
            )
            if load is None:
                session_id = (
                    await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                ).session_id
            else:
                await conn.load_session(session_id=load, cwd=str(world.workspace), mcp_servers=[])
                session_id = load
            yield Opened(conn, process.pid, editor, dump(init), session_id)
    finally:
        if group is not None:
            left += agents.end_session(group)


async def one_turn(
    command: list[str],
    world: World,
    meanwhile: Callable[[int], Awaitable[None]] | None = None,
) -> Turn:
    """One session sent the prompt (and ``meanwhile`` run with the process's id while it
    runs), through :func:`opened`."""
    seen = Turn()
    async with opened(command, world, seen.left) as session:
        seen.initialize, seen.session_id = session.initialize, session.session_id
        prompt = session.conn.prompt(session_id=session.session_id, prompt=[acp.text_block(PROMPT)])
        if meanwhile is None:
            done = await prompt
        else:
            done, _ = await asyncio.gather(prompt, meanwhile(session.pid))
        seen.stop_reason = str(done.stop_reason)
        # updates sent just before the answer may still be in the SDK's tasks
        await asyncio.sleep(0.2)
    seen.updates = [u for s, u in session.editor.updates if s == seen.session_id]
    seen.permissions = session.editor.permissions
    return seen


def normalized(value: Any, turn: Turn, world: World) -> Any:
    """``value`` made comparable across runs: this run's workspace, session id, the UUIDs
    agents make per run, the millisecond clock readings they put in ids and fields, and the
    values of `PER_RUN` fields are replaced."""
    if isinstance(value, str):
        value = value.replace(str(world.workspace), "<workspace>")
        value = value.replace(turn.session_id, "<sid>")
        value = re.sub(
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", value
        )
        return re.sub(r"(?<!\d)1\d{12}(?!\d)", "<ms>", value)
    if isinstance(value, int) and not isinstance(value, bool) and 10**12 <= value < 2 * 10**12:
        return "<ms>"
    if isinstance(value, list):
        return [normalized(v, turn, world) for v in value]
    if isinstance(value, dict):
        return {
            normalized(k, turn, world): "<run>" if k in PER_RUN else normalized(v, turn, world)
            for k, v in value.items()
        }
    return value


#: Fields whose values belong to one run: a process's id, how long a command took.
PER_RUN = {"process_id", "duration", "duration_ms"}


def assert_same(proxied: Any, direct: Any) -> None:
    """Fail with a line diff of the two (as indented JSON) where they differ."""
    if proxied != direct:
        lines = [json.dumps(v, indent=1, sort_keys=True).splitlines() for v in (direct, proxied)]
        diff = difflib.unified_diff(*lines, "direct", "proxied", lineterm="", n=2)
        raise AssertionError("\n".join(diff))


def updates(turn: Turn, world: World) -> list[Any]:
    """The updates, normalized, without the lists of commands (compared apart)."""
    return [normalized(u, turn, world) for u in turn.updates if u["sessionUpdate"] != _COMMANDS]


_COMMANDS = "available_commands_update"
_INFO = "session_info_update"


def commands(turn: Turn) -> set[str]:
    offered = [u for u in turn.updates if u["sessionUpdate"] == _COMMANDS]
    return {c["name"] for c in offered[-1]["availableCommands"]} if offered else set()


#: ``turnback acp`` with the proxy itself held at the door until the start has kept a
#: ``session/new`` it answered (``turnback.acp.launch.early_session``), however fast the agent
#: starts: the session is the start's, and the proxy takes it on. ``sys.argv[1:]``: turnback's
#: arguments, the home first (``--home HOME``).
ANSWERED_BY_THE_START = held_at_the_door(
    ("turnback.acp.proxy",),
    """
def opened(name):
    kept = os.path.join(sys.argv[2], "answered-sessions")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (os.path.isdir(kept) and os.listdir(kept)):
        time.sleep(0.01)
""",
)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_full_turn_is_the_same_directly_and_through_turnback(
    name: str, make_world: MakeWorld, tmp_path: Path
) -> None:
    """Directly, through ``turnback acp``, and through one whose session the start opened
    before the proxy had loaded."""
    agent = AGENTS[name]
    runs: dict[str, tuple[World, Model, Turn]] = {}
    for how in ("direct", "proxied", "answered by the start"):
        home = tmp_path / f"turnback-{how}"
        with Model() as model:
            world = make_world(model.url)
            model.script = agent.script(world)
            world.configure(codex_approval=agent.codex_approval)
            command = agent.command()
            if how == "proxied":
                command = [sys.executable, "-m", "turnback", "--home", str(home), "acp", "--"]
                command += agent.command()
            if how == "answered by the start":
                command = [sys.executable, "-c", ANSWERED_BY_THE_START, "--home", str(home)]
                command += ["acp", "--", *agent.command()]
            turn = asyncio.run(asyncio.wait_for(one_turn(command, world), 240))
        runs[how] = (world, model, turn)
        if how == "answered by the start":  # the start kept it, and it is a row now
            assert (home / "answered-sessions").is_dir()
            assert list((home / "answered-sessions").iterdir()) == []

    for how, (world, model, turn) in runs.items():
        assert turn.stop_reason == "end_turn", (how, turn.updates)
        assert (world.workspace / "NOTES").read_text() == NOTES, how
        assert not (world.workspace / "scratch.txt").exists(), how
        assert (world.workspace / "README").read_text() == "committed\n", how
        assert [s.step for s in model.steps()] == [1, 2, 3], (how, model.summary())
        text = "".join(
            u["content"].get("text", "")
            for u in turn.updates
            if u["sessionUpdate"] == "agent_message_chunk"
        )
        assert ANSWER in text, (how, text)
        # the write tool and the shell tool each asked, and were allowed once
        assert len(turn.permissions) == 2, (how, turn.permissions)

    direct_world, _, direct = runs["direct"]
    for how in ("proxied", "answered by the start"):
        proxied_world, _, proxied = runs[how]
        # closed by the editor, turnback ends its agent and leaves none of its processes
        # behind (directly, claude-agent-acp leaves its Claude Code process running when its
        # stdin closes, which is the agent's own business)
        assert proxied.left == [], how
        theirs, ours = updates(direct, direct_world), updates(proxied, proxied_world)
        if not any(u["sessionUpdate"] == _INFO for u in theirs):
            # turnback's own: the session's title and time after the turn
            [info] = [u for u in ours if u["sessionUpdate"] == _INFO]
            assert info["title"] == PROMPT
            ours.remove(info)
        assert_same(ours, theirs)
        assert_same(
            normalized(proxied.permissions, proxied, proxied_world),
            normalized(direct.permissions, direct, direct_world),
        )
        assert commands(proxied) == commands(direct) | TURNBACK_COMMANDS, how

        # turnback holds the turn, completed, with every file it changed
        with turnback.open(home=tmp_path / f"turnback-{how}") as tb:
            stored = tb.session(proxied.session_id)
            [held] = stored.turns()
            assert (held.prompt_text, held.status) == (PROMPT, TurnStatus.COMPLETED)
            files = {c.path: c.kind for c in stored.diff(1).files}
            assert files == {
                "NOTES": ChangeKind.ADDED,
                "README": ChangeKind.MODIFIED,
                "scratch.txt": ChangeKind.DELETED,
            }


# -- an agent killed in the middle of a turn -------------------------------------------------


@dataclass
class Crash:
    """What a turn through turnback saw when its agent was killed mid-stream."""

    world: World
    home: Path
    model: Model
    turn: Turn


def agent_pids(proxy: int) -> list[int]:
    """The processes the proxy started: its agent."""
    return [pid for pid, _ in agents.session_members(proxy) if agents.parent_of(pid) == proxy]


@pytest.fixture(scope="module")
def crash(tmp_path_factory: pytest.TempPathFactory) -> Crash:
    """codex-acp through turnback: the model streams the write, then stalls in its next
    answer; the agent is killed there (SIGKILL), and turnback restarts it and continues the
    turn, whose next model call is answered with the final text."""
    agent = AGENTS["codex-acp"]
    root = tmp_path_factory.mktemp("crash")
    home = root / "turnback"
    with Model() as model:
        world = World(root / "home", root / "workspace", root / "hooks", model.url)
        world.home.mkdir()
        agents.make_workspace(world.workspace)
        first = agent.script(world)[0]
        model.script = [
            first,
            Reply(Text("Now the shell command."), stall=True),
            Reply(Text(ANSWER)),
        ]
        world.configure(codex_approval=agent.codex_approval)
        command = [sys.executable, "-m", "turnback", "--home", str(home), "acp", "--"]
        command += agent.command()

        async def kill_when_stalled(proxy: int) -> None:
            await asyncio.to_thread(model.wait_stalled, 120)
            for pid in agent_pids(proxy):
                os.kill(pid, signal.SIGKILL)

        turn = asyncio.run(asyncio.wait_for(one_turn(command, world, kill_when_stalled), 240))
    return Crash(world, home, model, turn)


def turnback_cli(home: Path) -> list[str]:
    return [sys.executable, "-m", "turnback", "--home", str(home)]


def continuation(crash: Crash) -> str:
    """The prompt turnback sent the restarted agent, as the model got it."""
    return crash.model.steps()[2].user_texts()[-1]


def test_an_agent_killed_mid_stream_continues_its_turn_through_turnback(crash: Crash) -> None:
    turn = crash.turn
    assert turn.stop_reason == "end_turn", turn.updates
    chunks = [u for u in turn.updates if u["sessionUpdate"] == "agent_message_chunk"]
    notices = [u for u in chunks if u.get("_meta", {}).get("turnback")]
    assert len(notices) == 1, notices
    assert "stopped unexpectedly" in notices[0]["content"]["text"]
    assert ANSWER in "".join(u["content"]["text"] for u in chunks)
    # the model was asked again after the crash, with turnback's continuation of the prompt
    steps = crash.model.steps()
    assert [s.step for s in steps] == [1, 2, 3], crash.model.summary()
    prompt = continuation(crash)
    assert prompt.startswith("[turnback] Your previous attempt"), prompt
    assert prompt.endswith(PROMPT), prompt
    assert OPENING in prompt, prompt
    # the restarted agent reopened its session: the model got the conversation before it
    assert PROMPT in steps[2].user_texts()[:-1], steps[2].user_texts()
    # the file was written once, the turn is held whole, and no agent process is left
    assert (crash.world.workspace / "NOTES").read_text() == NOTES
    assert turn.left == []
    with turnback.open(home=crash.home) as tb:
        stored = tb.session(turn.session_id)
        [held] = stored.turns()
        assert held.status is TurnStatus.COMPLETED
        assert {c.path: c.kind for c in stored.diff(1).files} == {"NOTES": ChangeKind.ADDED}


def test_the_continuation_names_the_tool_calls_that_ran(crash: Crash) -> None:
    """codex-acp's edit comes as a tool call whose content is a list (a diff): the agent,
    started again, is told its title, status and result, and so is whoever reads the turn."""
    notes = crash.world.workspace / "NOTES"
    prompt = continuation(crash)
    assert f"Tool call: Edit {notes} (completed)\n  changed {notes}\n" in prompt, prompt
    assert "Success. Updated the following files:" in prompt, prompt
    shown = subprocess.run(
        [*turnback_cli(crash.home), "show", "--json", crash.turn.session_id, "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    messages = json.loads(shown.stdout)["messages"]
    [tool] = [m for m in messages if m["kind"] == "tool_call"]
    assert (tool["text"], tool["data"]["status"]) == (f"Edit {notes}", "completed")


def test_the_continuation_reports_only_what_the_agent_did(crash: Crash) -> None:
    prompt = continuation(crash)
    assert "stopped unexpectedly" not in prompt and "Note:" not in prompt, prompt


def test_turnback_leaves_nothing_of_an_agent_started_through_a_shim(
    make_world: MakeWorld, tmp_path: Path
) -> None:
    """codex-acp's npm shim runs the binary with ``spawnSync``, so a signal to the shim leaves
    the binary running: turnback stops the agent's whole process group."""
    with Model() as model:
        world = make_world(model.url)
        model.script = turn.codex(world)
        world.configure(codex_approval="untrusted")
        shim = str(agents.installed(".bin/codex-acp"))
        command = [sys.executable, "-m", "turnback", "--home", str(tmp_path / "tb"), "acp", "--"]
        seen = asyncio.run(asyncio.wait_for(one_turn([*command, shim], world), 240))
    assert seen.stop_reason == "end_turn"
    assert seen.left == []


# -- a conversation through turnback: rewinds, and what a fresh agent session is told ---------


@dataclass
class Said:
    """What the editor was told in answer to each prompt of a conversation through turnback,
    and the agent's processes counted after each."""

    session_id: str = ""
    stops: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    left: list[tuple[int, str]] = field(default_factory=list)


def proxied(home: Path, agent: AcpAgent) -> list[str]:
    return [*turnback_cli(home), "acp", "--", *agent.command()]


async def converse(
    command: list[str],
    world: World,
    prompts: list[str | Callable[[int], None]],
    cancel_stalled: Model | None = None,
) -> Said:
    """One session through ``command`` (:func:`opened`), sent ``prompts`` one after another
    (a function among them is called in its place, with the process's id); the editor cancels
    each once ``cancel_stalled``'s reply stalls."""
    said = Said()
    async with opened(command, world, said.left) as session:
        conn, editor, said.session_id = session.conn, session.editor, session.session_id
        for text in prompts:
            if not isinstance(text, str):
                text(session.pid)
                continue
            before = len(editor.updates)
            answer = asyncio.ensure_future(
                conn.prompt(session_id=said.session_id, prompt=[acp.text_block(text)])
            )
            if cancel_stalled is not None:
                await asyncio.to_thread(cancel_stalled.wait_stalled, 120)
                await conn.cancel(session_id=said.session_id)
            said.stops.append(str((await answer).stop_reason))
            await asyncio.sleep(0.2)  # updates sent just before the answer
            said.answers.append(
                "".join(
                    u["content"].get("text", "")
                    for s, u in editor.updates[before:]
                    if s == said.session_id and u["sessionUpdate"] == "agent_message_chunk"
                )
            )
            said.processes.append(await settled(session.pid))
    return said


async def settled(pid: int) -> int:
    """How many processes ``pid`` runs, once that stops changing (a closed agent session's
    process takes a moment to exit on a loaded machine; a leaked one never does)."""
    count = len(agents.descendants(pid))
    for _ in range(20):
        await asyncio.sleep(0.25)
        count, before = len(agents.descendants(pid)), count
        if count == before:
            break
    return count


REWIND = "/rewind 1 conversation confirm"


def test_after_a_rewind_the_agent_gets_the_transcript_apart_from_the_prompt(
    make_world: MakeWorld, tmp_path: Path
) -> None:
    """gemini-cli writes a resource block into its prompt text as "@uri" and the resource's
    text after the prompt: the user's words after a rewind start a line of their own. And the
    rewind cannot be undone once a turn was made after it, which the user is told plainly."""
    agent = AGENTS["gemini"]
    with Model() as model:
        world = make_world(model.url)
        model.script = [Reply(Text(word)) for word in ("one", "two", "three")]
        world.configure()
        prompts = ["first", "second", REWIND, "third", "/undo-rewind"]
        said = asyncio.run(
            asyncio.wait_for(converse(proxied(tmp_path / "tb", agent), world, prompts), 240)
        )
    assert said.left == []
    sent = model.steps()[-1].user_texts()[-1]
    assert "third" in sent.splitlines(), sent
    assert "User: first\nAgent: one\n" in sent and "second" not in sent, sent
    undo = said.answers[-1]
    assert "can no longer be undone: turn 2 ('third') began after it" in undo, undo


def test_a_cancel_from_the_editor_is_recorded_as_the_editors(
    make_world: MakeWorld, tmp_path: Path
) -> None:
    agent = AGENTS["codex-acp"]
    home = tmp_path / "tb"
    with Model() as model:
        world = make_world(model.url)
        model.script = [Reply(Text("Working on it, slowly."), stall=True)]
        world.configure(codex_approval=agent.codex_approval)
        said = asyncio.run(
            asyncio.wait_for(converse(proxied(home, agent), world, ["go"], model), 240)
        )
    assert said.stops == ["cancelled"] and said.left == []
    with turnback.open(home=home) as tb:
        [held] = tb.session(said.session_id).turns()
    assert held.status is TurnStatus.CANCELLED
    assert held.detail == "cancelled by the editor (session/cancel)"


def test_rewinds_and_their_undos_leave_no_agent_session_behind(
    make_world: MakeWorld, tmp_path: Path
) -> None:
    """Each rewind and each undo opens a fresh claude-agent-acp session (it cannot roll its
    conversation back), and each session runs a Claude Code process: the one replaced is
    closed (``session/close``), so over ten rewinds and ten undos the agent's processes stay
    as many as before them (without the close, one more each time)."""
    agent = AGENTS["claude-agent-acp"]
    with Model() as model:
        world = make_world(model.url)
        model.script = [Reply(Text(word)) for word in ("one", "two")]
        world.configure()
        prompts = ["first", "second"] + [REWIND, "/undo-rewind"] * 10
        said = asyncio.run(
            asyncio.wait_for(converse(proxied(tmp_path / "tb", agent), world, prompts), 300)
        )
    assert said.left == []
    undone = said.answers[-1]
    assert "Undid the last rewind" in undone, undone
    after_prompts = said.processes[1]
    assert said.processes[2:] and max(said.processes[2:]) <= after_prompts + 1, said.processes


def test_a_session_whose_claude_code_died_is_opened_again(
    make_world: MakeWorld, tmp_path: Path
) -> None:
    """claude-agent-acp runs a Claude Code process per session; killed between turns, the
    adapter lives on and answers every later prompt "Session not found". turnback opens the
    session again (session/load, from Claude Code's own transcript) and the turn goes on."""
    agent = AGENTS["claude-agent-acp"]
    home = tmp_path / "tb"
    killed: list[str] = []

    def kill_claude_code(proxy: int) -> None:
        adapter = agent_pids(proxy)
        for pid in agents.descendants(proxy):
            if agents.parent_of(pid) in adapter:  # the adapter's children: Claude Code
                killed.append(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "))
                os.kill(pid, signal.SIGKILL)

    with Model() as model:
        world = make_world(model.url)
        model.script = [Reply(Text("one")), Reply(Text("two"))]
        world.configure()
        said = asyncio.run(
            asyncio.wait_for(
                converse(proxied(home, agent), world, ["first", kill_claude_code, "second"]),
                240,
            )
        )
    assert killed and said.left == []
    assert said.stops == ["end_turn", "end_turn"], said.answers
    assert "two" in said.answers[-1], said.answers
    # the model was asked the second prompt with the first exchange before it
    texts = [t.splitlines()[-1] for t in model.steps()[-1].user_texts()]
    assert texts == ["first", "second"], texts
    with turnback.open(home=home) as tb:
        stored = tb.session(said.session_id)
        assert [t.status for t in stored.turns()] == [TurnStatus.COMPLETED] * 2
        codes = [a.code for a in stored.activities()]
        assert "agent.session.lost" in codes, codes


# -- an editor's "restore checkpoint", and the proxy killed mid-stream, on real turns ---------


def text_prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def test_an_editors_restore_checkpoint_rewinds_a_real_agents_turn(
    make_world: MakeWorld, tmp_path: Path
) -> None:
    """What an editor's "Restore checkpoint" on a prompt sends (the draft ``session/rewind``),
    through turnback, after claude-agent-acp's real turn (a Write; a Bash that removes the
    user's file and resets the repository): the files are as they were before the prompt,
    a file the user wrote since stays, the editor is told the history was cut, ``/undo-rewind``
    brings the turn's files back, and after the rewind made again the model is no longer told
    the prompt."""
    agent = AGENTS["claude-agent-acp"]
    workspace_before: dict[str, str] = {}

    async def restore(world: World, found: dict[str, Any]) -> None:
        async with opened(proxied(tmp_path / "tb", agent), world, found["left"]) as session:
            conn, sid = session.conn, session.session_id
            workspace_before.update(files(world.workspace))
            first = await request(conn, "session/prompt", text_prompt(sid, PROMPT))
            found["after_turn"] = files(world.workspace)
            (world.workspace / "HAND").write_text("the user's own, written after the turn\n")
            rewind = {"sessionId": sid, "toMessageId": first["userMessageId"]}
            found["rewind"] = await request(conn, "session/rewind", rewind)
            found["rewound"] = files(world.workspace)
            await request(conn, "session/prompt", text_prompt(sid, "/undo-rewind"))
            found["undone"] = files(world.workspace)
            await request(conn, "session/rewind", rewind)  # and again, to go on from there
            found["stop"] = await request(conn, "session/prompt", text_prompt(sid, "again"))
            await asyncio.sleep(0.2)  # updates sent just before the answer
            found["truncated"] = session.editor.kind("history_truncated")

    with Model() as model:
        world = make_world(model.url)
        model.script = [*agent.script(world), Reply(Text("two"))]
        world.configure()
        found: dict[str, Any] = {"left": []}
        asyncio.run(asyncio.wait_for(restore(world, found), 240))
    assert found["after_turn"] == {"NOTES": NOTES, "README": "committed\n"}
    assert found["rewind"]["remainingMessageCount"] == 0, found["rewind"]
    assert found["rewound"] == {**workspace_before, "HAND": found["undone"]["HAND"]}
    truncated = found["truncated"]
    assert [t["remainingMessageCount"] for t in truncated] == [0, 0], truncated
    assert found["stop"]["stopReason"] == "end_turn"
    asked = model.steps()[-1].user_texts()
    assert asked[-1].splitlines()[-1] == "again" and not any(PROMPT in t for t in asked), asked
    assert found["undone"] == {**found["after_turn"], "HAND": found["undone"]["HAND"]}
    assert found["left"] == []


def files(workspace: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in workspace.iterdir() if p.is_file()}


def test_a_proxy_killed_mid_stream_leaves_the_turn_interrupted_and_the_session_usable(
    make_world: MakeWorld, tmp_path: Path
) -> None:
    """claude-agent-acp streams the turn's text and its Write, then its next model call stalls;
    the proxy is killed there (SIGKILL). A new ``turnback acp`` loads the session: the editor
    is shown the turn so far, turnback holds it as interrupted with the file it wrote, and the
    next prompt is a turn like any other."""
    agent = AGENTS["claude-agent-acp"]
    home = tmp_path / "tb"
    killed: dict[str, Any] = {"left": []}

    async def kill_mid_stream(world: World, model: Model) -> None:
        async with opened(proxied(home, agent), world, killed["left"]) as session:
            killed["sid"] = session.session_id
            answer = asyncio.ensure_future(
                request(session.conn, "session/prompt", text_prompt(session.session_id, PROMPT))
            )
            await asyncio.to_thread(model.wait_stalled, 120)
            os.kill(session.pid, signal.SIGKILL)
            done, _ = await asyncio.wait({answer}, timeout=30)
            killed["answered"] = bool(done) and answer.exception() is None
            model.release()

    async def load_and_go_on(world: World, found: dict[str, Any]) -> None:
        async with opened(
            proxied(home, agent), world, found["left"], load=killed["sid"]
        ) as session:
            await asyncio.sleep(0.2)  # the loaded conversation's updates
            found["shown"] = [u["sessionUpdate"] for u in session.editor.raw]
            found["stop"] = await request(
                session.conn, "session/prompt", text_prompt(session.session_id, "go on")
            )

    with Model() as model:
        world = make_world(model.url)
        write = agent.script(world)[0]
        model.script = [write, Reply(Text("Now the shell."), stall=True), Reply(Text("done"))]
        world.configure()
        asyncio.run(asyncio.wait_for(kill_mid_stream(world, model), 240))
        found: dict[str, Any] = {"left": []}
        asyncio.run(asyncio.wait_for(load_and_go_on(world, found), 240))
    assert not killed["answered"]  # the editor got no answer: its proxy was gone
    assert "user_message_chunk" in found["shown"] and "tool_call" in found["shown"], found
    assert found["stop"]["stopReason"] == "end_turn"
    assert found["left"] == []
    with turnback.open(home=home) as tb:
        stored = tb.session(killed["sid"])
        first, second = stored.turns()
        assert first.status is TurnStatus.INTERRUPTED and second.status is TurnStatus.COMPLETED
        assert {c.path: c.kind for c in stored.diff(1).files} == {"NOTES": ChangeKind.ADDED}
