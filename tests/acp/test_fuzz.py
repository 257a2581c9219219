"""A property test: random and mutated frames, from the editor and from the agent, never wedge
the proxy. After each one the proxy still answers a valid request, a request it could read is
answered, and a prompt always comes back; at the end it exits 0 at once, no turn is left
running, and the store reads back whole.

CI runs 20 examples each way; a longer run is one command, ``make fuzz`` (2,000 each way; set
``TURNBACK_FUZZ_EXAMPLES`` for another count).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turnback
from tests.acp.harness import proxy_command
from tests.acp.test_wedges import ROUGH
from turnback.model import TurnStatus

FUZZ_EXAMPLES = int(os.environ.get("TURNBACK_FUZZ_EXAMPLES", "20"))
_SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)

_LONE = st.sampled_from(["\ud800", "x\udfffy", "\udbff"])
_TEXT = st.text(max_size=12) | _LONE
_SCALAR = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT
_JSON = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=10,
)
_ID = st.none() | st.integers(-5, 10**6) | _TEXT | st.booleans() | st.floats() | _JSON
# Methods the editor may name; not those that open a session (a random cwd could be "/").
_EDITOR_METHODS = st.sampled_from(
    [
        "session/list",
        "session/prompt",
        "session/cancel",
        "session/close",
        "session/delete",
        "session/set_mode",
        "authenticate",
        "$/cancel_request",
        "_vendor/thing",
        "frobnicate",
        "fs/read_text_file",
    ]
)
_AGENT_METHODS = st.sampled_from(
    [
        "session/update",
        "session/request_permission",
        "elicitation/create",
        "fs/read_text_file",
        "_turnback/checkpoint",
        "$/cancel_request",
        "_vendor/thing",
        "frobnicate",
    ]
)
_UPDATES = st.sampled_from(
    [
        "agent_message_chunk",
        "agent_thought_chunk",
        "user_message_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "available_commands_update",
        "session_info_update",
        "something_new",
    ]
)


def _encode(message: Any, ascii_only: bool) -> bytes:
    text = json.dumps(message, ensure_ascii=ascii_only)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def _mutated(draw: st.DrawFn, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(data)))
        what = draw(st.sampled_from(["flip", "drop", "insert"]))
        if what == "flip" and where < len(data):
            data[where] ^= 1 << draw(st.integers(0, 7))
        elif what == "drop":
            del data[where : where + draw(st.integers(1, 8))]
        else:
            data[where:where] = draw(st.binary(min_size=1, max_size=4))
    return bytes(data).replace(b"\n", b" ")


def _deep() -> st.SearchStrategy[bytes]:
    return st.integers(100, 5000).map(lambda n: b'{"id":9,"params":' + b"[" * n + b"]" * n + b"}")


@st.composite
def _editor_frame(draw: st.DrawFn) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0"}
    if draw(st.booleans()):
        message["id"] = draw(_ID)
    if draw(st.integers(0, 5)):
        message["method"] = draw(_EDITOR_METHODS)
    else:
        message[draw(st.sampled_from(["result", "error"]))] = draw(_JSON)
    if draw(st.booleans()):
        message["params"] = draw(_JSON | st.dictionaries(_TEXT, _JSON, max_size=3))
    frame = _encode(message, draw(st.booleans()))
    return draw(st.just(frame) | _mutated(frame) | _deep() | st.binary(max_size=40))


@st.composite
def _agent_frame(draw: st.DrawFn, agent_session: str) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0"}
    if draw(st.booleans()):
        message["id"] = draw(_ID)
    if draw(st.integers(0, 5)):
        message["method"] = draw(_AGENT_METHODS)
    else:
        message[draw(st.sampled_from(["result", "error"]))] = draw(_JSON)
    update: dict[str, Any] = {"sessionUpdate": draw(_UPDATES)}
    update.update(
        draw(
            st.dictionaries(
                st.sampled_from(["content", "toolCallId", "title", "status", "entries", "text"]),
                _JSON,
                max_size=3,
            )
        )
    )
    params = {"sessionId": draw(st.just(agent_session) | _TEXT), "update": update}
    message["params"] = draw(st.just(params) | _JSON)
    frame = _encode(message, draw(st.booleans()))
    return draw(st.just(frame) | _mutated(frame) | _deep())


class _Proxy:
    """The proxy on blocking pipes, read by a thread, with a bound on every wait."""

    def __init__(self, home: Path, cwd: Path) -> None:
        self.process = subprocess.Popen(
            proxy_command(home, ROUGH),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=cwd,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.serial = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> str:
        self.serial += 1
        rpc_id = f"fuzz-{self.serial}"
        self.send(
            _encode({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}, True)
        )
        return rpc_id

    def answers(self, wanted: set[Any], timeout: float = 20) -> dict[Any, dict[str, Any]]:
        """Read until every id in ``wanted`` is answered; answer the proxy's own requests."""
        got: dict[Any, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while not wanted <= got.keys():
            left = deadline - time.monotonic()
            assert left > 0, f"no answer to {wanted - got.keys()}"
            message = json.loads(self.lines.get(timeout=left))
            if "method" in message:
                if "id" in message:  # the agent's request, passed on: refuse it
                    error = {"code": -32601, "message": "not here"}
                    self.send(
                        _encode({"jsonrpc": "2.0", "id": message["id"], "error": error}, True)
                    )
                continue
            if isinstance(message.get("id"), str | int) and not isinstance(message["id"], bool):
                got[message["id"]] = message
        return got


def _expected_id(line: bytes) -> Any:
    """The id the proxy must answer for ``line``, when the line is a request it can read."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    rpc_id = message.get("id")
    if isinstance(rpc_id, bool) or not isinstance(rpc_id, int | str):
        return None
    return rpc_id


def test_random_and_mutated_frames_never_wedge_the_proxy(home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    proxy = _Proxy(home, workspace)
    try:
        first = proxy.request("initialize", {"protocolVersion": 1})
        proxy.answers({first})
        new = proxy.request("session/new", {"cwd": str(workspace), "mcpServers": []})
        session_id = proxy.answers({new})[new]["result"]["sessionId"]
        listed = proxy.request("session/list", {})  # answered once the session is a row
        proxy.answers({listed})
        with turnback.open(home) as tb:
            agent_session = str(tb.session(session_id).record.agent_state["agentSessionId"])

        def prompt(text: str) -> dict[str, Any]:
            blocks = [{"type": "text", "text": text}]
            rpc_id = proxy.request("session/prompt", {"sessionId": session_id, "prompt": blocks})
            return proxy.answers({rpc_id})[rpc_id]

        @_SETTINGS
        @given(_editor_frame())
        def from_the_editor(line: bytes) -> None:
            proxy.send(line)
            expected = _expected_id(line)
            sentinel = proxy.request("session/list", {})
            wanted = {sentinel} | ({expected} if expected is not None else set())
            got = proxy.answers(wanted)
            assert "result" in got[sentinel]

        @_SETTINGS
        @given(st.data())
        def from_the_agent(data: st.DataObject) -> None:
            line = data.draw(_agent_frame(agent_session))
            text = line.decode("latin-1")  # the agent writes each character as one byte
            answer = prompt(f"raw {json.dumps(text)}\nsay ok")
            assert "result" in answer or "error" in answer
            assert "result" in prompt("say still here")

        from_the_editor()
        from_the_agent()
        assert prompt("say bye")["result"]["stopReason"] == "end_turn"
    finally:
        assert proxy.process.stdin is not None
        proxy.process.stdin.close()
        began = time.monotonic()
        code = proxy.process.wait(timeout=15)
    assert code == 0
    assert time.monotonic() - began < 5
    with turnback.open(home) as tb:
        session = tb.session(session_id)
        turns = session.turns()
        assert turns and all(t.status is not TurnStatus.RUNNING for t in turns)
        assert tb.recover().recovered == ()
        session.messages()
        for turn in turns:
            session.run_events(turn.token)
    log = subprocess.run(
        [*proxy_command(home, ROUGH)[:5], "log", session_id, "--json"],
        capture_output=True,
        timeout=60,
    )
    assert log.returncode == 0, log.stderr
