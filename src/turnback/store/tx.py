"""What one transaction can do, one protocol per concern.

:class:`Tx` is the union of these protocols, and what the engine is handed inside
``store.atomic()`` and ``store.read()``. Each backend's transaction is made of the classes of
:mod:`turnback.store.sql`, one per concern, each of which subclasses its protocol here: mypy
checks every method against the protocol it implements, and refuses to build a backend's
transaction that leaves one out. Rows never leave the store: only model records.

The concurrency contract both backends keep is stated in :mod:`turnback.store.sql`: a write
transaction that changes a session or its turns locks the session first.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from turnback.model import (
    Activity,
    ActivityLevel,
    FileChange,
    JournalEntry,
    Message,
    Owner,
    Rescue,
    Revert,
    RevertState,
    RunEvent,
    SessionRecord,
    StepCheckpoint,
    ToolCheckpoint,
    Turn,
    TurnStatus,
)

#: A turn's end: (token, status, ended at, detail, event count).
TurnEnd = tuple[str, TurnStatus, float, str | None, int]
#: An activity to insert: (session id, turn, level, code, message, data, at).
NewActivity = tuple[str | None, str | None, ActivityLevel, str, str, dict[str, object], float]


class LocksTx(Protocol):
    """The per-session write locks of the concurrency contract."""

    def lock_sessions(self, session_ids: Sequence[str]) -> None:
        """Hold these sessions against every other writer until the transaction ends."""
        ...

    def lock_workspace(self, session_id: str) -> None:
        """Lock every session on the workspace of ``session_id``, as :meth:`lock_sessions`."""
        ...

    def lock_turns(self, tokens: Sequence[str]) -> dict[str, tuple[TurnStatus, str | None]]:
        """Lock the sessions of these turns; (status, fencing token) of each that exists."""
        ...


class OwnersTx(Protocol):
    """The processes that run turns, and their leases in the database's clock."""

    def now(self) -> float:
        """The database's clock (seconds since the epoch), by which leases are judged."""
        ...

    def renew_lease(self, owner_id: str, seconds: float) -> float | None:
        """Extend an owner's lease; its new expiry, or None if the owner is gone."""
        ...

    def upsert_owner(self, owner: Owner) -> None: ...
    def get_owner(self, owner_id: str) -> Owner | None: ...
    def get_owners(self, owner_ids: Collection[str]) -> dict[str, Owner]:
        """The owners of these ids that exist, by id, in one query."""
        ...

    def unreferenced_owners(self) -> list[Owner]:
        """Owners that no running turn and no unfinished revert names."""
        ...

    def delete_owner(self, owner_id: str, *, lease: float | None = None) -> bool:
        """Remove an owner; with ``lease``, only while its lease still expires then. Whether it
        was removed."""
        ...


class SessionsTx(Protocol):
    def insert_session(self, session: SessionRecord) -> None: ...
    def get_session(self, session_id: str) -> SessionRecord | None: ...
    def session_heads(self, session_ids: Collection[str]) -> dict[str, str | None]:
        """The head of each of these sessions that exists, by id, in one query."""
        ...

    def find_sessions(self, prefix: str, limit: int = 10) -> list[SessionRecord]: ...
    def list_sessions(self) -> list[SessionRecord]: ...
    def delete_session(self, session_id: str) -> None:
        """Remove the session and everything that is its (turns, events, messages,
        activities, reverts); the checkpoints they named become garbage for gc."""
        ...

    def set_head(self, session_id: str, head: str | None, now: float) -> None: ...
    def set_agent_state(self, session_id: str, state: dict[str, object], now: float) -> None: ...
    def hand_off(
        self, session_id: str, host: str, fence: str, expected: str | None, now: float
    ) -> bool:
        """Give the session to ``host`` under ``fence`` if its fencing token is still
        ``expected``; whether it did."""
        ...


class RequestsTx(Protocol):
    """A session's pending requests: what its agent asked of its user (permissions, input) and
    nobody has answered yet."""

    def add_pending_request(
        self, session_id: str, turn: str, request_id: str, request: dict[str, object], at: float
    ) -> None:
        """Add the request ``request_id`` of ``turn`` to its session's pending requests, read
        back as ``request`` in :attr:`SessionRecord.pending_requests`, in the order asked (one
        asked again under the same id replaces the one before, in its place)."""
        ...

    def remove_pending_request(self, turn: str, request_id: str) -> bool:
        """The request was answered; whether it was pending."""
        ...

    def clear_pending_requests(self, turns: Sequence[str]) -> None:
        """Drop every pending request of these turns (nobody can answer them any more)."""
        ...


class TurnsTx(Protocol):
    def insert_turn(self, turn: Turn) -> None: ...
    def get_turn(self, token: str) -> Turn | None: ...
    def turns(self, tokens: Sequence[str]) -> list[Turn]:
        """The turns of these tokens that exist, in one query."""
        ...

    def running_turn(self, session_id: str) -> Turn | None: ...
    def running_turns_in_workspace(self, workspace: str) -> list[Turn]:
        """Running turns of every session on ``workspace``."""
        ...

    def turns_with_status(self, status: TurnStatus) -> list[Turn]: ...
    def session_turns(self, session_id: str) -> list[Turn]: ...
    def conversation_overview(self) -> dict[str, tuple[int, Any]]:
        """Per session with a conversation: how many turns it holds, and its first prompt."""
        ...

    def end_turn(
        self,
        token: str,
        status: TurnStatus,
        ended_at: float,
        detail: str | None,
        event_count: int,
        *,
        expected: TurnStatus,
    ) -> bool:
        """Move a turn out of ``expected``; False when it was no longer in that status."""
        ...

    def end_turns(self, ends: Sequence[TurnEnd], *, expected: TurnStatus) -> None:
        """:meth:`end_turn` of many turns at once, each moved only out of ``expected``, in
        statements sent together: the caller, holding their sessions' locks, has read that
        they are in it."""
        ...

    def reopen_turn(self, token: str, owner_id: str, fence: str) -> bool:
        """Make an interrupted turn running again under ``owner_id`` and a new fencing token
        ``fence``, dropping what ending it
        wrote: its folded messages, its end checkpoint and the file changes measured against
        it. False, changing nothing, when the turn is not interrupted."""
        ...

    def reposition_turn(self, token: str, number: int, parent: str | None) -> None: ...

    def delete_turn(self, token: str) -> None: ...


class JournalTx(Protocol):
    """A turn's events, kept in place: its journal while it runs or is set aside, its run
    timeline once it has ended (ending a turn copies nothing)."""

    def append_journal(self, entries: Sequence[JournalEntry]) -> int:
        """Write the entries of running turns. Entries of a turn that is not running (it was
        ended by another process, or never existed) are not written: a turn's journal grows only
        while it runs. Returns how many were dropped."""
        ...

    def append_fenced(
        self, entries: Sequence[JournalEntry], fences: Mapping[str, str | None]
    ) -> dict[str, tuple[TurnStatus, str | None]]:
        """Under the locks of the entries' sessions, write the entries of each turn that runs
        under its fencing token in ``fences`` (absent or None: that runs at all); returns each
        turn's (status, fencing token) as found under the locks."""
        ...

    def journal(self, token: str) -> list[JournalEntry]: ...
    def journals(self, tokens: Sequence[str]) -> dict[str, list[JournalEntry]]:
        """:meth:`journal` of many turns in one query, by token."""
        ...

    def journal_size(self, token: str) -> tuple[int, int]:
        """(number of entries, highest seq or 0)."""
        ...

    def insert_run_events(self, events: Sequence[RunEvent]) -> None: ...
    def replace_run_events(self, events: Sequence[RunEvent]) -> None:
        """Rewrite run events (by turn and seq) with the given kind and event."""
        ...

    def run_events(self, token: str) -> list[RunEvent]:
        """A turn's events whatever its status: its run timeline once it has ended, its journal
        as it stands while it runs or is set aside (an unreadable one shown as such)."""
        ...


class ConversationTx(Protocol):
    """The committed conversation: the messages folded from the turns that ended."""

    def insert_messages(self, messages: Sequence[Message]) -> None: ...
    def messages(self, session_id: str) -> list[Message]: ...
    def turn_messages(self, token: str) -> list[Message]: ...


class StepsTx(Protocol):
    """Step checkpoints: the points inside a turn its agent can resume from."""

    def insert_step_checkpoint(self, checkpoint: StepCheckpoint) -> None: ...
    def step_checkpoints(self, token: str) -> list[StepCheckpoint]: ...
    def delete_step_checkpoints(self, token: str, after_seq: int = -1) -> int:
        """Remove a turn's step checkpoints (those marking a journal position after
        ``after_seq``)."""
        ...

    def delete_orphan_step_checkpoints(self) -> int:
        """Remove step checkpoints of turns that are neither running, interrupted nor set aside."""
        ...


class ActivitiesTx(Protocol):
    def insert_activity(
        self,
        session_id: str | None,
        turn: str | None,
        level: ActivityLevel,
        code: str,
        message: str,
        data: dict[str, object],
        at: float,
    ) -> int: ...
    def insert_activities(self, activities: Sequence[NewActivity]) -> None:
        """Many activities at once, as :meth:`insert_activity` each (without their ids)."""
        ...

    def activities(self, session_id: str | None, limit: int = 1000) -> list[Activity]: ...


class FilesTx(Protocol):
    """Workspace checkpoints, as the rows that name them, and the files each turn changed."""

    def set_checkpoint(self, token: str, which: str, commit: str | None) -> None:
        """Name a turn's ``begin`` or ``end`` workspace commit."""
        ...

    def insert_file_changes(self, token: str, scope: str, changes: Sequence[FileChange]) -> None:
        """``scope`` is ``turn`` (what the turn did) or ``before`` (what changed since the
        previous turn ended, outside any turn)."""
        ...

    def file_changes(self, token: str, scope: str) -> list[FileChange]: ...
    def session_file_changes(self, session_id: str) -> dict[tuple[str, str], list[FileChange]]:
        """Every file change of a session's turns, by (turn token, scope), in one query."""
        ...

    def release_checkpoints(self, tokens: Sequence[str]) -> None:
        """Stop naming the turns' workspace checkpoints (gc may then prune them)."""
        ...

    def release_revert_checkpoints(self, revert_ids: Sequence[int]) -> None:
        """Stop naming the reverts' target and undo checkpoints (gc may then prune them)."""
        ...

    def checkpoint_commits(self) -> set[str]:
        """Every workspace commit a row names: what gc must keep."""
        ...


class RevertsTx(Protocol):
    def insert_revert(self, revert: Revert) -> int: ...
    def get_revert(self, revert_id: int) -> Revert | None: ...
    def reverts(
        self, session_id: str | None, states: Sequence[RevertState] = ()
    ) -> list[Revert]: ...
    def set_revert_state(
        self,
        revert_id: int,
        state: RevertState,
        now: float,
        detail: str | None = None,
        owner_id: str | None = None,
    ) -> None: ...
    def take_revert(self, revert_id: int, from_owner: str | None, to_owner: str) -> bool:
        """Move an unfinished revert from ``from_owner`` to ``to_owner``; False, changing
        nothing, when it is finished or names another owner (the row's owner is its fence)."""
        ...

    def mark_reverted(self, tokens: Sequence[str], revert_id: int | None) -> None: ...
    def unmark_reverted(self, revert_id: int) -> list[str]:
        """Put the turns a revert took out back into the conversation; returns their tokens."""
        ...


class ToolsTx(Protocol):
    """Workspace checkpoints taken before a turn's tools, and the rescues made from them."""

    def insert_tool_checkpoint(self, checkpoint: ToolCheckpoint) -> None: ...
    def tool_checkpoints(self, token: str) -> list[ToolCheckpoint]: ...
    def insert_rescue(self, rescue: Rescue) -> int: ...
    def rescues(self, session_id: str) -> list[Rescue]: ...
    def set_rescue_undone(self, rescue_id: int, at: float) -> None: ...


class HealthTx(Protocol):
    def integrity_problems(self) -> list[str]: ...


class Tx(
    LocksTx,
    OwnersTx,
    SessionsTx,
    RequestsTx,
    TurnsTx,
    JournalTx,
    ConversationTx,
    StepsTx,
    ActivitiesTx,
    FilesTx,
    RevertsTx,
    ToolsTx,
    HealthTx,
    Protocol,
):
    """The operations of one transaction: every concern's. Everything done on one ``Tx`` inside
    ``store.atomic()`` commits together or not at all."""
