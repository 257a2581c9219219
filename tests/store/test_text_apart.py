"""Schema 7: the text of a plain text chunk is stored in a column of its own, never escaped into
its JSON payload, and a run of chunks is read back joined by the database. Texts the database
cannot hold as they are stay in the payload; a schema 6 store is upgraded with nothing lost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import turnback
from turnback.model import MessageKind, TurnStatus
from turnback.store import sqlite_url

from .conftest import BACKENDS
from .test_events_stored_once import chunk, old_schema


def database(backend: str, request: pytest.FixtureRequest, home: Path) -> str:
    return request.getfixturevalue("postgres_url") if backend == "postgresql" else sqlite_url(home)


def opened(home: Path, url: str) -> turnback.Turnback:
    return turnback.open(
        home, checkpoints=False, database_url=None if url.startswith("sqlite") else url
    )


@pytest.fixture(params=BACKENDS)
def tb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[turnback.Turnback]:
    home = tmp_path / "home"
    with opened(home, database(request.param, request, home)) as handle:
        yield handle


def text_chunk(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": text},
        **extra,
    }


def stored(tb: turnback.Turnback, token: str) -> list[tuple[str, str | None]]:
    with tb.store.read() as tx:
        return tx._all(  # type: ignore[attr-defined, no-any-return]
            "SELECT e.payload, e.text FROM events e JOIN turns t "
            "ON e.id / 4294967296 = t.id WHERE t.token = ? ORDER BY e.id",
            (token,),
        )


def test_a_text_chunk_is_stored_apart_and_every_event_reads_back_as_recorded(
    tb: turnback.Turnback, tmp_path: Path
) -> None:
    session = tb.create_session(tmp_path)
    surrogate, nul = "half \ud83d of a pair", "a \x00 in it"
    events = [
        text_chunk("Hello, "),
        text_chunk("wörld — ", messageId="m1"),  # another key than its kind and content
        text_chunk(surrogate, messageId="m1"),  # not UTF-8: stays in the payload, escaped
        text_chunk(nul, messageId="m1"),  # PostgreSQL's text holds no NUL: same
        text_chunk("", messageId="m1"),
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}, "messageId": "m1"},
        text_chunk("!", messageId="m1"),
    ]
    with session.turn("go") as turn:
        for event in events:
            turn.record(event)
    rows = stored(tb, turn.token)
    assert [text for _, text in rows] == ["Hello, ", "wörld — ", None, None, "", None, "!"]
    assert rows[0][0] == '{"sessionUpdate":"agent_message_chunk","content":{"type":"text"}}'
    assert "wörld" not in rows[1][0] and json.loads(rows[1][0])["messageId"] == "m1"
    with tb.store.read() as tx:
        assert [e.event for e in tx.run_events(turn.token)] == events
    [_, first, second] = session.messages()
    assert first.text == "Hello, "
    assert second.text == "wörld — " + surrogate + nul + "!"
    assert session.turn_messages(turn.token)[2] == second


def test_an_agents_own_json_text_is_stored_apart_too(tb: turnback.Turnback, tmp_path: Path) -> None:
    """What the proxy records: the update with the JSON text it arrived in."""
    session = tb.create_session(tmp_path)
    update = text_chunk("as sent ")
    with session.turn("go") as turn:
        turn.record(update, text=json.dumps(update))
        turn.record(text_chunk("and again"), text=json.dumps(text_chunk("and again")))
    assert [text for _, text in stored(tb, turn.token)] == ["as sent ", "and again"]
    assert session.messages()[1].text == "as sent and again"


def fill_schema_6(url: str) -> None:
    """A store at schema 6 holding a completed turn whose messages are folded into runs of text
    chunks (their text in the events' payloads), and a running turn of a process gone."""
    with old_schema(url, 6) as run:
        run(
            "INSERT INTO sessions (id, workspace, created_at, updated_at) VALUES (?, '/w', 1, 1)",
            ("5e5510",),
        )
        for token, number, parent, status in [
            ("d01e", 1, None, "completed"),
            ("a11e", 2, "d01e", "running"),
        ]:
            run(
                "INSERT INTO turns (token, session_id, number, parent, status, prompt, "
                "started_at) VALUES (?, '5e5510', ?, ?, ?, '\"hi\"', ?)",
                (token, number, parent, status, float(number)),
            )
        run("UPDATE turns SET id = number WHERE id IS NULL", ())  # SQLite's writer numbers them
        ids = dict(run("SELECT number, id FROM turns", ()).fetchall())  # type: ignore[attr-defined]
        tool = {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "look"}
        events = [
            (1, 1, chunk("Hel")),
            (1, 2, chunk("lo")),
            (1, 3, json.dumps(tool)),
            (1, 4, chunk(" world")),
            (2, 1, chunk("on")),
        ]
        for number, seq, payload in events:
            kind = json.loads(payload)["sessionUpdate"]
            run(
                "INSERT INTO events (id, kind, payload, at) VALUES (?, ?, ?, 1)",
                (ids[number] * 4294967296 + seq, kind, payload),
            )
        messages: list[tuple[str, dict[str, Any]]] = [
            ("user", {"content": [{"type": "text", "text": "hi"}]}),
            ("agent", {"content": [None], "_turnback/runs": [[0, 1, 2]]}),
            ("tool_call", {"toolCallId": "t", "title": "look"}),
            ("agent", {"content": [None], "_turnback/runs": [[0, 4, 4]]}),
        ]
        for index, (kind, data) in enumerate(messages):
            run(
                "INSERT INTO messages (session_id, turn, idx, kind, data) "
                "VALUES ('5e5510', 'd01e', ?, ?, ?)",
                (index, kind, json.dumps(data)),
            )
        run("UPDATE sessions SET head = 'd01e' WHERE id = '5e5510'", ())


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_schema_6_store_with_folded_runs_loses_nothing_in_the_upgrade(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    url = database(backend, request, home)
    fill_schema_6(url)
    with opened(home, url) as tb:
        session = tb.session("5e5510")
        assert [(m.kind, m.text) for m in session.messages()] == [
            (MessageKind.USER, "hi"),
            (MessageKind.AGENT, "Hello"),
            (MessageKind.TOOL_CALL, "look"),
            (MessageKind.AGENT, " world"),
        ]
        with tb.store.read() as tx:
            assert [e.event for e in tx.run_events("d01e")][-1] == json.loads(chunk(" world"))
            assert [e.payload for e in tx.journal("a11e")] == [chunk("on")]
        # the running turn of schema 6 is recovered with its text, and a new turn records apart
        assert [t.token for t in tb.recover().recovered] == ["a11e"]
        with session.turn("more") as turn:
            for text in ("new ", "text"):
                turn.record(text_chunk(text))
        assert [text for _, text in stored(tb, turn.token)] == ["new ", "text"]
        texts = [m.text for m in session.messages()]
        assert texts[4:6] == ["hi", "on"] and texts[-2:] == ["more", "new text"]
        with tb.store.read() as tx:
            assert tx.get_turn("a11e").status is TurnStatus.INTERRUPTED  # type: ignore[union-attr]


def test_sqlite_reads_a_run_of_chunks_in_key_order(tmp_path: Path) -> None:
    """SQLite before 3.44 joins a run in the order it reads the rows: that of the table's key,
    as long as ``events`` has no other index to read them by."""
    with turnback.open(tmp_path / "home", checkpoints=False) as tb:
        session = tb.create_session(tmp_path)
        with session.turn("go") as turn:
            for i in range(300):
                turn.record(text_chunk(f"{i} "))
        with tb.store.read() as tx:
            indexes = tx._all(  # type: ignore[attr-defined]
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'"
            )
        assert indexes == []
        assert session.messages()[1].text == "".join(f"{i} " for i in range(300))
