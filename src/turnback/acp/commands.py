"""The slash commands the proxy answers itself: ``/checkpoints``, ``/diff``, ``/rewind`` and
``/undo-rewind``. They are offered to the editor in ``available_commands_update`` next to the
agent's own commands, answered as agent text in Markdown (a table of turns, a fenced patch),
and never reach the agent or the journal; the proxy keeps each answer as a session activity so
a ``session/load`` shows it again where it was given.

``/rewind`` writes nothing before the user has seen its plan (``Session.revert_plan``: files
restored, deleted and kept, hand edits it would overwrite) and confirmed it: through an ACP
``elicitation/create`` form where the editor advertises form elicitation, else by sending the
command again with ``confirm``. Declined, cancelled or unanswered, nothing is written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from turnback.acp.offered import NAMES
from turnback.acp.rewind import SCOPES, scope_of
from turnback.errors import (
    DECIDE,
    INITIALIZE_TIMEOUT,
    RECOVER,
    SESSIONS,
    SHOW,
    TURNS,
    WAIT,
    TurnbackError,
)
from turnback.model import FileChange, RevertRequest
from turnback.records import record

if TYPE_CHECKING:
    from turnback.runtime import AgentRuntime

_KINDS = {"added": "A", "modified": "M", "deleted": "D", "renamed": "R", "type_changed": "T"}


@record
class SlashCommand:
    name: str
    args: tuple[str, ...]


def parse(prompt: Sequence[Any]) -> SlashCommand | None:
    """The turnback command a prompt is, or None (a prompt for the agent, its own commands
    included)."""
    text = "".join(
        str(block.get("text", ""))
        for block in prompt
        if isinstance(block, dict) and block.get("type") == "text"
    ).strip()
    if not text.startswith("/"):
        return None
    words = text[1:].split()
    if not words or words[0] not in NAMES:
        return None
    return SlashCommand(words[0], tuple(words[1:]))


@record
class Answer:
    """What to tell the user (Markdown), and whether the engine already recorded what was
    done (a rewind, as an activity) so it need not be recorded again."""

    text: str
    recorded: bool = False


#: Asks the editor's user to confirm what the message describes: True accepted, False declined
#: or cancelled, None when the editor could not be asked.
Confirm = Callable[[str], Awaitable[bool | None]]


async def run(
    command: SlashCommand, runtime: AgentRuntime, confirm: Confirm | None = None
) -> Answer:
    """Carry out ``command`` on the runtime's session; returns what to tell the user.
    ``confirm`` asks the editor (elicitation), where it can be asked."""
    try:
        if command.name == "checkpoints":
            return Answer(await runtime.service.acall(_checkpoints, runtime))
        if command.name == "diff":
            return Answer(await runtime.service.acall(_diff, runtime, command.args))
        if command.name == "rewind":
            return await _rewind(runtime, command.args, confirm)
        await runtime.undo_revert()
        return Answer(
            "Undid the last rewind: files, turns and conversation are back as they were.", True
        )
    except TurnbackError as error:
        return Answer(f"turnback could not do `/{command.name}`: {worded(error)}")


def worded(error: TurnbackError) -> str:
    """An engine error in the editor's terms: its message, and what settles it said as the
    editor's user can do it (its structured ``remedy``), never as a terminal command."""
    hints = {
        WAIT: "; send it again once the turn has ended, or cancel the turn",
        RECOVER: "; restarting the agent settles it",
        TURNS: "; `/checkpoints` lists this session's turns",
        SHOW: "; `/checkpoints` shows what was kept",
        SESSIONS: "; the editor's list of sessions shows the ones turnback keeps",
        DECIDE: "; such turns are applied or discarded on turnback's review page, not here",
        INITIALIZE_TIMEOUT: "; to give it longer, edit the agent's command in your editor's "
        "settings: put `--initialize-timeout SECONDS` between `acp` and `--`",
    }
    return f"{error}{hints.get(error.remedy or '', '')}"


def _changes(changes: Sequence[FileChange]) -> str:
    if not changes:
        return "no file changes"
    return ", ".join(
        f"{_KINDS.get(c.kind.value, '?')} `{c.path}`"
        + (" (binary)" if c.binary else f" (+{c.additions} −{c.deletions})")
        for c in changes
    )


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _checkpoints(runtime: AgentRuntime) -> str:
    session = runtime.session
    turns = runtime.session.conversation()
    lines = [
        "**Checkpoints of this session**",
        "",
        "| turn | status | prompt | files |",
        "|---:|---|---|---|",
        "| 0 | | *before the first turn* | |",
    ]
    for turn in turns:
        diff = session.diff(turn.number)
        files = _changes(diff.files) if diff.available else "*files unavailable*"
        if diff.outside:
            files += f"; changed by hand before it: {_changes(diff.outside)}"
        prompt = _cell(turn.prompt_text)
        prompt = prompt if len(prompt) <= 50 else prompt[:49] + "…"
        lines.append(f"| {turn.number} | {turn.status.value} | {prompt} | {_cell(files)} |")
    history = sum(1 for t in session.turns() if t.reverted_by is not None)
    lines.append("")
    if history:
        lines.append(f"{history} rewound turn(s) kept as history; `/undo-rewind` restores them.")
    lines.append("`/diff N` shows a turn's changes; `/rewind N` goes back to after turn N.")
    return "\n".join(lines)


def _diff(runtime: AgentRuntime, args: tuple[str, ...]) -> str:
    turns = runtime.session.conversation()
    if len(args) > 1 or (args and not args[0].isdigit()):
        return "Usage: `/diff [N]`, where N is a turn number from `/checkpoints`."
    if not turns:
        return "This session has no turns yet."
    number = int(args[0]) if args else turns[-1].number
    diff = runtime.session.diff(number, patch=True)
    header = f"**Turn {number}**: {_changes(diff.files)}"
    if not diff.patch:
        return header
    fence = "````" if "```" in diff.patch else "```"
    return f"{header}\n\n{fence}diff\n{diff.patch.rstrip()}\n{fence}"


_USAGE = "Usage: `/rewind N [files|conversation|both] [keep-edits] [confirm]`"
_WHAT = {"files": "the files", "conversation": "the conversation", "both": "files and conversation"}


async def _rewind(runtime: AgentRuntime, args: tuple[str, ...], confirm: Confirm | None) -> Answer:
    if not args or not args[0].isdigit():
        return Answer(_USAGE)
    rest = list(args[1:])
    flags = {flag for flag in ("keep-edits", "confirm") if flag in rest}
    rest = [word for word in rest if word not in flags]
    if len(rest) > 1 or (rest and rest[0] not in SCOPES):
        return Answer(_USAGE)
    scope = rest[0] if rest else "both"
    files, conversation = SCOPES[scope]
    number, keep = int(args[0]), "keep-edits" in flags
    request = RevertRequest(number, files, conversation, keep)
    if "confirm" not in flags:
        said, refused = await runtime.service.acall(_planned, runtime, request)
        if refused:
            return Answer(said + "\n\nNothing was changed.")
        confirmed = await confirm(said) if confirm is not None else None
        if confirmed is None:
            again = " ".join(("/rewind", *args, "confirm"))
            return Answer(f"{said}\n\nNothing was changed yet: send `{again}` to do it.")
        if not confirmed:
            return Answer(f"{said}\n\nRewind declined: nothing was changed.")
    await runtime.revert(request)
    kept = "; the edits you made by hand were kept" if keep else ""
    return Answer(
        f"Rewound {_WHAT[scope]} to turn {number}{kept}. Later turns are kept as history; "
        "`/undo-rewind` puts everything back.",
        True,
    )


def _planned(runtime: AgentRuntime, request: RevertRequest) -> tuple[str, bool]:
    """What a rewind would do, in Markdown (the plan of its files, the turns it undoes), and
    whether it would be refused (hand edits that keep-edits cannot keep). Writes nothing."""
    plan = runtime.session.revert_plan(request)
    number, keep = request.to_turn, request.keep_user_edits
    scope = scope_of(request)
    later = sum(1 for t in runtime.session.conversation() if t.number > number)
    lines = [
        f"**Rewind {_WHAT[scope]} to turn {number}**"
        + (", keeping your own edits" if keep else "")
        + f": {later} later turn(s) are undone and kept as history.",
    ]
    if scope == "conversation":
        lines.append("- The files are left as they are.")
    else:
        for label, changes in (("Restored", plan.restore), ("Deleted", plan.delete)):
            lines.append(f"- {label}: {_changes(changes) if changes else 'none'}")
        if plan.keep:
            kept = (f"`{c.path}` ({plan.kept_because.get(c.path, 'kept')})" for c in plan.keep)
            lines.append(f"- Left as they are: {', '.join(kept)}")
        if plan.conflicts:
            paths = ", ".join(f"`{c.path}`" for c in plan.conflicts)
            lines.append(
                f"- Your own edits in the way, which keep-edits cannot keep: {paths}"
                if keep
                else f"- Your own edits it overwrites: {paths} (keep-edits keeps them)"
            )
    return "\n".join(lines), keep and bool(plan.conflicts)
