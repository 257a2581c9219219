"""``turnback demo``: everything turnback does, on a throwaway home and workspace, in plain words.

It drives the bundled scripted agent through the runtime the ACP proxy uses: turns that edit
files; the agent killed with SIGKILL mid-turn and resumed from its last step checkpoint; the
orchestrating process itself killed mid-turn, recovered and resumed; the turn log with diffs; a
revert to turn 1 that keeps a hand edit; and the undo of that revert.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import turnback
from turnback.errors import ExtraMissing
from turnback.runtime import AgentRuntime, ResumePolicy
from turnback.views import DemoTurnView, DemoView

AGENT = [sys.executable, "-m", "turnback.agents.scripted"]

TURN_ONE = """\
say Creating a tiny greeting module.
write greet.py <<END
def greet(name):
    return "Hello, " + name
END
write README.txt A greeting module.
"""

# The agent dies by SIGKILL after the first file and its checkpoint; the runtime restarts it
# and it continues after that checkpoint, so each file is written once.
TURN_TWO = """\
say Adding a farewell and tests, in steps.
append greet.py <<END

def farewell(name):
    return "Goodbye, " + name
END
crash-once
write test_greet.py <<END
from greet import farewell, greet

assert greet("Ada") == "Hello, Ada"
assert farewell("Ada") == "Goodbye, Ada"
END
say Done: farewell() and its test.
"""

# The orchestrating process is killed while this turn waits after its checkpoint.
TURN_THREE = """\
say Renaming the readme, then waiting for a build.
rename README.txt README.md
checkpoint
sleep 2
append README.md Built.
say Build finished.
"""

_ORCHESTRATOR = textwrap.dedent(
    """
    import asyncio, sys
    import turnback
    from turnback.runtime import AgentRuntime

    async def main():
        tb = turnback.open(sys.argv[1])
        session = tb.session(sys.argv[2])
        runtime = await AgentRuntime.start(tb, session, sys.argv[4:])
        await runtime.prompt(sys.argv[3])

    asyncio.run(main())
    """
)


def check_workspace(workspace: str | None) -> None:
    """ValueError unless ``workspace`` is absent, new or empty: the demo writes and reverts
    files there, and must not touch anyone's own."""
    if workspace is not None and Path(workspace).is_dir() and any(Path(workspace).iterdir()):
        raise ValueError(
            f"{workspace} is not empty, and the demo writes and reverts files there; give it a "
            "new or empty directory"
        )


def run(*, keep: bool, workspace: str | None, echo: Callable[[str], None]) -> DemoView:
    """Run the demo, telling ``echo`` each step; returns a summary (the ``--json`` output).
    ExtraMissing, before anything is made, where the scripted agent's SDK is not installed."""
    if importlib.util.find_spec("acp") is None:
        raise ExtraMissing(
            "`turnback demo` runs the bundled scripted agent, which needs the ACP SDK that a "
            "plain `pip install turnback` leaves out: pip install 'turnback[agent]'"
        )
    check_workspace(workspace)
    home = Path(tempfile.mkdtemp(prefix="turnback-demo-home-"))
    work = Path(workspace) if workspace else Path(tempfile.mkdtemp(prefix="turnback-demo-ws-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        session_id = asyncio.run(_scenario(home, work, echo, keep))
        with turnback.open(home) as tb:
            turns = tb.session(session_id).turns()
    finally:
        if keep:
            echo(f"\nKept the demo's home {home} and workspace {work}.")
        else:
            shutil.rmtree(home, ignore_errors=True)
            if workspace is None:
                shutil.rmtree(work, ignore_errors=True)
                echo("\nRemoved the demo's home and workspace; `turnback demo --keep` keeps them.")
            else:
                echo(
                    f"\nRemoved the demo's home; its workspace {work} stays as the demo left it "
                    "(`turnback demo --keep` keeps the home too)."
                )
    echo(f"The demo took {time.monotonic() - started:.1f}s.")
    return DemoView(
        str(home) if keep else None,
        str(work) if keep or workspace else None,
        session_id,
        tuple(DemoTurnView.of(t) for t in turns),
    )


async def _scenario(home: Path, work: Path, echo: Callable[[str], None], keep: bool) -> str:
    def hint(command: str) -> None:
        if keep:
            echo(f"   → `turnback --home {home} {command}`")

    policy = ResumePolicy(backoff=0.05)
    tb = turnback.open(home)
    try:
        session = tb.create_session(work, title="demo", agent="scripted")
        short = session.id[:12]
        echo(f"Session {short}: the bundled scripted agent, working in {work}\n")

        async with await AgentRuntime.start(tb, session, AGENT, policy=policy) as rt:
            turn = await rt.prompt(TURN_ONE)
            echo(
                f"1. Turn {turn.number} {turn.status.value}: the agent wrote greet.py and "
                "README.txt. Its prompt was durable before the agent saw it, its events were "
                "journaled as they streamed, and the workspace was captured before and after."
            )
            hint(f"show {short} 1")

            turn = await rt.prompt(TURN_TWO)
            crashed = [a for a in session.activities() if a.code == "agent.crashed"]
            echo(
                f"2. Turn {turn.number} {turn.status.value}, although the agent process was "
                f"killed with SIGKILL mid-turn ({len(crashed)} crash): the runtime restarted "
                "it, reloaded its session and resumed from the agent's last step checkpoint. "
                "Each file was written once and no message shows twice."
            )
            hint(f"activities {short}")
        tb.close()

        echo(
            "3. Another process now runs turn 3 and is killed with SIGKILL while the agent "
            "waits, after a step checkpoint…"
        )
        await _kill_orchestrator_mid_turn(home, session.id)

        tb = turnback.open(home)
        session = tb.session(session.id)
        report = tb.recover()
        for recovered in report.recovered:
            echo(
                f"   Recovery applied turn {recovered.number} as "
                f"{recovered.status.value}, with the {recovered.event_count} events it had "
                "acknowledged; its workspace was captured as recovery found it."
            )
        async with await AgentRuntime.start(tb, session, AGENT, policy=policy) as rt:
            resumed = await rt.resume()
        echo(
            f"4. Turn {resumed.number} went on from its step checkpoint and "
            f"{resumed.status.value}, in its own place: the rename was not done twice, and what "
            "it said after the checkpoint shows once."
        )
        hint(f"log {short}")

        echo("\n5. The turn log, each turn's files and +/- from its own checkpoints:")
        for t in session.turns():
            diff = session.diff(t.token)
            files = ", ".join(
                f"{c.kind.value} {c.old_path + ' -> ' if c.old_path else ''}{c.path} "
                f"+{c.additions} -{c.deletions}"
                for c in diff.files
            )
            echo(f"     turn {t.number}  {t.status.value:<11}  {files or 'no file changes'}")
        hint(f"diff {short} 2")

        (work / "greet.py").write_text("# Greetings.\n" + (work / "greet.py").read_text())
        echo("\n6. You edit greet.py by hand: a comment on its first line.")
        session.revert(1, keep_user_edits=True)
        kept = "# Greetings." in (work / "greet.py").read_text()
        gone = not (work / "test_greet.py").exists()
        echo(
            "7. Reverted files and conversation to turn 1, keeping your edit: the agent's later "
            f"changes are undone (test_greet.py removed: {gone}), your hand edit is still there "
            f"({kept}); the later turns are kept as reverted history."
        )

        session.undo_revert()
        echo(
            "8. Undid the revert: files, turns and head are exactly as before it "
            f"(test_greet.py back: {(work / 'test_greet.py').exists()})."
        )
        hint(f"activities {short}")
        return session.id
    finally:
        tb.close()


async def _kill_orchestrator_mid_turn(home: Path, session_id: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _ORCHESTRATOR, str(home), session_id, TURN_THREE, *AGENT],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with turnback.open(home) as tb:
            session = tb.session(session_id)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                running = session.running()
                if running and session.step_checkpoints(running.token):
                    break
                await asyncio.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
