"""Fixtures for the runtime suite."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import turnback


@pytest.fixture
def write_agent(tmp_path: Path) -> Callable[[str, str], tuple[str, ...]]:
    """Write a small agent program into the test's directory; returns its command line."""

    def write(name: str, source: str) -> tuple[str, ...]:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return (sys.executable, str(path))

    return write


@pytest.fixture
def workspace(session: turnback.Session) -> Path:
    return session.workspace
