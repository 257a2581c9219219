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
    from turnback.model import Activity, Message, SessionRecord, Turn, UnrecoveredTurn


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


class Context:
    def __init__(self, home: str | None) -> None:
        self.home = home
        self._tb: Turnback | None = None

    @property
    def tb(self) -> Turnback:
        if self._tb is None:
            import turnback

            self._tb = turnback.open(self.home, create=False)
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
    if as_json:
        _emit_json({"session": session_json(handle.record), "turns": [turn_json(t) for t in turns]})
        return
    record = handle.record
    click.echo(f"session {record.id}  {record.title or ''}".rstrip())
    click.echo(f"workspace {record.workspace}\n")
    if not turns:
        click.echo("No turns yet.")
        return
    rows = [
        [
            str(t.number) if t.status.ended or t.status == "running" else "-",
            t.token[:12],
            _status(t.status.value),
            str(t.event_count),
            _when(t.started_at),
            _short(t.prompt_text, 50),
        ]
        for t in turns
    ]
    click.echo(_table(["#", "token", "status", "events", "started", "prompt"], rows))
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
            }
        )
        return
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
    if not (report.recovered or report.set_aside or report.live):
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
    """Remove what no turn can use any more: stale journal rows, step checkpoints, owners."""
    report = state.tb.sweep()
    if as_json:
        _emit_json(
            {
                "journal_rows": report.journal_rows,
                "step_checkpoints": report.step_checkpoints,
                "owners": report.owners,
            }
        )
        return
    click.echo(
        f"removed {report.journal_rows} journal rows, {report.step_checkpoints} step "
        f"checkpoints and {report.owners} dead owners"
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
        click.echo(_colour(f"error: {error}", fg="red"), err=True)
        sys.exit(error.exit_code)


def main(argv: Sequence[str] | None = None) -> None:
    with _errors_to_exit_codes():
        cli.main(args=list(argv) if argv is not None else None, prog_name="turnback")
