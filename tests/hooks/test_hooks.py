"""``turnback hook AGENT EVENT`` fed the payloads Claude Code, Codex and Gemini CLI really send
(``tests/realagents/hooks``), one real process per event, over a real git workspace whose files
change between the events as the agent's tools changed them: NOTES written, then the user's
untracked file removed and ``git reset --hard`` run over a hand edit."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import turnback
from turnback.hooks import transcripts
from turnback.hooks.events import DESTRUCTIVE_GIT, session_id_for

from .feed import Agent, git, make_workspace

#: (prompt event, before a tool, after it, end; write tool, shell tool) of each agent's fixture
EVENTS = {
    "claude": ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "Write", "Bash"),
    "codex": ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "apply_patch", "Bash"),
    "gemini": ("BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent", "write_file",
               "run_shell_command"),
}  # fmt: skip


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    make_workspace(tmp_path / "workspace")
    return tmp_path / "workspace"


def _agent(name: str, workspace: Path) -> Agent:
    return Agent(name, workspace, workspace.parent / "home")


def _a_turn(agent: Agent) -> None:
    """The turn the real agents did, hook by hook, with its tools' effects on disk."""
    prompt, before, after, stop, write, shell = EVENTS[agent.name]
    agent.send("SessionStart")
    agent.send(prompt)
    agent.send(f"{before} {write}")
    (agent.workspace / "NOTES").write_text("hello from the agent\n")
    agent.send(f"{after} {write}")
    agent.send(f"{before} {shell}")
    subprocess.run(
        "rm scratch.txt && git reset --hard -q", shell=True, cwd=agent.workspace, check=True
    )
    agent.send(f"{after} {shell}")
    agent.send(stop)
    agent.send("SessionEnd")


@pytest.mark.parametrize("name", sorted(EVENTS))
def test_a_turn_from_hooks_and_every_byte_rescued(name: str, workspace: Path) -> None:
    agent = _agent(name, workspace)
    _a_turn(agent)
    check_the_turn_and_rescue(agent)


def check_the_turn_and_rescue(agent: Agent) -> None:
    """What :func:`_a_turn` leaves, read back, and its files brought back."""
    name, workspace = agent.name, agent.workspace
    assert not (workspace / "scratch.txt").exists()
    assert (workspace / "README").read_text() == "committed\n"

    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for(name, agent.session))
        assert session.record.agent == name
        assert Path(session.record.workspace) == workspace.resolve()
        [turn] = session.turns()
        assert turn.status == "completed"
        assert turn.prompt == agent.payload(EVENTS[name][0])["prompt"]
        changes = {c.path: c.kind.value for c in session.diff(1).files}
        assert changes == {"NOTES": "added", "scratch.txt": "deleted", "README": "modified"}
        tools = session.tool_checkpoints(1)
        assert [t.tool for t in tools] == [EVENTS[name][4], EVENTS[name][5]]
        assert all(t.commit for t in tools)
        # a destructive git command keeps the repository's refs, stash and reflog too
        assert tools[0].git_state is None
        assert tools[1].git_state["head"] == git(workspace, "rev-parse", "HEAD").strip()
        assert "refs/heads/main" in " ".join(tools[1].git_state["refs"])
        # the journal names each tool call before and after, the same call each time
        events = [(e.kind, e.event.get("toolCallId")) for e in session.run_events(1)]
        calls = [call for kind, call in events if kind == "tool_call"]
        updates = [call for kind, call in events if kind == "tool_call_update"]
        assert len(calls) == 2 and calls == updates

        # before the shell command: the user's untracked file and hand edit, every byte
        rescued = session.rescue(["scratch.txt", "README"], 1, before_tool=2)
        assert sorted(rescued.written) == ["README", "scratch.txt"]
        assert (workspace / "scratch.txt").read_text() == "the user's own notes\n"
        assert (workspace / "README").read_text() == "committed\nedited by hand\n"
        assert (workspace / "NOTES").read_text() == "hello from the agent\n"  # not named
        # and the rescue is undone as it was done
        session.undo_rescue()
        assert not (workspace / "scratch.txt").exists()
        assert (workspace / "README").read_text() == "committed\n"


def test_a_rescue_keeps_a_hand_edit_made_after_the_turn(workspace: Path) -> None:
    agent = _agent("claude", workspace)
    _a_turn(agent)
    (workspace / "README").write_text("committed\nedited again, after the turn\n")
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("claude", agent.session))
        with pytest.raises(turnback.RevertConflict) as refused:
            session.rescue(["README", "scratch.txt"], 1, before_tool=2)
        assert refused.value.paths == ("README",)
        assert not (workspace / "scratch.txt").exists()  # nothing written
        assert (workspace / "README").read_text() == "committed\nedited again, after the turn\n"
        session.rescue(["README"], 1, before_tool=2, force=True)
        assert (workspace / "README").read_text() == "committed\nedited by hand\n"
        session.undo_rescue()
        assert (workspace / "README").read_text() == "committed\nedited again, after the turn\n"


def test_undoing_a_rescue_keeps_an_edit_made_after_it(workspace: Path) -> None:
    agent = _agent("claude", workspace)
    _a_turn(agent)
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("claude", agent.session))
        session.rescue(["README"], 1, before_tool=2)
        (workspace / "README").write_text("edited after the rescue\n")
        with pytest.raises(turnback.RevertConflict) as refused:
            session.undo_rescue()
        assert refused.value.paths == ("README",)
        assert (workspace / "README").read_text() == "edited after the rescue\n"  # kept
        assert [r.undone_at for r in session.rescues()] == [None]
        session.undo_rescue(force=True)
        assert (workspace / "README").read_text() == "committed\n"


def test_a_prompt_without_a_stop_before_it_interrupts_the_turn(workspace: Path) -> None:
    """Ctrl+C gives Claude Code no Stop: the next prompt closes the turn it left running."""
    agent = _agent("claude", workspace)
    agent.send("SessionStart")
    agent.send("UserPromptSubmit")
    agent.send("PreToolUse Write")
    (workspace / "NOTES").write_text("half done\n")
    agent.prompt_id = "prompt-2"
    agent.send("UserPromptSubmit", prompt="try again")
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("claude", agent.session))
        first, second = session.turns()
        assert first.status == "interrupted"
        assert [c.path for c in session.diff(1).files] == ["NOTES"]
        assert second.status == "running" and second.prompt == "try again"


def test_a_dead_agents_turn_is_recovered(workspace: Path, tmp_path: Path) -> None:
    """An agent killed mid-turn sends nothing more: its turn is the dead process's, and
    `turnback recover` (or the next SessionStart) closes it as interrupted."""
    agent = _agent("claude", workspace)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    # hooks of an agent that has exited since (its pid is named, as Claude Code names it)
    agent.env["CLAUDE_PID"] = str(gone.pid)
    agent.send("SessionStart")
    agent.send("UserPromptSubmit")
    home = agent.home / "turnback"
    with turnback.open(home) as tb:
        [turn] = tb.session(session_id_for("claude", agent.session)).turns()
        assert turn.status == "running"
    done = subprocess.run(
        [sys.executable, "-m", "turnback", "--home", str(home), "recover", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout)["recovered"], done.stdout
    with turnback.open(home) as tb:
        [turn] = tb.session(session_id_for("claude", agent.session)).turns()
        assert turn.status == "interrupted"


def test_a_new_session_start_closes_a_dead_agents_turn(workspace: Path) -> None:
    agent = _agent("codex", workspace)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TURNBACK_HOME", str(agent.home / "turnback"))
        from turnback.hooks.events import handle

        handle("codex", "UserPromptSubmit", agent.payload("UserPromptSubmit"), owner_pid=gone.pid)
    agent.send("SessionStart", source="resume")
    with turnback.open(agent.home / "turnback") as tb:
        [turn] = tb.session(session_id_for("codex", agent.session)).turns()
        assert turn.status == "interrupted"


def test_a_failing_hook_exits_0_fast_and_says_why(workspace: Path) -> None:
    agent = _agent("claude", workspace)
    # not JSON at all: nothing to record it on, but the agent is not held up
    done = agent.send_text("UserPromptSubmit", "not json")
    assert "JSONDecodeError" in done.stderr and done.stdout == ""
    # no session id: nothing to record it on either
    done = agent.send_text("UserPromptSubmit", json.dumps({"prompt": "x"}))
    assert "no session_id" in done.stderr and done.stdout == ""
    # a home that cannot be opened (a file where it should be): the agent goes on
    unusable = agent.home / "not-a-home"
    unusable.parent.mkdir(parents=True, exist_ok=True)
    unusable.write_text("a file\n")
    agent.env["TURNBACK_HOME"] = str(unusable)
    done = agent.send("UserPromptSubmit")
    assert done.stdout == "" and "turnback hook claude UserPromptSubmit" in done.stderr
    assert unusable.read_text() == "a file\n"
    del agent.env["TURNBACK_HOME"]
    # a turn of another live agent process in the same session: refused, said on the session
    other = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TURNBACK_HOME", str(agent.home / "turnback"))
            from turnback.hooks.events import handle

            handle(
                "claude", "UserPromptSubmit", agent.payload("UserPromptSubmit"), owner_pid=other.pid
            )
        done = agent.send("UserPromptSubmit", prompt="mine")
    finally:
        other.kill()
        other.wait()
    assert "TurnInProgress" in done.stderr, done.stderr
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("claude", agent.session))
        [failed] = [a for a in session.activities() if a.code == "hook.failed"]
        assert "UserPromptSubmit" in failed.message and len(session.turns()) == 1
    # an event turnback does not use is accepted as it is
    agent.send_text("Notification", json.dumps({"session_id": agent.session}))
    assert max(agent.took) < 10


def test_a_tool_outside_any_turn_begins_one_for_its_checkpoint(workspace: Path) -> None:
    """Hooks installed in the middle of a turn, or an agent that went on after its stop
    (another Stop hook asked it to): its shell command still gets its checkpoint."""
    agent = _agent("claude", workspace)
    agent.send("SessionStart")
    agent.send("PostToolUse Write")  # nothing to journal it in: left alone
    agent.send("Stop")  # nothing to end
    agent.send("PreToolUse Bash")
    subprocess.run("rm scratch.txt", shell=True, cwd=workspace, check=True)
    agent.send("PostToolUse Bash")
    agent.send("Stop")
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("claude", agent.session))
        [turn] = session.turns()
        assert turn.status == "completed" and "went on" in str(turn.prompt)
        assert [c.path for c in session.diff(1).files] == ["scratch.txt"]
        [begun] = [a for a in session.activities() if a.code == "hook.turn.begun"]
        assert "Bash" in begun.message
        assert not [a for a in session.activities() if a.code == "hook.failed"]
        session.rescue(["scratch.txt"], 1, before_tool=1)
    assert (workspace / "scratch.txt").read_text() == "the user's own notes\n"


@pytest.mark.parametrize(
    ("command", "destructive"),
    [
        ("git reset --hard -q", True),
        ("rm scratch.txt && git reset --hard HEAD~1", True),
        ("git checkout .", True),
        ("git checkout -- README", True),
        ("git -C sub clean -fdx", True),
        ("git stash drop", True),
        ("git branch -D feature", True),
        ("git restore README", True),
        ("git status", False),
        ("git checkout -b feature", False),
        ("git reset HEAD README", False),
        ("echo git", False),
    ],
)
def test_destructive_git_commands(command: str, destructive: bool) -> None:
    assert bool(DESTRUCTIVE_GIT.search(command)) is destructive


def test_hooks_take_little_time(workspace: Path) -> None:
    agent = _agent("claude", workspace)
    started = time.monotonic()
    _a_turn(agent)
    assert time.monotonic() - started < 60


def test_revert_of_a_hook_turn_brings_the_workspace_back_and_is_undone(workspace: Path) -> None:
    agent = _agent("gemini", workspace)
    _a_turn(agent)
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("gemini", agent.session))
        session.revert(0)
        assert (workspace / "scratch.txt").read_text() == "the user's own notes\n"
        assert (workspace / "README").read_text() == "committed\nedited by hand\n"
        assert not (workspace / "NOTES").exists()
        session.undo_revert()
        assert not (workspace / "scratch.txt").exists()
        assert (workspace / "NOTES").read_text() == "hello from the agent\n"


def test_a_rescue_of_the_whole_workspace_and_of_a_directory(workspace: Path) -> None:
    agent = _agent("claude", workspace)
    (workspace / "notes").mkdir()
    (workspace / "notes" / "a.txt").write_text("a\n")
    agent.send("SessionStart")
    agent.send("UserPromptSubmit")
    agent.send("PreToolUse Bash")
    subprocess.run("rm -r notes scratch.txt", shell=True, cwd=workspace, check=True)
    agent.send("PostToolUse Bash")
    agent.send("Stop")
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("claude", agent.session))
        assert session.rescue([str(workspace / "notes")], 1).written == ("notes/a.txt",)
        assert (workspace / "notes" / "a.txt").read_text() == "a\n"
        assert not (workspace / "scratch.txt").exists()
        assert session.rescue(["."], 1).written == ("scratch.txt",)
    assert (workspace / "scratch.txt").read_text() == "the user's own notes\n"


def test_what_claude_said_comes_from_its_transcript_in_order(workspace: Path) -> None:
    """Claude Code's hooks give only the last answer; its transcript gives every piece."""
    agent = _agent("claude", workspace)
    transcript = workspace.parent / "transcript.jsonl"

    def said_by_agent(uuid: str, *blocks: dict[str, str]) -> dict[str, object]:
        return {"type": "assistant", "uuid": uuid, "message": {"content": list(blocks)}}

    entries = [
        {"type": "user", "promptId": "prompt-0", "message": {"content": "an older prompt"}},
        said_by_agent("u0", {"type": "text", "text": "old"}),
        {"type": "user", "promptId": "prompt-1", "message": {"content": "Write NOTES"}},
        said_by_agent(
            "u1",
            {"type": "thinking", "thinking": "notes first"},
            {"type": "text", "text": "Writing."},
            {"type": "tool_use", "id": "toolu_0001"},
        ),
    ]
    transcript.write_text("\n".join(json.dumps(e) for e in entries) + "\nnot json\n")
    where = {"transcript_path": str(transcript)}
    agent.send("SessionStart", **where)
    agent.send("UserPromptSubmit", **where)
    agent.send("PreToolUse Write", **where)
    agent.send("PostToolUse Write", **where)
    more = said_by_agent("u2", {"type": "text", "text": "Done."})
    with transcript.open("a") as out:
        out.write(json.dumps(more) + "\n")
    # the transcript has the last answer already: it is said once
    agent.send("Stop", last_assistant_message="Done.", **where)
    with turnback.open(agent.home / "turnback") as tb:
        session = tb.session(session_id_for("claude", agent.session))
        said = [(m.kind.value, m.text) for m in session.turn_messages(1)]
    assert said == [
        ("user", agent.payload("UserPromptSubmit")["prompt"]),
        ("thought", "notes first"),
        ("agent", "Writing."),
        ("tool_call", said[3][1]),
        ("agent", "Done."),
    ], said


#: A Claude Code transcript's lines: the prompt, then what the agent said before its first tool.
PROMPTED = {"type": "user", "promptId": "prompt-1", "message": {"content": "Write NOTES"}}
SAID_THEN_WROTE = {
    "type": "assistant",
    "uuid": "u1",
    "message": {
        "content": [
            {"type": "text", "text": "I will write the notes first."},
            {"type": "tool_use", "id": "toolu_0001"},
        ]
    },
}


def test_a_tools_hook_waits_for_claudes_transcript_to_reach_the_call(tmp_path: Path) -> None:
    """Claude Code writes its transcript on a timer of its own, beside the hook: on a loaded
    machine the tool call reaches it well after the hook began. What the agent said before the
    tool is read once the call is there, so it is journaled before the tool call."""
    transcript = tmp_path / "transcript.jsonl"
    transcript.write_text(json.dumps(PROMPTED) + "\n")

    def written_late() -> None:
        with transcript.open("a") as out:
            out.write(json.dumps(SAID_THEN_WROTE) + "\n")

    late = threading.Timer(0.6, written_late)
    late.start()
    started = time.monotonic()
    try:
        read = transcripts.claude(str(transcript), "prompt-1", wait_for="toolu_0001")
    finally:
        late.join()
    assert [(s.kind, s.text) for s in read] == [
        ("agent_message_chunk", "I will write the notes first.")
    ]
    assert time.monotonic() - started < transcripts.WAIT  # it stopped waiting once it was there
    # a call the transcript never reaches costs the wait once, and the hook goes on
    assert transcripts.claude(str(transcript), "prompt-1", wait_for="toolu_9", wait=0.05) == read


def test_a_transcript_made_after_the_first_tools_hook_is_waited_for(tmp_path: Path) -> None:
    """Claude Code may create the transcript only after a session's first tool's hook began
    (seen with ``claude -p``): the hook waits for the file as for the call in it."""
    transcript = tmp_path / "transcript.jsonl"
    lines = [PROMPTED, SAID_THEN_WROTE]
    late = threading.Timer(
        0.3, lambda: transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    )
    late.start()
    try:
        read = transcripts.claude(str(transcript), "prompt-1", wait_for="toolu_0001")
    finally:
        late.join()
    assert [s.text for s in read] == ["I will write the notes first."]
    missing = tmp_path / "never.jsonl"  # never made (no transcript kept): a short wait
    started = time.monotonic()
    assert transcripts.claude(str(missing), "prompt-1", wait_for="toolu_0001") == []
    assert time.monotonic() - started < transcripts.WAIT / 2
    assert transcripts.claude(str(missing), "prompt-1") == []  # nothing to wait for: at once
    assert transcripts.claude("", "prompt-1", wait_for="toolu_0001") == []  # none named
