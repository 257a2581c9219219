"""The peer of bench/journal.py's (lg) row: LangGraph's SQLite checkpointer storing writes.

Run by the Python of the virtualenv ``make`` gives it (``bench/.langgraph``, with the
``langgraph-checkpoint-sqlite`` package and nothing of turnback's):

    bench/.langgraph/bin/python bench/langgraph_peer.py DATABASE BATCH TEXT_LENGTH

It opens ``SqliteSaver`` on DATABASE, prints ``ready``, then for each line N read from its
standard input stores N agent_message_chunk events of TEXT_LENGTH characters with
``put_writes``, BATCH to a call (each call is one committed transaction), and prints the
seconds that took. Reading its orders one round at a time lets bench/journal.py interleave it
with turnback's rounds.
"""

from __future__ import annotations

import sqlite3
import sys
import time

from langgraph.checkpoint.sqlite import SqliteSaver


def main() -> int:
    path, batch, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    words = "Looking at the failing test, the fixture opens the database twice. "
    event = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": (words * (length // len(words) + 1))[:length]},
    }
    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    saver.setup()
    config = {"configurable": {"thread_id": "bench", "checkpoint_ns": "", "checkpoint_id": "1"}}
    print("ready", flush=True)
    done = 0
    for line in sys.stdin:
        count = int(line)
        started = time.perf_counter()
        for first in range(done, done + count, batch):
            writes = [("messages", event)] * min(batch, done + count - first)
            saver.put_writes(config, writes, task_id=f"task-{first}")  # type: ignore[arg-type]
        print(time.perf_counter() - started, flush=True)
        done += count
    return 0


if __name__ == "__main__":
    sys.exit(main())
