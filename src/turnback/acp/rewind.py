"""The draft ACP ``session/rewind`` (its extension form ``_session/rewind``, and
``session/edit_prompt``), served for every agent from turnback's turns: what an editor's
"restore checkpoint" on a message asks for.

A message id names a turn: the user message of turn N (the prompt that began it) means back to
before turn N, i.e. to turn N-1, as restoring the checkpoint on a prompt does in an editor (the
workspace as it was when the prompt was sent, the prompt and all after it gone); any other
message of turn N (the agent's text or thoughts) means back to the end of turn N, which keeps
that message and drops what follows it, at the granularity turnback checkpoints at: turns.

The rewind is the engine's revert, run by the session's runtime as ``/rewind`` is: files and
conversation together by default (``mode`` chooses one), always keeping the user's own edits
(refused, with nothing changed, when one is in the way), the later turns kept as history, and
undone by ``/undo-rewind``. A rewind of the conversation is followed by a ``history_truncated``
update, which only an editor that asked for a rewind is sent. ``dryRun`` answers the plan and
changes nothing. ``session/edit_prompt`` is that rewind to before a prompt, then a turn with the
new content.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from turnback.acp import transcript
from turnback.errors import WAIT
from turnback.model import FileChange, Message, RevertPlan, RevertRequest, Turn
from turnback.records import record
from turnback.runtime.rpc import RequestError

if TYPE_CHECKING:
    from turnback.engine.handle import Session

METHODS = frozenset({"session/rewind", "_session/rewind"})
EDIT_PROMPT = "session/edit_prompt"
#: What a rewind (or ``/rewind``) moves, by its word: (files, conversation).
SCOPES = {"files": (True, False), "conversation": (False, True), "both": (True, True)}
INVALID_PARAMS = -32602
#: ACP's "internal error", which turnback answers its own refusals with (see the proxy).
REFUSED = -32603
HISTORY_TRUNCATED = "history_truncated"


@record
class Target:
    """Where a message id takes the session: ``request`` is the revert; the messages of the
    conversation that stay are ``kept`` (all of them when only the files move)."""

    request: RevertRequest
    message_id: str
    later: int  # turns of the conversation after the target
    kept: tuple[Message, ...]


def scope_of(request: RevertRequest) -> str:
    """The word of :data:`SCOPES` that says what ``request`` moves."""
    if request.files and request.conversation:
        return "both"
    return "files" if request.files else "conversation"


def refuse(message: str, code: int = INVALID_PARAMS, **data: Any) -> RequestError:
    return RequestError(code, message, {"details": message, **data})


def read(params: dict[str, Any], *, extension: bool) -> tuple[str, bool, bool, bool]:
    """The message id, the scope (files, conversation) and ``dryRun`` of a rewind request; the
    standard method takes the RFD's ``toMessageId`` and neither ``mode`` nor ``dryRun``, the
    extension takes ``messageId`` or ``toMessageId`` and both."""
    names = ("toMessageId", "messageId") if extension else ("toMessageId",)
    given = next((params[name] for name in names if name in params), None)
    if not isinstance(given, str) or not given:
        raise refuse(f"{' or '.join(names)} is required: the id of a message of this session")
    mode = params.get("mode", "both") if extension else "both"
    if mode not in SCOPES:
        raise refuse(f"mode {mode!r} is not one of files, conversation, both", mode=mode)
    dry = params.get("dryRun", False) if extension else False
    if not isinstance(dry, bool):
        raise refuse(f"dryRun must be true or false, not {dry!r}")
    files, conversation = SCOPES[mode]
    return given, files, conversation, dry


def target(
    session: Session, given: str, files: bool, conversation: bool, *, prompt: bool = False
) -> Target:
    """Resolve ``given`` against the session's current conversation (an engine read);
    ``prompt``: it must name a user message (session/edit_prompt)."""
    turns = session.conversation()
    numbers = {turn.token: turn.number for turn in turns}
    messages = [m for m in session.messages() if m.turn in numbers]
    found = next((m for m in messages if transcript.message_id(m) == given), None)
    if found is None:
        raise refuse(
            f"no message {given!r} in the conversation of session {session.id!r}: give the "
            "messageId of a message a session/prompt answer or a session/load showed (a "
            "message already rewound away has none until /undo-rewind brings it back)",
            messageId=given,
        )
    if prompt and found.index != 0:
        raise refuse(
            f"message {given!r} is not a prompt: only a user message can be edited",
            messageId=given,
        )
    number = numbers[found.turn]
    to_turn = number - 1 if found.index == 0 else number
    keep = {turn.token for turn in turns if turn.number <= to_turn or not conversation}
    return Target(
        RevertRequest(to_turn, files, conversation, keep_user_edits=True),
        given,
        sum(1 for turn in turns if turn.number > to_turn),
        tuple(m for m in messages if m.turn in keep),
    )


def plan(session: Session, aim: Target) -> RevertPlan | None:
    """The files' plan, when the rewind moves files and there is something to undo."""
    if not aim.request.files or aim.later == 0:
        return None
    return session.revert_plan(aim.request)


def running(turn: Turn | None, prompting: bool) -> RequestError | None:
    """The refusal while a turn runs (the draft says the agent cancels the turn first; turnback
    does not throw away a running turn's work unasked: cancel it, then rewind)."""
    if turn is None and not prompting:
        return None
    which = f"turn {turn.number}" if turn is not None else "a turn"
    data = {"turn": turn.token} if turn is not None else {}
    return refuse(
        f"{which} is still running: cancel it (session/cancel) or let it end, then rewind; "
        "nothing was changed",
        REFUSED,
        error="TurnRunning",
        remedy=WAIT,
        **data,
    )


def conflicts(aim: Target, files: RevertPlan | None) -> RequestError | None:
    """The refusal when the user's own edits are in the files the rewind would write back."""
    if files is None or not files.conflicts:
        return None
    paths = [change.path for change in files.conflicts]
    return refuse(
        f"your own edits to {', '.join(paths)} are in the way of rewinding to turn "
        f"{aim.request.to_turn}, and a rewind keeps your edits: save them elsewhere or undo "
        "them, then rewind again; nothing was changed",
        REFUSED,
        error="UserEditsInTheWay",
        paths=paths,
    )


def answer(aim: Target, files: RevertPlan | None, *, dry: bool, extension: bool) -> dict[str, Any]:
    """The answer: the draft's ``remainingMessageCount`` and ``lastMessageId`` (the messages
    that stay, counting the conversation's when only the files move), and for the extension the
    plan of the files and turns as well."""
    kept = [m for m in aim.kept if transcript.message_id(m) is not None]
    result: dict[str, Any] = {
        "remainingMessageCount": len(kept),
        "lastMessageId": transcript.message_id(kept[-1]) if kept else None,
    }
    request = aim.request
    details: dict[str, Any] = {
        "toTurn": request.to_turn,
        "laterTurns": aim.later,
        "keepUserEdits": True,
        "undo": "/undo-rewind",
    }
    if extension:
        result.update(
            mode=scope_of(request), dryRun=dry, turnsUndone=aim.later if request.conversation else 0
        )
        if files is not None:
            result["files"] = {
                "restore": _paths(files.restore),
                "delete": _paths(files.delete),
                "keep": [
                    {"path": c.path, "why": files.kept_because.get(c.path, "kept")}
                    for c in files.keep
                ],
            }
    result["_meta"] = {"turnback": details}
    return result


def truncated(result: dict[str, Any], to_turn: int) -> dict[str, Any]:
    """The ``history_truncated`` update that follows a rewind of the conversation."""
    return {
        "sessionUpdate": HISTORY_TRUNCATED,
        "lastMessageId": result["lastMessageId"],
        "remainingMessageCount": result["remainingMessageCount"],
        "_meta": {"turnback": {"toTurn": to_turn}},
    }


def _paths(changes: Sequence[FileChange]) -> list[str]:
    return [change.path for change in changes]
