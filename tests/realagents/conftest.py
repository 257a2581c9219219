"""What the real agents' tests share: a world for an agent to run in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .agents import World, make_workspace

MakeWorld = Callable[[str], World]


@pytest.fixture
def make_world(tmp_path: Path) -> MakeWorld:
    """A world for one run against the endpoint at the given URL: a home, a workspace (a git
    repository with a hand edit and an untracked file), a directory for hook records."""
    count = 0

    def make(model_url: str) -> World:
        nonlocal count
        count += 1
        root = tmp_path / f"world{count}"
        world = World(root / "home", root / "workspace", root / "hooks", model_url)
        world.home.mkdir(parents=True)
        make_workspace(world.workspace)
        return world

    return make
