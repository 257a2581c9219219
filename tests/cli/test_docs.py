"""Every CLI command and every option is documented in the README (like sqlite-utils'
``test_docs.py``): a command or option added without documentation fails here."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from turnback.cli import cli

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


def option_names(command: click.Command) -> list[str]:
    return [
        name
        for param in command.params
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
    ]


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_command_is_documented(readme: str, name: str) -> None:
    """A line of the README shows ``turnback … NAME`` (options may stand between)."""
    pattern = re.compile(rf"turnback\b[^\n`]*?(?<![\w-]){re.escape(name)}(?![\w-])")
    assert pattern.search(readme), f"`turnback {name}` is not documented in README.md"


@pytest.mark.parametrize(
    ("command", "option"),
    sorted(
        {
            (name, option)
            for name, command in cli.commands.items()
            for option in option_names(command)
        }
        | {("turnback", option) for option in option_names(cli)}
    ),
)
def test_every_option_is_documented(readme: str, command: str, option: str) -> None:
    assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", readme), (
        f"option {option} of `{command}` is not documented in README.md"
    )


@pytest.mark.parametrize(
    ("code", "meaning"), [(0, "ok"), (1, "error"), (2, "usage"), (3, "conflict")]
)
def test_the_exit_codes_are_documented(readme: str, code: int, meaning: str) -> None:
    assert re.search(rf"(?<!\w)\**`?{code}`?\**:?\s+{meaning}", readme), (code, meaning)
