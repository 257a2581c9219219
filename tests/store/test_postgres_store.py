"""What is PostgreSQL's own: how its database is opened and migrated, and how its errors reach
the caller (classified by SQLSTATE), each leaving the stored state as it was. The queries are
the conformance suite's (test_sqlite_store.py runs it on both backends)."""

from __future__ import annotations

import threading
from urllib.parse import quote

import psycopg
import pytest

from turnback.errors import (
    SchemaTooNew,
    StoreCorrupt,
    StoreLocked,
    StoreNotFound,
    StoreUnavailable,
)
from turnback.store import open_store
from turnback.store.schema import SCHEMA_VERSION

from .test_sqlite_store import new_session


def test_a_new_schema_is_migrated_once_by_processes_opening_it_together(
    postgres_url: str,
) -> None:
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            open_store(postgres_url).close()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT version FROM turnback_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_create_false_refuses_an_empty_database(postgres_url: str) -> None:
    with pytest.raises(StoreNotFound, match="TURNBACK_DATABASE_URL"):
        open_store(postgres_url, create=False)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT to_regclass('turnback_schema')").fetchone() == (None,)


def test_a_foreign_database_is_refused_untouched(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int)")
    with pytest.raises(StoreCorrupt, match="did not create"):
        open_store(postgres_url)
    with psycopg.connect(postgres_url) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        assert tables.fetchall() == [("invoices",)]


def test_a_newer_schema_is_refused(postgres_url: str) -> None:
    open_store(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE turnback_schema SET version = version + 1")
    with pytest.raises(SchemaTooNew, match="upgrade turnback"):
        open_store(postgres_url)


def test_an_unreachable_server_is_unavailable(tmp_path: object) -> None:
    with pytest.raises(StoreUnavailable, match="TURNBACK_DATABASE_URL"):
        open_store(f"postgresql://turnback@/turnback?host={quote('/nonexistent/socket/dir')}")


def test_a_missing_database_is_named(postgres_url: str) -> None:
    missing = postgres_url.replace("@/postgres?", "@/no_such_database?")
    with pytest.raises(StoreUnavailable, match="does not exist"):
        open_store(missing)


def test_a_session_held_past_the_busy_timeout_is_locked_and_nothing_is_lost(
    postgres_url: str,
) -> None:
    holder = open_store(postgres_url)
    waiter = open_store(postgres_url, busy_timeout=0.3)
    record = new_session()
    try:
        with holder.atomic() as tx:
            tx.insert_session(record)
        with holder.atomic() as tx:
            tx.lock_sessions([record.id])
            tx.set_head(record.id, None, 2.0)
            with (
                pytest.raises(StoreLocked, match="locked by another process"),
                waiter.atomic() as other,
            ):
                other.lock_sessions([record.id])
        with waiter.atomic() as tx:  # the waiter is usable again, and sees the holder's commit
            tx.lock_sessions([record.id])
            found = tx.get_session(record.id)
        assert found is not None and found.updated_at == 2.0
    finally:
        holder.close()
        waiter.close()


def test_a_statement_timeout_is_worded_as_one_not_as_a_lock(postgres_url: str) -> None:
    """The server's statement_timeout (the DBA's, or the URL's options) cancels a statement
    that waits on a lock before the busy timeout does: the error says so, not that a session
    was locked for the busy timeout's 5 s (bug)."""
    holder = open_store(postgres_url)
    timed = postgres_url.replace("options=", f"options={quote('-c statement_timeout=200 ')}")
    waiter = open_store(timed, busy_timeout=5.0)
    record = new_session()
    try:
        with holder.atomic() as tx:
            tx.insert_session(record)
        with holder.atomic() as tx:
            tx.lock_sessions([record.id])
            with pytest.raises(StoreUnavailable) as cancelled, waiter.atomic() as other:
                other.lock_sessions([record.id])
        message = str(cancelled.value)
        assert "statement_timeout" in message and "statement timeout" in message
        assert "locked" not in message and "5s" not in message
        with waiter.atomic() as tx:  # usable again once the holder is done
            tx.lock_sessions([record.id])
    finally:
        holder.close()
        waiter.close()


def test_a_begin_and_a_revert_on_one_workspace_lock_each_other(postgres_url: str) -> None:
    holder = open_store(postgres_url)
    waiter = open_store(postgres_url, busy_timeout=0.3)
    one, other, elsewhere = new_session("/w"), new_session("/w"), new_session("/x")
    try:
        with holder.atomic() as tx:
            for record in (one, other, elsewhere):
                tx.insert_session(record)
        with holder.atomic() as tx:
            tx.lock_workspace(one.id)
            with (
                pytest.raises(StoreLocked, match="locked by another process"),
                waiter.atomic() as second,
            ):
                second.lock_sessions([other.id])  # another session of the same workspace
            with waiter.atomic() as second:
                second.lock_workspace(elsewhere.id)  # another workspace is free
    finally:
        holder.close()
        waiter.close()


def test_a_dropped_connection_is_opened_again(postgres_url: str) -> None:
    store = open_store(postgres_url)
    record = new_session()
    try:
        with store.atomic() as tx:
            tx.insert_session(record)
        with psycopg.connect(postgres_url, autocommit=True) as admin:  # as an operator would
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'turnback' AND pid <> pg_backend_pid()"
            ).fetchall()
        assert ended
        with store.read() as tx:
            assert tx.get_session(record.id) == record
    finally:
        store.close()


def test_the_password_stays_out_of_the_url_and_messages(postgres_url: str) -> None:
    with_password = postgres_url.replace("turnback@", "turnback:s3cret@")
    store = open_store(with_password)
    try:
        assert "s3cret" not in store.url and "turnback:***@" in store.url
        with store.read() as tx:
            assert tx.list_sessions() == []
    finally:
        store.close()
    with pytest.raises(StoreUnavailable) as error:
        open_store(with_password.replace("@/postgres?", "@/no_such_database?"))
    assert "s3cret" not in str(error.value)
