"""A hook command that records what an agent gave it: ``record_hook.py DIR EVENT`` writes the
JSON the agent sent on stdin, the arguments and the environment to a new file in DIR, then exits 0
with nothing on stdout, so that the agent goes on as if no hook were there."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    directory, event = Path(sys.argv[1]), sys.argv[2]
    raw = sys.stdin.read()
    try:
        payload = json.loads(raw) if raw.strip() else None
    except ValueError:
        payload = {"_unparsed": raw}
    record = {
        "event": event,
        "argv": sys.argv[3:],
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


if __name__ == "__main__":
    main()
