"""The ``turnback`` command: the one entry point, above every interface.

A plain ``turnback acp -- AGENT…`` is started here without the command line's machinery (see
:mod:`turnback.acp.launch`: the agent starts before anything heavy is imported); everything else
goes to :mod:`turnback.cli`. This module imports only :mod:`turnback.acp.launch`, which imports
only the standard library, at its top.
"""

from __future__ import annotations

import sys

from turnback.acp import launch


def main() -> None:
    argv = sys.argv[1:]
    line = launch.command_line(argv)
    if line is not None:
        early = launch.start(line.agent, line.initialize_timeout)
        from turnback.acp import run
        from turnback.errors import TurnbackError

        try:
            sys.exit(run(line, early))
        except TurnbackError as error:
            from turnback.cli import fail

            fail(error)
    from turnback.cli import main as cli

    cli(argv)
