"""Run a command and copy bytes between it and this process's stdin and stdout, nothing else.

    python bench/copier.py AGENT_COMMAND...
    python bench/copier.py --asyncio AGENT_COMMAND...

bench/proxy.py's floor: the least any process between an editor and an agent costs on the
machine it runs on. It imports only what it uses, so it starts as fast as Python can.

With ``--asyncio`` it copies on one asyncio event loop (a stream reader's reads, a pipe
transport's writes), as the proxy reads and writes: the least CPU a chunk costs any proxy built
on asyncio, when each chunk arrives on its own and wakes the loop.
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


async def copy_async(command: list[str]) -> int:
    import asyncio

    loop = asyncio.get_running_loop()
    agent = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert agent.stdin is not None and agent.stdout is not None
    editor = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(editor), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout
    )
    out = asyncio.StreamWriter(transport, protocol, None, loop)

    async def pump(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
        while data := await source.read(1 << 16):
            target.write(data)
            if target.transport.get_write_buffer_size() > 1 << 20:  # as the proxy: only
                await target.drain()  # when the reader falls behind
        target.close()

    to_agent = asyncio.ensure_future(pump(editor, agent.stdin))
    await pump(agent.stdout, out)
    to_agent.cancel()
    return await agent.wait()


def main(command: list[str]) -> int:
    agent = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert agent.stdin is not None and agent.stdout is not None
    threading.Thread(target=pump, args=(0, agent.stdin.fileno()), daemon=True).start()
    pump(agent.stdout.fileno(), 1)
    return agent.wait()


if __name__ == "__main__":
    if sys.argv[1:2] in (["-h"], ["--help"]):  # no argparse: it would slow the start-up measured
        print(__doc__)
        sys.exit(0)
    if sys.argv[1:] in ([], ["--asyncio"]):
        print("usage: python bench/copier.py [--asyncio] AGENT_COMMAND...", file=sys.stderr)
        sys.exit(2)
    if sys.argv[1:2] == ["--asyncio"]:
        import asyncio

        sys.exit(asyncio.run(copy_async(sys.argv[2:])))
    sys.exit(main(sys.argv[1:]))
