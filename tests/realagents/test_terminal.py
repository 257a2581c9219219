"""Claude Code, Codex and Gemini CLI as people run them in a terminal, non-interactively
(``claude -p``, ``codex exec``, ``gemini -p``), each doing one real turn against the scripted
model: it writes a file with its write tool, then its shell tool removes the user's untracked
file and runs ``git reset --hard``. The files really change on disk, the model gets each tool's
result back, and every hook the agent offers is configured with a command that records what it
was given: the tests check the hooks' order and how they name the session, the turn and each tool
call, and compare the payloads with the fixtures in ``hooks/`` that the README there describes.

``TURNBACK_REFRESH_HOOK_FIXTURES=1`` rewrites the fixtures from the run instead of comparing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import agents, turn
from .agents import World
from .conftest import MakeWorld
from .model import Model, Reply, Request
from .turn import ANSWER, NOTES, PROMPT

FIXTURES = Path(__file__).with_name("hooks")
REFRESH = os.environ.get("TURNBACK_REFRESH_HOOK_FIXTURES") == "1"


@dataclass(frozen=True)
class Terminal:
    """How one CLI is run for a turn, what its model does, and the names of its hooks (the
    prompt's, before and after a tool, the turn's end) and of its write and shell tools."""

    name: str
    argv: Callable[[], list[str]]
    script: Callable[[World], list[Reply]]
    hooks: tuple[str, str, str, str]
    tools: tuple[str, str]

    @property
    def events(self) -> list[str]:
        """The hooks of a turn, in order, leaving out gemini-cli's per-model-call ones."""
        prompt, before, after, stop = self.hooks
        tools = [f"{hook} {tool}" for tool in self.tools for hook in (before, after)]
        return ["SessionStart", prompt, *tools, stop, "SessionEnd"]


CLAUDE = Terminal(
    "claude",
    lambda: [*agents.claude(), "-p", PROMPT, "--permission-mode", "bypassPermissions"],
    turn.claude,
    ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"),
    ("Write", "Bash"),
)
CODEX = Terminal(
    "codex",
    # a hook runs only once trusted; this run trusts the hooks this test wrote
    lambda: [*agents.codex(), "exec", "--dangerously-bypass-hook-trust", PROMPT],
    turn.codex,
    ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"),
    # the hooks name the shell tool Bash, as Claude Code's
    ("apply_patch", "Bash"),
)
GEMINI = Terminal(
    "gemini",
    lambda: [*agents.gemini(), "-p", PROMPT, "--approval-mode", "yolo"],
    turn.gemini,
    ("BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent"),
    ("write_file", "run_shell_command"),
)
TERMINALS = {t.name: t for t in (CLAUDE, CODEX, GEMINI)}
#: gemini-cli's hooks around each model call, left out of a turn's order
PER_MODEL_CALL = {"BeforeModel", "AfterModel", "BeforeToolSelection", "PreCompress"}


def run(
    world: World,
    argv: list[str],
    timeout: float = 150,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the workspace as its own process group, and end the group after;
    ``env`` adds to the world's environment."""
    process = subprocess.Popen(
        agents.in_own_session(argv),
        cwd=world.workspace,
        env={**world.env(), **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        agents.end_session(process.pid)
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


@pytest.mark.parametrize("name", sorted(TERMINALS))
def test_a_turn_writes_and_runs_commands_for_real(name: str, make_world: MakeWorld) -> None:
    terminal = TERMINALS[name]
    with Model() as model:
        world = make_world(model.url)
        model.script = terminal.script(world)
        world.configure(hooks=True)
        done = run(world, terminal.argv())
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"

    # the files really changed: the write tool wrote, the shell removed and reset
    workspace = world.workspace
    assert (workspace / "NOTES").read_text() == NOTES
    assert not (workspace / "scratch.txt").exists()
    assert (workspace / "README").read_text() == "committed\n"
    assert ANSWER in done.stdout or name == "codex", done.stdout  # codex exec prints to stderr

    # the model was asked three times, and got each tool's result back
    steps = model.steps()
    assert [s.step for s in steps] == [1, 2, 3], model.summary()
    assert PROMPT in steps[0].user_texts()[-1]
    for n, tool in enumerate(("write", "shell")):
        # Gemini's calls have no id: its results name the tool
        call = steps[n].calls[0] if steps[n].calls else model.script[n].calls[0].name
        results = [r.call for r in steps[n + 1].tool_results()]
        assert call in results, f"{name} sent no result for its {tool} tool: {results}"

    # the hooks ran in the turn's order and name the same session, turn and tool calls
    records = world.recorded_hooks()
    order = [_label(r) for r in records if r["event"] not in PER_MODEL_CALL]
    assert order == terminal.events, order
    _check_links(name, records, steps)
    _compare_with_fixture(name, records, world)


REFUSAL = "turnback's test hook refuses this command"


@pytest.mark.parametrize("name", sorted(TERMINALS))
def test_a_hook_blocks_the_shell_and_a_slow_hook_does_not_hold_the_turn(
    name: str, make_world: MakeWorld
) -> None:
    """Exit code 2 from the hook before a shell command blocks the command, and its standard
    error reaches the model as the tool's result; a hook that outlives its timeout (1 s here)
    is given up on, and the turn goes on (hooks fail open)."""
    terminal = TERMINALS[name]
    prompt_hook, tool_hook, _, _ = terminal.hooks
    with Model() as model:
        world = make_world(model.url)
        model.script = terminal.script(world)
        world.configure(
            hooks=True,
            answers={
                prompt_hook: agents.Answer(timeout=1, options=("--sleep", "10")),
                tool_hook: agents.Answer(
                    matcher=terminal.tools[1], options=("--exit", "2", "--stderr", REFUSAL)
                ),
            },
        )
        done = run(world, terminal.argv())
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    # the write ran, the shell command did not
    assert (world.workspace / "NOTES").read_text() == NOTES
    assert (world.workspace / "scratch.txt").read_text() == "the user's own notes\n"
    assert (world.workspace / "README").read_text() == "committed\nedited by hand\n"
    steps = model.steps()
    assert [s.step for s in steps] == [1, 2, 3], model.summary()
    assert REFUSAL in steps[2].tool_results()[-1].output, steps[2].tool_results()
    # the model was asked long before the slow hook would have finished
    [prompted] = [r for r in world.recorded_hooks() if r["event"] == prompt_hook]
    assert steps[0].at - prompted["at"] < 8, steps[0].at - prompted["at"]


def _label(record: dict[str, Any]) -> str:
    tool = (record["stdin"] or {}).get("tool_name")
    return f"{record['event']} {tool}" if tool else record["event"]


def _check_links(name: str, records: list[dict[str, Any]], steps: list[Request]) -> None:
    """Every payload names the one session and workspace; tool events name the call."""
    payloads = [r["stdin"] for r in records]
    sessions = {p["session_id"] for p in payloads}
    assert len(sessions) == 1, sessions
    assert {p["cwd"] for p in payloads} == {records[0]["cwd"]}
    assert {p["transcript_path"] for p in payloads} != {None}
    tools = [p for p in payloads if p.get("tool_name")]
    if name == "gemini":
        # gemini-cli gives a tool event no id: only the name and input tell calls apart
        assert all("tool_use_id" not in p for p in tools)
        return
    # Claude Code and Codex give the model's own tool-call id, before and after the tool
    ids = [p["tool_use_id"] for p in tools]
    assert ids == [steps[0].calls[0]] * 2 + [steps[1].calls[0]] * 2, ids
    if name == "codex":
        # a turn id on every turn-scoped event, the one Codex sends the model with each step
        turn_ids = {p.get("turn_id") for p in payloads if p["hook_event_name"] not in _SESSION}
        sent = {s.body["client_metadata"]["turn_id"] for s in steps}
        assert turn_ids == sent and len(sent) == 1, (turn_ids, sent)


_SESSION = {"SessionStart", "SessionEnd"}


# -- fixtures -------------------------------------------------------------------------------


def _compare_with_fixture(name: str, records: list[dict[str, Any]], world: World) -> None:
    """One payload per event (per tool, for tool events), made machine-independent, against
    ``hooks/NAME.json``: the events and each payload's fields must match."""
    seen: dict[str, Any] = {}
    for record in records:
        seen.setdefault(_label(record), _representative(record, world))
    path = FIXTURES / f"{name}.json"
    if REFRESH:
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(seen, indent=2, sort_keys=True) + "\n")
        return
    fixture = json.loads(path.read_text())
    hint = f"if {name} changed on purpose, rerun with TURNBACK_REFRESH_HOOK_FIXTURES=1"
    assert sorted(seen) == sorted(fixture), hint
    for label, payload in seen.items():
        assert sorted(payload["stdin"]) == sorted(fixture[label]["stdin"]), (label, hint)


def _representative(record: dict[str, Any], world: World) -> dict[str, Any]:
    """A record without this machine in it: paths become <workspace>, <home>…, long values are
    cut, secrets hidden; ``env`` keeps only what the agent added to the environment it got."""
    given = world.env()
    replacements = [
        (str(world.workspace), "<workspace>"),
        # Claude Code keys a project's transcripts by its path, every other character a dash
        (re.sub("[^A-Za-z0-9]", "-", str(world.workspace)), "<workspace-key>"),
        (str(world.home), "<home>"),
        (world.model_url, "<model>"),
        (str(agents.NODE_MODULES), "<node_modules>"),
        (sys.executable, "<python>"),
    ]

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            for old, new in replacements:
                value = value.replace(old, new)
            # a temporary path of the agent's own (not one inside a path replaced above)
            value = re.sub(r"(?<![\w>.-])/tmp/[^\s\"'/]+", "<tmp>", value)
            return value if len(value) <= 200 else value[:200] + f"…[{len(value)} chars]"
        if isinstance(value, list):
            cut = [clean(v) for v in value[:4]]
            return [*cut, f"…[{len(value)} items]"] if len(value) > 4 else cut
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    added = {
        k: "<secret>" if re.search("TOKEN|KEY|SECRET", k) else clean(v)
        for k, v in sorted(record["env"].items())
        if k not in given
    }
    return {"stdin": clean(record["stdin"]), "env_added": added, "cwd": clean(record["cwd"])}
