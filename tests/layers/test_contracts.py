"""The layers are enforced: the tree keeps every import-linter contract in pyproject.toml, and
a copy of the package with one import injected against them breaks the contract it should --
at a module's top or inside a function."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import turnback

ROOT = Path(__file__).resolve().parents[2]
LINT = str(Path(sys.executable).parent / "lint-imports")


def lint(package: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` from the repository (its configuration), on ``package``'s parent
    directory first on the path when given."""
    env = {**os.environ, "PYTHONPATH": str(package.parent)} if package else dict(os.environ)
    return subprocess.run(
        [LINT, "--no-logo", "--no-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_keeps_every_contract() -> None:
    done = lint()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


INJECTED = {
    # an arrow going up, at the top of a module
    "an upward import": ("engine/turns.py", "from turnback import views", "layers"),
    # the same inside a function, where cycles used to hide
    "an upward import in a function": (
        "store/sqlite.py",
        "def _up() -> None:\n    from turnback.runtime import AgentRuntime",
        "layers",
    ),
    # the page importing the command line: interfaces are independent
    "an interface importing another": (
        "ui/app.py",
        "def _cli() -> None:\n    from turnback import cli",
        "layers",
    ),
    # the command line reaching past the proxy's seam
    "past a seam": ("cli.py", "from turnback.acp import proxy", "layers"),
    # two modules of one layer importing each other
    "a cycle inside a layer": (
        "engine/owners.py",
        "def _handle() -> None:\n    import turnback.engine.handle",
        "acyclic",
    ),
    "a bundled agent importing turnback": ("agents/scripted.py", "import turnback.model", "agents"),
    "the face importing an interface": (
        "__init__.py",
        "def _x() -> None:\n    import turnback.cli",
        "face",
    ),
}


@pytest.mark.parametrize("case", sorted(INJECTED))
def test_an_injected_import_breaks_its_contract(case: str, tmp_path: Path) -> None:
    module, line, contract = INJECTED[case]
    package = tmp_path / "turnback"
    shutil.copytree(
        Path(turnback.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__")
    )
    path = package / module
    path.write_text(path.read_text() + f"\n\n{line}\n")
    done = lint(package)
    assert done.returncode == 1, done.stdout + done.stderr
    names = {
        "layers": "Each layer imports only the layers below it",
        "acyclic": "No import cycle",
        "agents": "The bundled agents are ordinary ACP agents",
        "face": "The package's face",
    }
    broken = done.stdout.partition("Broken contracts")[2]
    assert names[contract] in broken, done.stdout
    injected = "turnback." + module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    assert injected.removesuffix(".__init__") in broken, done.stdout
