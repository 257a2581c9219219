"""A journal that cannot write ends its turn instead of holding the session (bug: a full disk
left the turn running under a live owner, and every later turn() of that process raised
TurnInProgress). On a real small tmpfs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import turnback
from turnback.errors import StoreError

from ..conftest import fill

ROOT = str(Path(__file__).resolve().parents[2])


def chunk(text: str) -> dict[str, object]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def test_a_turn_whose_journal_cannot_write_ends_once_it_can(
    tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    disk = small_disk(4 * 2**20)
    tb = turnback.open(disk / "home", durability="strict", checkpoints=False)
    session = tb.create_session(tmp_path)
    turn = session.turn("fill the disk")
    turn.record(chunk("written before the disk filled"))
    filler = fill(disk)

    with pytest.raises(StoreError) as full, turn:
        for _ in range(200):
            turn.record(chunk("x" * 65536))
    assert "disk" in str(full.value).lower() or "full" in str(full.value).lower()
    with pytest.raises(StoreError):  # the disk is still full: said so, not TurnInProgress
        session.turn("while the disk is full")

    filler.unlink()  # space again: the same process ends the turn, then begins the next
    with session.turn("after the disk emptied") as after:
        after.record(chunk("fine"))
    first, second = session.turns()
    assert first.status is turnback.TurnStatus.FAILED
    assert first.detail and "StoreUnavailable" in first.detail
    assert "written before the disk filled" in "".join(m.text for m in session.turn_messages(1))
    assert second.status is turnback.TurnStatus.COMPLETED and second.parent == first.token
    tb.close()


EXITS_ON_A_FULL_DISK = """
import sys
import turnback
sys.path.insert(0, sys.argv[3])
from tests.conftest import fill

# batched, with a window longer than the run: the chunks wait to be written until the exit,
# however slow a loaded machine makes the loop
tb = turnback.open(sys.argv[1], checkpoints=False, batch_window=600)
session = tb.create_session(sys.argv[2])
turn = session.turn("fill the disk")
turn.record({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "durable"})
fill(tb.home.parent)
for _ in range(50):
    turn.record({"sessionUpdate": "agent_message_chunk",
                 "content": {"type": "text", "text": "x" * 1000}})
print(turn.token)
"""


def test_a_process_that_exits_on_a_full_disk_says_so_without_a_traceback(
    tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    """Closing at exit writes what the journal still holds; on a full disk it cannot. That is
    said in a line (bug: an atexit traceback), the process exits as it meant to, and the turn
    is recovered with what was written."""
    disk = small_disk(4 * 2**20)
    done = subprocess.run(
        [sys.executable, "-c", EXITS_ON_A_FULL_DISK, str(disk / "home"), str(tmp_path), ROOT],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "atexit" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("turnback: "), done.stderr
    assert "full" in lines[0] and "not written" in lines[0]
    (disk / "filler.bin").unlink()
    with turnback.open(disk / "home") as tb:
        [recovered] = tb.recover().recovered
        assert recovered.token == done.stdout.strip()
        kinds = [e.kind for e in tb.session(recovered.session_id).run_events(recovered.token)]
        assert kinds[0] == "tool_call"  # acknowledged durable: kept
