"""The command line: parses arguments, calls the library, renders the result. No rules here.

Exit codes: 0 ok, 1 error, 2 usage, 3 conflict (a running turn, a turn in the wrong state).
Every command takes ``--json`` for scripts; the shapes are documented in the README.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from turnback import Turnback
    from turnback.model import (
        Activity,
        FileChange,
        Message,
        Revert,
        SessionRecord,
        Turn,
        UnrecoveredTurn,
    )


# -- rendering ---------------------------------------------------------------------------------


def _colour(text: str, **style: Any) -> str:
    if os.environ.get("NO_COLOR") or not sys.stdout.isatty():
        return text
    return click.style(text, **style)


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "-"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


_STATUS_COLOURS = {
    "completed": "green",
    "running": "cyan",
    "interrupted": "yellow",
    "set_aside": "magenta",
    "failed": "red",
    "cancelled": "yellow",
}


def _status(status: str) -> str:
    return _colour(status, fg=_STATUS_COLOURS.get(status))


def _short(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def turn_json(turn: Turn) -> dict[str, Any]:
    return {
        "token": turn.token,
        "number": turn.number,
        "parent": turn.parent,
        "status": turn.status.value,
        "prompt": turn.prompt,
        "started_at": turn.started_at,
        "ended_at": turn.ended_at,
        "events": turn.event_count,
        "detail": turn.detail,
    }


def session_json(session: SessionRecord, turns: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": session.id,
        "workspace": session.workspace,
        "title": session.title,
        "agent": session.agent,
        "head": session.head,
        "status": session.status,
        "pending_requests": list(session.pending_requests),
        "created_at": session.created_at,
        "updated_at": session.updated_at,
    }
    if turns is not None:
        data["turns"] = turns
    return data


def change_json(change: FileChange) -> dict[str, Any]:
    return {
        "path": change.path,
        "kind": change.kind.value,
        "additions": change.additions,
        "deletions": change.deletions,
        "binary": change.binary,
        "old_path": change.old_path,
    }


_KIND_LETTERS = {
    "added": "A",
    "modified": "M",
    "deleted": "D",
    "renamed": "R",
    "type_changed": "T",
}


def _changes_line(changes: Sequence[FileChange], limit: int = 6) -> str:
    shown = [
        f"{_KIND_LETTERS[c.kind.value]} " + (f"{c.old_path} -> {c.path}" if c.old_path else c.path)
        for c in changes[:limit]
    ]
    more = f", … {len(changes) - limit} more" if len(changes) > limit else ""
    return ", ".join(shown) + more


def revert_json(revert: Revert) -> dict[str, Any]:
    return {
        "id": revert.id,
        "session": revert.session_id,
        "state": revert.state.value,
        "to_turn": revert.to_turn,
        "from_head": revert.from_head,
        "files": revert.files,
        "conversation": revert.conversation,
        "keep_user_edits": revert.keep_user_edits,
        "undo_checkpoint": revert.undo_checkpoint,
        "detail": revert.detail,
    }


def message_json(message: Message) -> dict[str, Any]:
    return {"kind": message.kind.value, "text": message.text, "data": message.data}


def activity_json(activity: Activity) -> dict[str, Any]:
    return {
        "level": activity.level.value,
        "code": activity.code,
        "message": activity.message,
        "turn": activity.turn,
        "data": activity.data,
        "at": activity.at,
    }


def unrecovered_json(item: UnrecoveredTurn) -> dict[str, Any]:
    return {**turn_json(item.turn), "session": item.turn.session_id, "reason": item.reason}


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


# -- plumbing ----------------------------------------------------------------------------------


class Progress:
    """A one-line progress report on a terminal's stderr, shown only once work has taken more
    than a moment; silent when stderr is not a terminal."""

    def __init__(self, delay: float = 0.5) -> None:
        self.delay = delay
        self.started: float | None = None
        self.shown = False
        self.enabled = sys.stderr.isatty()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        self.started = self.started or now
        if now - self.started < self.delay and done < total:
            return
        click.echo(f"\r{stage}: {done}/{total}".ljust(40), nl=False, err=True)
        self.shown = True
        if done >= total:
            click.echo(err=True)
            self.started, self.shown = None, False


class Context:
    def __init__(self, home: str | None) -> None:
        self.home = home
        self._tb: Turnback | None = None

    @property
    def tb(self) -> Turnback:
        if self._tb is None:
            import turnback

            self._tb = turnback.open(self.home, create=False, progress=Progress())
        return self._tb

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--home",
    type=click.Path(file_okay=False),
    envvar="TURNBACK_HOME",
    help="turnback's home directory (default: $TURNBACK_HOME, else the platform data dir).",
)
@click.version_option(package_name="turnback")
@click.pass_context
def cli(ctx: click.Context, home: str | None) -> None:
    """turnback: durable, resumable, reviewable and reversible turns for AI coding agents."""
    state = Context(home)
    ctx.obj = state
    ctx.call_on_close(state.close)


pass_state = click.make_pass_decorator(Context)


@cli.command()
@json_option
@pass_state
def sessions(state: Context, as_json: bool) -> None:
    """List sessions, most recently active first."""
    from turnback.errors import StoreNotFound

    try:
        records = state.tb.sessions()
    except StoreNotFound:
        records = []
    counts = {
        r.id: len([t for t in state.tb.session(r.id).turns() if t.status.ended]) for r in records
    }
    if as_json:
        _emit_json([session_json(r, counts[r.id]) for r in records])
        return
    if not records:
        click.echo("No sessions yet. `turnback demo` shows turnback at work.")
        return
    rows = [
        [r.id[:12], str(counts[r.id]), _when(r.updated_at), _short(r.title or "-", 30), r.workspace]
        for r in records
    ]
    click.echo(_table(["session", "turns", "updated", "title", "workspace"], rows))


@cli.command()
@click.argument("session")
@json_option
@pass_state
def log(state: Context, session: str, as_json: bool) -> None:
    """Show a session's turns: number, status, events and prompt."""
    handle = state.tb.session(session)
    turns = handle.turns()
    diffs = {t.token: handle.diff(t.token) for t in turns}
    if as_json:
        _emit_json(
            {
                "session": session_json(handle.record),
                "turns": [
                    {
                        **turn_json(t),
                        "files": [change_json(f) for f in diffs[t.token].files],
                        "outside": [change_json(f) for f in diffs[t.token].outside],
                        "checkpoints": {"begin": t.begin_checkpoint, "end": t.end_checkpoint},
                        "reverted_by": t.reverted_by,
                    }
                    for t in turns
                ],
            }
        )
        return
    record = handle.record
    click.echo(f"session {record.id}  {record.title or ''}".rstrip())
    click.echo(f"workspace {record.workspace}\n")
    if not turns:
        click.echo("No turns yet.")
        return
    for t in turns:
        diff = diffs[t.token]
        if diff.outside:
            click.echo(
                _colour(f"   changed outside any turn: {_changes_line(diff.outside)}", dim=True)
            )
        number = str(t.number) if t.status.ended or t.status == "running" else "-"
        status = _status(t.status.value) + (
            _colour(" (reverted)", dim=True) if t.reverted_by else ""
        )
        added = sum(f.additions for f in diff.files)
        removed = sum(f.deletions for f in diff.files)
        click.echo(
            f"{number:>3}  {t.token[:12]}  {status}  {_when(t.started_at)}  "
            f"{t.event_count} events  {_short(t.prompt_text, 50)}"
        )
        if diff.files:
            click.echo(
                f"     {len(diff.files)} file(s) "
                + _colour(f"+{added}", fg="green")
                + " "
                + _colour(f"-{removed}", fg="red")
                + f": {_changes_line(diff.files)}"
            )
        elif not diff.available and t.status != "running":
            click.echo(_colour("     workspace checkpoint unavailable", fg="yellow"))
    aside = [t for t in turns if t.status == "set_aside"]
    if aside:
        click.echo(
            f"\n{len(aside)} turn(s) set aside: `turnback unrecovered {record.id[:12]}` shows them."
        )


@cli.command()
@click.argument("session")
@click.argument("turn")
@click.option("--events", is_flag=True, help="Also print the turn's raw event timeline.")
@json_option
@pass_state
def show(state: Context, session: str, turn: str, events: bool, as_json: bool) -> None:
    """Show one turn's conversation. TURN is its number or a token prefix."""
    handle = state.tb.session(session)
    found = handle.get_turn(turn)
    messages = handle.turn_messages(found.token)
    timeline = handle.run_events(found.token)
    if as_json:
        _emit_json(
            {
                "session": handle.id,
                "turn": turn_json(found),
                "messages": [message_json(m) for m in messages],
                "events": [
                    {"seq": e.seq, "kind": e.kind, "event": e.event, "at": e.at} for e in timeline
                ],
            }
        )
        return
    click.echo(f"turn {found.number} ({found.token})  {_status(found.status.value)}")
    if found.detail:
        click.echo(f"  {found.detail}")
    click.echo()
    if found.status in ("running", "set_aside"):
        click.echo(f"This turn is {found.status.value}: its events are still in the journal.")
    for message in messages:
        label = _colour(f"[{message.kind.value}]", bold=True)
        body = message.text
        if message.kind == "tool_call":
            body = f"{message.data.get('title', '')} ({message.data.get('status', '?')})"
        click.echo(f"{label} {body}")
    if events:
        click.echo()
        for e in timeline:
            click.echo(f"{e.seq:>5} {e.kind} {json.dumps(e.event, ensure_ascii=False)}")


@cli.command()
@json_option
@pass_state
def recover(state: Context, as_json: bool) -> None:
    """Recover turns whose process died: apply each as interrupted, or set it aside."""
    report = state.tb.recover()
    if as_json:
        _emit_json(
            {
                "recovered": [{**turn_json(t), "session": t.session_id} for t in report.recovered],
                "set_aside": [unrecovered_json(u) for u in report.set_aside],
                "live": [{**turn_json(t), "session": t.session_id} for t in report.live],
                "reverts": [revert_json(r) for r in report.reverts],
            }
        )
        return
    for r in report.reverts:
        action = "finished undoing" if r.state == "undone" else "rolled back"
        click.echo(f"{action} revert {r.id} of session {r.session_id[:12]}, left half done")
    for t in report.recovered:
        click.echo(
            f"recovered turn {t.number} of session {t.session_id[:12]} as interrupted "
            f"({t.event_count} events)"
        )
    for u in report.set_aside:
        click.echo(
            _colour(
                f"set aside: turn {u.turn.token[:12]} of session {u.turn.session_id[:12]}: ",
                fg="magenta",
            )
            + u.reason
        )
    for t in report.live:
        click.echo(f"left alone: turn {t.number} of session {t.session_id[:12]} is still running")
    if not (report.recovered or report.set_aside or report.live or report.reverts):
        click.echo("Nothing to recover.")
    elif report.set_aside:
        click.echo(
            "`turnback unrecovered SESSION` shows a set-aside turn; apply or discard it there."
        )


@cli.command()
@click.argument("session")
@click.argument("action", required=False, type=click.Choice(["apply", "discard"]))
@click.argument("turn", required=False)
@json_option
@pass_state
def unrecovered(
    state: Context, session: str, action: str | None, turn: str | None, as_json: bool
) -> None:
    """List a session's set-aside turns, or apply or discard one (by token prefix)."""
    handle = state.tb.session(session)
    if action is None:
        items = handle.unrecovered()
        if as_json:
            _emit_json([unrecovered_json(u) for u in items])
            return
        if not items:
            click.echo("No set-aside turns.")
        for u in items:
            click.echo(
                f"{u.turn.token[:12]}  {u.turn.event_count} events  {_when(u.turn.started_at)}  "
                f"{_short(u.turn.prompt_text, 40)}\n  reason: {u.reason}"
            )
        return
    if turn is None:
        raise click.UsageError(f"`unrecovered SESSION {action}` needs the TURN to {action}")
    if action == "apply":
        applied = handle.apply(turn)
        result: dict[str, Any] = {"applied": turn_json(applied)}
        text = f"applied turn {applied.token[:12]} as turn {applied.number}"
    else:
        count = handle.discard(turn)
        result = {"discarded": turn, "events": count}
        text = f"discarded set-aside turn {turn} and its {count} events"
    if as_json:
        _emit_json(result)
    else:
        click.echo(text)


@cli.command()
@json_option
@pass_state
def sweep(state: Context, as_json: bool) -> None:
    """Remove what no turn can use any more: stale step checkpoints and dead owners."""
    report = state.tb.sweep()
    if as_json:
        _emit_json(
            {
                "step_checkpoints": report.step_checkpoints,
                "owners": report.owners,
            }
        )
        return
    click.echo(
        f"removed {report.step_checkpoints} step checkpoints and {report.owners} dead owners"
    )


@cli.command()
@click.argument("session")
@json_option
@pass_state
def activities(state: Context, session: str, as_json: bool) -> None:
    """Show a session's activities: recoveries, set-asides, failures of side work."""
    items = state.tb.session(session).activities()
    if as_json:
        _emit_json([activity_json(a) for a in items])
        return
    colours = {"info": None, "warning": "yellow", "error": "red"}
    for a in items:
        level = _colour(a.level.value, fg=colours[a.level.value])
        click.echo(f"{_when(a.at)}  {level:<7}  {a.code}  {a.message}")
    if not items:
        click.echo("No activities.")


@cli.command()
@click.argument("session")
@click.argument("turn")
@click.option("--stat", is_flag=True, help="Only the changed files with their +/- counts.")
@json_option
@pass_state
def diff(state: Context, session: str, turn: str, stat: bool, as_json: bool) -> None:
    """Show what a turn changed in the workspace (its begin checkpoint to its end).

    Changes made between turns, by hand or by a `git pull`, are listed apart: they are not
    the agent's."""
    handle = state.tb.session(session)
    found = handle.diff(turn, patch=not stat and not as_json)
    if as_json:
        full = handle.diff(turn, patch=found.available).patch if found.available else None
        _emit_json(
            {
                "turn": turn_json(found.turn),
                "available": found.available,
                "files": [change_json(f) for f in found.files],
                "outside": [change_json(f) for f in found.outside],
                "patch": full,
            }
        )
        return
    if found.outside:
        click.echo(f"changed outside any turn, before turn {found.turn.number}:")
        for change in found.outside:
            click.echo(f"  {_KIND_LETTERS[change.kind.value]} {change.path}")
        click.echo()
    if not found.available:
        click.echo(f"turn {found.turn.number}: workspace checkpoint unavailable")
        return
    if stat or not found.patch:
        width = max((len(c.path) for c in found.files), default=0)
        for c in found.files:
            counts = "binary" if c.binary else f"+{c.additions} -{c.deletions}"
            label = f"{c.old_path} -> {c.path}" if c.old_path else c.path
            click.echo(f"  {_KIND_LETTERS[c.kind.value]} {label.ljust(width)}  {counts}")
        if not found.files:
            click.echo(f"turn {found.turn.number} changed no files")
        return
    for line in found.patch.splitlines():
        colour = {"+": "green", "-": "red", "@": "cyan"}.get(line[:1])
        bold = line.startswith(("+++", "---", "diff "))
        click.echo(_colour(line, fg=None if bold else colour, bold=bold))


@cli.command()
@click.argument("session")
@click.argument("turn", required=False)
@click.option("--files-only", is_flag=True, help="Restore the files; keep the conversation.")
@click.option(
    "--conversation-only", is_flag=True, help="Rewind the conversation; leave the files alone."
)
@click.option(
    "--keep-user-edits",
    is_flag=True,
    help="Undo only the agent's own changes; keep edits made by hand.",
)
@click.option("--undo", is_flag=True, help="Undo the session's last revert.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@pass_state
def revert(
    state: Context,
    session: str,
    turn: str | None,
    files_only: bool,
    conversation_only: bool,
    keep_user_edits: bool,
    undo: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Rewind a session to TURN (0: before its first turn): files, conversation, or both.

    Later turns are kept as reverted history, and `turnback revert --undo SESSION` puts
    everything back. Files that existed before the undone turns began, and ignored files,
    are never deleted."""
    if files_only and conversation_only:
        raise click.UsageError("--files-only and --conversation-only exclude each other")
    if undo and turn is not None:
        raise click.UsageError("`revert --undo SESSION` takes no TURN: it undoes the last revert")
    if not undo and (turn is None or not turn.strip().isdigit()):
        raise click.UsageError("revert needs the TURN number to go back to (0: before the first)")
    handle = state.tb.session(session)
    what = "undo the last revert" if undo else f"revert session {handle.id[:12]} to turn {turn}"
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(f"this would {what}; pass --yes to confirm without a terminal")
        click.confirm(f"{what[0].upper()}{what[1:]}?", abort=True)
    if undo:
        result = handle.undo_revert()
    else:
        assert turn is not None
        result = handle.revert(
            int(turn),
            files=not conversation_only,
            conversation=not files_only,
            keep_user_edits=keep_user_edits,
        )
    if as_json:
        _emit_json(revert_json(result))
    elif undo:
        click.echo(f"undid revert {result.id}: files, turns and head are as before it")
    else:
        click.echo(
            f"reverted to turn {turn} (revert {result.id}); "
            f"`turnback revert --undo {handle.id[:12]}` puts it back"
        )


@cli.command()
@click.option(
    "--keep",
    type=click.IntRange(min=0),
    help="Keep checkpoints of each session's last N turns only.",
)
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    help="Prune unnamed refs and objects older than this many seconds (default 3600).",
)
@json_option
@pass_state
def gc(state: Context, keep: int | None, older_than: float | None, as_json: bool) -> None:
    """Prune workspace checkpoints nothing needs and report the bytes freed."""
    report = state.tb.gc(keep=keep, older_than=older_than)
    if as_json:
        _emit_json(
            {
                "checkpoints_released": report.checkpoints_released,
                "refs_removed": report.refs_removed,
                "bytes_freed": report.bytes_freed,
                "problems": list(report.problems),
            }
        )
        return
    click.echo(
        f"released {report.checkpoints_released} turn checkpoint(s), removed "
        f"{report.refs_removed} ref(s), freed {report.bytes_freed / 2**20:.1f} MiB"
    )
    for problem in report.problems:
        click.echo(_colour(f"could not prune {problem}", fg="yellow"), err=True)


@cli.command()
@json_option
@pass_state
def doctor(state: Context, as_json: bool) -> None:
    """Check git, the home, the database and the checkpoints; say what to do for each problem.

    Exits 1 when something needs attention."""
    checks = state.tb.doctor()
    if as_json:
        _emit_json([{"name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix} for c in checks])
    else:
        for check in checks:
            mark = _colour("ok  ", fg="green") if check.ok else _colour("FAIL", fg="red")
            click.echo(f"{mark}  {check.name}: {check.detail}")
            if check.fix:
                click.echo(f"      → {check.fix}")
    if not all(c.ok for c in checks):
        sys.exit(1)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--home",
    "acp_home",
    type=click.Path(file_okay=False),
    help="turnback's home directory (default: the global --home, $TURNBACK_HOME, else the "
    "platform data dir).",
)
@click.option(
    "--max-frame",
    type=click.IntRange(min=1024),
    default=32 * 2**20,
    show_default=True,
    help="The largest JSON-RPC message accepted from the editor, in bytes.",
)
@click.argument("agent_command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_state
def acp(
    state: Context, acp_home: str | None, max_frame: int, agent_command: tuple[str, ...]
) -> None:
    """Run AGENT_COMMAND behind an ACP proxy on stdin/stdout: every prompt a durable turn.

    Configure the editor to start `turnback acp -- AGENT_COMMAND…` instead of the agent. Sessions
    are listed, loaded, resumed and forked from turnback's store, and /checkpoints, /diff,
    /rewind and /undo-rewind are answered by turnback."""
    from turnback.acp import main as serve_acp

    sys.exit(serve_acp(agent_command, home=acp_home or state.home, max_frame=max_frame))


@cli.command()
@click.option("--keep", is_flag=True, help="Keep the demo's home and workspace afterwards.")
@click.option("--workspace", type=click.Path(file_okay=False), help="Run the demo in this folder.")
@json_option
def demo(keep: bool, workspace: str | None, as_json: bool) -> None:
    """Show turnback at work: durable turns, a crash mid-turn, and its recovery."""
    from turnback.demo import run

    summary = run(keep=keep, workspace=workspace, echo=(lambda _: None) if as_json else click.echo)
    if as_json:
        _emit_json(summary)


# -- entry point -------------------------------------------------------------------------------


@contextmanager
def _errors_to_exit_codes() -> Iterator[None]:
    from turnback.errors import TurnbackError

    try:
        yield
    except TurnbackError as error:
        click.echo(_colour(f"error: {error}{_hint(error)}", fg="red"), err=True)
        sys.exit(error.exit_code)


def _hint(error: Exception) -> str:
    """The CLI's words for what settles an error (its structured ``remedy``)."""
    from turnback.errors import RECOVER, WAIT

    remedy = getattr(error, "remedy", None)
    if remedy == WAIT:
        return "; if the process running it died, `turnback recover` settles it"
    if remedy == RECOVER:
        return "; run `turnback recover`"
    return ""


def main(argv: Sequence[str] | None = None) -> None:
    with _errors_to_exit_codes():
        cli.main(args=list(argv) if argv is not None else None, prog_name="turnback")
