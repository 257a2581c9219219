"""Sessions as wholes -- made, forked and deleted, each in one transaction -- and sessions and
turns found by what a person types: an id, a unique prefix of one, or a turn's number."""

from __future__ import annotations

import dataclasses
import os
import re
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from turnback.engine.checkpoints import DELETED
from turnback.engine.turns import require_idle
from turnback.errors import (
    DECIDE,
    SESSIONS,
    TURNS,
    AmbiguousId,
    InvalidId,
    SessionNotFound,
    TurnInProgress,
    TurnNotFound,
)
from turnback.model import ActivityLevel, SessionRecord, Turn, TurnStatus, conversation
from turnback.store import Store

_HEX = re.compile(r"[0-9a-f]+")


def normalise_id(text: str, what: str) -> str:
    """``text`` as an id or id prefix (hexadecimal, lower case); InvalidId when it is not one."""
    value = text.strip().lower()
    if not value or not _HEX.fullmatch(value):
        raise InvalidId(
            f"{text!r} is not a {what} id: ids are hexadecimal (a unique prefix is enough)"
        )
    return value


def _record(
    workspace: str, title: str | None, agent: str | None, now: float, session_id: str | None = None
) -> SessionRecord:
    return SessionRecord(
        id=session_id or uuid.uuid4().hex,
        workspace=workspace,
        title=title,
        agent=agent,
        head=None,
        status="open",
        pending_requests=(),
        created_at=now,
        updated_at=now,
    )


def _place(workspace: str | os.PathLike[str]) -> str:
    return str(Path(workspace).expanduser().resolve())


def create(
    store: Store,
    workspace: str | os.PathLike[str],
    title: str | None,
    agent: str | None,
    session_id: str | None = None,
    existing: bool = False,
) -> str:
    """A new session in ``workspace``; returns its id (``session_id`` when given: 32
    hexadecimal digits). With ``existing``, a session already stored under ``session_id`` is
    the one returned, unchanged (a front-end making the same session again)."""
    if session_id is not None and not re.fullmatch("[0-9a-f]{32}", session_id):
        raise InvalidId(f"{session_id!r} is not a session id: 32 hexadecimal digits")
    record = _record(_place(workspace), title, agent, time.time(), session_id)
    with store.atomic() as tx:
        if not (existing and session_id is not None and tx.get_session(session_id) is not None):
            tx.insert_session(record)
    return record.id


def find(store: Store, ref: str, home: Path) -> str:
    """The id of the session whose id is ``ref`` or starts with it."""
    prefix = normalise_id(ref, "session")
    with store.read() as tx:
        exact = tx.get_session(prefix)
        matches = [exact] if exact else tx.find_sessions(prefix, limit=6)
    if not matches:
        raise SessionNotFound(f"no session matches {ref!r} in {home}").settled_by(SESSIONS)
    if len(matches) > 1:
        names = ", ".join(m.id[:12] for m in matches[:5])
        raise AmbiguousId(
            f"{ref!r} matches {len(matches)}{'+' if len(matches) > 5 else ''} sessions "
            f"({names}); give more characters"
        )
    return matches[0].id


def fork(
    store: Store,
    session_id: str,
    workspace: str | os.PathLike[str] | None,
    title: str | None,
    agent: str | None,
) -> str:
    """A new session whose conversation is a copy of ``session_id``'s, in one transaction;
    returns its id.

    Each turn of the conversation is copied (new tokens, the same numbers, statuses and
    timeline; reverted and set-aside turns are not), with its file changes and step
    checkpoints, so an interrupted head can be continued in the fork too. In the same
    workspace the copies name the same workspace checkpoints; in another they have none."""
    now = time.time()
    with store.atomic() as tx:
        source = tx.get_session(session_id)
        if source is None:
            raise SessionNotFound(f"session {session_id} no longer exists")
        place = _place(workspace) if workspace else source.workspace
        same = place == source.workspace
        copy = _record(
            place,
            title or f"fork of {source.title or source.id[:12]}",
            agent if agent is not None else source.agent,
            now,
        )
        tx.insert_session(copy)
        parent: str | None = None
        turns = conversation(tx.session_turns(session_id))
        for turn in turns:
            token = uuid.uuid4().hex
            tx.insert_turn(
                dataclasses.replace(
                    turn,
                    token=token,
                    session_id=copy.id,
                    parent=parent,
                    owner_id=None,
                    begin_checkpoint=turn.begin_checkpoint if same else None,
                    end_checkpoint=turn.end_checkpoint if same else None,
                )
            )
            tx.insert_messages(
                [
                    dataclasses.replace(m, session_id=copy.id, turn=token)
                    for m in tx.turn_messages(turn.token)
                ]
            )
            tx.insert_run_events(
                [
                    dataclasses.replace(e, session_id=copy.id, turn=token)
                    for e in tx.run_events(turn.token)
                ]
            )
            for scope in ("before", "turn"):
                tx.insert_file_changes(token, scope, tx.file_changes(turn.token, scope))
            for step in tx.step_checkpoints(turn.token):  # an interrupted turn's
                tx.insert_step_checkpoint(dataclasses.replace(step, turn=token))
            parent = token
        tx.set_head(copy.id, parent, now)
        tx.insert_activity(
            copy.id,
            None,
            ActivityLevel.INFO,
            "session.forked",
            f"forked from session {session_id[:12]} with {len(turns)} turn(s)",
            {"source": session_id, "turns": len(turns)},
            now,
        )
    return copy.id


def delete(store: Store, session_id: str) -> None:
    """Remove the session from the store: its turns, conversation, timeline, activities and
    reverts. Its workspace checkpoints are named by nothing any more, so ``gc`` releases them.
    Refused while a turn runs (TurnInProgress) and while a turn is set aside (invariant 7:
    only apply or discard removes one)."""
    with store.atomic() as tx:
        record = tx.get_session(session_id)
        if record is None:
            raise SessionNotFound(f"session {session_id} no longer exists")
        require_idle(tx, session_id, "deleting the session")
        aside = [t for t in tx.session_turns(session_id) if t.status is TurnStatus.SET_ASIDE]
        if aside:
            raise TurnInProgress(
                f"session {session_id[:12]} has {len(aside)} set-aside turn(s) (turn "
                f"{aside[0].number} first), kept until each is applied or discarded, so it "
                "cannot be deleted yet",
                aside[0].token,
                turn=aside[0].number,
                state=TurnStatus.SET_ASIDE.value,
                remedy=DECIDE,
            )
        tx.delete_session(session_id)
        # Kept outside the session (which is gone): says what went, and tells gc which
        # workspace's shadow repository holds the checkpoints nothing names any more.
        tx.insert_activity(
            None,
            None,
            ActivityLevel.INFO,
            DELETED,
            f"session {session_id[:12]} in {record.workspace} was deleted",
            {"session": session_id, "workspace": record.workspace},
            time.time(),
        )


def _ambiguous(ref: int | str, found: list[Turn], remedy: str) -> AmbiguousId:
    names = ", ".join(f"{t.token[:12]} (turn {t.number}, {t.status})" for t in found[:5])
    return AmbiguousId(
        f"{ref!r} matches {len(found)} turns: {names}{' …' if len(found) > 5 else ''}; {remedy}"
    )


def find_turn(turns: Sequence[Turn], ref: int | str, session_id: str) -> Turn:
    """The turn of ``turns`` (a session's) that ``ref`` names: a number or a token prefix (see
    ``Session.get_turn``)."""
    if isinstance(ref, int) or (isinstance(ref, str) and ref.strip().isdigit()):
        number = int(ref)
        numbered = [t for t in turns if t.number == number]
        found = (
            [t for t in numbered if t.in_conversation]
            or [t for t in numbered if t.status is TurnStatus.RUNNING]
            or [t for t in numbered if t.status is TurnStatus.SET_ASIDE]
        )
        if len(found) > 1 and found[0].status is TurnStatus.SET_ASIDE:
            raise _ambiguous(ref, found, "give a token prefix")
        if found:
            return found[-1]
        if isinstance(ref, str) and len(ref.strip()) >= 4:  # 4+ digits: a token prefix too
            by_token = [t for t in turns if t.token.startswith(ref.strip())]
            if len(by_token) == 1:
                return by_token[0]
        reached = {t.number for t in turns if t.in_conversation or not t.status.ended}
        raise TurnNotFound(
            f"session {session_id[:12]} has no turn {number} (it has {len(reached)})"
        ).settled_by(TURNS, session=session_id)
    prefix = normalise_id(str(ref), "turn")
    found = [t for t in turns if t.token.startswith(prefix)]
    if len(found) > 1:
        raise _ambiguous(ref, found, "give more characters")
    if not found:
        raise TurnNotFound(f"session {session_id[:12]} has no turn matching {ref!r}")
    return found[0]
