"""Folding a turn's events into the session's conversation, with ACP's own semantics.

Each test runs a real turn through the public API and reads what the session kept."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

import turnback
from turnback import MessageKind, Turn, TurnStatus

AbandonTurn = Callable[..., Turn]


def chunk(text: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def run_turn(
    session: turnback.Session, events: list[dict[str, Any]], prompt: Any = "go"
) -> list[turnback.Message]:
    with session.turn(prompt) as turn:
        for event in events:
            turn.record(event)
    return session.turn_messages(turn.token)


def shape(messages: list[turnback.Message]) -> list[tuple[str, str]]:
    return [(m.kind.value, m.text) for m in messages]


def test_the_prompt_is_the_first_message(session: turnback.Session) -> None:
    messages = run_turn(session, [], prompt="fix it")
    assert shape(messages) == [("user", "fix it")]
    assert messages[0].data == {"content": [{"type": "text", "text": "fix it"}]}


def test_a_prompt_of_content_blocks_is_kept_as_blocks(session: turnback.Session) -> None:
    blocks = [
        {"type": "text", "text": "look at "},
        {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"},
    ]
    [user] = run_turn(session, [], prompt=blocks)
    assert user.data == {"content": blocks}
    assert user.text == "look at "


def test_chunks_concatenate(session: turnback.Session) -> None:
    messages = run_turn(session, [chunk("Hel"), chunk("lo, "), chunk("world")])
    assert shape(messages) == [("user", "go"), ("agent", "Hello, world")]
    assert messages[1].data == {"content": [{"type": "text", "text": "Hello, world"}]}


def test_each_chunk_kind_makes_its_own_message(session: turnback.Session) -> None:
    messages = run_turn(
        session,
        [
            chunk("think ", "agent_thought_chunk"),
            chunk("hard", "agent_thought_chunk"),
            chunk("answer"),
            chunk("more", "user_message_chunk"),
        ],
    )
    assert shape(messages) == [
        ("user", "go"),
        ("thought", "think hard"),
        ("agent", "answer"),
        ("user", "more"),
    ]


def test_chunks_separated_by_another_event_are_separate_messages(
    session: turnback.Session,
) -> None:
    messages = run_turn(
        session,
        [
            chunk("before "),
            chunk("the tool"),
            {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Run", "status": "pending"},
            chunk("after"),
            {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"},
        ],
    )
    assert shape(messages) == [
        ("user", "go"),
        ("agent", "before the tool"),
        ("tool_call", "Run"),
        ("agent", "after"),
    ]


def test_non_text_chunks_are_kept_as_blocks(session: turnback.Session) -> None:
    image = {"type": "image", "mimeType": "image/png", "data": "iVBOR"}
    messages = run_turn(
        session,
        [
            chunk("see "),
            {"sessionUpdate": "agent_message_chunk", "content": image},
            chunk("this"),
        ],
    )
    assert messages[1].data == {
        "content": [{"type": "text", "text": "see "}, image, {"type": "text", "text": "this"}]
    }


def test_tool_call_updates_merge_by_id(session: turnback.Session) -> None:
    messages = run_turn(
        session,
        [
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "a",
                "title": "Read a.py",
                "kind": "read",
                "status": "pending",
            },
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "b",
                "title": "Edit b.py",
                "kind": "edit",
                "status": "pending",
            },
            {"sessionUpdate": "tool_call_update", "toolCallId": "a", "status": "in_progress"},
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "b",
                "status": "completed",
                "title": "Edited b.py",
                "content": [{"type": "content", "content": {"type": "text", "text": "ok"}}],
            },
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "a",
                "status": "completed",
                "locations": [{"path": "a.py"}],
            },
        ],
    )
    assert [m.kind for m in messages] == [
        MessageKind.USER,
        MessageKind.TOOL_CALL,
        MessageKind.TOOL_CALL,
    ]
    assert messages[1].data == {
        "toolCallId": "a",
        "title": "Read a.py",
        "kind": "read",
        "status": "completed",
        "locations": [{"path": "a.py"}],
    }
    assert messages[2].data == {
        "toolCallId": "b",
        "title": "Edited b.py",
        "kind": "edit",
        "status": "completed",
        "content": [{"type": "content", "content": {"type": "text", "text": "ok"}}],
    }


def test_an_update_field_replaces_not_appends(session: turnback.Session) -> None:
    first = [{"type": "content", "content": {"type": "text", "text": "1"}}]
    second = [{"type": "content", "content": {"type": "text", "text": "2"}}]
    messages = run_turn(
        session,
        [
            {"sessionUpdate": "tool_call", "toolCallId": "a", "title": "T", "content": first},
            {"sessionUpdate": "tool_call_update", "toolCallId": "a", "content": second},
            {"sessionUpdate": "tool_call_update", "toolCallId": "a", "status": "completed"},
        ],
    )
    assert messages[1].data["content"] == second
    assert messages[1].data["status"] == "completed"


def test_a_plan_replaces_the_previous_plan_in_place(session: turnback.Session) -> None:
    def plan(*steps: str) -> dict[str, Any]:
        return {
            "sessionUpdate": "plan",
            "entries": [{"content": s, "priority": "medium", "status": "pending"} for s in steps],
        }

    messages = run_turn(session, [plan("read"), chunk("working"), plan("read", "edit", "test")])
    assert [m.kind for m in messages] == [MessageKind.USER, MessageKind.PLAN, MessageKind.AGENT]
    assert [e["content"] for e in messages[1].data["entries"]] == ["read", "edit", "test"]


def test_unknown_kinds_are_kept_and_replayed_verbatim(session: turnback.Session) -> None:
    unknown = {"sessionUpdate": "x_future_update", "payload": {"nested": [1, 2.5, None, "é"]}}
    messages = run_turn(session, [chunk("a"), unknown, chunk("b")])
    assert [m.kind for m in messages] == [
        MessageKind.USER,
        MessageKind.AGENT,
        MessageKind.OTHER,
        MessageKind.AGENT,
    ]
    assert messages[2].data == unknown
    [event] = [e for e in session.run_events(1) if e.kind == "x_future_update"]
    assert event.event == unknown


def test_bookkeeping_kinds_are_only_in_the_run_timeline(session: turnback.Session) -> None:
    bookkeeping = [
        {"sessionUpdate": "_turnback/permission_requested", "requestId": "r1"},
        {"sessionUpdate": "_turnback/permission_answered", "requestId": "r1", "outcome": "allow"},
        {"sessionUpdate": "_turnback/input_requested", "requestId": "r2"},
        {"sessionUpdate": "_turnback/input_answered", "requestId": "r2", "text": "yes"},
        {"sessionUpdate": "available_commands_update", "availableCommands": []},
        {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
    ]
    with session.turn("go") as turn:
        turn.record(chunk("hi"))
        for event in bookkeeping:
            turn.record(event)
        turn.step(1, checkpoint_id="c1")
    assert shape(session.turn_messages(1)) == [("user", "go"), ("agent", "hi")]
    kinds = [e.kind for e in session.run_events(1)]
    assert kinds == [
        "agent_message_chunk",
        *[e["sessionUpdate"] for e in bookkeeping],
        "_turnback/step_checkpoint",
    ]


def test_the_run_timeline_keeps_every_event_in_order(session: turnback.Session) -> None:
    events = [chunk("a"), chunk("b"), {"sessionUpdate": "plan", "entries": []}, chunk("c")]
    run_turn(session, events)
    timeline = session.run_events(1)
    assert [e.seq for e in timeline] == [1, 2, 3, 4]
    assert [e.event for e in timeline] == events


def test_folding_is_per_turn(session: turnback.Session) -> None:
    run_turn(session, [chunk("one")], prompt="first")
    run_turn(session, [chunk("two")], prompt="second")
    assert shape(session.messages()) == [
        ("user", "first"),
        ("agent", "one"),
        ("user", "second"),
        ("agent", "two"),
    ]


# -- unfinished tool calls -------------------------------------------------------------------

UNFINISHED = [
    chunk("let me look"),
    {"sessionUpdate": "tool_call", "toolCallId": "done", "title": "Read", "status": "pending"},
    {"sessionUpdate": "tool_call_update", "toolCallId": "done", "status": "completed"},
    {"sessionUpdate": "tool_call", "toolCallId": "open", "title": "Edit", "status": "pending"},
    {"sessionUpdate": "tool_call_update", "toolCallId": "open", "status": "in_progress"},
    {"sessionUpdate": "tool_call", "toolCallId": "bad", "title": "Test", "status": "failed"},
]


def assert_cancelled_result(session: turnback.Session, token: str) -> None:
    messages = {m.data.get("toolCallId"): m for m in session.turn_messages(token)}
    assert messages["done"].data["status"] == "completed"
    assert "_meta" not in messages["done"].data
    assert messages["bad"].data["status"] == "failed"
    assert "_meta" not in messages["bad"].data
    cancelled = messages["open"].data
    assert cancelled["status"] == "failed"
    assert cancelled["title"] == "Edit"
    assert cancelled["_meta"]["turnback"]["cancelled"] is True
    synthetic = [e for e in session.run_events(token) if e.event.get("_meta", {}).get("turnback")]
    assert [e.event["toolCallId"] for e in synthetic] == ["open"]
    assert synthetic[0].seq > len(UNFINISHED)


def test_a_failed_turn_cancels_its_unfinished_tool_calls(session: turnback.Session) -> None:
    with pytest.raises(RuntimeError), session.turn("go") as turn:
        for event in UNFINISHED:
            turn.record(event)
        raise RuntimeError("agent crashed")
    assert turn.turn.status is TurnStatus.FAILED
    assert_cancelled_result(session, turn.token)
    assert session.turn_messages(turn.token)[-1].kind is MessageKind.ERROR
    assert "agent crashed" in session.turn_messages(turn.token)[-1].text


def test_a_cancelled_turn_cancels_its_unfinished_tool_calls(session: turnback.Session) -> None:
    with session.turn("go") as turn:
        for event in UNFINISHED:
            turn.record(event)
        turn.cancel("the user pressed stop")
    assert turn.turn.status is TurnStatus.CANCELLED
    assert_cancelled_result(session, turn.token)
    open_call = [m for m in session.turn_messages(turn.token) if m.data.get("toolCallId") == "open"]
    assert "the user pressed stop" in str(open_call[0].data["content"])


def test_an_interrupted_turn_cancels_its_unfinished_tool_calls(
    tb: turnback.Turnback, session: turnback.Session, abandoned_turn: AbandonTurn
) -> None:
    turn = abandoned_turn(session, UNFINISHED)
    report = tb.recover()
    assert [t.token for t in report.recovered] == [turn.token]
    assert report.recovered[0].status is TurnStatus.INTERRUPTED
    assert_cancelled_result(session, turn.token)
    messages = session.turn_messages(turn.token)
    assert shape(messages)[:2] == [("user", "do it"), ("agent", "let me look")]
    assert messages[-1].kind is MessageKind.NOTICE
    assert "interrupted" in messages[-1].text
    assert f"{len(UNFINISHED)} events" in messages[-1].text


def test_a_completed_turn_adds_no_synthetic_results(session: turnback.Session) -> None:
    run_turn(session, UNFINISHED)
    assert not [e for e in session.run_events(1) if e.event.get("_meta")]
    [open_call] = [m for m in session.turn_messages(1) if m.data.get("toolCallId") == "open"]
    assert open_call.data["status"] == "in_progress"


def test_a_new_message_id_starts_a_new_message_and_each_keeps_its_id(
    session: turnback.Session, abandoned_turn: AbandonTurn, tb: turnback.Turnback
) -> None:
    events = [
        {**chunk("one "), "messageId": "m1"},
        {**chunk("two"), "messageId": "m1"},
        {**chunk("three"), "messageId": "m2"},
        {**chunk("plain", "agent_thought_chunk"), "messageId": "m3"},
    ]
    messages = run_turn(session, events)
    assert shape(messages)[1:] == [("agent", "one two"), ("agent", "three"), ("thought", "plain")]
    assert [m.data.get("messageId") for m in messages] == [None, "m1", "m2", "m3"]
    abandoned_turn(session, events)  # recovery folds the journal the same way
    tb.recover()
    recovered = session.turn_messages(2)
    assert [m.data.get("messageId") for m in recovered][1:4] == ["m1", "m2", "m3"]


def test_a_long_run_of_text_chunks_is_joined_as_it_comes(session: turnback.Session) -> None:
    # A running turn keeps what it folded so far: a chunk's text, and a few bytes more, not a
    # block per chunk (goal: <= 50 bytes a chunk beyond the text).
    count = 5_000
    with session.turn("go") as turn:
        turn.record(chunk("start "))
        image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
        turn.record({"sessionUpdate": "agent_message_chunk", "content": image})
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for index in range(count):
                turn.record(chunk(f"piece {index:05d}\n"), sync=False)
                if index % 500 == 499:
                    turn.sync()
            turn.sync()
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert kept / count - len("piece 00000\n") <= 50
    [_, message] = session.turn_messages(turn.token)
    text = "".join(f"piece {index:05d}\n" for index in range(count))
    assert message.data["content"] == [
        {"type": "text", "text": "start "},
        image,
        {"type": "text", "text": text},
    ]
