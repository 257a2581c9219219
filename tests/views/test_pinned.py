"""Every ``--json`` shape of every command, and every answer of the review page's API, on a home
with every kind of turn, revert and activity, exactly as pinned in tests/views/pinned/: the
shapes scripts read do not change by accident."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import turnback
from turnback.ui.app import build_app

from .pinned import Pinned
from .scenario import Scenario, build

TURNBACK = str(Path(sys.executable).parent / "turnback")
TOKEN = "the-token-of-this-test"


@pytest.fixture
def scenario(tmp_path: Path) -> Iterator[Scenario]:
    built = build(tmp_path)
    try:
        yield built
    finally:
        built.close()


class Cli:
    def __init__(self, scenario: Scenario, pinned: Pinned) -> None:
        self.home = scenario.home
        self.pinned = pinned

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [TURNBACK, "--home", str(self.home), *args, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            input=stdin,
            env={**os.environ, "NO_COLOR": "1"},
        )
        assert done.returncode in (0, 1, 3), done
        said = f"{done.stdout}\n-- stderr:\n{done.stderr}" if done.returncode else done.stdout
        self.pinned.add(f"{' '.join(args)} (exit {done.returncode})", said)
        return done.stdout


def test_every_command(scenario: Scenario, tmp_path: Path) -> None:
    pinned = Pinned("cli", tmp_path)
    cli = Cli(scenario, pinned)
    full, second = scenario.full, scenario.second
    quiet = json.loads(cli("sessions"))[0]["id"]
    for session in (full, second, quiet):
        cli("log", session)
    for turn in ("1", "2", "3", "4", "5", "6", *scenario.aside):
        cli("show", full, turn)
        cli("diff", full, turn)
    cli("show", quiet, "1")
    cli("diff", quiet, "1")
    cli("diff", full, "1", "--stat")
    cli("activities", full)
    cli("rescue", full, "--turn", "5")
    cli("unrecovered", full)
    (scenario.workspace / "CHANGES.md").write_text("# Changes, by hand\n")
    cli("revert", full, "5", "--dry-run")
    cli("revert", full, "5", "--dry-run", "--keep-user-edits")
    cli("revert", full, "5", "--yes", "--keep-user-edits")  # a conflict: exit 3
    cli("revert", full, "0", "--dry-run", "--keep-user-edits")  # turn 4 has no checkpoints
    cli("doctor")
    cli("recover")
    cli("log", second)
    cli("unrecovered", full, "discard", scenario.aside[1][:10])
    cli("unrecovered", full, "apply", scenario.aside[0][:10])
    cli("revert", full, "6", "--yes")
    cli("revert", "--undo", full, "--yes")
    cli("revert", full, "6", "--yes")
    cli("revert", full, "6", "--yes")  # nothing to revert: exit 3
    cli("log", full)
    cli("sweep")
    cli("gc", "--keep", "1", "--older-than", "0")
    cli("sessions")
    pinned.check()


def test_every_route(scenario: Scenario, tmp_path: Path) -> None:
    pinned = Pinned("api", tmp_path)
    with turnback.open(scenario.home, create=False) as tb:
        app = build_app(tb, TOKEN, hosts=["testserver"])
        with TestClient(app, follow_redirects=False) as client:
            key = client.post("/api/login", json={"token": TOKEN}).json()["key"]
            client.headers["authorization"] = f"Bearer {key}"

            def get(route: str, **params: str | list[str]) -> str:
                answer = client.get(route, params=params)
                pinned.add(f"GET {_query(route, params)} ({answer.status_code})", answer.text)
                return answer.text

            def post(path: str, body: object) -> str:
                answer = client.post(path, json=body)
                pinned.add(f"POST {path} {json.dumps(body)} ({answer.status_code})", answer.text)
                return answer.text

            full, second = scenario.full, scenario.second
            quiet = json.loads(get("/api/sessions"))[0]["id"]
            base = f"/api/sessions/{full}"
            for session in (full, second, quiet):
                get(f"/api/sessions/{session}")
                get(f"/api/sessions/{session}/log")
                get(f"/api/sessions/{session}/timeline")
            for turn in ("1", "2", "3", "4", "5", "6", *scenario.aside):
                get(f"{base}/turns/{turn}")
                get(f"{base}/turns/{turn}/diff")
            get(f"{base}/turns/1/diff", stat="1")
            get(f"{base}/turns/5/patch", path=["helper.py", "logo.bin"])
            get(f"{base}/range", **{"from": "1", "to": "6"})
            (scenario.workspace / "CHANGES.md").write_text("# Changes, by hand\n")
            get(f"{base}/revert-plan", to_turn="5")
            get(f"{base}/revert-plan", to_turn="5", scope="files", keep_user_edits="1")
            post(f"{base}/revert", {"to_turn": 5, "scope": "both", "keep_user_edits": True})
            get(f"/api/sessions/{quiet}/turns/1")
            get("/api/sessions/0123456789abcdef")  # no such session: 404
            with client.stream("GET", f"/api/sessions/{quiet}/stream") as stream:
                lines, read = [], stream.iter_lines()
                for line in read:
                    lines.append(line)
                    if line.startswith("event: running"):
                        lines.append(next(read))
                        break
                pinned.add("GET stream of a running turn", "\n".join(lines))
            post(f"{base}/review-mark", {"turn": 3})
            get(f"{base}/timeline")
            post(f"{base}/unrecovered/{scenario.aside[1]}/discard", {})
            post(f"{base}/unrecovered/{scenario.aside[0]}/apply", {})
            post(f"{base}/revert", {"to_turn": 6, "scope": "both"})
            post(f"{base}/undo", {})
            post(f"{base}/revert", {"to_turn": 5, "scope": "files"})
            get(f"{base}/log")
    pinned.check()


def _query(route: str, params: dict[str, str | list[str]]) -> str:
    pairs = [
        f"{name}={value}"
        for name, values in params.items()
        for value in ([values] if isinstance(values, str) else values)
    ]
    return route + ("?" + "&".join(pairs) if pairs else "")


def test_demo(tmp_path: Path) -> None:
    # how many events the turns the agent was killed in hold depends on when it was killed
    pinned = Pinned("demo", tmp_path, (re.compile(r'"events": [0-9]+'), '"events": "<n>"'))
    done = subprocess.run(
        [TURNBACK, "demo", "--json"], capture_output=True, text=True, timeout=300, check=True
    )
    pinned.add("demo", done.stdout)
    pinned.check()
