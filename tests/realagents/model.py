"""A scripted model endpoint: a local HTTP server that answers real coding agents' model calls
as Anthropic's Messages API, OpenAI's Responses API and Gemini's generateContent API do, with
streaming, from a script the test writes.

Some facts about the agents' model traffic, which shape this server:

- An agent's loop sends one streaming request per model step: the conversation so far, the tools
  it offers, and the results of the tools the previous step called. Those requests carry a
  non-empty tool list; each takes the next `Reply` of the script. Once the script is spent, the
  model answers "Done." so that an agent never waits on it.
- Around the loop, agents make small requests of their own: Claude Code may count tokens or ask
  for a title; gemini-cli asks a classifier (``generateContent`` with a JSON schema) how complex
  the prompt is, to pick a model. Those carry no tools or ask for JSON; they get a short, valid
  answer and do not take a reply of the script.
- Every request is recorded with its path and body, so a test can show exactly what an agent
  sent: the tool results of a step, the prompt it continued with after a crash. The ids of the
  tool calls a step answered with are recorded with it, numbered per endpoint, so two runs of a
  script give the same ids.
- A reply can stall mid-stream (the connection stays open until the test releases it or the
  server stops) or die mid-stream (the socket is closed without the stream's end), so a test can
  kill an agent or a proxy at a known point.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["Call", "Model", "Reply", "Request", "Text", "ToolResult"]


@dataclass(frozen=True, slots=True)
class Text:
    """Text the model says, streamed in a few pieces."""

    text: str


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call: the tool's name as the agent offers it, and its arguments -- an object for a
    function tool, a string for a free-form (custom) tool such as Codex's ``apply_patch``."""

    name: str
    arguments: dict[str, Any] | str


@dataclass(frozen=True, slots=True, init=False)
class Reply:
    """One model step. ``stall`` keeps the stream open after its first piece until
    `Model.release` (or the server stops); ``die`` cuts the connection there instead."""

    blocks: tuple[Text | Call, ...]
    stall: bool
    die: bool

    def __init__(self, *blocks: Text | Call, stall: bool = False, die: bool = False) -> None:
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "stall", stall)
        object.__setattr__(self, "die", die)

    @property
    def calls(self) -> list[Call]:
        return [b for b in self.blocks if isinstance(b, Call)]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's result as the agent sent it back: the call's id (Gemini has none: the tool's
    name), and its output as text."""

    call: str
    output: str


@dataclass(frozen=True, slots=True)
class Request:
    """One request the endpoint got: which API, its path and query, its JSON body, when (the
    wall clock's seconds, as hooks can record them too), and, for a step of the agent's loop,
    the step's number and the ids of the tool calls it was answered with."""

    api: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: dict[str, Any]
    at: float
    step: int | None = None
    calls: tuple[str, ...] = ()

    def tool_results(self) -> list[ToolResult]:
        """Every tool result in the conversation the request carries, in order."""
        results = []
        if self.api == "anthropic":
            for message in self.body.get("messages", []):
                for block in _blocks(message.get("content")):
                    if block.get("type") == "tool_result":
                        results.append(ToolResult(block["tool_use_id"], _text(block)))
        elif self.api == "responses":
            for item in self.body.get("input", []):
                if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                    results.append(ToolResult(item["call_id"], _text(item.get("output"))))
        elif self.api == "gemini":
            for content in self.body.get("contents", []):
                for part in content.get("parts", []):
                    if "functionResponse" in part:
                        answer = part["functionResponse"]
                        results.append(ToolResult(answer["name"], json.dumps(answer["response"])))
        return results

    def user_texts(self) -> list[str]:
        """The text of each of the user's messages in the conversation, in order."""
        texts = []
        if self.api == "anthropic":
            for message in self.body.get("messages", []):
                if message.get("role") == "user":
                    text = _text([b for b in _blocks(message.get("content")) if "text" in b])
                    if text:
                        texts.append(text)
        elif self.api == "responses":
            for item in self.body.get("input", []):
                if item.get("type") == "message" and item.get("role") == "user":
                    texts.append(_text(item.get("content")))
        elif self.api == "gemini":
            for content in self.body.get("contents", []):
                if content.get("role") == "user":
                    text = "".join(p.get("text", "") for p in content.get("parts", []))
                    if text:
                        texts.append(text)
        return texts


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _text(value: Any) -> str:
    """The text of a tool result's or a message's content, whichever shape it has."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return _text(value.get("content", value.get("text", "")))
    if isinstance(value, list):
        return "".join(_text(v) for v in value)
    return "" if value is None else json.dumps(value)


DONE = Reply(Text("Done."))
#: What Anthropic's API reports as usage; adapters add these fields up.
USAGE = {
    "input_tokens": 100,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "output_tokens": 20,
}


class Died(Exception):
    """The reply was scripted to die here: the connection is cut."""


@dataclass
class Model:
    """The endpoint. ``with Model(script) as model:`` serves on ``model.url`` until the block
    ends; ``model.requests`` is everything it was sent."""

    script: Sequence[Reply] = ()
    requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _released: threading.Event = field(default_factory=threading.Event)
    _stalled: threading.Event = field(default_factory=threading.Event)
    _ids: int = 0
    _server: ThreadingHTTPServer | None = None

    def __enter__(self) -> Model:
        model = self

        class Handler(_Handler):
            owner = model

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def release(self) -> None:
        """Let a stalled reply finish."""
        self._released.set()

    def wait_stalled(self, timeout: float = 60) -> None:
        """Block until a reply has stalled (its first piece has been sent)."""
        if not self._stalled.wait(timeout):
            raise TimeoutError(f"no reply stalled within {timeout} s; got {self.summary()}")

    def steps(self) -> list[Request]:
        """The requests that were steps of an agent's loop, in order."""
        with self._lock:
            return [r for r in self.requests if r.step is not None]

    def summary(self) -> list[str]:
        with self._lock:
            return [f"{r.path} step={r.step}" for r in self.requests]

    # -- the server's side ---------------------------------------------------------------

    def _new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:04d}"

    def _take(self, request: Request, is_step: bool, prefix: str) -> tuple[Reply | None, Request]:
        """Record ``request``; a step takes the script's next reply and ids for its calls."""
        with self._lock:
            reply = None
            if is_step:
                step = sum(1 for r in self.requests if r.step is not None) + 1
                reply = self.script[step - 1] if step <= len(self.script) else DONE
                calls = tuple(self._new_id(prefix) for _ in reply.calls) if prefix else ()
                request = Request(**{**_fields(request), "step": step, "calls": calls})
            self.requests.append(request)
            return reply, request

    def _record(self, request: Request) -> None:
        self._take(request, False, "")

    def _pause(self, reply: Reply) -> None:
        """The point a reply stalls or dies at: after its first piece."""
        if reply.die:
            raise Died
        if reply.stall:
            self._stalled.set()
            self._released.wait()


def _fields(request: Request) -> dict[str, Any]:
    return {name: getattr(request, name) for name in Request.__slots__}


def pieces(text: str) -> Iterator[str]:
    """Text in three pieces or so, as a model streams it."""
    words = text.split(" ")
    size = max(1, len(words) // 3)
    for start in range(0, len(words), size):
        chunk = " ".join(words[start : start + size])
        yield chunk if start + size >= len(words) else chunk + " "


class _Handler(BaseHTTPRequestHandler):
    owner: Model
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing -------------------------------------------------------------------------

    def _body(self) -> dict[str, Any]:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = bytearray()
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                raw += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            raw = bytearray(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            return {"_raw": raw.decode(errors="replace")}
        return parsed if isinstance(parsed, dict) else {"_json": parsed}

    def _request(self, api: str, body: dict[str, Any]) -> Request:
        parts = urlsplit(self.path)
        return Request(
            api=api,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            at=time.time(),
        )

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _open_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _event(self, data: dict[str, Any], name: str | None = None) -> None:
        """One server-sent event, in a chunk of its own, flushed."""
        head = f"event: {name}\n" if name else ""
        event = f"{head}data: {json.dumps(data)}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # -- routing --------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.owner._record(self._request("get", {}))
        if urlsplit(self.path).path.endswith("/models"):
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, {"error": {"message": f"no {self.path} here"}})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        body = self._body()
        try:
            if path.endswith("/messages/count_tokens"):
                self.owner._record(self._request("anthropic", body))
                self._json(200, {"input_tokens": USAGE["input_tokens"]})
            elif path.endswith("/messages"):
                self._anthropic(body)
            elif path.endswith("/responses"):
                self._responses(body)
            elif ":streamGenerateContent" in path or ":generateContent" in path:
                self._gemini(body, stream=":streamGenerateContent" in path)
            elif ":countTokens" in path:
                self.owner._record(self._request("gemini", body))
                self._json(200, {"totalTokens": USAGE["input_tokens"]})
            else:
                self.owner._record(self._request("unknown", body))
                self._json(404, {"error": {"message": f"no {path} here"}})
        except Died:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # -- Anthropic Messages ---------------------------------------------------------------

    def _anthropic(self, body: dict[str, Any]) -> None:
        reply, request = self.owner._take(
            self._request("anthropic", body), bool(body.get("tools")), "toolu_"
        )
        reply = reply or Reply(Text(SIDE_ANSWER))
        ids = iter(request.calls)
        blocks: list[dict[str, Any]] = [
            {"type": "text", "text": b.text}
            if isinstance(b, Text)
            else {"type": "tool_use", "id": next(ids), "name": b.name, "input": b.arguments}
            for b in reply.blocks
        ]
        message = {
            "id": f"msg_{request.step or 0:04d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude"),
            "content": blocks,
            "stop_reason": "tool_use" if reply.calls else "end_turn",
            "stop_sequence": None,
            "usage": USAGE,
        }
        if not body.get("stream"):
            self._json(200, message)
            return
        self._open_stream()
        start = {**message, "content": [], "stop_reason": None, "usage": {**USAGE}}
        start["usage"]["output_tokens"] = 1
        self._event({"type": "message_start", "message": start}, "message_start")
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                opening: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
            else:
                opening = {**block, "input": {}}
                encoded = json.dumps(block["input"])
                half = len(encoded) // 2
                deltas = [
                    {"type": "input_json_delta", "partial_json": encoded[:half]},
                    {"type": "input_json_delta", "partial_json": encoded[half:]},
                ]
            self._event(
                {"type": "content_block_start", "index": index, "content_block": opening},
                "content_block_start",
            )
            for number, delta in enumerate(deltas):
                self._event(
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    "content_block_delta",
                )
                if index == number == 0:
                    self.owner._pause(reply)
            self._event({"type": "content_block_stop", "index": index}, "content_block_stop")
        self._event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": USAGE["output_tokens"]},
            },
            "message_delta",
        )
        self._event({"type": "message_stop"}, "message_stop")
        self._end_stream()

    # -- OpenAI Responses -----------------------------------------------------------------

    def _responses(self, body: dict[str, Any]) -> None:
        reply, request = self.owner._take(
            self._request("responses", body), bool(body.get("tools")), "call_"
        )
        reply = reply or Reply(Text(SIDE_ANSWER))
        response = {
            "id": f"resp_{request.step or 0:04d}",
            "object": "response",
            "model": body.get("model", "gpt"),
            "status": "in_progress",
        }
        self._open_stream()
        self._event({"type": "response.created", "response": response}, "response.created")
        ids = iter(request.calls)
        output: list[dict[str, Any]] = []
        for index, block in enumerate(reply.blocks):
            if isinstance(block, Text):
                item: dict[str, Any] = {
                    "type": "message",
                    "id": f"msg_{request.step or 0:04d}_{index}",
                    "role": "assistant",
                    "status": "in_progress",
                    "content": [],
                }
                self._added(index, item)
                for number, piece in enumerate(pieces(block.text)):
                    delta = {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "delta": piece,
                    }
                    self._event(delta, delta["type"])
                    if index == number == 0:
                        self.owner._pause(reply)
                text = {"type": "output_text", "text": block.text, "annotations": []}
                item = {**item, "status": "completed", "content": [text]}
            else:
                call_id = next(ids)
                item = {"id": f"fc_{call_id}", "call_id": call_id, "name": block.name}
                if isinstance(block.arguments, str):
                    item.update(type="custom_tool_call", input=block.arguments)
                else:
                    item.update(type="function_call", arguments=json.dumps(block.arguments))
                item["status"] = "completed"
                self._added(index, item)
                if index == 0:
                    self.owner._pause(reply)
            output.append(item)
            done = {"type": "response.output_item.done", "output_index": index, "item": item}
            self._event(done, done["type"])
        usage = {
            "input_tokens": USAGE["input_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": USAGE["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": USAGE["input_tokens"] + USAGE["output_tokens"],
        }
        completed = {**response, "status": "completed", "output": output, "usage": usage}
        self._event({"type": "response.completed", "response": completed}, "response.completed")
        self._end_stream()

    def _added(self, index: int, item: dict[str, Any]) -> None:
        added = {"type": "response.output_item.added", "output_index": index, "item": item}
        self._event(added, added["type"])

    # -- Gemini generateContent -----------------------------------------------------------

    def _gemini(self, body: dict[str, Any], *, stream: bool) -> None:
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        reply, _ = self.owner._take(
            self._request("gemini", body), bool(body.get("tools")) and not schema, ""
        )
        reply = reply or Reply(Text(_json_answer(schema) if schema else SIDE_ANSWER))
        chunks: list[list[dict[str, Any]]] = []
        for block in reply.blocks:
            if isinstance(block, Text):
                chunks.extend([{"text": p}] for p in pieces(block.text))
            else:
                chunks.append([{"functionCall": {"name": block.name, "args": block.arguments}}])
        if not stream:
            self._json(200, _candidate([p for c in chunks for p in c], last=True))
            return
        self._open_stream()
        for number, parts in enumerate(chunks):
            self._event(_candidate(parts, last=number == len(chunks) - 1))
            if number == 0:
                self.owner._pause(reply)
        self._end_stream()


#: The answer to a request outside the agent's loop (a title, a summary).
SIDE_ANSWER = "Scripted session"


def _candidate(parts: list[dict[str, Any]], *, last: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    response: dict[str, Any] = {"candidates": [candidate], "modelVersion": "scripted"}
    if last:
        candidate["finishReason"] = "STOP"
        response["usageMetadata"] = {
            "promptTokenCount": USAGE["input_tokens"],
            "candidatesTokenCount": USAGE["output_tokens"],
            "totalTokenCount": USAGE["input_tokens"] + USAGE["output_tokens"],
        }
    return response


def _json_answer(schema: dict[str, Any]) -> str:
    """An object that fits ``schema``, as gemini-cli's classifiers ask: the first of an enum
    (the user, when the user is one), false, the smallest number allowed (or 10), a word."""
    answer: dict[str, Any] = {}
    for name, spec in (schema.get("properties") or {}).items():
        kind = str(spec.get("type", "string")).lower()
        if "enum" in spec:
            answer[name] = "user" if "user" in spec["enum"] else spec["enum"][0]
        elif kind == "boolean":
            answer[name] = False
        elif kind in ("number", "integer"):
            answer[name] = spec.get("minimum", 10)
        else:
            answer[name] = "scripted"
    return json.dumps(answer)
