"""Benchmark of the agent runtime: streamed chunks through turnback next to a bare SDK client.

    python bench/runtime.py                   # the recorded run: 10,000 chunks, 5 rounds
    python bench/runtime.py --smoke           # 500 chunks, 1 round: a few seconds
    python bench/runtime.py --chunks 20000 --rounds 3 --json

The same scripted agent (``python -m turnback.agents.scripted``) streams N ``agent_message_chunk``
updates (``stream N``) in one prompt, over real pipes, driven by

(a)  a bare SDK client (``acp.spawn_agent_process``) whose ``session_update`` keeps each update:
     the baseline, measured in the same run, in interleaved rounds;
(t)  ``turnback.runtime.AgentRuntime`` with ``batched`` durability: the turn is begun, every
     chunk recorded into its journal in wire order, the turn completed (folded into the session).
     goal: (t) <= 1.2 x (a)
(o)  the runtime's overhead per chunk, ((t) - (a)) / N, in microseconds.

Both time one prompt on an agent that is already running, initialized and past a first short
prompt (spawning the agent and importing the SDK cost the same on both sides; a workspace's first
turn also creates its checkpoint repository, once). Every turn's own costs -- the baseline and end
workspace checkpoints, the commit -- are inside the timed prompt. The best round of each is
reported (the least disturbed by the machine). The exit code is 0 when the goal is missed (MISS
is printed), 1 when the benchmark itself went wrong (the turn did not record every chunk).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, cast

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    import turnback
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(SRC))
    import turnback

import acp  # noqa: E402
from rounds import DIR_HELP, interleaved, machine, scratch_dir, verdict  # noqa: E402

from turnback.model import MessageKind, TurnStatus  # noqa: E402
from turnback.runtime import AgentRuntime  # noqa: E402

AGENT = (sys.executable, "-m", "turnback.agents.scripted")
GOAL = 1.2
WARM_UP = "stream 1"


class BareClient:
    """What an editor minimally does with a stream: keep each update."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


def agent_env() -> dict[str, str]:
    env = {"PYTHONPATH": str(SRC)}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    return env


async def bare_round(workspace: Path, chunks: int) -> float:
    client = BareClient()
    async with acp.spawn_agent_process(
        cast(acp.Client, client),
        *AGENT,
        cwd=workspace,
        env=agent_env(),
        transport_kwargs={"stderr": asyncio.subprocess.DEVNULL},
    ) as (conn, _):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session_id = (await conn.new_session(cwd=str(workspace))).session_id
        await conn.prompt(session_id=session_id, prompt=[acp.text_block(WARM_UP)])
        client.updates.clear()
        started = time.perf_counter()
        response = await conn.prompt(
            session_id=session_id, prompt=[acp.text_block(f"stream {chunks}")]
        )
        elapsed = time.perf_counter() - started
    if response.stop_reason != "end_turn" or len(client.updates) != chunks:
        raise SystemExit(f"the bare client saw {len(client.updates)} of {chunks} chunks")
    return elapsed


async def runtime_round(home: Path, workspace: Path, chunks: int) -> float:
    with turnback.open(home=home, durability="batched") as tb:
        session = tb.create_session(workspace=workspace)
        async with await AgentRuntime.start(tb, session, AGENT, env=agent_env()) as runtime:
            await runtime.prompt(WARM_UP)
            started = time.perf_counter()
            turn = await runtime.prompt(f"stream {chunks}")
            elapsed = time.perf_counter() - started
        messages = session.turn_messages(turn.number)
    text = "".join(m.text for m in messages if m.kind is MessageKind.AGENT)
    if turn.status is not TurnStatus.COMPLETED or text.count("chunk ") != chunks:
        raise SystemExit(f"the runtime recorded {text.count('chunk ')} of {chunks} chunks")
    return elapsed


def measure(scratch: Path, chunks: int, rounds: int) -> dict[str, list[float]]:
    def workspace(index: int) -> Path:
        path = scratch / f"w{index}"
        path.mkdir(exist_ok=True)
        return path

    return interleaved(
        rounds,
        {
            "a": lambda i: asyncio.run(bare_round(workspace(i), chunks)),
            "t": lambda i: asyncio.run(runtime_round(scratch / f"h{i}", workspace(i), chunks)),
        },
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="500 chunks, 1 round")
    parser.add_argument("--chunks", type=int, default=None, help="chunks per prompt (10000)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (5)")
    parser.add_argument("--dir", type=Path, default=None, help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    chunks = args.chunks or (500 if args.smoke else 10_000)
    rounds = args.rounds or (1 if args.smoke else 5)
    scratch = scratch_dir(args.dir, "turnback-bench-runtime-")
    try:
        times = measure(scratch, chunks, rounds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    bare, through = min(times["a"]), min(times["t"])
    ratio = through / bare
    overhead = (through - bare) / chunks * 1e6
    met = ratio <= GOAL
    rows = [
        {"id": "a", "what": "bare SDK client", "value": bare, "unit": "s", "met": None},
        {"id": "t", "what": "through AgentRuntime", "value": through, "unit": "s", "met": met},
        {"id": "t/a", "what": "ratio", "value": ratio, "unit": "x", "met": met},
        {"id": "o", "what": "overhead per chunk", "value": overhead, "unit": "us", "met": None},
    ]
    report = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "chunks": chunks,
        "rounds": rounds,
        "times": times,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"turnback runtime benchmark: {chunks:,} chunks, best of {rounds} rounds")
    print(f"{report['machine']}; {report['date']}")
    print()
    print("| row | what | value | goal | |")
    print("|---|---|---|---|---|")
    print(f"| (a) | bare SDK client, one prompt | {bare * 1000:,.1f} ms | baseline | |")
    print(f"| (t) | through AgentRuntime (batched) | {through * 1000:,.1f} ms | | |")
    print(f"| (t/a) | ratio | {ratio:.2f}x | <= {GOAL}x | {verdict(met)} |")
    print(f"| (o) | overhead per chunk | {overhead:,.1f} us | | |")
    print()
    print("goals met" if met else f"MISS: (t/a) {ratio:.2f}x > {GOAL}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
