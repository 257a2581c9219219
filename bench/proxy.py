"""Benchmark of the ACP proxy: an agent through ``turnback acp`` next to the same agent directly.

    python bench/proxy.py              # the recorded run: 10,000 chunks, 1,000 timed updates
    python bench/proxy.py --smoke      # 500 chunks, 100 timed updates, 1 start-up round
    python bench/proxy.py --json
    python bench/proxy.py --rounds 0   # the start-up rows only
    python bench/proxy.py --load 0     # the start-up rows not measured again under load

One SDK client (what an editor does: keep each update) drives the same agent -- a small SDK agent
in this file (``python bench/proxy.py --agent``) -- over real pipes: (d) directly, (p) through
``python -m turnback acp -- python bench/proxy.py --agent`` on a fresh home, where every prompt is
a durable turn (begin, workspace checkpoints, journal, fold), and (c) through a process that only
copies bytes both ways (``python bench/copier.py AGENT``): the least any process between
client and agent costs on this machine, since client, agent and that process share its cores.

Rows:

(n)  latency of one streamed notification, agent to client: the agent stamps each update with
     ``time.monotonic_ns()`` (one clock for every process on the machine) and sends them 1 ms
     apart, so the figure is transit, not queueing; medians of (d) and (p), and (p) - (d).
     goal: at most 1 ms added at the median
(s)  time for the client to receive 10,000 streamed chunks in one prompt, sent as fast as the
     agent can; (p) / (d).  goal: at most 1.25 x
(c)  the same stream through the byte-copying process; (c) / (d). No goal: it is the floor that
     (s) cannot go below on the machine the benchmark runs on.
(cpu) CPU time per chunk of (s), from the processes' own counters (``/proc/PID/stat``: user and
     system, every thread): the proxy process's next to the SDK client's in the same stream;
     proxy / client.  goal: at most 0.5 x
(cpu-c), (cpu-a)  the same for the byte-copying process of (c), and for one that copies on an
     asyncio event loop as the proxy reads and writes (``copier.py --asyncio``), each against the
     client of its own run (no goal): the CPU any process between client and agent costs per
     chunk, and any on asyncio, on this machine.
(r)  one prompt round trip (a prompt with one short reply): medians of (d) and (p), and the
     difference -- for the proxy, a whole durable turn with its two workspace captures.

Interleaved rounds; the best of each is kept (the least disturbed by the machine).

Start-up, with two agents turnback did not tune for: the agent on the TypeScript SDK the tests
use (``node tests/acp/ts_agent/agent.mjs``, installed by ``make``) and the bundled scripted
agent (``python -m turnback.agents.scripted``). Each round starts each agent directly and
through the proxy (on one home, so only the first start creates its database; with more than
one round, an extra first round warms up and is not counted), in turn, and times what an editor
waits for:

(i-ts), (i-py)      from spawning the process to the answer to ``initialize``.
                    goal: at most 150 ms added
(new-ts), (new-py)  the ``session/new`` round trip that follows.  goal: at most 50 ms added
(i-ts-c), (i-py-c)  initialize through the byte-copying process instead of the proxy: the least
                    any process between editor and agent adds to it here (no goal).
(new-fast)          ``initialize`` and ``session/new`` sent at once, as an editor may, to an
                    agent that starts as fast as Python can (``bench/fast_agent.py``, the
                    standard library alone): from spawning the process to the answer to
                    ``session/new``, which no agent start-up hides the proxy's loading behind.
                    goal: at most 50 ms added
(list-fast)         the same with ``session/list`` sent too: from spawning the process to its
                    answer, the first the proxy gives only once it has loaded and opened its
                    store, which it does once ``initialize`` is answered and nothing else is
                    in hand (no goal: where the proxy's start-up went).
(load-ts)           ``session/load`` of a session opened earlier (by the same side: the agent's
                    own, or turnback's), sent as soon as ``initialize`` is answered, as an editor
                    reopening its last thread does, the TypeScript SDK agent: the round trip.
                    goal: at most 50 ms added, as for ``session/new``
(new-fast-c)        the same as (new-fast) through the byte-copying process (no goal).
(py)                ``python -c pass``, from spawning it to its exit: one interpreter's start,
                    the least CPU any process written in Python adds (no goal).
(i-ts-cpu), (new-fast-cpu)  the CPU the process in front of the agent had used when it gave
                    the answer of (i-ts) and of (new-fast), from ``/proc`` (10 ms ticks): the
                    byte copier's and the proxy's, and what the proxy used beyond the copier
                    (no goal): what the proxy's start-up costs, which a loaded machine turns
                    into time.

Then every start-up row again, ids ending in ``-load``, with ``--load N`` (default 2) processes
keeping a core busy each the whole time (on a 2-core machine: the other work of a busy editor's
machine): (i-ts-load) and the rest, with the same goals, beside the floor under the same load --
the copier's rows (i-ts-c-load), (i-py-c-load), (new-fast-c-load), and (py-load).

Each shows the median of (d) and of (p), and the time added in a round ((p) - (d) of that round)
as its median and its min-max over the rounds. turnback's modules are compiled to bytecode first,
as an installed turnback's are.

Exit code 0 (MISS is printed when a goal is missed), 1 when the benchmark itself went wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import datetime
import json
import os
import shutil
import statistics
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
from acp.schema import (  # noqa: E402  # noqa: E402
    AgentCapabilities,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    TextContentBlock,
)
from rounds import DIR_HELP, machine, scratch_dir, verdict  # noqa: E402

AGENT = (sys.executable, str(Path(__file__).resolve()), "--agent")
COPIER = (sys.executable, str(Path(__file__).with_name("copier.py")))
TS_AGENT = Path(__file__).resolve().parents[1] / "tests" / "acp" / "ts_agent"
STARTED_AGENTS = {
    "ts": ("the TypeScript SDK agent", ("node", str(TS_AGENT / "agent.mjs"))),
    "py": ("the scripted agent", (sys.executable, "-m", "turnback.agents.scripted")),
}
FAST_AGENT = (sys.executable, str(Path(__file__).with_name("fast_agent.py")))
NOTIFICATION_GOAL_MS = 1.0
STREAM_GOAL = 1.25
CPU_GOAL = 0.5
INITIALIZE_GOAL_MS = 150.0
NEW_SESSION_GOAL_MS = 50.0


# -- the agent -----------------------------------------------------------------------------


class BenchAgent:
    """``stream N``: N chunks as fast as possible; ``timed N``: N stamped chunks 1 ms apart;
    anything else: one short reply."""

    def __init__(self) -> None:
        self.client: Any = None

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=protocol_version, agent_capabilities=AgentCapabilities()
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id="bench")

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        verb, _blank, count = "".join(
            b.text for b in prompt if isinstance(b, TextContentBlock)
        ).partition(" ")
        if verb == "stream":
            for index in range(int(count)):
                await self.client.session_update(
                    session_id=session_id, update=acp.update_agent_message_text(f"chunk {index}\n")
                )
        elif verb == "timed":
            for _index in range(int(count)):
                update = acp.update_agent_message_text("t")
                update.field_meta = {"t": time.monotonic_ns()}
                await self.client.session_update(session_id=session_id, update=update)
                await asyncio.sleep(0.001)
        else:
            await self.client.session_update(
                session_id=session_id, update=acp.update_agent_message_text("ok")
            )
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **_: Any) -> None:
        return None


async def serve_agent() -> None:
    reader, writer = await acp.stdio_streams()
    await acp.run_agent(cast(acp.Agent, BenchAgent()), writer, reader)


# -- the client ----------------------------------------------------------------------------


class Client:
    def __init__(self) -> None:
        self.updates = 0
        self.latencies: list[float] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if update.session_update != "agent_message_chunk":
            return  # the proxy's own (its commands, the session's title), not the agent's
        self.updates += 1
        meta = update.field_meta
        if meta and "t" in meta:
            self.latencies.append((time.monotonic_ns() - meta["t"]) / 1e6)


async def measure(
    command: list[str], cwd: Path, env: dict[str, str], sizes: dict[str, int]
) -> dict[str, Any]:
    client = Client()
    async with acp.spawn_agent_process(
        cast(acp.Client, client), command[0], *command[1:], cwd=cwd, env=env
    ) as (conn, process):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = (await conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id

        async def ask(text: str) -> float:
            started = time.perf_counter()
            await conn.prompt(session_id=session, prompt=[acp.text_block(text)])
            return time.perf_counter() - started

        await ask("warm up")
        trips = [await ask("hello") for _ in range(sizes["prompts"])]
        client.updates = 0
        served, received = cpu_seconds(process.pid), time.process_time()
        stream = await ask(f"stream {sizes['chunks']}")
        served, received = cpu_seconds(process.pid) - served, time.process_time() - received
        for _ in range(100):  # the SDK runs each notification's handler in a task of its own,
            if client.updates >= sizes["chunks"]:  # which can run after the answer's
                break
            await asyncio.sleep(0.01)
        if client.updates != sizes["chunks"]:
            raise RuntimeError(f"{client.updates} of {sizes['chunks']} chunks arrived")
        await ask(f"timed {sizes['timed']}")
        if len(client.latencies) != sizes["timed"]:
            raise RuntimeError(f"{len(client.latencies)} of {sizes['timed']} timed updates arrived")
    return {
        "trip": statistics.median(trips) * 1000,
        "stream": stream,
        # CPU per streamed chunk (us): of the process the client talks to, and of the client
        "served_cpu": served / sizes["chunks"] * 1e6,
        "client_cpu": received / sizes["chunks"] * 1e6,
        "notification": statistics.median(client.latencies),
    }


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system, every thread) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def through_proxy(home: Path, agent: tuple[str, ...] | list[str]) -> list[str]:
    return [sys.executable, "-m", "turnback", "--home", str(home), "acp", "--", *agent]


#: What a start-up round measures of one process: milliseconds from spawning it to its answer to
#: initialize, of the session/new round trip, and the CPU it had used by its first answer (ms).
Start = tuple[float, float, float]


async def start_up(
    command: list[str], cwd: Path, env: dict[str, str], load: str | None = None
) -> Start:
    """Milliseconds from spawning ``command`` to its answer to initialize, and for the
    session/new sent then -- or, with ``load``, the ``session/load`` of that session (an
    editor reopening its last thread); its CPU when it answered initialize (the agent's own
    not counted when it is not the agent)."""
    started = time.perf_counter()
    async with acp.spawn_agent_process(
        cast(acp.Client, Client()), command[0], *command[1:], cwd=cwd, env=env
    ) as (conn, process):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        answered = time.perf_counter()
        cpu = cpu_seconds(process.pid) * 1000
        if load is None:
            await conn.new_session(cwd=str(cwd), mcp_servers=[])
        else:
            await conn.load_session(cwd=str(cwd), session_id=load, mcp_servers=[])
        opened = time.perf_counter()
    return (answered - started) * 1000, (opened - answered) * 1000, cpu


async def at_once(command: list[str], cwd: Path, env: dict[str, str]) -> Start:
    """Milliseconds from spawning ``command`` to its answer to ``session/new``, sent together
    with ``initialize`` and ``session/list``, and to its answer to ``session/list``; its CPU
    when it answered ``session/new``."""
    started = time.perf_counter()
    async with acp.spawn_agent_process(
        cast(acp.Client, Client()), command[0], *command[1:], cwd=cwd, env=env
    ) as (conn, process):
        cpu = 0.0

        async def opened() -> float:
            nonlocal cpu
            await conn.new_session(cwd=str(cwd), mcp_servers=[])
            cpu = cpu_seconds(process.pid) * 1000
            return (time.perf_counter() - started) * 1000

        async def listed() -> float:
            await conn.list_sessions()
            return (time.perf_counter() - started) * 1000

        _, new, listing = await asyncio.gather(
            conn.initialize(protocol_version=acp.PROTOCOL_VERSION), opened(), listed()
        )
        return new, listing, cpu


async def session_of(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    """A session opened by ``command`` in ``cwd`` (and left there), to load in (load-ts)."""
    async with acp.spawn_agent_process(
        cast(acp.Client, Client()), command[0], *command[1:], cwd=cwd, env=env
    ) as (conn, _):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        return (await conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id


async def bare_start(env: dict[str, str]) -> float:
    """Milliseconds from spawning ``python -c pass`` to its exit: the least CPU any process
    written in Python adds when it starts in front of an agent."""
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass", env=env)
    await process.wait()
    return (time.perf_counter() - started) * 1000


#: A busy process's work: it ends when the benchmark does, however the benchmark ends.
BUSY_LOOP = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    pass"


class Busy:
    """``count`` processes that keep a core busy each while the block runs: the load under
    which the ``-load`` rows are measured (other work on a shared machine, an editor's own)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.processes: list[Any] = []

    async def __aenter__(self) -> Busy:
        for _ in range(self.count):
            self.processes.append(
                await asyncio.create_subprocess_exec(sys.executable, "-c", BUSY_LOOP)
            )
        await asyncio.sleep(0.2)  # they are running before anything is measured
        return self

    async def __aexit__(self, *_: object) -> None:
        for process in self.processes:
            process.kill()
            await process.wait()


async def start_ups(
    rounds: int, scratch: Path, env: dict[str, str], busy: int = 0
) -> list[dict[str, Any]]:
    """The start-up rows: each agent started directly, through the proxy and through the byte
    copier, interleaved; with ``busy``, all of it beside that many busy processes (``-load``)."""
    if not (TS_AGENT / "node_modules").is_dir():
        raise RuntimeError(f"the TypeScript agent is not installed: run `npm ci` in {TS_AGENT}")
    # turnback's modules compiled, as an installed turnback has them (pip compiles them), even
    # where PYTHONDONTWRITEBYTECODE keeps the first run from doing it: each start-up would
    # otherwise measure Python compiling them, for the proxy and for the scripted agent.
    compileall.compile_dir(SRC, quiet=1)
    tag = "-load" if busy else ""
    home = scratch / f"start-up-home{tag}"
    times: dict[tuple[str, str], list[Start]] = {}
    warm_up = 1 if rounds > 1 else 0  # not counted: it creates the home's database

    def on(side: str, agent: tuple[str, ...]) -> list[str]:
        if side == "p":
            return through_proxy(home, agent)
        return [*COPIER, *agent] if side == "c" else list(agent)

    ts_agent = STARTED_AGENTS["ts"][1]
    async with Busy(busy):
        opened: dict[str, tuple[Path, str]] = {}  # a session of each side's, for (load-ts)
        for side in ("d", "p", "c"):
            work = scratch / f"start-load-{side}{tag}"
            work.mkdir()
            opened[side] = (work, await session_of(on(side, ts_agent), work, env))
        for round_ in range(warm_up + rounds):
            agents = [(key, agent, start_up) for key, (_, agent) in STARTED_AGENTS.items()]
            for key, agent, measure_start in [
                *agents,
                ("fast", FAST_AGENT, at_once),
                ("load", ts_agent, None),
            ]:
                for side in ("d", "p", "c"):
                    command = on(side, agent)
                    if measure_start is None:
                        work, session = opened[side]
                        measured = await start_up(command, work, env, load=session)
                        if round_ >= warm_up:
                            times.setdefault((key, side), []).append(measured)
                        continue
                    work = scratch / f"start-{key}-{side}{round_}{tag}"
                    work.mkdir()
                    measured = await measure_start(command, work, env)
                    if round_ >= warm_up:
                        times.setdefault((key, side), []).append(measured)
            bare = await bare_start(env)
            if round_ >= warm_up:
                times.setdefault(("bare", "p"), []).append((bare, bare, 0.0))
    rows = start_up_rows(times)
    if busy:
        for row in rows:
            row["id"] += tag
            row["what"] = f"under load ({busy} busy processes): {row['what']}"
            row["busy"] = busy
    return rows


def start_up_rows(times: dict[tuple[str, str], list[Start]]) -> list[dict[str, Any]]:
    """The start-up rows from each side's times (see start_ups)."""

    def of(key: str, side: str, index: int = 0) -> list[float]:
        return [measured[index] for measured in times[(key, side)]]

    rows = []
    for index, (what, goal) in enumerate(
        (("initialize", INITIALIZE_GOAL_MS), ("session/new", NEW_SESSION_GOAL_MS))
    ):
        for key, (name, _) in STARTED_AGENTS.items():
            row, what_of = f"{'i' if index == 0 else 'new'}-{key}", f"{what}, {name}, median (ms)"
            rows.append(added_row(row, what_of, of(key, "d", index), of(key, "p", index), goal))
    at_once_what = "initialize and session/new sent at once, a fast-starting agent: spawn to "
    what = f"{at_once_what}the session/new answer, median (ms)"
    rows.append(added_row("new-fast", what, of("fast", "d"), of("fast", "p"), NEW_SESSION_GOAL_MS))
    what = (
        "initialize, session/new and session/list sent at once, a fast-starting agent: spawn to "
        "the session/list answer, the first that needs the proxy loaded and its store open, "
        "median (ms)"
    )
    rows.append(added_row("list-fast", what, of("fast", "d", 1), of("fast", "p", 1)))
    what = (
        "session/load of a session the home holds, sent at once after the initialize answer, "
        "the TypeScript SDK agent (an editor reopening its last thread): the round trip, "
        "median (ms)"
    )
    rows.append(
        added_row("load-ts", what, of("load", "d", 1), of("load", "p", 1), NEW_SESSION_GOAL_MS)
    )
    for key, (name, _) in STARTED_AGENTS.items():
        what = f"initialize, {name}, through the byte-copying process, median (ms)"
        rows.append(added_row(f"i-{key}-c", what, of(key, "d"), of(key, "c")))
    what = f"{at_once_what}the session/new answer, through the byte-copying process, median (ms)"
    rows.append(added_row("new-fast-c", what, of("fast", "d"), of("fast", "c")))
    bare = of("bare", "p")
    what = "a bare Python start (`python -c pass`, spawn to exit): the least a Python proxy adds"
    rows.append(added_row("py", f"{what}, median (ms)", [0.0] * len(bare), bare))
    # CPU: the process in front of the agent, the copier (direct) and the proxy, at its answer
    for key, answer in (("ts", "initialize, the TypeScript SDK agent"), ("fast", "session/new")):
        what = f"CPU when it answered {answer} (ms): the byte copier's, the proxy's"
        row = f"{'i' if key == 'ts' else 'new'}-{key}-cpu"
        rows.append(added_row(row, what, of(key, "c", 2), of(key, "p", 2)))
    return rows


def added_row(
    row: str, what: str, direct: list[float], other: list[float], goal: float | None = None
) -> dict[str, Any]:
    """A start-up row: the medians of each side, and what the other side added in a round, its
    median and its min to max over the rounds; met when that median is within ``goal`` ms."""
    added = [o - d for o, d in zip(other, direct, strict=True)]
    median = statistics.median(added)
    return {
        "id": row,
        "what": what,
        "direct": statistics.median(direct),
        "proxy": statistics.median(other),
        "value": median,
        "unit": "ms",
        "spread": [min(added), max(added)],
        "goal": "-" if goal is None else f"<= {goal:.0f} ms added",
        "met": None if goal is None else median <= goal,
    }


async def bench(
    sizes: dict[str, int], rounds: int, startups: int, scratch: Path, busy: int = 0
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNBACK_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    best: dict[str, dict[str, float]] = {}
    for round_ in range(rounds):
        for side in ("d", "p", "c", "a"):
            work = scratch / f"{side}{round_}"
            work.mkdir()
            command = list(AGENT)
            if side == "c":
                command = [*COPIER, *AGENT]
            if side == "a":
                command = [*COPIER, "--asyncio", *AGENT]
            if side == "p":
                command = through_proxy(scratch / f"home{round_}", AGENT)
            result = await measure(command, work, env, sizes)
            kept = best.setdefault(side, result)
            for key, value in result.items():
                kept[key] = min(kept[key], value)
    rows = stream_rows(best, sizes) if rounds > 0 else []
    if startups > 0:
        rows += await start_ups(startups, scratch, env)
    if startups > 0 and busy > 0:
        rows += await start_ups(startups, scratch, env, busy)
    return {"rows": rows, **sizes, "rounds": rounds, "startups": startups, "load": busy}


def stream_rows(best: dict[str, dict[str, float]], sizes: dict[str, int]) -> list[dict[str, Any]]:
    """The stream rows, (n) to (r), from the best of each side's rounds."""
    d, p, c, a = best["d"], best["p"], best["c"], best["a"]
    added = p["notification"] - d["notification"]
    ratio = p["stream"] / d["stream"]
    cpu = p["served_cpu"] / p["client_cpu"]
    return [
        {
            "id": "n",
            "what": "notification latency, median (ms)",
            "direct": d["notification"],
            "proxy": p["notification"],
            "value": added,
            "unit": "ms",
            "goal": f"<= {NOTIFICATION_GOAL_MS} ms added",
            "met": added <= NOTIFICATION_GOAL_MS,
        },
        {
            "id": "s",
            "what": f"{sizes['chunks']:,} streamed chunks (s)",
            "direct": d["stream"],
            "proxy": p["stream"],
            "value": ratio,
            "unit": "x",
            "goal": f"<= {STREAM_GOAL} x",
            "met": ratio <= STREAM_GOAL,
        },
        {
            "id": "c",
            "what": "the same stream through a byte-copying process (s)",
            "direct": d["stream"],
            "proxy": c["stream"],
            "value": c["stream"] / d["stream"],
            "unit": "x",
            "goal": "-",
            "met": None,
        },
        {
            "id": "cpu",
            "what": "CPU per streamed chunk (us): the SDK client's, the proxy's",
            "direct": p["client_cpu"],
            "proxy": p["served_cpu"],
            "value": cpu,
            "unit": "x",
            "goal": f"<= {CPU_GOAL} x",
            "met": cpu <= CPU_GOAL,
        },
        {
            "id": "cpu-c",
            "what": "CPU per streamed chunk (us): the SDK client's, the byte copier's",
            "direct": c["client_cpu"],
            "proxy": c["served_cpu"],
            "value": c["served_cpu"] / c["client_cpu"],
            "unit": "x",
            "goal": "-",
            "met": None,
        },
        {
            "id": "cpu-a",
            "what": "CPU per streamed chunk (us): the SDK client's, an asyncio byte copier's",
            "direct": a["client_cpu"],
            "proxy": a["served_cpu"],
            "value": a["served_cpu"] / a["client_cpu"],
            "unit": "x",
            "goal": "-",
            "met": None,
        },
        {
            "id": "r",
            "what": "prompt round trip, median (ms)",
            "direct": d["trip"],
            "proxy": p["trip"],
            "value": p["trip"] - d["trip"],
            "unit": "ms",
            "goal": "-",
            "met": None,
        },
    ]


def table(report: dict[str, Any]) -> str:
    lines = [
        "| row | what | direct | through turnback acp ((c): the copier) | added / ratio | goal | |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for row in report["rows"]:
        value = (
            f"{row['value']:.2f} x"
            if row["id"] in ("s", "c", "cpu", "cpu-c", "cpu-a")
            else f"{row['value']:+.3f} ms"
        )
        if row["id"] == "r":
            value = f"{row['value']:+.1f} ms"
        if "spread" in row:
            low, high = row["spread"]
            value = f"{row['value']:+.0f} ms ({low:+.0f} to {high:+.0f})"
        lines.append(
            f"| ({row['id']}) | {row['what']} | {row['direct']:.3f} | {row['proxy']:.3f} | "
            f"{value} | {row['goal']} | {verdict(row['met'])} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("command", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="a small, quick run (CI)")
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--timed", type=int, default=1_000)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument(
        "--rounds", type=int, default=3, help="stream rounds (default 3; 0: start-up rows only)"
    )
    parser.add_argument(
        "--startups", type=int, help="start-up rounds (default 7, 1 with --smoke; 0: none)"
    )
    parser.add_argument(
        "--load",
        type=int,
        default=2,
        help="busy processes beside the start-up rows measured again under load (default 2; "
        "0: not measured under load)",
    )
    parser.add_argument("--dir", type=Path, help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args()
    if args.agent:
        asyncio.run(serve_agent())
        return 0
    sizes = {"chunks": args.chunks, "timed": args.timed, "prompts": args.prompts}
    rounds, startups = args.rounds, 7 if args.startups is None else args.startups
    if args.smoke:
        sizes, rounds = {"chunks": 500, "timed": 100, "prompts": 3}, 1
        startups = 1 if args.startups is None else args.startups
    scratch = scratch_dir(args.dir, "turnback-bench-proxy-")
    try:
        report = asyncio.run(bench(sizes, rounds, startups, scratch, max(args.load, 0)))
    except RuntimeError as error:
        print(f"the benchmark went wrong: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    print(f"turnback {turnback.__version__} proxy benchmark, {now}, {machine()}")
    print(f"command: {' '.join(sys.argv)}\n")
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
