"""Schema 8: a session's pending requests one row each. Asking or answering one writes that
row alone, whatever else is pending; the lists sessions held before are moved over, on both
backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turnback.model import TurnStatus
from turnback.store import Store, open_store

from .conftest import BACKENDS
from .test_events_stored_once import old_schema
from .test_sqlite_store import add_session, add_turn


def asked(token: str, request_id: str, kind: str = "permission") -> dict[str, object]:
    return {"turn": token, "requestId": request_id, "kind": kind, "sessionUpdate": kind}


def pending(store: Store, session_id: str) -> list[tuple[object, object]]:
    with store.read() as tx:
        record = tx.get_session(session_id)
    assert record is not None
    return [(r["turn"], r["requestId"]) for r in record.pending_requests]


def test_requests_are_pending_in_the_order_asked_until_answered(store: Store) -> None:
    session = add_session(store)
    first = add_turn(store, session.id, status=TurnStatus.COMPLETED)
    second = add_turn(store, session.id, number=2)
    with store.atomic() as tx:
        tx.add_pending_request(session.id, second.token, "b", asked(second.token, "b"), 1.0)
        tx.add_pending_request(session.id, first.token, "a", asked(first.token, "a"), 2.0)
        tx.add_pending_request(session.id, second.token, "c", asked(second.token, "c"), 3.0)
    assert pending(store, session.id) == [
        (second.token, "b"),
        (first.token, "a"),
        (second.token, "c"),
    ]

    with store.atomic() as tx:
        again = asked(second.token, "b") | {"toolCall": {"toolCallId": "t2"}}
        tx.add_pending_request(session.id, second.token, "b", again, 4.0)  # asked again
        assert tx.remove_pending_request(first.token, "a") is True
        assert tx.remove_pending_request(first.token, "a") is False  # answered already
    with store.read() as tx:
        record = tx.get_session(session.id)
        [listed] = [s for s in tx.list_sessions() if s.id == session.id]
        [found] = tx.find_sessions(session.id[:8])
    assert record is not None
    assert record.pending_requests == (again, asked(second.token, "c"))
    assert listed.pending_requests == found.pending_requests == record.pending_requests

    with store.atomic() as tx:
        tx.clear_pending_requests([second.token])
    assert pending(store, session.id) == []


def test_pending_requests_go_with_their_turn_and_session(store: Store) -> None:
    one, other = add_session(store), add_session(store)
    turn, kept = add_turn(store, one.id), add_turn(store, other.id)
    with store.atomic() as tx:
        tx.add_pending_request(one.id, turn.token, "r", asked(turn.token, "r"), 1.0)
        tx.add_pending_request(other.id, kept.token, "r", asked(kept.token, "r"), 1.0)
    with store.atomic() as tx:
        tx.delete_turn(turn.token)
    assert pending(store, one.id) == []
    assert pending(store, other.id) == [(kept.token, "r")]
    with store.atomic() as tx:
        tx.delete_session(other.id)
    with store.atomic() as tx:  # the request went with it: asked anew, it is the only one
        tx.insert_session(other)
        tx.insert_turn(kept)
        tx.add_pending_request(other.id, kept.token, "s", asked(kept.token, "s"), 2.0)
    assert pending(store, other.id) == [(kept.token, "s")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_upgrade_moves_each_sessions_list_to_rows(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Schema 7 kept a session's pending requests as one JSON list: each entry becomes a row, in
    the list's order; an entry naming a turn that does not exist (nobody could answer it) and a
    damaged list are not carried over, and nothing else is lost."""
    url = (
        request.getfixturevalue("postgres_url")
        if backend == "postgresql"
        else f"sqlite:///{tmp_path / 'v7.db'}"
    )
    listed = [
        {"turn": "live", "requestId": "2", "kind": "permission", "toolCall": {"toolCallId": "x"}},
        {"turn": "gone", "requestId": "3", "kind": "permission"},
        {"turn": "live", "requestId": "1", "kind": "input", "message": "name?"},
        "not a request",
    ]
    with old_schema(url, version=7) as run:
        sessions = [("s", json.dumps(listed)), ("t", "[]")]
        if backend == "sqlite":  # a damaged file; PostgreSQL's text is what turnback wrote
            sessions.append(("u", "not json"))
        for session_id, requests in sessions:
            run(
                "INSERT INTO sessions (id, workspace, pending_requests, created_at, updated_at) "
                "VALUES (?, '/w', ?, 1, 2)",
                (session_id, requests),
            )
        run(
            "INSERT INTO turns (token, session_id, number, status, prompt, started_at, id) "
            "VALUES ('live', 's', 1, 'running', ?, 1, 1)",
            (json.dumps("hi"),),
        )
    store = open_store(url)
    try:
        with store.read() as tx:
            records = {s.id: s for s in tx.list_sessions()}
        assert records["s"].pending_requests == (listed[0], listed[2])
        assert {s.pending_requests for s in records.values() if s.id != "s"} == {()}
        assert set(records) == {session_id for session_id, _ in sessions}
        with store.atomic() as tx:  # answered as any other
            assert tx.remove_pending_request("live", "2") is True
        assert pending(store, "s") == [("live", "1")]
    finally:
        store.close()
