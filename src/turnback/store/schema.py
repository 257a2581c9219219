"""The schema, as an ordered list of forward migrations.

The number of migrations applied is the schema version (SQLite's ``user_version``, PostgreSQL's
``turnback_schema`` row). A migration is never edited once released: a change to the schema is a
new entry at the end.

Both backends run these same migrations. They are written in the SQL the two share; the few type
names that differ are rewritten for PostgreSQL by :func:`postgres_migration` (``REAL`` is a
4-byte float there, ``INTEGER`` 4 bytes, a row id is an identity column, and so is the ``id``
schema 6 adds to ``turns``, and a column named ``binary`` must be quoted), so a migration
added here reaches a fleet's database too. A migration that moves data with functions the two
name differently (JSON's) has a PostgreSQL text of its own, run in its place. The constraints
that carry invariants (one running turn per session, events owned by their turn) are declared
once, for both.
"""

from __future__ import annotations

import re

#: PRAGMA application_id of a turnback database ("TRNB"): a file without it is not ours.
APPLICATION_ID = 0x54524E42

#: A session's pending requests, one row each: asking and answering a request is one small
#: write, where rewriting the session's whole list made a storm of requests quadratic. The
#: lists sessions held are moved over, keeping their order; an entry naming no turn that exists
#: could never be answered or cleared, and is dropped. Moving them reads JSON, whose functions
#: SQLite and PostgreSQL name differently: PostgreSQL runs ``_PENDING_REQUESTS_POSTGRES``.
_PENDING_TABLE = """
    CREATE TABLE pending_requests (
        id         INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn       TEXT NOT NULL REFERENCES turns(token) ON DELETE CASCADE,
        request_id TEXT NOT NULL,
        request    TEXT NOT NULL,
        at         REAL NOT NULL
    );
    CREATE UNIQUE INDEX pending_requests_turn ON pending_requests(turn, request_id);
    CREATE INDEX pending_requests_session ON pending_requests(session_id, id);
"""
_PENDING_REQUESTS = (
    _PENDING_TABLE
    + """
    INSERT INTO pending_requests (session_id, turn, request_id, request, at)
        SELECT s.id, json_extract(r.value, '$.turn'),
            coalesce(json_extract(r.value, '$.requestId'), ''), r.value, s.updated_at
        FROM sessions s, json_each(CASE WHEN json_valid(s.pending_requests)
            THEN s.pending_requests ELSE '[]' END) r
        WHERE r.type = 'object' AND json_extract(r.value, '$.turn') IN (SELECT token FROM turns)
        ORDER BY s.id, r.key
        ON CONFLICT DO NOTHING;
    ALTER TABLE sessions DROP COLUMN pending_requests;
"""
)
_PENDING_REQUESTS_POSTGRES = (
    _PENDING_TABLE
    + """
    INSERT INTO pending_requests (session_id, turn, request_id, request, at)
        SELECT s.id, r.value->>'turn', coalesce(r.value->>'requestId', ''), r.value::text,
            s.updated_at
        FROM sessions s CROSS JOIN LATERAL json_array_elements(CASE
            WHEN json_typeof(s.pending_requests::json) = 'array' THEN s.pending_requests::json
            ELSE '[]'::json END) WITH ORDINALITY AS r (value, n)
        WHERE json_typeof(r.value) = 'object' AND r.value->>'turn' IN (SELECT token FROM turns)
        ORDER BY s.id, r.n
        ON CONFLICT DO NOTHING;
    ALTER TABLE sessions DROP COLUMN pending_requests;
"""
)
#: Migrations PostgreSQL runs in SQL of its own (then rewritten to its type names as any other).
_POSTGRES_OWN = {_PENDING_REQUESTS: _PENDING_REQUESTS_POSTGRES}

MIGRATIONS: tuple[str, ...] = (
    # 1: sessions, turns, journal, committed conversation, step checkpoints, activities, owners
    """
    CREATE TABLE sessions (
        id               TEXT PRIMARY KEY,
        workspace        TEXT NOT NULL,
        title            TEXT,
        agent            TEXT,
        head             TEXT,
        status           TEXT NOT NULL DEFAULT 'open',
        pending_requests TEXT NOT NULL DEFAULT '[]',
        created_at       REAL NOT NULL,
        updated_at       REAL NOT NULL
    );
    CREATE INDEX sessions_workspace ON sessions(workspace);

    CREATE TABLE owners (
        id            TEXT PRIMARY KEY,
        host          TEXT NOT NULL,
        boot_id       TEXT NOT NULL,
        pid           INTEGER NOT NULL,
        start_time    INTEGER NOT NULL,
        created_at    REAL NOT NULL,
        lease_expires REAL
    );

    CREATE TABLE turns (
        token       TEXT PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        number      INTEGER NOT NULL,
        parent      TEXT,
        owner_id    TEXT REFERENCES owners(id) ON DELETE SET NULL,
        status      TEXT NOT NULL,
        prompt      TEXT NOT NULL,
        started_at  REAL NOT NULL,
        ended_at    REAL,
        detail      TEXT,
        event_count INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX turns_session ON turns(session_id, number);
    CREATE INDEX turns_status ON turns(status);
    -- Invariant 8 enforced by the database itself: one running turn per session.
    CREATE UNIQUE INDEX turns_one_running ON turns(session_id) WHERE status = 'running';

    CREATE TABLE journal (
        turn    TEXT NOT NULL REFERENCES turns(token) ON DELETE CASCADE,
        seq     INTEGER NOT NULL,
        kind    TEXT NOT NULL,
        payload TEXT NOT NULL,
        at      REAL NOT NULL,
        PRIMARY KEY (turn, seq)
    );

    CREATE TABLE messages (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn       TEXT NOT NULL REFERENCES turns(token) ON DELETE CASCADE,
        idx        INTEGER NOT NULL,
        kind       TEXT NOT NULL,
        data       TEXT NOT NULL,
        PRIMARY KEY (turn, idx)
    );
    CREATE INDEX messages_session ON messages(session_id);

    CREATE TABLE run_events (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn       TEXT NOT NULL REFERENCES turns(token) ON DELETE CASCADE,
        seq        INTEGER NOT NULL,
        kind       TEXT NOT NULL,
        payload    TEXT NOT NULL,
        at         REAL NOT NULL,
        PRIMARY KEY (turn, seq)
    );

    CREATE TABLE step_checkpoints (
        turn          TEXT NOT NULL REFERENCES turns(token) ON DELETE CASCADE,
        step          INTEGER NOT NULL,
        checkpoint_id TEXT NOT NULL,
        journal_seq   INTEGER NOT NULL,
        state         TEXT,
        store_path    TEXT,
        at            REAL NOT NULL,
        PRIMARY KEY (turn, journal_seq)
    );

    CREATE TABLE activities (
        id         INTEGER PRIMARY KEY,
        session_id TEXT REFERENCES sessions(id) ON DELETE CASCADE,
        turn       TEXT,
        level      TEXT NOT NULL,
        code       TEXT NOT NULL,
        message    TEXT NOT NULL,
        data       TEXT NOT NULL DEFAULT '{}',
        at         REAL NOT NULL
    );
    CREATE INDEX activities_session ON activities(session_id, id);
    """,
    # 2: workspace checkpoints per turn, the files each turn changed, and reverts
    """
    ALTER TABLE turns ADD COLUMN begin_checkpoint TEXT;
    ALTER TABLE turns ADD COLUMN end_checkpoint TEXT;
    ALTER TABLE turns ADD COLUMN reverted_by INTEGER;

    CREATE TABLE file_changes (
        turn      TEXT NOT NULL REFERENCES turns(token) ON DELETE CASCADE,
        scope     TEXT NOT NULL,
        path      TEXT NOT NULL,
        kind      TEXT NOT NULL,
        additions INTEGER NOT NULL DEFAULT 0,
        deletions INTEGER NOT NULL DEFAULT 0,
        binary    INTEGER NOT NULL DEFAULT 0,
        old_path  TEXT,
        PRIMARY KEY (turn, scope, path)
    );

    CREATE TABLE reverts (
        id               INTEGER PRIMARY KEY,
        session_id       TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        to_turn          TEXT,
        from_head        TEXT,
        target           TEXT,
        undo_checkpoint  TEXT,
        files            INTEGER NOT NULL,
        conversation     INTEGER NOT NULL,
        keep_user_edits  INTEGER NOT NULL,
        state            TEXT NOT NULL,
        owner_id         TEXT,
        detail           TEXT,
        created_at       REAL NOT NULL,
        ended_at         REAL
    );
    CREATE INDEX reverts_session ON reverts(session_id, id);
    """,
    # 3: what the runtime must remember of the agent behind a session (its own session id, …)
    """
    ALTER TABLE sessions ADD COLUMN agent_state TEXT NOT NULL DEFAULT '{}';
    """,
    # 4: one table for a turn's events. They are its journal while it runs or is set aside and
    # its run timeline once it has ended, in place: ending a turn no longer copies every event
    # into a second table and deletes it from the first (three writes of each event become
    # one). Journal rows of turns that had already ended were garbage and are not carried over.
    """
    CREATE TABLE events (
        turn    TEXT NOT NULL REFERENCES turns(token) ON DELETE CASCADE,
        seq     INTEGER NOT NULL,
        kind    TEXT NOT NULL,
        payload TEXT NOT NULL,
        at      REAL NOT NULL,
        PRIMARY KEY (turn, seq)
    );
    INSERT INTO events (turn, seq, kind, payload, at)
        SELECT turn, seq, kind, payload, at FROM run_events;
    INSERT INTO events (turn, seq, kind, payload, at)
        SELECT turn, seq, kind, payload, at FROM journal
        WHERE turn IN (SELECT token FROM turns WHERE status IN ('running', 'set_aside'));
    DROP TABLE journal;
    DROP TABLE run_events;
    """,
    # 5: fleets. A running turn carries the fencing token of the lease it runs under, checked by
    # every write of the turn, and the host whose workspace holds its checkpoints.
    """
    ALTER TABLE turns ADD COLUMN fence TEXT;
    ALTER TABLE turns ADD COLUMN host TEXT;
    """,
    # 6: events stored once, in as few bytes as they take. A turn gets a number of its own
    # (``id``), and an event's key is one integer, ``turns.id * 2**32 + seq``: on SQLite the row
    # is its own index (a rowid table), and no row repeats its turn's 32-character token. The
    # folded conversation no longer copies the text of message chunks: a run of them is stored
    # as the seqs it joins and read back from the events (see ``TEXT_RUNS`` in the model), so
    # ``messages`` needs no change here; the messages of turns folded before keep their text.
    # On PostgreSQL ``id`` is an identity column, numbered by the server (see
    # ``postgres_migration``); on SQLite the one writer numbers new turns, and the turns that
    # exist are numbered here in the order they began.
    """
    ALTER TABLE turns ADD COLUMN id INTEGER;
    UPDATE turns SET id = numbered.n
        FROM (SELECT token, row_number() OVER (ORDER BY started_at, token) AS n FROM turns)
        AS numbered
        WHERE numbered.token = turns.token AND turns.id IS NULL;
    CREATE UNIQUE INDEX turns_id ON turns(id);
    CREATE TABLE turn_events (
        id      INTEGER NOT NULL PRIMARY KEY,
        kind    TEXT NOT NULL,
        payload TEXT NOT NULL,
        at      REAL NOT NULL
    );
    INSERT INTO turn_events (id, kind, payload, at)
        SELECT t.id * 4294967296 + e.seq, e.kind, e.payload, e.at
        FROM events e JOIN turns t ON t.token = e.turn;
    DROP TABLE events;
    ALTER TABLE turn_events RENAME TO events;
    """,
    # 7: the text of a plain text chunk in a column of its own, the event's payload then holding
    # the rest (see ``JournalEntry.text``): recording never escapes the text into JSON, and a
    # run of chunks is read back as the database's join of that column. Events recorded before
    # keep their text in their payload and are read as they were.
    """
    ALTER TABLE events ADD COLUMN text TEXT;
    """,
    # 8: a session's pending requests one row each (see ``_PENDING_REQUESTS``).
    _PENDING_REQUESTS,
    # 9: a workspace checkpoint before each shell or write tool of a turn (an agent's hooks
    # take them), and the rescues made from them, each naming the capture it can be undone to.
    """
    CREATE TABLE tool_checkpoints (
        turn      TEXT NOT NULL REFERENCES turns(token) ON DELETE CASCADE,
        number    INTEGER NOT NULL,
        tool      TEXT NOT NULL,
        call_id   TEXT,
        summary   TEXT NOT NULL,
        checkpoint TEXT,
        git_state TEXT,
        at        REAL NOT NULL,
        PRIMARY KEY (turn, number)
    );
    CREATE TABLE rescues (
        id              INTEGER PRIMARY KEY,
        session_id      TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn            TEXT NOT NULL REFERENCES turns(token) ON DELETE CASCADE,
        before_tool     INTEGER NOT NULL,
        paths           TEXT NOT NULL,
        source          TEXT NOT NULL,
        undo_checkpoint TEXT NOT NULL,
        written         TEXT NOT NULL,
        at              REAL NOT NULL,
        undone_at       REAL
    );
    CREATE INDEX rescues_session ON rescues(session_id, id);
    """,
    # 10: the machine that holds a session after a handoff, and the fencing token of that hold:
    # a handoff moves it in one conditional update (no two handoffs both win), and a turn
    # begins only on the machine that holds its session. ``NULL``: never handed off, any
    # machine may run it.
    """
    ALTER TABLE sessions ADD COLUMN host TEXT;
    ALTER TABLE sessions ADD COLUMN host_fence TEXT;
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)

_POSTGRES_TYPES = (
    (
        re.compile(r"\bADD COLUMN id INTEGER\b"),
        "ADD COLUMN id BIGINT GENERATED BY DEFAULT AS IDENTITY",
    ),
    (re.compile(r"\bINTEGER PRIMARY KEY\b"), "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"^(\s+)binary\b", re.MULTILINE), r'\1"binary"'),  # a keyword there
)


def postgres_migration(sql: str) -> str:
    """A migration in PostgreSQL's type names (and its own SQL, where it needs some)."""
    sql = _POSTGRES_OWN.get(sql, sql)
    for pattern, replacement in _POSTGRES_TYPES:
        sql = pattern.sub(replacement, sql)
    return sql
