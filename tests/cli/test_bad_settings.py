"""A bad setting in the environment is one line on standard error and exit code 1 from every
command that opens a home: what is wrong and what is accepted, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_cli import run

LINE = (
    "error: TURNBACK_LEASE_SECONDS must be a positive number of seconds, such as 30, not "
    "'soon'; set it so, or unset it for the default"
)


@pytest.mark.parametrize(
    "args",
    [("sessions",), ("sessions", "--json"), ("recover",), ("ui", "--no-open"), ("gc",)],
)
def test_a_bad_lease_setting(home: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str]) -> None:
    monkeypatch.setenv("TURNBACK_LEASE_SECONDS", "soon")
    done = run(home, *args)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", LINE + "\n")
    assert not home.exists()


def test_a_revert_of_neither_is_a_usage_error(home: Path) -> None:
    done = run(home, "revert", "0123abcd", "1", "--files-only", "--conversation-only", "--yes")
    assert done.returncode == 2
    assert "--files-only and --conversation-only exclude each other" in done.stderr
    assert "Traceback" not in done.stderr
