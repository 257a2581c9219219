"""Benchmark of the time a terminal agent's hooks add: ``turnback hook`` as a process per event
on a large repository, next to the cost of any process and of ``git status`` there.

    python bench/hooks.py                  # the recorded run: 10,000 files, 9 rounds
    python bench/hooks.py --smoke          # 500 files, 2 rounds: a few seconds
    python bench/hooks.py --files 20000 --rounds 5 --json

A git repository of N committed files (100 directories) is the workspace of two Claude Code
sessions whose hooks are fed to ``turnback hook claude EVENT`` as Claude Code runs them: a new
process each, the event's JSON on stdin, the agent waiting for it to exit. In one session every
hook does its work in its own process (``TURNBACK_HOOK_HELPER=0``); in the other it hands the
event to the home's helper (``turnback.hooks.helper``: the engine imported, the store open, a
file watcher on the workspace). Each round is one turn of each -- prompt, a shell command's
before and after, stop -- with one file changed by the "command"; the baselines run in the same
rounds, interleaved:

(p)  ``python -c pass``: starting the same Python, and nothing else;
(g)  ``git status`` in the repository: what a look at its files costs;
(u)  ``turnback hook claude UserPromptSubmit``: a turn begins, its baseline captured;
(t)  ``turnback hook claude PreToolUse`` of a Bash command: the checkpoint before it;
(a)  ``turnback hook claude PostToolUse``: its result journaled;
(e)  ``turnback hook claude Stop``: the turn ends, captured, its file changes computed.
     each as ``(x)`` in its own process and ``(x')`` through the helper
     goal: (u') and (t') <= 50 ms at the median -- the whole hook, as the agent waits for it

(c) and (c') are each session's first prompt, which captures the repository for the first time
(once per session, not per round); the helper's first hook runs in its own process and starts
the helper. The exit code is 0 when a goal is missed (MISS is printed), 1 when the
benchmark itself went wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    import turnback
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(SRC))
    import turnback

from rounds import DIR_HELP, interleaved, machine, scratch_dir, spread, verdict  # noqa: E402

GOAL = 0.050
SESSIONS = {
    "": "0b3c9d2e-bench-4000-8000-000000000001",
    "'": "0b3c9d2e-bench-4000-8000-000000000002",
}


def build(workspace: Path, files: int) -> None:
    """A repository of ``files`` committed files in 100 directories."""
    workspace.mkdir()
    for n in range(files):
        directory = workspace / f"pkg{n % 100:02d}"
        directory.mkdir(exist_ok=True)
        (directory / f"module_{n}.py").write_text(f"# module {n}\nVALUE = {n}\n" + "x = 1\n" * 20)
    git = ["git", "-C", str(workspace)]
    quiet = {"check": True, "capture_output": True}
    subprocess.run([*git, "init", "-q", "-b", "main"], **quiet)  # type: ignore[call-overload]
    subprocess.run([*git, "add", "-A"], **quiet)  # type: ignore[call-overload]
    subprocess.run(  # type: ignore[call-overload]
        [*git, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "files"], **quiet
    )


class Agent:
    """Claude Code's hooks of one session, each a ``turnback hook`` process to wait for."""

    def __init__(self, script: str, home: Path, workspace: Path, mode: str) -> None:
        self.script = script
        self.workspace = workspace
        self.session = SESSIONS[mode]
        self.env = {**os.environ, "TURNBACK_HOME": str(home)}
        self.env["TURNBACK_HOOK_HELPER"] = "1" if mode else "0"
        self.env.pop("CLAUDE_PID", None)
        self.turn = 0

    def hook(self, event: str, **fields: Any) -> float:
        payload = {
            "session_id": self.session,
            "transcript_path": str(self.workspace / "transcript.jsonl"),
            "cwd": str(self.workspace),
            "hook_event_name": event,
            "prompt_id": f"prompt-{self.turn}",
            **fields,
        }
        started = time.perf_counter()
        done = subprocess.run(
            [self.script, "hook", "claude", event],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            cwd=self.workspace,
            env=self.env,
            check=False,
        )
        elapsed = time.perf_counter() - started
        if done.returncode != 0 or done.stderr:
            raise SystemExit(f"turnback hook claude {event} failed: {done.stderr}")
        return elapsed


def timed(command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, capture_output=True, check=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="500 files, 2 rounds")
    parser.add_argument("--files", type=int, default=None, help="files in the repository (10000)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (9)")
    parser.add_argument("--dir", type=Path, default=None, help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    files = max(10, args.files or (500 if args.smoke else 10_000))
    rounds = args.rounds or (2 if args.smoke else 9)
    script = shutil.which("turnback", path=str(Path(sys.executable).parent)) or "turnback"
    scratch = scratch_dir(args.dir, "turnback-bench-hooks-")
    try:
        workspace, home = scratch / "workspace", scratch / "home"
        build(workspace, files)
        bash = {"tool_name": "Bash", "tool_input": {"command": "sed -i s/1/2/ pkg00/module_0.py"}}
        per_turn: dict[str, list[float]] = {}
        cold: dict[str, float] = {}
        sides: dict[str, Callable[[int], float]] = {
            "p": lambda _: timed([sys.executable, "-c", "pass"], workspace),
            "g": lambda _: timed(["git", "status", "--porcelain"], workspace),
        }
        for mode in SESSIONS:
            agent = Agent(script, home, workspace, mode)
            agent.hook("SessionStart", source="startup")
            agent.turn = 1
            cold[mode] = agent.hook("UserPromptSubmit", prompt="warm up")
            agent.hook("Stop", last_assistant_message="done")
            for row in "utae":
                per_turn[row + mode] = []
            sides["turn" + mode] = lambda index, agent=agent, mode=mode: one_turn(
                agent, mode, index
            )

        def one_turn(agent: Agent, mode: str, index: int) -> float:
            agent.turn = index + 2
            prompt = f"change a file ({index})"
            per_turn["u" + mode].append(agent.hook("UserPromptSubmit", prompt=prompt))
            call = {**bash, "tool_use_id": f"toolu_{index}"}
            per_turn["t" + mode].append(agent.hook("PreToolUse", **call))
            changed = workspace / "pkg00" / "module_0.py"
            changed.write_text(changed.read_text() + f"# round {index} {mode}\n")
            response = {"stdout": "", "stderr": ""}
            per_turn["a" + mode].append(agent.hook("PostToolUse", **call, tool_response=response))
            per_turn["e" + mode].append(agent.hook("Stop", last_assistant_message="changed it"))
            return 0.0

        times = interleaved(rounds, sides)
        done: list[Any] = []
        points = 0
        with turnback.open(home) as tb:
            for listed in tb.sessions():
                session = tb.session(listed.id)
                done += [t for t in session.turns() if t.status == "completed"]
                points += sum(len(session.tool_checkpoints(t.token)) for t in done[-rounds:])
    finally:
        helper = scratch / "home" / "hooks" / "helper.pid"
        if helper.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(helper.read_text()), signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)
    if len(done) != 2 * (rounds + 1) or points != 2 * rounds:
        print(f"{len(done)} turns completed and {points} checkpoints taken", file=sys.stderr)
        return 1

    rows: list[dict[str, Any]] = []
    names = {
        "p": "python -c pass (baseline)",
        "g": "git status (baseline)",
        "u": "hook: prompt (UserPromptSubmit)",
        "t": "hook: before a shell command (PreToolUse)",
        "a": "hook: after it (PostToolUse)",
        "e": "hook: the turn's end (Stop)",
    }
    values = {"p": times["p"], "g": times["g"], **per_turn}
    for row in ("p", "g", "u", "t", "a", "e", "u'", "t'", "a'", "e'"):
        median = statistics.median(values[row])
        where = "" if row in "pg" else (", through the helper" if "'" in row else ", own process")
        met = median <= GOAL if row in ("u'", "t'") else None
        what = names[row[0]] + where
        rows.append(
            {
                "id": row,
                "what": what,
                **spread(values[row]),
                "value": median,
                "unit": "s",
                "met": met,
            }
        )
    for mode, what in (("", "own process"), ("'", "its hook starting the helper")):
        rows.append(
            {
                "id": "c" + mode,
                "what": f"the session's first prompt (cold capture), {what}",
                "value": cold[mode],
                "unit": "s",
                "met": None,
            }
        )
    report: dict[str, Any] = {
        "files": files,
        "rounds": rounds,
        "machine": machine(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"turnback hook benchmark: {files:,} files, {rounds} interleaved rounds")
    print(f"{report['machine']}; {report['date']}")
    print()
    print("| row | what | min | median | max | goal | |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if "min" in row:
            cells = " | ".join(f"{row[k] * 1000:,.0f} ms" for k in ("min", "median", "max"))
        else:
            cells = f" | {row['value'] * 1000:,.0f} ms | "
        goal = f"<= {GOAL * 1000:.0f} ms" if row["met"] is not None else ""
        print(f"| ({row['id']}) | {row['what']} | {cells} | {goal} | {verdict(row['met'])} |")
    print()
    missed = [r["id"] for r in rows if r["met"] is False]
    print("goals met" if not missed else f"MISS: ({'), ('.join(missed)}) over {GOAL * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
