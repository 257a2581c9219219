"""Real git, real files: workspaces built in tmp_path, a fresh turnback home per test."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from turnback.workspace import Snapshots

GIT_ENV = {
    "PATH": os.environ.get("PATH", os.defpath),
    "HOME": "/nonexistent",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "User",
    "GIT_AUTHOR_EMAIL": "user@example.com",
    "GIT_COMMITTER_NAME": "User",
    "GIT_COMMITTER_EMAIL": "user@example.com",
}


def git(cwd: Path, *args: str) -> str:
    """Run the user's git in ``cwd`` the way a person would (not turnback's runner)."""
    result = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always", *args],
        cwd=cwd,
        env=GIT_ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def commit_all(root: Path, message: str = "initial") -> None:
    """Make ``root`` a git repository with one commit of everything in it."""
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)


def with_submodule(workspace: Path, library: Path, content: str) -> None:
    """Make ``workspace`` a repository whose ``vendor/lib`` is a submodule: a repository made at
    ``library`` with ``lib.py`` holding ``content``."""
    write(library, "lib.py", content)
    commit_all(library, "lib")
    write(workspace, "main.py", "import lib\n")
    git(workspace, "init", "-q")
    git(workspace, "submodule", "add", "-q", str(library), "vendor/lib")
    git(workspace, "commit", "-qam", "with submodule")


def write(root: Path, path: str, content: str | bytes = "") -> Path:
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        file.write_bytes(content)
    else:
        file.write_text(content)
    return file


def tree_digest(root: Path, skip: tuple[str, ...] = (".git",)) -> dict[str, str]:
    """Every path below ``root`` (not following links) and what it is: content, link, mode."""
    found: dict[str, str] = {}
    for directory, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        dirs[:] = [d for d in dirs if d not in skip]
        for name in dirs + files:
            path = os.path.normpath(os.path.join(rel_dir, name))
            full = os.path.join(directory, name)
            if os.path.islink(full):
                found[path] = "link:" + os.readlink(full)
            elif os.path.isdir(full):
                found[path] = "dir"
            else:
                with open(full, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()[:16]
                found[path] = f"{oct(os.lstat(full).st_mode & 0o111)}:{digest}"
    return found


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def problems() -> list[str]:
    return []


@pytest.fixture
def snapshots(home: Path, problems: list[str]) -> Snapshots:
    return Snapshots(home, problems=lambda _ws, message: problems.append(message))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture(params=["plain", "git"])
def any_workspace(request: pytest.FixtureRequest, workspace: Path) -> Path:
    """The same tests on a plain directory and on a git repository with one commit."""
    write(workspace, "README.md", "# project\n")
    write(workspace, "src/app.py", "print('hello')\n")
    if request.param == "git":
        commit_all(workspace)
    return workspace


Capture = Callable[[str], str]


@pytest.fixture
def capture(snapshots: Snapshots, any_workspace: Path) -> Capture:
    """capture("name") -> commit id of a fresh checkpoint of ``any_workspace``."""

    def take(name: str) -> str:
        return snapshots.capture(any_workspace, f"t/{name}").commit

    return take
