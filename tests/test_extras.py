"""``pip install turnback`` stays light: the ACP SDK (the bundled scripted agent's) and
starlette/uvicorn (``turnback ui``'s) are extras. Run with only the core's dependencies on the
path -- the extras hidden -- every command works or says, in one line, what to install."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import turnback

#: What ``pip install turnback`` brings: the package and its dependencies, nothing else.
CORE = ("click", "platformdirs", "inotify_simple")
LAUNCH = "import sys; sys.argv[0] = 'turnback'; from turnback.launcher import main; main()"


@pytest.fixture
def light(tmp_path: Path) -> Path:
    """A directory holding turnback and its core dependencies only (as links)."""
    place = tmp_path / "light"
    place.mkdir()
    (place / "turnback").symlink_to(Path(turnback.__file__).parent)
    for name in CORE:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue  # inotify_simple: Linux only
        origin = Path(spec.origin)
        found = origin.parent if origin.name == "__init__.py" else origin
        (place / found.name).symlink_to(found)
    return place


def python(light: Path, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """This interpreter without its site-packages (``-S``): only ``light`` is on the path."""
    env = {"PYTHONPATH": str(light), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
    if home is not None:
        env["TURNBACK_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-S", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=light.parent,
    )


def test_the_extras_are_extras() -> None:
    required = importlib.metadata.requires("turnback") or []
    core = [r for r in required if "extra ==" not in r]
    for name in ("agent-client-protocol", "starlette", "uvicorn"):
        assert not [r for r in core if r.startswith(name)], core
    extras = importlib.metadata.metadata("turnback").get_all("Provides-Extra") or []
    assert {"agent", "ui"} <= set(extras)


def test_the_core_works_without_them(light: Path, tmp_path: Path) -> None:
    hidden = python(light, "-c", "import acp", home=tmp_path)
    assert "No module named 'acp'" in hidden.stderr  # the extras really are hidden
    done = python(light, "-c", LAUNCH, "sessions", "--json", home=tmp_path / "home")
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "[]", "")
    # the proxy and the runtime speak ACP with turnback's own wire, not the SDK
    loaded = python(light, "-c", "import turnback.acp.proxy, turnback.runtime, turnback.views")
    assert loaded.returncode == 0, loaded.stderr


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("-c", LAUNCH, "ui", "--no-open"), "ui"),
        (("-c", LAUNCH, "demo"), "agent"),
        (("-m", "turnback.agents.scripted"), "agent"),
    ],
)
def test_without_its_extra_a_command_says_what_to_install(
    light: Path, tmp_path: Path, args: tuple[str, ...], extra: str
) -> None:
    done = python(light, *args, home=tmp_path / "home")
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.endswith(f"pip install 'turnback[{extra}]'"), line
    assert not (tmp_path / "home").exists()  # nothing was opened or made
