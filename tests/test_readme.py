"""The README's Python snippets run as written: the API section's two blocks in one process (the
second goes on from the first), the runtime's on its own, each in a fresh home and workspace."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    env = {**os.environ, "TURNBACK_HOME": str(tmp_path / "home")}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_readme_has_the_snippets_this_test_runs() -> None:
    blocks = _blocks()
    assert len(blocks) == 4
    assert "turnback.open(" in blocks[0] and "session.diff(" in blocks[1]
    assert "AgentRuntime" in blocks[2] and "Service.of(" in blocks[3]


def test_the_api_snippets_run_as_written(tmp_path: Path) -> None:
    first, second, _runtime, _service = _blocks()
    done = _run(first + second, tmp_path)
    assert done.returncode == 0, done.stderr
    workspace = tmp_path / "workspace"
    assert (workspace / "fix.py").is_file()  # turn 1's edit stays
    assert not (workspace / "test_fix.py").exists()  # turn 2's went with the last revert
    assert (tmp_path / "home" / "turnback.db").is_file()


def test_the_runtime_snippet_runs_as_written(tmp_path: Path) -> None:
    done = _run(_blocks()[2], tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "workspace" / "hello.txt").exists()  # written, then reverted


def test_the_service_snippet_runs_as_written(tmp_path: Path) -> None:
    done = _run(_blocks()[3], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "write notes" in done.stdout  # the turns it read through the service
    assert not (tmp_path / "workspace" / "notes.txt").exists()  # written, then reverted
