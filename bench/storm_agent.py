"""An ACP agent that asks for many permissions at once, written on bare JSON-RPC lines (no SDK),
so that what a storm costs is turnback's alone.

A prompt whose text is ``storm N`` sends N ``session/request_permission`` requests without
waiting for any answer (each for its own tool call), then, once every one is answered, says
``allowed K of N`` and ends the turn. Any other prompt ends the turn at once. Run it as
``python bench/storm_agent.py``.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import uuid
from typing import Any

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


class Agent:
    def __init__(self) -> None:
        self._out = sys.stdout.buffer
        self._lock = threading.Lock()
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._next = 0

    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            self._out.write(line)
            self._out.flush()

    def read(self) -> None:
        """Read the client's lines: answers to our requests go to the prompt being run (on a
        thread of its own, so a storm's answers are read while its requests are written)."""
        for line in sys.stdin.buffer:
            if not line.strip():
                continue
            message = json.loads(line)
            method = message.get("method")
            if method is None:
                self._answers.put(message)
            elif "id" in message:
                threading.Thread(target=self.handle, args=(message,), daemon=True).start()

    def handle(self, message: dict[str, Any]) -> None:
        method, params, rpc_id = message["method"], message.get("params") or {}, message["id"]
        if method == "initialize":
            result: Any = {"protocolVersion": params.get("protocolVersion", 1)}
            result["agentCapabilities"] = {"loadSession": False}
        elif method == "session/new":
            result = {"sessionId": uuid.uuid4().hex}
        elif method == "session/prompt":
            result = self.prompt(params)
        else:
            self.send({"id": rpc_id, "error": {"code": -32601, "message": f"no {method}"}})
            return
        self.send({"id": rpc_id, "result": result})

    def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = params["sessionId"]
        words = " ".join(b.get("text", "") for b in params.get("prompt", [])).split()
        if len(words) != 2 or words[0] != "storm":
            return {"stopReason": "end_turn"}
        count = int(words[1])
        asked = set()
        for _ in range(count):
            self._next += 1
            asked.add(f"ask-{self._next}")
            call = {"toolCallId": f"call-{self._next}", "title": f"step {self._next}"}
            self.send(
                {
                    "id": f"ask-{self._next}",
                    "method": "session/request_permission",
                    "params": {"sessionId": session_id, "toolCall": call, "options": OPTIONS},
                }
            )
        allowed = 0
        while asked:
            answer = self._answers.get()
            if answer.get("id") in asked:
                asked.discard(answer["id"])
                outcome = (answer.get("result") or {}).get("outcome") or {}
                allowed += outcome.get("optionId") == "allow"
        said = {"type": "text", "text": f"allowed {allowed} of {count}"}
        update = {"sessionUpdate": "agent_message_chunk", "content": said}
        self.send(
            {
                "method": "session/update",
                "params": {"sessionId": session_id, "update": update},
            }
        )
        return {"stopReason": "end_turn"}


if __name__ == "__main__":
    Agent().read()
