"""The web stack is imported only by `turnback ui`: the other commands, the proxy above all, do
not pay for it at start-up."""

from __future__ import annotations

import subprocess
import sys


def test_the_cli_and_the_proxy_do_not_import_the_web_stack() -> None:
    probe = (
        "import sys, turnback, turnback.cli, turnback.acp; "
        "print(sorted(m for m in ('starlette', 'uvicorn') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
