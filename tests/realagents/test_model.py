"""The scripted model endpoint on its own, spoken to as an agent would over real HTTP: the
script's replies go to the agent's loop in order and nowhere else, a reply can stall until
released or die mid-stream, and what was sent back is read out of later requests."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest

from .model import Call, Model, Reply, Text

TOOLS = [{"name": "Write", "input_schema": {"type": "object"}}]


def events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def messages(model: Model, **body: Any) -> httpx.Response:
    return httpx.post(f"{model.url}/v1/messages", json={"stream": False, **body}, timeout=10)


def test_replies_go_to_the_loop_in_order_and_side_requests_take_none() -> None:
    script = [Reply(Text("one"), Call("Write", {"file_path": "a"})), Reply(Text("two"))]
    with Model(script) as model:
        title = messages(model, messages=[{"role": "user", "content": "name this"}]).json()
        first = messages(model, tools=TOOLS, messages=[]).json()
        second = messages(model, tools=TOOLS, messages=[]).json()
        spent = messages(model, tools=TOOLS, messages=[]).json()
        steps = model.steps()
    assert [b["type"] for b in first["content"]] == ["text", "tool_use"]
    assert first["stop_reason"] == "tool_use" and second["stop_reason"] == "end_turn"
    assert first["content"][1]["id"] == steps[0].calls[0] == "toolu_0001"
    assert [title["content"][0]["text"], second["content"][0]["text"]] == [
        "Scripted session",
        "two",
    ]
    assert spent["content"][0]["text"] == "Done."
    assert [s.step for s in steps] == [1, 2, 3]


def test_a_stream_stalls_until_released_and_one_that_dies_is_cut() -> None:
    script = [Reply(Text("slow words here"), stall=True), Reply(Text("cut short here"), die=True)]
    body = {"stream": True, "tools": TOOLS, "messages": []}
    with Model(script) as model:
        got: list[dict[str, Any]] = []

        def read() -> None:
            with httpx.stream("POST", f"{model.url}/v1/messages", json=body) as response:
                got.extend(events(response))

        reader = threading.Thread(target=read)
        reader.start()
        model.wait_stalled(10)
        assert reader.is_alive()
        model.release()
        reader.join(10)
        assert [e["type"] for e in got][-1] == "message_stop"
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream("POST", f"{model.url}/v1/messages", json=body) as response,
        ):
            cut = []
            for event in events(response):
                cut.append(event)
    texts = [e["delta"]["text"] for e in got if e["type"] == "content_block_delta"]
    assert "".join(texts) == "slow words here"
    assert "message_stop" not in [e["type"] for e in cut]


def test_tool_results_and_user_texts_are_read_back_in_each_api() -> None:
    with Model() as model:
        messages(
            model,
            messages=[
                {"role": "user", "content": "do it"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1"}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
                        {"type": "text", "text": "and then"},
                    ],
                },
            ],
        )
        httpx.post(
            f"{model.url}/v1/responses",
            json={
                "input": [
                    {"type": "message", "role": "user", "content": [{"text": "go"}]},
                    {"type": "custom_tool_call_output", "call_id": "call_1", "output": "done"},
                ]
            },
        ).read()
        httpx.post(
            f"{model.url}/v1beta/models/m:generateContent",
            json={
                "contents": [
                    {"role": "user", "parts": [{"text": "hi"}]},
                    {
                        "role": "user",
                        "parts": [{"functionResponse": {"name": "w", "response": {"o": 1}}}],
                    },
                ]
            },
        )
        anthropic, responses, gemini = model.requests
    assert [(r.call, r.output) for r in anthropic.tool_results()] == [("toolu_1", "ok")]
    assert anthropic.user_texts() == ["do it", "and then"]
    assert [(r.call, r.output) for r in responses.tool_results()] == [("call_1", "done")]
    assert responses.user_texts() == ["go"]
    assert [(r.call, r.output) for r in gemini.tool_results()] == [("w", '{"o": 1}')]
    assert gemini.user_texts() == ["hi"]
