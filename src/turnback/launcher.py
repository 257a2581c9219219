"""The ``turnback`` command: the one entry point, above every interface.

A plain ``turnback acp -- AGENT…`` is started here without the command line's machinery (see
:mod:`turnback.acp.launch`: the agent starts before anything heavy is imported); everything else
goes to :mod:`turnback.cli`; so is a plain ``turnback hook AGENT EVENT`` (a terminal agent's hook,
run on every prompt and tool: :mod:`turnback.hooks.client`). This module imports
nothing at its top: a hook then imports :mod:`turnback.hooks.client`, anything else
:mod:`turnback.acp.launch`, each of which imports only the standard library.
"""

from __future__ import annotations

import sys


def _hook(argv: list[str]) -> tuple[str | None, str, str] | None:
    """(home, agent, event) of a plain ``turnback [--home H] hook AGENT EVENT``, else None."""
    home = None
    if argv[:1] == ["--home"] and len(argv) > 2:
        home, argv = argv[1], argv[2:]
    if len(argv) == 3 and argv[0] == "hook" and not argv[1].startswith("-"):
        return home, argv[1], argv[2]
    return None


def main() -> None:
    argv = sys.argv[1:]
    hook = _hook(argv)
    if hook is not None:  # a hook runs on every prompt and tool: no command line machinery
        from turnback.hooks import client

        home, agent, event = hook
        problem = client.run(agent, event, client.read_stdin(), home=home)
        if problem:
            print(f"turnback hook {agent} {event}: {problem}", file=sys.stderr)
        sys.exit(0)
    from turnback.acp import launch

    line = launch.command_line(argv)
    if line is not None:
        early = launch.start(line.agent, line.initialize_timeout, line.home)
        from turnback.acp import run
        from turnback.errors import TurnbackError

        try:
            sys.exit(run(line, early))
        except TurnbackError as error:
            from turnback.cli import fail

            fail(error)
    from turnback.cli import main as cli

    cli(argv)
