"""What the proxy's tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty directory for the agent to work in."""
    path = tmp_path / "workspace"
    path.mkdir()
    return path
