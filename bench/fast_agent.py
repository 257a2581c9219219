"""An ACP agent that starts as fast as Python can: the standard library's ``json`` alone, no SDK.

    python bench/fast_agent.py

It answers ``initialize``, ``session/new`` and ``session/list`` at once, every other request with
"Method not found", and leaves when its stdin closes: bench/proxy.py's (new-fast) and (list-fast)
rows, where an agent's own start-up hides none of the proxy's.
"""

import json
import sys


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        method = message["method"]
        answer: dict[str, object] = {"jsonrpc": "2.0", "id": message["id"]}
        if method == "initialize":
            answer["result"] = {"protocolVersion": 1, "agentCapabilities": {}}
        elif method == "session/new":
            answer["result"] = {"sessionId": f"fast-{message['id']}"}
        elif method == "session/list":
            answer["result"] = {"sessions": []}
        else:
            answer["error"] = {"code": -32601, "message": "Method not found"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
