"""Installed as the README says, outside this checkout: ``make dist``'s wheel into a fresh
virtualenv, then the README's first snippet and the ``turnback`` command run from another
directory, with nothing of the checkout on the path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    made = subprocess.run(
        ["make", "-s", "dist"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert made.returncode == 0, made.stderr
    [wheel] = re.findall(r"dist/turnback-[^\s]+\.whl", made.stdout)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "--quiet", str(ROOT / wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stderr

    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "TURNBACK_HOME": str(tmp_path / "home"),
        "HOME": str(tmp_path),
        "NO_COLOR": "1",
    }
    snippet = (
        "import turnback\n"
        "tb = turnback.open()\n"
        "session = tb.create_session(workspace='.')\n"
        "with session.turn('write a file'):\n"
        "    open('a.txt', 'w').write('one\\n')\n"
        "print(turnback.__file__, [c.path for c in session.diff(1).files])\n"
    )
    ran = subprocess.run(
        [str(venv / "bin/python"), "-c", snippet],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert str(venv) in ran.stdout and str(ROOT) not in ran.stdout
    assert ran.stdout.rstrip().endswith("['a.txt']")
    listed = subprocess.run(
        ["turnback", "sessions"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert listed.returncode == 0 and str(elsewhere) in listed.stdout, listed
    # an extra left out says which one to install
    page = subprocess.run(
        ["turnback", "ui", "--no-open"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert page.returncode != 0 and "turnback[ui]" in page.stderr, page
