"""Recovery on a fleet's store costs a few round trips per recovery, not a dozen per turn: the
dead turns are claimed, their journals read and their ends written in batches. Round trips are
counted on the wire, by a relay between turnback and the server (``bench/wire.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import turnback

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from wire import RoundTrips

#: Begins one turn in each of N sessions (the last of them also asked a permission), records a
#: few events, one an unfinished tool call, and dies by SIGKILL.
DYING = """
import os, signal, sys
import turnback
tb = turnback.open(sys.argv[1], database_url=sys.argv[2], checkpoints=False)
for i in range(int(sys.argv[3])):
    turn = tb.create_session(sys.argv[4]).turn(f"prompt {i}")
    turn.record({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a"}})
    turn.record({"sessionUpdate": "tool_call", "toolCallId": f"c{i}", "title": "Run it",
                 "kind": "execute", "status": "pending"})
    turn.record({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "b"}})
tb.journal.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""


def die_with_turns(home: Path, url: str, workspace: Path, turns: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNBACK_")}
    child = subprocess.run(
        [sys.executable, "-c", DYING, str(home), url, str(turns), str(workspace)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr


def counted_recovery(home: Path, url: str) -> tuple[int, turnback.RecoveryReport]:
    """Round trips of one recover(), and its report."""
    relay = RoundTrips(url)
    try:
        with turnback.open(home, database_url=relay.url(), checkpoints=False) as tb:
            before = relay.count
            report = tb.recover()
            return relay.count - before, report
    finally:
        relay.close()


def test_a_recovered_turn_costs_at_most_three_round_trips(
    postgres_url: str, tmp_path: Path
) -> None:
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    workspace.mkdir()
    die_with_turns(home, postgres_url, workspace, 1)
    one, report = counted_recovery(home, postgres_url)
    assert len(report.recovered) == 1

    die_with_turns(home, postgres_url, workspace, 40)
    many, report = counted_recovery(home, postgres_url)
    assert len(report.recovered) == 40 and not report.set_aside and not report.live
    assert many / 40 <= 3, f"{many} round trips for 40 recovered turns"
    assert many <= one + 3, f"40 turns took {many} round trips, one took {one}: a cost per turn"

    with turnback.open(home, database_url=postgres_url, checkpoints=False) as tb:
        for turn in report.recovered:
            events = tb.session(turn.session_id).run_events(turn.token)
            assert turn.status is turnback.TurnStatus.INTERRUPTED and turn.event_count == 3
            assert [e.kind for e in events][3:] == ["tool_call_update", "_turnback/notice"]
            codes = [a.code for a in tb.session(turn.session_id).activities()]
            assert codes.count("turn.recovered") == 1
        assert not tb.recover().recovered, "a second recovery found more to do"
