"""Schema 6: a turn's events stored once. An event is keyed by one integer (its turn's number and
its seq), and the folded conversation stores a run of text chunks as the seqs it joins, read
back from the events. A database of schema 5 is upgraded with its data, on both backends."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

import turnback
from turnback.model import JournalEntry, Message, MessageKind, TurnStatus
from turnback.store import Store, open_store, sqlite_url
from turnback.store.schema import APPLICATION_ID, MIGRATIONS, postgres_migration

from .conftest import BACKENDS
from .test_sqlite_store import new_session, new_turn

Run = Callable[[str, tuple[Any, ...]], object]


def chunk(text: str) -> str:
    return json.dumps(
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    )


@contextmanager
def old_schema(url: str, version: int = 5) -> Iterator[Run]:
    """A way to run SQL on an empty store at an earlier schema ``version`` (made here), as a
    turnback of then would."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None)
        for migration in MIGRATIONS[:version]:
            conn.executescript(migration)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={version}")
        try:
            yield lambda sql, params: conn.execute(sql, params)
        finally:
            conn.close()
        return
    pg = psycopg.connect(url, autocommit=True)
    pg.execute("CREATE TABLE turnback_schema (application_id BIGINT NOT NULL, version INTEGER)")
    pg.execute("INSERT INTO turnback_schema VALUES (%s, %s)", (APPLICATION_ID, version))
    for migration in MIGRATIONS[:version]:
        for statement in postgres_migration(migration).split(";"):
            if statement.strip():
                pg.execute(statement)
    try:
        yield lambda sql, params: pg.execute(sql.replace("?", "%s"), params)
    finally:
        pg.close()


@contextmanager
def schema_5_version(url: str) -> Iterator[int]:
    """The schema version a store at ``url`` records."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            yield int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
        return
    with psycopg.connect(url) as pg:
        row = pg.execute("SELECT version FROM turnback_schema").fetchone()
        assert row is not None
        yield int(row[0])


def fill_schema_5(url: str) -> None:
    """A store at schema 5 holding a session with a completed turn and a running one."""
    with old_schema(url) as run:
        run(
            "INSERT INTO sessions (id, workspace, created_at, updated_at) VALUES (?, '/w', 1, 1)",
            ("s",),
        )
        turns = [("done", 1, None, "completed"), ("live", 2, "done", "running")]
        for token, number, parent, status in turns:
            run(
                "INSERT INTO turns (token, session_id, number, parent, status, prompt, started_at) "
                "VALUES (?, 's', ?, ?, ?, '\"hi\"', ?)",
                (token, number, parent, status, float(number)),
            )
        for token, seq, text in [("done", 1, "Hel"), ("done", 2, "lo"), ("live", 1, "on")]:
            run(
                "INSERT INTO events (turn, seq, kind, payload, at) "
                "VALUES (?, ?, 'agent_message_chunk', ?, 1)",
                (token, seq, chunk(text)),
            )
        for index, kind, data in [
            (0, "user", {"content": [{"type": "text", "text": "hi"}]}),
            (1, "agent", {"content": [{"type": "text", "text": "Hello"}]}),
        ]:
            run(
                "INSERT INTO messages (session_id, turn, idx, kind, data) "
                "VALUES ('s', 'done', ?, ?, ?)",
                (index, kind, json.dumps(data)),
            )
        run("UPDATE sessions SET head = 'done' WHERE id = 's'", ())


def check_schema_5_content(store: Store) -> None:
    """What :func:`fill_schema_5` wrote reads the same."""
    with store.read() as tx:
        assert [(m.kind, m.text) for m in tx.messages("s")] == [
            (MessageKind.USER, "hi"),
            (MessageKind.AGENT, "Hello"),
        ]
        assert [(e.seq, e.event["content"]["text"]) for e in tx.run_events("done")] == [
            (1, "Hel"),
            (2, "lo"),
        ]
        assert [e.payload for e in tx.journal("live")] == [chunk("on")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_schema_5_database_reads_the_same_conversation_after_the_upgrade(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = (
        request.getfixturevalue("postgres_url")
        if backend == "postgresql"
        else sqlite_url(tmp_path / "home")
    )
    fill_schema_5(url)
    store = open_store(url)
    try:
        check_schema_5_content(store)
        # the running turn goes on where it was, and a new turn is numbered after the old ones
        with store.atomic() as tx:
            tx.append_journal([JournalEntry("live", 2, "agent_message_chunk", chunk("!"), 2.0)])
            other = new_session()
            tx.insert_session(other)
            tx.insert_turn(new_turn(other.id))
        with store.read() as tx:
            assert [e.payload for e in tx.journal("live")] == [chunk("on"), chunk("!")]
            assert [(e.seq, e.event["content"]["text"]) for e in tx.run_events("done")] == [
                (1, "Hel"),
                (2, "lo"),
            ]
    finally:
        store.close()
    with open_store(url).read() as tx:  # opened again: nothing is migrated twice
        assert tx.get_turn("live").status is TurnStatus.RUNNING  # type: ignore[union-attr]


@pytest.fixture(params=BACKENDS)
def tb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[turnback.Turnback]:
    database = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    opened = turnback.open(tmp_path / "home", checkpoints=False, database_url=database)
    try:
        yield opened
    finally:
        opened.close()


def event(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def test_the_conversation_keeps_no_copy_of_the_text_its_events_hold(
    tb: turnback.Turnback, tmp_path: Path
) -> None:
    session = tb.create_session(tmp_path)
    image = {"type": "image", "data": "AA==", "mimeType": "image/png"}
    with session.turn("go") as turn:
        for text in ("Hel", "lo"):
            turn.record(event(text))
        turn.record({"sessionUpdate": "agent_message_chunk", "content": image})
        turn.record(event(" world"))
    with tb.store.read() as tx:
        stored = tx._all("SELECT data FROM messages WHERE kind = 'agent'")  # type: ignore[attr-defined]
    assert "Hel" not in stored[0][0] and "world" not in stored[0][0]
    [user, agent] = session.messages()
    assert agent.data["content"] == [
        {"type": "text", "text": "Hello"},
        image,
        {"type": "text", "text": " world"},
    ]
    assert session.turn_messages(turn.token) == [user, agent]


def test_a_damaged_event_makes_its_message_unreadable_and_keeps_the_others(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with turnback.open(home, checkpoints=False) as tb:
        session = tb.create_session(tmp_path)
        with session.turn("one") as first:
            first.record(event("kept"))
        with session.turn("two") as second:
            second.record(event("dam"))
            second.record(event("aged"))
    conn = sqlite3.connect(home / "turnback.db")
    with conn:
        conn.execute(
            "UPDATE events SET payload = '{', text = NULL "
            "WHERE id = (SELECT id FROM turns WHERE token = ?) * 4294967296 + 2",
            (second.token,),
        )
    conn.close()
    with turnback.open(home, checkpoints=False) as tb:
        messages = tb.session(session.id).messages()
    assert [m.text for m in messages[:2]] == ["one", "kept"]
    assert messages[3].kind is MessageKind.UNREADABLE
    assert "event 2 of its turn" in json.dumps(messages[3].data)
    assert isinstance(messages[3], Message) and messages[2].text == "two"


def test_deleting_a_session_takes_its_events_and_no_others(
    tb: turnback.Turnback, tmp_path: Path
) -> None:
    kept, gone = tb.create_session(tmp_path), tb.create_session(tmp_path)
    for session in (kept, gone):
        with session.turn("go") as turn:
            turn.record(event(session.id))
    gone.delete()
    with tb.store.read() as tx:
        assert tx._one("SELECT count(*) FROM events") == (1,)  # type: ignore[attr-defined]
    assert kept.messages()[1].text == kept.id
