"""Run a command and copy bytes between it and this process's stdin and stdout, nothing else.

    python bench/copier.py AGENT_COMMAND...

bench/proxy.py's floor: the least any process between an editor and an agent costs on the
machine it runs on. It imports only what it uses, so it starts as fast as Python can.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading


def pump(source: int, target: int) -> None:
    while data := os.read(source, 1 << 16):
        view = memoryview(data)
        while view:
            view = view[os.write(target, view) :]
    os.close(target)


def main(command: list[str]) -> int:
    agent = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert agent.stdin is not None and agent.stdout is not None
    threading.Thread(target=pump, args=(0, agent.stdin.fileno()), daemon=True).start()
    pump(agent.stdout.fileno(), 1)
    return agent.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
