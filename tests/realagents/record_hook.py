"""A hook command that records what an agent gave it: ``record_hook.py DIR EVENT`` writes the
JSON the agent sent on stdin, the arguments and the environment to a new file in DIR, then exits 0
with nothing on stdout, so that the agent goes on as if no hook were there.

To see what a hook's answer does, ``--sleep S`` waits S seconds after recording (past its
timeout, say), and ``--exit N`` with ``--stderr TEXT`` or ``--stdout TEXT`` answers so."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("event")
    parser.add_argument("--sleep", type=float, default=0)
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("--stdout", default="")
    parser.add_argument("--stderr", default="")
    options = parser.parse_args()
    directory, event = options.directory, options.event
    raw = sys.stdin.read()
    try:
        payload = json.loads(raw) if raw.strip() else None
    except ValueError:
        payload = {"_unparsed": raw}
    record = {
        "event": event,
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "stdin": payload,
        "at": time.time(),
    }
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{time.monotonic_ns():020d}-{os.getpid()}-{event}.json"
    partial = directory / f".{name}"
    partial.write_text(json.dumps(record, indent=1))
    partial.rename(directory / name)
    time.sleep(options.sleep)
    sys.stdout.write(options.stdout)
    sys.stderr.write(options.stderr)
    sys.exit(options.exit)


if __name__ == "__main__":
    main()
