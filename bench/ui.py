"""Benchmark of ``turnback ui``: the page's data next to the CLI's ``--json`` for the same data.

    python bench/ui.py              # the recorded run: a 1,000-turn session, a 2,000-file turn
    python bench/ui.py --smoke      # 50 turns, 100 files: a few seconds (CI)
    python bench/ui.py --json

A home is built with (1) a session of N completed turns, each with three changed files, written
through the store as a long-lived session leaves them, and (2) a session with one real turn that
modifies M files of a real workspace (real captures, a real patch). Then a real ``turnback ui``
process serves that home, and in interleaved rounds:

(t)  the timeline's data: ``GET /api/sessions/ID/log`` from the running server, next to the CLI's
     ``turnback log ID --json`` run in this process (click's ``main``, output to a null stream;
     it opens the home each time, as the command does). Ratio server / CLI.  goal: <= 1.2 x
(p)  everything the timeline page asks for (``/log`` and ``/timeline``) against the same CLI
     baseline.  goal: <= 1.2 x
(d)  the diff of the M-file turn: ``GET /api/sessions/ID/turns/1/diff`` next to
     ``turnback diff ID 1 --json``.  goal: <= 1.2 x
(f)  Chromium (Debian's, headless, through Playwright) opening that turn's page: milliseconds
     from navigation start to the animation frame after the first files' diff rows are drawn
     (the page's own ``turnback:first-screen`` performance mark).  goal: < 1,000 ms
(s)  Chromium opening the N-turn session's page (its timeline): milliseconds to the frame after
     its first screen of turns is drawn (the same mark), next to a 3-turn session's page in the
     same rounds as the baseline.  goal: < 1,000 ms

Each row gives min / median / max over the rounds; ratios are of the medians. Exit code 0 (MISS
is printed when a goal is missed), 1 when the benchmark itself went wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    import turnback
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(SRC))
    import turnback

import httpx  # noqa: E402
from browser import launch  # noqa: E402
from rounds import DIR_HELP, interleaved, machine, scratch_dir, spread, verdict  # noqa: E402

from turnback.cli import main as cli_main  # noqa: E402
from turnback.model import ChangeKind, FileChange, Turn, TurnStatus  # noqa: E402

RATIO_GOAL = 1.2
FIRST_SCREEN_GOAL_MS = 1000.0
# The page marks the frame after the first files' diff rows are drawn.
MARKED = "performance.getEntriesByName('turnback:first-screen')"


def long_session(tb: turnback.Turnback, workspace: Path, turns: int) -> str:
    """N completed turns of three changed files each, written through the store."""
    session = tb.create_session(workspace, title=f"{turns} turns", agent="bench")
    parent: str | None = None
    now = time.time()
    with tb.store.atomic() as tx:
        for number in range(1, turns + 1):
            token = uuid.uuid4().hex
            tx.insert_turn(
                Turn(
                    token=token,
                    session_id=session.id,
                    number=number,
                    parent=parent,
                    owner_id=None,
                    status=TurnStatus.COMPLETED,
                    prompt=f"step {number}: change the parser, its tests and the docs",
                    started_at=now + number,
                    ended_at=now + number + 0.5,
                    event_count=40,
                )
            )
            tx.insert_file_changes(
                token,
                "turn",
                [
                    FileChange(f"src/module_{number % 50}.py", ChangeKind.MODIFIED, 12, 4),
                    FileChange(f"tests/test_{number % 50}.py", ChangeKind.MODIFIED, 8, 1),
                    FileChange(f"docs/step_{number}.md", ChangeKind.ADDED, 20, 0),
                ],
            )
            parent = token
        tx.set_head(session.id, parent, now + turns + 1)
    return session.id


def wide_turn(tb: turnback.Turnback, workspace: Path, files: int) -> str:
    """One real turn that modifies ``files`` files of a real workspace."""
    for i in range(files):
        folder = workspace / f"pkg{i // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [f"def function_{i}_{n}(value):\n    return value + {n}\n" for n in range(4)]
        (folder / f"mod_{i}.py").write_text("".join(lines))
    session = tb.create_session(workspace, title=f"{files} files", agent="bench")
    with session.turn("rename the helpers everywhere"):
        for i in range(files):
            path = workspace / f"pkg{i // 100}" / f"mod_{i}.py"
            path.write_text(path.read_text().replace("return value + 1", "return value - 1"))
    return session.id


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def cli_run(home: Path, *args: str) -> None:
    """One CLI command in this process, its output thrown away."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cli_main(["--home", str(home), *args])
        except SystemExit as done:
            if done.code not in (0, None):
                raise RuntimeError(f"turnback {' '.join(args)} exited {done.code}") from None


def start_server(home: Path) -> tuple[subprocess.Popen[str], str, str]:
    script = Path(sys.executable).parent / "turnback"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "turnback.cli"]
    process = subprocess.Popen(
        [*command, "--home", str(home), "ui", "--no-open", "--read-only"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    if not url:
        process.wait(timeout=10)
        raise RuntimeError(
            f"turnback ui did not start: {process.stderr.read() if process.stderr else ''}"
        )
    return process, url, url.split("/#token=")[0]


def first_screens(
    url: str, base: str, pages: dict[str, tuple[str, str]], rounds: int, scratch: Path
) -> dict[str, list[float]]:
    """For each name, ``(path, selector)``: milliseconds to the page's first-screen mark, in
    interleaved rounds; ``selector`` must then match something drawn."""
    from playwright.sync_api import sync_playwright

    samples: dict[str, list[float]] = {name: [] for name in pages}
    with sync_playwright() as driver:
        browser = launch(driver, scratch / "profile")
        try:
            page = browser.new_page()
            page.goto(url)  # logs in: the page keeps its key
            page.wait_for_selector("body[data-ready]")
            for _ in range(rounds + 1):  # the first warms the browser's cache of the assets
                for name, (path, selector) in pages.items():
                    page.goto(base + path, wait_until="commit")
                    page.wait_for_function(f"() => {MARKED}.length > 0", timeout=30_000)
                    assert page.locator(selector).count() > 0
                    samples[name].append(float(page.evaluate(f"{MARKED}[0].startTime")))
        finally:
            browser.close()
    return {name: values[1:] for name, values in samples.items()}


def bench(turns: int, files: int, rounds: int, scratch: Path, browser: bool) -> dict[str, Any]:
    home = scratch / "home"
    (scratch / "long").mkdir()
    (scratch / "wide").mkdir()
    with turnback.open(home) as tb:
        long_id = long_session(tb, scratch / "long", turns)
        (scratch / "short").mkdir()
        short_id = long_session(tb, scratch / "short", 3)
        wide_id = wide_turn(tb, scratch / "wide", files)
    process, url, base = start_server(home)
    try:
        with httpx.Client(base_url=base, timeout=300) as client:
            login = client.post("/api/login", json={"token": url.split("#token=")[1]})
            client.headers["authorization"] = f"Bearer {login.raise_for_status().json()['key']}"
            get = lambda path: client.get(path).raise_for_status()  # noqa: E731
            get(f"/api/sessions/{long_id}/log")  # warm both sides once
            cli_run(home, "log", long_id, "--json")
            samples = interleaved(
                rounds,
                {
                    "tc": lambda _: timed(lambda: cli_run(home, "log", long_id, "--json")),
                    "ts": lambda _: timed(lambda: get(f"/api/sessions/{long_id}/log")),
                    "ps": lambda _: timed(
                        lambda: (
                            get(f"/api/sessions/{long_id}/log"),
                            get(f"/api/sessions/{long_id}/timeline"),
                        )
                    ),
                    "dc": lambda _: timed(lambda: cli_run(home, "diff", wide_id, "1", "--json")),
                    "ds": lambda _: timed(lambda: get(f"/api/sessions/{wide_id}/turns/1/diff")),
                },
            )
        shown = (
            first_screens(
                url,
                base,
                {
                    "f": (f"/sessions/{wide_id}/turns/1", "section.file tr.add"),
                    "s": (f"/sessions/{long_id}", "li.node"),
                    "s0": (f"/sessions/{short_id}", "li.node"),
                },
                rounds,
                scratch,
            )
            if browser
            else {}
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    s = {k: spread(v) for k, v in samples.items()}

    def ratio(row: str, what: str, cli: str, server: str) -> dict[str, Any]:
        value = s[server]["median"] / s[cli]["median"]
        return {
            "id": row,
            "what": what,
            "cli": s[cli],
            "server": s[server],
            "value": value,
            "unit": "x",
            "goal": f"<= {RATIO_GOAL} x",
            "met": value <= RATIO_GOAL,
        }

    rows = [
        ratio("t", f"timeline of a {turns:,}-turn session: `log --json` vs GET /log", "tc", "ts"),
        ratio("p", "the timeline page's data (/log, /timeline) vs `log --json`", "tc", "ps"),
        ratio("d", f"diff of a {files:,}-file turn: `diff --json` vs GET /diff", "dc", "ds"),
    ]

    def screen(row: str, what: str, baseline: str | None) -> dict[str, Any]:
        first = spread(shown[row])
        return {
            "id": row,
            "what": what,
            "cli": spread(shown[baseline]) if baseline else None,
            "server": first,
            "value": first["median"],
            "unit": "ms",
            "goal": f"< {FIRST_SCREEN_GOAL_MS:,.0f} ms",
            "met": first["median"] < FIRST_SCREEN_GOAL_MS,
        }

    if shown:
        rows.append(screen("f", f"Chromium: first screen of the {files:,}-file turn's page", None))
        rows.append(
            screen(
                "s",
                f"Chromium: first screen of the {turns:,}-turn session's page "
                "(baseline: a 3-turn session's)",
                "s0",
            )
        )
    return {"rows": rows, "turns": turns, "files": files, "rounds": rounds}


def _spread_text(values: dict[str, float] | None, scale: float, digits: int) -> str:
    if values is None:
        return "-"
    return " / ".join(f"{values[k] * scale:.{digits}f}" for k in ("min", "median", "max"))


def table(report: dict[str, Any]) -> str:
    lines = [
        "| row | what | CLI or baseline min / median / max (s; (f), (s): ms) "
        "| page min / median / max (s; (f), (s): ms) "
        "| ratio or value "
        "| goal | |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for row in report["rows"]:
        browser = row["unit"] == "ms"
        value = f"{row['value']:.0f} ms" if browser else f"{row['value']:.2f} x"
        digits = 0 if browser else 3
        lines.append(
            f"| ({row['id']}) | {row['what']} | {_spread_text(row['cli'], 1, digits)} | "
            f"{_spread_text(row['server'], 1, digits)} | {value} | {row['goal']} | "
            f"{verdict(row['met'])} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a small, quick run (CI)")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--no-browser", action="store_true", help="skip the Chromium rows (f) and (s)"
    )
    parser.add_argument("--dir", type=Path, help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args()
    turns, files, rounds = args.turns, args.files, args.rounds
    if args.smoke:
        turns, files, rounds = 50, 100, 2
    env_home = os.environ.pop("TURNBACK_HOME", None)
    scratch = scratch_dir(args.dir, "turnback-bench-ui-")
    try:
        report = bench(turns, files, rounds, scratch, browser=not args.no_browser)
    except (RuntimeError, httpx.HTTPError) as error:
        print(f"the benchmark went wrong: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if env_home is not None:
            os.environ["TURNBACK_HOME"] = env_home
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    print(f"turnback {turnback.__version__} ui benchmark, {now}, {machine()}")
    print(f"command: {' '.join(sys.argv)}\n")
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
