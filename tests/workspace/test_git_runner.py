"""The git runner: found by absolute path, failures explained."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from turnback.errors import GitFailed, GitUnavailable
from turnback.workspace import Snapshots
from turnback.workspace.git import Git


def test_git_missing_from_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(GitUnavailable) as raised:
        Snapshots(tmp_path / "home")
    message = str(raised.value)
    assert "not on PATH" in message and str(empty) in message and "install" in message


def test_a_named_git_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(GitUnavailable, match="not found"):
        Snapshots(tmp_path / "home", git=str(tmp_path / "no-such-git"))


def test_git_is_run_by_absolute_path(tmp_path: Path) -> None:
    runner = Git(home=tmp_path)
    assert os.path.isabs(runner.executable) and runner.version >= (2, 30)


def test_failures_name_the_command_and_what_git_said(tmp_path: Path) -> None:
    runner = Git(home=tmp_path)
    with pytest.raises(GitFailed) as raised:
        runner.run(["rev-parse", "--verify", "no-such-thing"], timeout=30, cwd=tmp_path)
    message = str(raised.value)
    assert "`git rev-parse --verify no-such-thing`" in message
    assert "exit status 128" in message and "not a git repository" in message


def test_the_environment_is_built_from_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_DIR", "/elsewhere")
    monkeypatch.setenv("GIT_TRACE", "1")
    env = Git(home=tmp_path).environment()
    assert "GIT_TRACE" not in env and "GIT_DIR" not in env
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == os.devnull
    assert env["HOME"] == str(tmp_path) and env["LC_ALL"] == "C"
