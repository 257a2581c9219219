"""The turn lifecycle and its write order.

Invariant 1, begin before work: ``begin`` commits the turn's row (status ``running``, owner,
parent, token) and the user's prompt in one synced transaction before it returns, so the caller
can only reach the agent once both are durable. The check that no other turn is running and the
insert share that transaction (``BEGIN IMMEDIATE``), and the database holds a unique index on the
running turn of a session besides (invariant 8).

Invariant 2, one transaction to commit: ``commit_turn`` folds the journal into messages, sets the
turn's status and moves the session's head inside one transaction. The journal's rows stay where
they are and, the turn having ended, are its run timeline from then on: the turn's status alone
says which they are. A crash before its COMMIT leaves the turn running with its journal (recovery
applies it); a crash after leaves it committed, with a timeline and no journal. There is no state
in between, so no event is replayed twice and none is lost. The folded messages store no text
of their own: a run of text chunks is the range of seqs it joins, read back from the turn's
events, which are durable before the commit that writes the messages naming them (the journal is
flushed first, and ``commit_turn`` folds only what it finds). ``commit_turn`` only commits a turn
that is still ``running`` (or ``set_aside``, for an explicit apply): whoever commits first wins,
the other sees it has gone.

A begin, a reopen or an end whose commit raised may have landed all the same (the store's reply
was lost): it is read back before anything else is written for the turn, never written twice
(``engine/reconcile.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from turnback import faults, jsontext
from turnback.engine import reconcile
from turnback.engine.fold import (
    Folder,
    cancelled_tool_result,
    error_event,
    fold,
    is_text_chunk,
    notice,
    parse,
    superseded,
    unfinished_tool_calls,
)
from turnback.engine.owners import host_identity, is_alive
from turnback.errors import (
    RECOVER,
    TURNS,
    CheckpointUnavailable,
    InvalidEvent,
    OwnershipLost,
    ResumeUnavailable,
    RevertInProgress,
    SessionElsewhere,
    SessionNotFound,
    StoreError,
    TurnbackError,
    TurnInProgress,
    TurnNotFound,
    TurnNotRunning,
)
from turnback.model import (
    JSON,
    UNFINISHED_REVERTS,
    EventKind,
    JournalEntry,
    Message,
    MessageKind,
    Revert,
    RevertState,
    RunEvent,
    SessionRecord,
    StepCheckpoint,
    ToolCheckpoint,
    Turn,
    TurnStatus,
)
from turnback.records import record
from turnback.store import Tx

if TYPE_CHECKING:
    from turnback.engine.checkpoints import WorkspaceCheckpoints
    from turnback.engine.journal import After, Journal
    from turnback.engine.owners import Lease
    from turnback.store import Store

#: Events larger than this are refused; large payloads belong in files the event names.
MAX_EVENT_BYTES = 4 * 2**20

_BOUNDARY = frozenset(
    {
        EventKind.TOOL_CALL.value,
        EventKind.PERMISSION_REQUESTED.value,
        EventKind.PERMISSION_ANSWERED.value,
        EventKind.INPUT_REQUESTED.value,
        EventKind.INPUT_ANSWERED.value,
        EventKind.STEP_CHECKPOINT.value,
        EventKind.REWIND.value,
        EventKind.ERROR.value,
    }
)
_REQUESTS = {
    EventKind.PERMISSION_REQUESTED.value: "permission",
    EventKind.INPUT_REQUESTED.value: "input",
}
_ANSWERS = frozenset({EventKind.PERMISSION_ANSWERED.value, EventKind.INPUT_ANSWERED.value})
_SIDE_EFFECTS = frozenset(
    {EventKind.REWIND.value, EventKind.STEP_CHECKPOINT.value, *_REQUESTS, *_ANSWERS}
)


# Plain strings for the kinds every record compares with: an enum member costs an attribute
# look-up each time, on the path of every streamed chunk.
_STEP = EventKind.STEP_CHECKPOINT.value
_REWIND = EventKind.REWIND.value
_TOOL_CALL_UPDATE = EventKind.TOOL_CALL_UPDATE.value


def is_boundary(kind: str, event: JSON) -> bool:
    if kind in _BOUNDARY:
        return True
    return kind == _TOOL_CALL_UPDATE and event.get("status") in ("completed", "failed")


#: Built once: json.dumps with options builds an encoder per call. Without the check for a value
#: that contains itself (a tenth of the cost of encoding an event): such a value ends in
#: RecursionError instead, which :func:`encode` reports as it.
_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False
)


def _encode(value: Any) -> str:
    return jsontext.safe_text(_ENCODER.encode(value), value)  # unpaired surrogates escaped


def encode(value: Any, what: str) -> str:
    """JSON text of an event or prompt, refused with a clear error before anything is written."""
    try:
        text = _encode(value)
    except RecursionError as error:
        raise InvalidEvent(
            f"{what} is not JSON-serialisable (it contains itself, or is nested too deeply: "
            f"{error}); nothing was written"
        ) from error
    except (TypeError, ValueError) as error:
        raise InvalidEvent(
            f"{what} is not JSON-serialisable ({error}); nothing was written. "
            "Pass plain dicts, lists, strings, numbers, booleans and None"
        ) from error
    _check_size(text, what)
    return text


def _check_size(text: str, what: str) -> None:
    if len(text) > MAX_EVENT_BYTES // 4 and len(text.encode()) > MAX_EVENT_BYTES:
        raise InvalidEvent(
            f"{what} is {len(text.encode()) / 2**20:.1f} MiB, over the "
            f"{MAX_EVENT_BYTES // 2**20} MiB limit; nothing was written. Write large content to "
            "a file and put its path in the event"
        )


#: The payload of a plain text chunk that holds nothing else, its text kept apart.
_BARE_CHUNK = {
    kind: f'{{"sessionUpdate":"{kind}","content":{{"type":"text"}}}}'
    for kind in (
        EventKind.USER_MESSAGE_CHUNK.value,
        EventKind.AGENT_MESSAGE_CHUNK.value,
        EventKind.AGENT_THOUGHT_CHUNK.value,
    )
}


def _text_apart(kind: str, update: JSON, raw: str | None) -> tuple[str, str | None]:
    """A plain text chunk's payload and text (see ``JournalEntry.text``): the text is stored
    as it is, never escaped into JSON, which costs 5-7 ns a character. A text the database
    could not hold as it is (an unpaired surrogate, a NUL) stays in the payload, escaped."""
    what = f"the {kind} event"
    text = update["content"].get("text")
    if text is None or "\x00" in text or jsontext.has_surrogates(text):
        return (raw if raw is not None else encode(update, what)), None
    _check_size(text, what)
    if len(update) == 2:  # nothing but its kind and content
        return _BARE_CHUNK[kind], text
    return encode({**update, "content": {"type": "text"}}, what), text


#: ACP's content blocks (the schema's ``ContentBlock``): for each ``type``, its required string
#: fields, and its optional fields with the JSON types they may have (None: null allowed).
_STR, _OBJ, _INT = (str,), (dict,), (int,)
_BLOCKS: dict[str, tuple[tuple[str, ...], dict[str, tuple[type, ...]]]] = {
    "text": (("text",), {}),
    "image": (("data", "mimeType"), {"uri": _STR}),
    "audio": (("data", "mimeType"), {}),
    "resource_link": (
        ("name", "uri"),
        {"title": _STR, "description": _STR, "mimeType": _STR, "size": _INT},
    ),
    "resource": ((), {}),
}
_ANY_BLOCK: dict[str, tuple[type, ...]] = {"annotations": _OBJ, "_meta": _OBJ}


def validate_prompt(prompt: Any) -> Any:
    """``prompt`` if it is a non-empty string or a list of ACP content blocks; else
    InvalidEvent naming the first field that is wrong (``prompt[1].text``)."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise InvalidEvent("the prompt is empty; give the turn something to do")
        return prompt
    if not isinstance(prompt, list) or not prompt:
        raise InvalidEvent(
            "a prompt is a non-empty string or a list of ACP content blocks "
            f"(dicts such as {{'type': 'text', 'text': '...'}}), not "
            f"{'an empty list' if isinstance(prompt, list) else type(prompt).__name__}"
        )
    for index, block in enumerate(prompt):
        _validate_block(block, f"prompt[{index}]")
    return prompt


def _invalid(field: str, problem: str) -> InvalidEvent:
    error = InvalidEvent(f"{field} {problem}; nothing was written")
    error.field = field
    return error


def _validate_block(block: Any, where: str) -> None:
    if not isinstance(block, dict):
        raise _invalid(where, f"must be an ACP content block (an object), not {_kind(block)}")
    kind = block.get("type")
    if kind not in _BLOCKS:
        raise _invalid(
            f"{where}.type", f"must be one of {', '.join(map(repr, _BLOCKS))}, not {kind!r}"
        )
    required, optional = _BLOCKS[kind]
    for name in required:
        if not isinstance(block.get(name), str):
            raise _invalid(f"{where}.{name}", f"must be a string, not {_kind(block.get(name))}")
    for name, types in (*optional.items(), *_ANY_BLOCK.items()):
        value = block.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            expected = {str: "a string", dict: "an object", int: "an integer"}[types[0]]
            raise _invalid(f"{where}.{name}", f"must be {expected} or null, not {_kind(value)}")
    if kind == "resource":
        resource = block.get("resource")
        if not isinstance(resource, dict):
            raise _invalid(f"{where}.resource", f"must be an object, not {_kind(resource)}")
        if not isinstance(resource.get("uri"), str):
            raise _invalid(
                f"{where}.resource.uri", f"must be a string, not {_kind(resource.get('uri'))}"
            )
        if not isinstance(resource.get("text"), str) and not isinstance(resource.get("blob"), str):
            raise _invalid(f"{where}.resource", "must have a string 'text' or a string 'blob'")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names |= {list: "an array", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def begin(
    store: Store,
    session_id: str,
    prompt: Any,
    *,
    lease: Lease,
    token: str | None = None,
    prepare: Callable[[Tx, Turn], None] | None = None,
) -> Turn:
    """Make a new running turn durable (invariant 1). Raises TurnInProgress (invariant 8).

    ``prepare`` runs inside the begin transaction once the turn's row is in (it records the
    baseline checkpoint, taken just before). The turn runs under a fresh fencing token and this
    process's lease, which this transaction claims or renews."""
    prompt = validate_prompt(prompt)
    encode(prompt, "the prompt")
    now = time.time()
    token, fence = token or uuid.uuid4().hex, uuid.uuid4().hex
    planned: Turn | None = None
    faults.point("turn.begin.before")
    try:
        with store.atomic() as tx:
            session = quiet_session(tx, session_id, "beginning another", "begin")
            head = tx.get_turn(session.head) if session.head else None
            owner = lease.claim(tx)
            require_held_here(session, owner.host)
            turn = planned = Turn(
                token=token,
                session_id=session_id,
                number=head.number + 1 if head else 1,
                parent=session.head,
                owner_id=owner.id,
                status=TurnStatus.RUNNING,
                prompt=prompt,
                started_at=now,
                fence=fence,
                host=owner.host,
            )
            tx.insert_turn(turn)
            if prepare is not None:
                prepare(tx, turn)
                turn = tx.get_turn(turn.token) or turn
            faults.point("turn.begin.inside")
        faults.point("turn.begin.after")
    except StoreError as error:
        if planned is None:  # failed before the turn's row was written
            raise
        turn, _ = _read_back_begin(store, planned, error, TurnStatus.FAILED, _UNCONFIRMED_BEGIN)
    _settled_unconfirmed(session_id)
    return turn


#: Why a turn whose begin this process could not confirm is ended by the session's next begin.
_UNCONFIRMED_BEGIN = (
    "the store did not confirm its begin (the reply to the commit was lost), so its caller was "
    "told it had failed and it never ran"
)
_UNCONFIRMED_REOPEN = (
    "the store did not confirm that it was continued (the reply to the commit was lost), so its "
    "caller was told it had failed and it did not run again"
)

#: Turns this process began or reopened whose commit it could not confirm (the store's reply
#: was lost, and it could not be read back, or not yet): the caller was told it failed, so if
#: it landed nobody runs it. The next begin in its session that finds it running ends it, as
#: said here: (the turn as written, its end, why).
_UNCONFIRMED: dict[str, tuple[Turn, TurnStatus, str]] = {}


def _read_back_begin(
    store: Store, planned: Turn, error: StoreError, status: TurnStatus, why: str
) -> tuple[Turn, int]:
    """After a begin or reopen of ``planned`` failed with ``error``: the turn and its last seq,
    if it landed all the same; else ``error`` raised, the turn kept among the unconfirmed (it
    may yet show, or the read-back itself failed) to be ended ``status`` by the session's next
    begin."""
    assert planned.fence is not None
    try:
        landed = reconcile.begun(store, planned.token, planned.fence)
    except StoreError:
        landed = None
    if landed is None:
        _UNCONFIRMED[planned.token] = (planned, status, why)
        raise error
    return landed


def _settled_unconfirmed(session_id: str) -> None:
    """A turn of ``session_id`` began: none of its unconfirmed ones can be running any more
    (two running turns in a session are refused by the store), so forget them."""
    for token, (turn, _status, _why) in list(_UNCONFIRMED.items()):
        if turn.session_id == session_id:
            _UNCONFIRMED.pop(token, None)


def end_unconfirmed(store: Store, journal: Journal, token: str) -> bool:
    """End the running turn ``token`` if this process wrote it without being able to confirm it
    to its caller (see ``_UNCONFIRMED``), as said there; whether it was one."""
    found = _UNCONFIRMED.pop(token, None)
    if found is None:
        return False
    turn, status, why = found
    running = RunningTurn(store, journal, turn)
    if status is TurnStatus.INTERRUPTED:
        running.interrupt(why)
    else:
        running.fail(why)
    return True


def quiet_session(tx: Tx, session_id: str, before: str, then: str) -> SessionRecord:
    """The session, its workspace locked, once no turn of it runs (:func:`require_idle`, with
    ``before``) and no revert of its workspace is half done (:func:`require_no_revert`, with
    ``then``)."""
    tx.lock_workspace(session_id)
    session = tx.get_session(session_id)
    if session is None:
        raise SessionNotFound(f"no session {session_id}")
    require_idle(tx, session_id, before)
    require_no_revert(tx, session.workspace, then)
    return session


def require_idle(tx: Tx, session_id: str, before: str) -> None:
    """Raise TurnInProgress, naming the running turn, if the session has one (invariant 8)."""
    running = tx.running_turn(session_id)
    if running is not None:
        raise TurnInProgress(
            f"session {session_id[:12]} already has turn {running.number} running "
            f"(token {running.token}, since {time.ctime(running.started_at)}); wait for it to "
            f"end before {before}, or cancel it",
            running.token,
            turn=running.number,
        )


def unfinished(reverts: Iterable[Revert]) -> list[Revert]:
    """The reverts and undos of ``reverts`` that have not finished: their files may be moving."""
    return [r for r in reverts if r.state in UNFINISHED_REVERTS]


def require_held_here(session: SessionRecord, host: str, doing: str = "run it") -> None:
    """Raise SessionElsewhere if a handoff gave the session to another machine than ``host``:
    its turns begin (and continue), and its reverts and undos run, only there (where its
    workspace is). Called in the transaction that writes the turn or revert, under the
    session's lock, so a handoff that commits first is always seen."""
    if session.host is not None and session.host != host:
        raise SessionElsewhere(
            f"session {session.id[:12]} was handed off to host {session.host}, so its turns "
            f"run there, not on this one ({host}); hand it off to this host first to {doing} "
            "here",
            session.host,
        )


def require_no_revert(tx: Tx, workspace: str, then: str) -> None:
    """Raise RevertInProgress if a revert or undo of any session on ``workspace`` has not
    finished; ``then`` is what the caller does once it has (``"begin"``). A revert holds its
    workspace against new turns from the transaction that writes its row to the one that commits
    or rolls it back; the row is durable, so a revert killed midway still holds until recovery
    settles it (docs/design.md, invariant 9), and the error then says so."""
    for revert in tx.reverts(None, UNFINISHED_REVERTS):
        session = tx.get_session(revert.session_id)
        if session is None or session.workspace != workspace:
            continue
        undoing = revert.state is RevertState.UNDOING
        what = f"{'the undo of ' if undoing else ''}revert {revert.id} of session "
        what += revert.session_id[:12]
        owner = tx.get_owner(revert.owner_id) if revert.owner_id else None
        if is_alive(owner, tx.now()):
            raise RevertInProgress(
                f"{what} is moving the files of {workspace}; {then} once it has finished",
                revert.id,
                revert.owner_id,
            )
        away = owner is not None and revert.files and owner.host != host_identity()[0]
        raise RevertInProgress(
            f"{what} was interrupted midway and its process is gone: the files of {workspace} "
            f"are partly {'put back' if undoing else 'reverted'} until recovery "
            + (f"on host {owner.host} " if away and owner is not None else "")
            + f"{'finishes the undo' if undoing else 'rolls the revert back'}",
            revert.id,
            revert.owner_id,
        ).settled_by(RECOVER, state="interrupted")


def reopen(store: Store, token: str, *, lease: Lease) -> tuple[Turn, int]:
    """Continue an interrupted turn from its last step checkpoint (from its beginning if it has
    none), in one transaction: the reverse of recovery's apply, then a rewind. Returns the turn,
    running again under this process, and the seq its next event takes.

    Only the session's head can be reopened, and only while nothing runs: its parent becomes the
    head again and the turn is running from it, so invariants 6 and 8 hold as for a new turn. Its
    events stay where they are -- its journal again, now that it runs -- and its folded messages
    and end-of-turn file changes go, to be folded and captured again when it ends. The rewind
    appended in the same transaction makes what it recorded after the checkpoint (recovery's
    notice and cancelled tool calls included) leave the conversation, as after an agent crash,
    so the agent doing it again shows it once. A crash after the commit leaves a running turn
    with a dead owner, which recovery settles again like any other. It runs under a fresh
    fencing token."""
    now = time.time()
    fence = uuid.uuid4().hex
    planned: Turn | None = None
    faults.point("turn.reopen.before")
    with store.read() as tx:
        found = tx.get_turn(token)
    try:
        with store.atomic() as tx:
            if found is not None:
                tx.lock_workspace(found.session_id)
            turn = tx.get_turn(token)
            session = tx.get_session(turn.session_id) if turn else None
            if turn is None or session is None:
                raise TurnNotFound(f"no turn {token}").settled_by(TURNS)
            if (
                turn.status is not TurnStatus.INTERRUPTED
                or session.head != token
                or turn.reverted_by
            ):
                raise ResumeUnavailable(
                    f"turn {turn.number} ({turn.token}) cannot be continued: only an interrupted "
                    f"turn at its session's head can, and it is {turn.status.value}"
                    + ("" if session.head == token else ", not the head")
                    + (", reverted" if turn.reverted_by else "")
                )
            require_idle(tx, turn.session_id, "continuing an interrupted turn")
            require_no_revert(tx, session.workspace, "continue the turn")
            owner = lease.claim(tx)
            require_held_here(session, owner.host)
            changed = tx.reopen_turn(token, owner.id, fence)
            assert changed, "checked interrupted in this same transaction"
            planned = dataclasses.replace(turn, status=TurnStatus.RUNNING, fence=fence)
            tx.set_head(turn.session_id, turn.parent, now)
            _, last = tx.journal_size(token)
            steps = tx.step_checkpoints(token)
            event = rewind_event(steps[-1] if steps else None)
            rewind = encode(event, "a rewind")
            tx.append_journal([JournalEntry(token, last + 1, EventKind.REWIND.value, rewind, now)])
            tx.delete_step_checkpoints(token, after_seq=event["toSeq"])
            faults.point("turn.reopen.inside")
            reopened = tx.get_turn(token)
        faults.point("turn.reopen.after")
    except StoreError as error:
        if planned is None:
            raise
        reopened, rewound = _read_back_begin(
            store, planned, error, TurnStatus.INTERRUPTED, _UNCONFIRMED_REOPEN
        )
        _settled_unconfirmed(reopened.session_id)
        return reopened, rewound + 1  # the rewind it appended is its last event
    assert reopened is not None
    _settled_unconfirmed(reopened.session_id)
    return reopened, last + 2


def rewind_event(checkpoint: StepCheckpoint | None) -> JSON:
    """The event that voids what a running turn recorded after ``checkpoint`` (None: all)."""
    event: JSON = {
        "sessionUpdate": EventKind.REWIND.value,
        "toSeq": checkpoint.journal_seq if checkpoint else 0,
    }
    if checkpoint is not None:
        event.update(step=checkpoint.step, checkpointId=checkpoint.checkpoint_id)
    return event


def commit_turn(
    tx: Tx,
    turn: Turn,
    status: TurnStatus,
    *,
    detail: str | None = None,
    extra: Sequence[JSON] = (),
    keep_unreadable: bool = False,
    expected: TurnStatus = TurnStatus.RUNNING,
    prefolded: tuple[int, list[tuple[MessageKind, JSON]]] | None = None,
    now: float | None = None,
) -> bool:
    """Fold ``turn``'s journal into its session and end it, inside the caller's transaction.

    ``extra`` events are appended after the journal (a notice, synthetic tool results). Returns
    False, having changed nothing, when the turn is no longer in ``expected`` status. ``now`` is
    its end time (by default, the time it is called).

    ``prefolded`` is ``(events, messages)`` from the process that recorded the turn and folded it
    as it went. It is used only when the journal holds exactly those ``events`` (seqs 1 to
    ``events``): then the journal need not be read back. Otherwise it is folded here.
    """
    current = tx.get_turn(turn.token)
    if current is None or current.status is not expected:
        return False
    now = time.time() if now is None else now
    if (
        prefolded is not None
        and not extra
        and status is TurnStatus.COMPLETED
        and tx.journal_size(turn.token) == (prefolded[0], prefolded[0])
    ):
        messages = [
            Message(turn.session_id, turn.token, i, kind, data)
            for i, (kind, data) in enumerate(prefolded[1])
        ]
        ending = Ending(current, status, detail, prefolded[0], now, messages)
    else:
        ending = fold_ending(
            current,
            tx.journal(turn.token),
            status,
            detail=detail,
            extra=extra,
            keep_unreadable=keep_unreadable,
            now=now,
        )
    write_endings(tx, [ending], expected=expected)
    return True


@record(frozen=False)
class Ending:
    """What ending a turn writes: its folded messages, the run events that had to be rewritten
    (``replaced``) or were added after its journal (``added``), and its row's end."""

    turn: Turn
    status: TurnStatus
    detail: str | None
    events: int  # the journal's entries, the event count of its row
    now: float
    messages: list[Message]
    replaced: list[RunEvent] = dataclasses.field(default_factory=list)
    added: list[RunEvent] = dataclasses.field(default_factory=list)


def fold_ending(
    turn: Turn,
    entries: Sequence[JournalEntry],
    status: TurnStatus,
    *,
    detail: str | None = None,
    extra: Sequence[JSON] = (),
    keep_unreadable: bool = False,
    now: float,
) -> Ending:
    """How ``turn`` ends with the journal ``entries``: pure, so recovery folds many turns
    before it writes any. Raises UnreadableEntry for an entry that cannot be read, unless
    ``keep_unreadable`` keeps it in the run timeline as such."""
    events = [parse(entry, keep_unreadable=keep_unreadable) for entry in entries]
    last_seq = entries[-1].seq if entries else 0
    if status is not TurnStatus.COMPLETED:
        why = detail or f"the turn was {status.value}"
        void = superseded((entry.seq, event) for entry, event in zip(entries, events, strict=True))
        live = [
            event for entry, event in zip(entries, events, strict=True) if entry.seq not in void
        ]
        extra = [cancelled_tool_result(c, why) for c in unfinished_tool_calls(live)] + list(extra)
    timeline = [
        RunEvent(
            turn.session_id,
            turn.token,
            entry.seq,
            str(event.get("sessionUpdate", entry.kind)),
            event,
            entry.at,
        )
        for entry, event in zip(entries, events, strict=True)
    ] + [
        RunEvent(turn.session_id, turn.token, last_seq + i, str(e["sessionUpdate"]), e, now)
        for i, e in enumerate(extra, start=1)
    ]
    void = superseded((event.seq, event.event) for event in timeline)
    folder = Folder(turn.prompt, refer=True)  # text chunks stored as the seqs they join
    for event in timeline:
        if event.seq not in void:
            folder.add(event.event, event.seq)
    messages = [
        Message(turn.session_id, turn.token, i, kind, data)
        for i, (kind, data) in enumerate(folder.messages())
    ]
    # The journal's rows become the run timeline as they are; only rows that had to be wrapped
    # (unreadable ones, on an explicit apply) are rewritten, and the extra events added.
    replaced = [e for e, entry in zip(timeline, entries, strict=False) if e.kind != entry.kind]
    return Ending(
        turn, status, detail, len(entries), now, messages, replaced, timeline[len(entries) :]
    )


def write_endings(tx: Tx, endings: Sequence[Ending], *, expected: TurnStatus) -> None:
    """Write the ends of turns, each of a session of its own and found in ``expected`` status
    by the caller under their sessions' locks: in statements whose results nobody waits for,
    so on PostgreSQL all of them go to the server with what the transaction sends next."""
    tx.insert_messages([m for ending in endings for m in ending.messages])
    tx.replace_run_events([e for ending in endings for e in ending.replaced])
    tx.insert_run_events([e for ending in endings for e in ending.added])
    for ending in endings:
        if ending.status is not TurnStatus.INTERRUPTED:
            tx.delete_step_checkpoints(ending.turn.token)
    tx.end_turns(
        [(e.turn.token, e.status, e.now, e.detail, e.events) for e in endings], expected=expected
    )
    for ending in endings:
        tx.set_head(ending.turn.session_id, ending.turn.token, ending.now)
    tx.clear_pending_requests([ending.turn.token for ending in endings])


def journal_messages(tx: Tx, turn: Turn) -> list[Message]:
    """A turn that has not ended, as the conversation it would fold into now: its journal,
    without what a resume superseded. Reads only; the journal stays as it is."""
    entries = tx.journal(turn.token)
    events = [parse(entry, keep_unreadable=True) for entry in entries]
    void = superseded((entry.seq, event) for entry, event in zip(entries, events, strict=True))
    live = [event for entry, event in zip(entries, events, strict=True) if entry.seq not in void]
    return [
        Message(turn.session_id, turn.token, i, kind, data)
        for i, (kind, data) in enumerate(fold(turn.prompt, live))
    ]


def clear_requests(tx: Tx, token: str) -> None:
    """Drop a turn's pending permission and input requests: once it has ended nobody can answer
    them."""
    tx.clear_pending_requests([token])


def _validate_step(update: JSON) -> None:
    step, checkpoint_id = update.get("step"), update.get("checkpointId")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise InvalidEvent(f"a step checkpoint's step is a whole number >= 0, not {step!r}")
    if not isinstance(checkpoint_id, str) or not checkpoint_id:
        raise InvalidEvent(
            f"a step checkpoint needs a non-empty string checkpointId, not {checkpoint_id!r}"
        )
    store_path = update.get("storePath")
    if store_path is not None and not isinstance(store_path, str):
        raise InvalidEvent(f"a step checkpoint's storePath is a string, not {store_path!r}")


#: Turns of this process whose end could not be written (the store failed), by token, with how
#: each was to end: the next turn begun in their session ends them first (``stranded``).
_STRANDED: dict[str, tuple[RunningTurn, TurnStatus, str | None, tuple[JSON, ...]]] = {}


def stranded(token: str) -> RunningTurn | None:
    """The running turn ``token`` if this process failed to write its end, else None."""
    found = _STRANDED.get(token)
    return found[0] if found else None


class RunningTurn:
    """A turn this process is running. As a context manager: a normal exit completes it, an
    exception fails it (cancellation cancels it) and propagates."""

    def __init__(
        self,
        store: Store,
        journal: Journal,
        turn: Turn,
        *,
        workspace: str | None = None,
        checkpoints: WorkspaceCheckpoints | None = None,
        next_seq: int = 1,
    ) -> None:
        self._store = store
        self._journal = journal
        self._workspace = workspace
        self._checkpoints = checkpoints
        self.turn = turn
        # Folds as it records; dropped (the commit folds the journal instead) after a rewind or
        # when recording resumed a journal this object did not see from the start.
        self._folder: Folder | None = Folder(turn.prompt, refer=True) if next_seq == 1 else None
        self._seq = next_seq - 1
        self._ended = False
        #: (status, end time) of each end written whose commit was not confirmed
        self._unconfirmed_ends: list[tuple[TurnStatus, float]] = []
        journal.hold(turn.token, turn.fence)

    @property
    def token(self) -> str:
        return self.turn.token

    @property
    def number(self) -> int:
        return self.turn.number

    @property
    def session_id(self) -> str:
        return self.turn.session_id

    def record(self, update: JSON, *, sync: bool = True, text: str | None = None) -> int:
        """Journal one ACP ``session/update`` payload (or a turnback event); returns its seq.

        When this returns the event is acknowledged under the journal's durability mode. With
        ``sync=False`` it is only buffered, in order, and the caller calls :meth:`sync` (in a
        worker thread, say) before it treats the event as acknowledged. ``text`` is ``update``'s
        JSON text as it was received, when the caller has it: stored as it is, not encoded
        again (it must encode as UTF-8 and hold only JSON's own values)."""
        self._require_running()
        if not isinstance(update, dict):
            raise InvalidEvent(
                f"an event is a dict with a 'sessionUpdate' kind, not {type(update).__name__}"
            )
        kind = update.get("sessionUpdate")
        if not isinstance(kind, str) or not kind:
            raise InvalidEvent(
                "an event needs a non-empty string 'sessionUpdate' naming its kind, such as "
                "'agent_message_chunk'; nothing was written"
            )
        if kind == _STEP:
            _validate_step(update)
        seq = self._seq + 1
        plain = is_text_chunk(kind, update)
        if plain:
            payload, apart = _text_apart(kind, update, text)
        else:
            payload = text if text is not None else encode(update, f"the {kind} event")
            apart = None
        folder = self._folder
        if folder is not None:
            if plain:
                folder.add_text(kind, "", update.get("messageId"), seq)  # seqs, no text
            elif kind == _REWIND:
                self._folder = None
            else:
                folder.add(json.loads(payload), seq)  # a copy the caller cannot change
        self._seq = seq
        entry = JournalEntry(self.turn.token, seq, kind, payload, time.time(), apart)
        faults.point("turn.record.before")
        self._journal.append(
            entry,
            boundary=is_boundary(kind, update),
            after=self._side_effect(kind, update, entry),
            wait=sync,
        )
        faults.point("turn.record.after")
        return entry.seq

    def sync(self) -> None:
        """Make every event recorded so far durable (whatever the mode)."""
        self._journal.flush(self.turn.token)

    def step(
        self,
        step: int,
        checkpoint_id: str,
        state: Any = None,
        store_path: str | None = None,
        *,
        sync: bool = True,
    ) -> int:
        """Save a step checkpoint: a point inside the turn the agent can resume from. It is a
        boundary event: durable when this returns (with ``sync=False``, once :meth:`sync` has)."""
        event: JSON = {
            "sessionUpdate": EventKind.STEP_CHECKPOINT.value,
            "step": step,
            "checkpointId": checkpoint_id,
        }
        if state is not None:
            event["state"] = state
        if store_path is not None:
            event["storePath"] = store_path
        faults.point("turn.step.before")
        seq = self.record(event, sync=sync)
        faults.point("turn.step.after")
        return seq

    def last_checkpoint(self) -> StepCheckpoint | None:
        """The latest step checkpoint this turn can resume from."""
        self._journal.flush(self.turn.token)
        with self._store.read() as tx:
            checkpoints = tx.step_checkpoints(self.turn.token)
        return checkpoints[-1] if checkpoints else None

    def rewind(self, checkpoint: StepCheckpoint | None) -> int:
        """Resume the turn from ``checkpoint`` (None: from its beginning): what was recorded after
        it leaves the conversation (kept in the run timeline), later step checkpoints are dropped
        and the turn's pending permission and input requests are cleared, in one transaction."""
        return self.record(rewind_event(checkpoint))

    def messages_so_far(self) -> list[Message]:
        """What the turn has recorded so far, folded as it would be if it ended now (after a
        rewind, without what the rewind voided)."""
        self._journal.flush()
        with self._store.read() as tx:
            entries = tx.journal(self.turn.token)
        events = [(entry.seq, parse(entry, keep_unreadable=True)) for entry in entries]
        void = superseded(events)
        folded = fold(self.turn.prompt, [event for seq, event in events if seq not in void])
        return [
            Message(self.turn.session_id, self.turn.token, i, kind, data)
            for i, (kind, data) in enumerate(folded)
        ]

    def clear_requests(self) -> int:
        """Clear the turn's pending permission and input requests (whoever asked is gone),
        keeping everything it recorded: a rewind to where the turn now stands."""
        return self.record({"sessionUpdate": EventKind.REWIND.value, "toSeq": self._seq})

    def _side_effect(self, kind: str, update: JSON, entry: JournalEntry) -> After | None:
        """Rows that must commit in the same transaction as this event, if any."""
        if kind not in _SIDE_EFFECTS:
            return None
        token, session_id = self.turn.token, self.turn.session_id
        if kind == EventKind.REWIND:
            to_seq = int(update.get("toSeq", 0))

            def rewind(tx: Tx) -> None:
                tx.delete_step_checkpoints(token, after_seq=to_seq)
                clear_requests(tx, token)

            return rewind
        if kind == EventKind.STEP_CHECKPOINT:
            checkpoint = StepCheckpoint(
                turn=token,
                step=update["step"],
                checkpoint_id=update["checkpointId"],
                journal_seq=entry.seq,
                state=update.get("state"),
                store_path=update.get("storePath"),
                at=entry.at,
            )
            return lambda tx: tx.insert_step_checkpoint(checkpoint)
        if kind in _REQUESTS:
            # One row each, so that asking and answering cost the same however many are pending.
            request_id = str(update.get("requestId", ""))
            request = {"turn": token, "requestId": request_id, "kind": _REQUESTS[kind], **update}
            return lambda tx: tx.add_pending_request(
                session_id, token, request_id, request, entry.at
            )
        if kind in _ANSWERS:
            answered = str(update.get("requestId", ""))

            def remove(tx: Tx) -> None:
                tx.remove_pending_request(token, answered)

            return remove
        return None

    def checkpoint_tool(
        self, tool: str, call_id: str | None, summary: str, *, git_state: bool = False
    ) -> ToolCheckpoint:
        """Capture the workspace just before a tool of this turn runs (a shell command, a
        write), so that any file can be brought back as it was then; with ``git_state``, keep
        the repository's refs, stash and reflog too (before a destructive git command).

        Invariant 4: the capture's objects and ref are written before the row naming it
        commits, in a transaction that checks this turn still runs under its fencing token. A
        capture that fails never stops the tool: the row says so (no commit) and an activity
        says why."""
        self._require_running()
        if self._checkpoints is None or self._workspace is None:
            raise CheckpointUnavailable("workspace checkpoints are turned off for this handle")
        with self._store.read() as tx:
            number = len(tx.tool_checkpoints(self.turn.token)) + 1
        ref = f"{self.turn.session_id}/{self.turn.token}/tool-{number}"
        captured, notes = self._checkpoints.capture(self._workspace, ref)
        state = None
        if git_state:
            try:
                state = self._checkpoints.snapshots.repository_state(Path(self._workspace))
            except (TurnbackError, OSError) as error:
                state = {"error": str(error)}
        checkpoint = ToolCheckpoint(
            turn=self.turn.token,
            number=number,
            tool=tool,
            call_id=call_id,
            summary=summary,
            commit=captured.commit if captured else None,
            git_state=state,
            at=time.time(),
        )
        with self._store.atomic() as tx:
            if tx.lock_turns([self.turn.token]).get(self.turn.token) != (
                TurnStatus.RUNNING,
                self.turn.fence,
            ):
                self._journal.lose_turn(self.turn.token, "another process recovered it")
                self._journal.check(self.turn.token)
            tx.insert_tool_checkpoint(checkpoint)
            for note in notes:
                note.record(tx, self.turn.session_id, self.turn.token)
        return checkpoint

    def complete(self, detail: str | None = None) -> Turn:
        """End the turn completed; ``detail`` says how, where there is more to say than that
        (an agent that stopped at its token limit, say)."""
        return self._end(TurnStatus.COMPLETED, detail)

    def fail(self, error: BaseException | str) -> Turn:
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return self._end(TurnStatus.FAILED, text, [error_event(text)])

    def cancel(self, reason: str = "cancelled") -> Turn:
        return self._end(TurnStatus.CANCELLED, reason)

    def interrupt(self, reason: str) -> Turn:
        """End the turn interrupted, with what it did so far and a notice saying why; it can be
        continued later (:meth:`Session.reopen`)."""
        return self._end(TurnStatus.INTERRUPTED, reason, [notice(reason)])

    def _end(self, status: TurnStatus, detail: str | None, extra: Sequence[JSON] = ()) -> Turn:
        self._require_running()
        try:
            ended = self._commit_end(status, detail, extra)
        except StoreError as error:
            if self._unconfirmed_ends:
                with contextlib.suppress(StoreError):  # out of reach: read back at the next end
                    self._read_back_end()
            if not self._ended:
                # The store cannot write (a full disk, say) or cannot say whether it did:
                # remember how this turn was to end, so this process ends it once it can
                # instead of holding the session (end_stranded).
                _STRANDED[self.turn.token] = (self, status, detail, tuple(extra))
                raise error
            ended = self.turn
        _STRANDED.pop(self.turn.token, None)
        if ended.status is not status:
            self._require_running()  # an earlier end, unconfirmed, had landed: say which
        return ended

    def _read_back_end(self) -> None:
        """The turn has ended as one of the ends this process wrote without learning whether
        they landed, if one did."""
        landed = reconcile.ended(self._store, self.turn.token, self._unconfirmed_ends)
        if landed is not None:
            self._ended_as(landed)

    def _ended_as(self, ended: Turn) -> None:
        self._ended = True
        self._unconfirmed_ends.clear()
        self._journal.release(self.turn.token)
        self.turn = ended

    def _commit_end(
        self, status: TurnStatus, detail: str | None, extra: Sequence[JSON] = ()
    ) -> Turn:
        self._journal.flush(self.turn.token)
        capture = None
        if self._checkpoints is not None and self._workspace is not None:
            capture = self._checkpoints.for_turn(
                self._workspace,
                self.turn.session_id,
                self.turn.token,
                "end",
                since=self.turn.begin_checkpoint,
            )
        faults.point("turn.end.before")
        ended_at = time.time()
        with self._store.atomic() as tx:
            state = tx.lock_turns([self.turn.token]).get(self.turn.token)
            if state != (TurnStatus.RUNNING, self.turn.fence):
                landed = tx.get_turn(self.turn.token)
                if landed and (landed.status, landed.ended_at) in self._unconfirmed_ends:
                    self._ended_as(landed)  # an earlier end of this process, unconfirmed
                    return landed
                self._journal.lose_turn(self.turn.token, "another process recovered it")
                self._journal.check(self.turn.token)
            prefolded = (self._seq, self._folder.messages()) if self._folder else None
            # From here until it is known to have committed or not, this end may have landed.
            self._unconfirmed_ends.append((status, ended_at))
            applied = commit_turn(
                tx,
                self.turn,
                status,
                detail=detail,
                extra=extra,
                prefolded=prefolded,
                now=ended_at,
            )
            assert applied, "checked running under this fence in this same transaction"
            if capture is not None:
                capture.write(tx, self.turn.session_id, self.turn.token)
            faults.point("turn.end.inside")
            ended = tx.get_turn(self.turn.token)
        faults.point("turn.end.after")
        assert ended is not None
        self._ended_as(ended)
        return ended

    def end_stranded(self) -> Turn:
        """End this turn as an earlier attempt meant to, before the store failed it (or could
        not say whether it had written it)."""
        _own, status, detail, extra = _STRANDED[self.turn.token]
        return self._end(status, detail, extra)

    def _require_running(self) -> None:
        self._journal.check(self.turn.token)
        if self._ended:
            raise TurnNotRunning(
                f"turn {self.turn.number} ({self.turn.token}) has ended ({self.turn.status})"
            )

    def __enter__(self) -> RunningTurn:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._ended or isinstance(exc, OwnershipLost):
            return
        if exc is None:
            self.complete()
        elif isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "CancelledError":
            self.cancel(f"cancelled ({type(exc).__name__})")
        else:
            self.fail(exc)
