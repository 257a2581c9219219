"""The command line: parses arguments, calls the library, renders the result. No rules here.

Exit codes: 0 ok, 1 error, 2 usage, 3 conflict (a running turn, a turn in the wrong state),
130 interrupted (Ctrl-C during a revert).
Every command takes ``--json`` for scripts: the shapes of :mod:`turnback.views`.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sys
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

import turnback.acp
from turnback.acp import launch
from turnback.hooks.agents import AGENTS

if TYPE_CHECKING:
    from turnback import Session, Turnback, views
    from turnback.errors import TurnbackError
    from turnback.hooks.install import Installed
    from turnback.model import FileChange, Revert, RevertPlan
    from turnback.service import Command

T = TypeVar("T")

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
    return _colour(_words(status), fg=_STATUS_COLOURS.get(status))


def _words(value: str) -> str:
    """A status or state as words, for people: ``rolled_back`` is "rolled back"."""
    return value.replace("_", " ")


def _size(size: int) -> str:
    """A size in bytes as people read it: 512 B, 43.6 KiB, 12.0 MiB."""
    if size < 2**10:
        return f"{size} B"
    if size < 2**20:
        return f"{size / 2**10:.1f} KiB"
    return f"{size / 2**20:.1f} MiB"


def _events(count: int) -> str:
    return f"{count} event{'s' if count != 1 else ''}"


def _char_width(c: str) -> int:
    if unicodedata.combining(c):
        return 0
    return 2 if unicodedata.east_asian_width(c) in "WF" else 1


def _width(text: str) -> int:
    """Columns ``text`` takes on a terminal: wide characters two, combining marks none."""
    return len(text) if text.isascii() else sum(_char_width(c) for c in text)


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal columns, with an ellipsis when cut."""
    if text.isascii():
        return text if len(text) <= width else text[: max(0, width - 1)] + "…"
    out: list[str] = []
    used = 0
    for c in text:
        used += _char_width(c)
        if used > width - 1:
            return "".join(out) + "…" if _width(text) > width else text
        out.append(c)
    return text


_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    '"': '\\"',
    "\\": "\\\\",
}


_PLAIN = re.compile(r'[^\x00-\x1f\x7f"\\]*')


def _quote(path: str) -> str:
    """A path as git quotes one with unusual characters: in double quotes, control characters
    escaped (``\\t``, ``\\n``, octal), so a name cannot break a row or move the cursor."""
    if _PLAIN.fullmatch(path):
        return path
    body = "".join(
        _ESCAPES.get(c) or (f"\\{ord(c):03o}" if ord(c) < 0x20 or ord(c) == 0x7F else c)
        for c in path
    )
    return f'"{body}"'


def _short(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


_KIND_LETTERS = {
    "added": "A",
    "modified": "M",
    "deleted": "D",
    "renamed": "R",
    "type_changed": "T",
}


def _changes_line(changes: Sequence[FileChange], limit: int = 6) -> str:
    shown = [
        f"{_KIND_LETTERS[c.kind.value]} "
        + (f"{_quote(c.old_path)} -> {_quote(c.path)}" if c.old_path else _quote(c.path))
        for c in changes[:limit]
    ]
    more = f", … {len(changes) - limit} more" if len(changes) > limit else ""
    return ", ".join(shown) + more


def _emit_json(data: views.View | Sequence[views.View]) -> None:
    from turnback.jsontext import indented
    from turnback.views import to_json

    click.echo(indented(to_json(data)))


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
        self.pager = True
        self._tb: Turnback | None = None

    def page(self, lines: Sequence[str]) -> None:
        """Long output: through the pager (``$PAGER``, else ``less``) on a terminal, as git
        does, unless ``--no-pager``; printed otherwise."""
        text = "\n".join(lines)
        if self.pager and sys.stdout.isatty():
            click.echo_via_pager(text + "\n")
        else:
            click.echo(text)

    @property
    def tb(self) -> Turnback:
        if self._tb is None:
            self._tb = turnback.open(self.home, create=False, progress=Progress())
        return self._tb

    def run(self, command: Command[T]) -> T:
        """Carry a command out through the handle's service, on this thread (Ctrl-C reaches
        it where the engine settles it)."""
        from turnback.service import Service

        return Service.of(self.tb).run(command)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def json_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(command)


class _Commands(click.Group):
    """The global ``--home`` and ``--no-pager`` are taken after the command as well as before
    it (``turnback log SESSION --home DIR``); ``turnback acp`` keeps its own options, and
    whatever follows ``--`` is left alone."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _global_options_first(ctx, args, self.commands))


def _global_options_first(
    ctx: click.Context, args: list[str], commands: Mapping[str, click.Command]
) -> list[str]:
    at = 0
    while at < len(args) and args[at] not in commands:
        at += 2 if args[at] == "--home" else 1
    if at >= len(args) or args[at] == "acp":
        return args
    front, rest, moved = args[:at], [], []
    tail = iter(args[at:])
    for arg in tail:
        if arg == "--":
            rest += [arg, *tail]
        elif arg == "--no-pager" or arg.startswith("--home="):
            moved.append(arg)
        elif arg == "--home":
            value = next(tail, None)
            if value is None:
                raise click.UsageError("Option '--home' requires an argument.", ctx)
            moved += [arg, value]
        else:
            rest.append(arg)
    return [*front, *moved, *rest]


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"]},
    invoke_without_command=True,
)
@click.option(
    "--home",
    type=click.Path(file_okay=False),
    envvar="TURNBACK_HOME",
    help="turnback's home directory (default: $TURNBACK_HOME, else the platform data dir).",
)
@click.option("--no-pager", is_flag=True, help="Print long output instead of paging it.")
@click.version_option(package_name="turnback")
@click.pass_context
def cli(ctx: click.Context, home: str | None, no_pager: bool) -> None:
    """turnback: durable, resumable, reviewable and reversible turns for AI coding agents."""
    state = Context(home)
    state.pager = not no_pager
    ctx.obj = state
    ctx.call_on_close(state.close)
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


pass_state = click.make_pass_decorator(Context)


@cli.command()
@json_option
@pass_state
def sessions(state: Context, as_json: bool) -> None:
    """List sessions, most recently active first."""
    from turnback import views
    from turnback.errors import StoreNotFound

    try:
        listed = views.sessions(state.tb)
    except StoreNotFound:
        listed = []
    if as_json:
        _emit_json(listed)
        return
    if not listed:
        click.echo("No sessions yet. `turnback demo` shows turnback at work.")
        return
    rows = [
        [r.id[:12], str(r.turns), _when(r.updated_at), _short(r.title or "-", 30), r.workspace]
        for r in listed
    ]
    click.echo(_table(["session", "turns", "updated", "title", "workspace"], rows))


@cli.command()
@click.argument("session")
@json_option
@pass_state
def log(state: Context, session: str, as_json: bool) -> None:
    """Show a session's timeline: its turns (the head marked) with their files and +/-, the
    changes made between turns, its reverts and undos where they happened, and what changed
    since the last turn."""
    handle = state.tb.session(session)
    if as_json:
        from turnback import views

        _emit_json(views.log(handle))
        return
    record = handle.record
    timeline = handle.timeline()
    reverts = handle.reverts()
    running = [d.turn for d in timeline if d.turn.status == "running"]
    from turnback.engine.turns import unfinished

    moving = unfinished(reverts)
    # The capture for "since the head" runs git while the rows are rendered; not while a turn
    # runs or a revert moves the files (it would wait for the revert to finish).
    pool = ThreadPoolExecutor(max_workers=1)
    pending = None if running or moving else pool.submit(handle.changes_since_head)
    pool.shutdown(wait=False)
    width = shutil.get_terminal_size((100, 24)).columns
    lines: list[str] = []
    emit = lines.append
    emit(f"session {record.id}  {record.title or ''}".rstrip())
    emit(f"workspace {_quote(record.workspace)}\n")
    if not timeline:
        click.echo("\n".join([*lines, "No turns yet."]))
        return
    after: dict[str | None, list[Revert]] = {}
    for r in reverts:
        after.setdefault(r.from_head, []).append(r)
    numbers = {d.turn.token: d.turn.number for d in timeline}
    for d in timeline:
        t = d.turn
        if d.outside:
            line = f"   changed outside any turn: {_changes_line(d.outside)}"
            emit(_colour(_fit(line, width), dim=True))
        number = str(t.number) if t.status.ended or t.status == "running" else "-"
        status = _status(t.status.value)
        if t.reverted_by:
            status += _colour(" (reverted)", dim=True)
        if t.token == record.head:
            status += " " + _colour("<- head", bold=True)
        head = f"{number:>3}  {t.token[:12]}  {status}  {_when(t.started_at)}  "
        head += _events(t.event_count) + (" so far" if t.status == "running" else "") + "  "
        room = max(10, width - _width(click.unstyle(head)))
        emit(head + _fit(" ".join(t.prompt_text.split()), room))
        if t.status == "running" and not handle.is_live(t):
            emit(
                _colour(
                    "     its process is gone; `turnback recover` settles it "
                    "(or beginning a turn does)",
                    fg="yellow",
                )
            )
        if d.files:
            added = sum(f.additions for f in d.files)
            removed = sum(f.deletions for f in d.files)
            counts = _colour(f"+{added}", fg="green") + " " + _colour(f"-{removed}", fg="red")
            prefix = f"     {len(d.files)} file(s) {counts}: "
            room = max(10, width - _width(click.unstyle(prefix)))
            emit(prefix + _fit(_changes_line(d.files), room))
        elif not d.available and t.status != "running":
            emit(_colour("     workspace checkpoint unavailable", fg="yellow"))
        for r in after.get(t.token, []):
            to = numbers.get(r.to_turn, 0) if r.to_turn else 0
            what = f"revert {r.id}: back to turn {to}" + (
                ", keeping hand edits" if r.keep_user_edits else ""
            )
            when = (
                f"undone {_when(r.ended_at)}"
                if r.state == "undone"
                else "refused, nothing changed"
                if r.refused
                else _words(r.state.value)
            )
            if r in moving and not handle.is_live(r):
                when += "; interrupted, its process is gone: run `turnback recover`"
            emit(_colour(f"   <- {what} ({when})", fg="magenta"))
    since = pending.result() if pending else None
    if since:
        line = f"   changed since the head, in no turn yet: {_changes_line(since)}"
        emit(_colour(_fit(line, width), dim=True))
    aside = [d.turn for d in timeline if d.turn.status == "set_aside"]
    if aside:
        emit(
            f"\n{len(aside)} turn(s) set aside: `turnback unrecovered {record.id[:12]}` shows them."
        )
    click.echo("\n".join(lines))


@cli.command()
@click.argument("session")
@click.argument("turn")
@click.option("--events", is_flag=True, help="Also print the turn's raw event timeline.")
@json_option
@pass_state
def show(state: Context, session: str, turn: str, events: bool, as_json: bool) -> None:
    """Show one turn's conversation. TURN is its number or a token prefix."""
    handle = state.tb.session(session)
    if as_json:
        from turnback import views

        _emit_json(views.show(handle, turn))
        return
    found = handle.get_turn(turn)
    messages = handle.turn_messages(found.token)
    timeline = handle.run_events(found.token)
    lines = [f"turn {found.number} ({found.token})  {_status(found.status.value)}"]
    if found.detail:
        lines.append(f"  {found.detail}")
    lines.append("")
    if found.status in ("running", "set_aside"):
        lines.append(
            f"This turn is {_words(found.status.value)}: its events are still in the journal."
        )
    for message in messages:
        label = _colour(f"[{message.kind.value}]", bold=True)
        body = message.text
        if message.kind == "tool_call":
            body = f"{message.text} ({message.data.get('status', '?')})"
            body += "".join(f"\n    {line}" for line in message.result.splitlines())
        lines.append(body if message.kind == "unreadable" else f"{label} {body}")
    if not events:
        click.echo("\n".join(lines))
        return
    lines.append("")
    for e in timeline:
        lines.append(f"{e.seq:>5} {e.kind} {json.dumps(e.event, ensure_ascii=False)}")
    state.page(lines)


@cli.command()
@json_option
@pass_state
def recover(state: Context, as_json: bool) -> None:
    """Recover turns whose process died: apply each as interrupted, or set it aside."""
    from turnback.service import Recover

    report = state.run(Recover())
    if as_json:
        from turnback import views

        _emit_json(views.RecoverView.of(report))
        return
    for r in report.reverts:
        action = "finished undoing" if r.state == "undone" else "rolled back"
        click.echo(f"{action} revert {r.id} of session {r.session_id[:12]}, left half done")
    for t in report.recovered:
        click.echo(
            f"recovered turn {t.number} of session {t.session_id[:12]} as interrupted "
            f"({_events(t.event_count)})"
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
    from turnback.service import ApplySetAside, DiscardSetAside

    handle = state.tb.session(session)
    if action is None:
        items = handle.unrecovered()
        if as_json:
            from turnback import views

            _emit_json([views.UnrecoveredView.of(u) for u in items])
            return
        if not items:
            click.echo("No set-aside turns.")
        for u in items:
            click.echo(
                f"{u.turn.token[:12]}  {_events(u.turn.event_count)}  {_when(u.turn.started_at)}  "
                f"{_short(u.turn.prompt_text, 40)}\n  reason: {u.reason}"
            )
        return
    if turn is None:
        raise click.UsageError(f"`unrecovered SESSION {action}` needs the TURN to {action}")
    if action == "apply":
        applied = state.run(ApplySetAside(handle.id, turn))
        from turnback import views

        result: views.View = views.AppliedView(views.TurnView.of(applied))
        text = f"applied turn {applied.token[:12]} as turn {applied.number}"
    else:
        token = handle.get_turn(turn).token if turn.strip().isdigit() else None
        token = token or next(
            (u.turn.token for u in handle.unrecovered() if u.turn.token.startswith(turn.lower())),
            turn,
        )
        count = state.run(DiscardSetAside(handle.id, turn))
        from turnback import views

        result = views.DiscardedView(token, count)
        text = f"discarded set-aside turn {token} and its {_events(count)}"
    if as_json:
        _emit_json(result)
    else:
        click.echo(text)


@cli.command()
@json_option
@pass_state
def sweep(state: Context, as_json: bool) -> None:
    """Remove what no turn can use any more: stale step checkpoints and dead owners."""
    from turnback.service import Sweep

    report = state.run(Sweep())
    if as_json:
        from turnback import views

        _emit_json(views.SweepView.of(report))
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
        from turnback import views

        _emit_json([views.ActivityView.of(a) for a in items])
        return
    colours = {"info": None, "warning": "yellow", "error": "red"}
    for a in items:
        level = _colour(a.level.value, fg=colours[a.level.value])
        hint = remedy_hint(a.data.get("remedy"), a.session_id)
        click.echo(f"{_when(a.at)}  {level:<7}  {a.code}  {a.message}{hint}")
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
    if as_json:
        from turnback import views

        _emit_json(views.diff(handle, turn, patch=not stat))
        return
    found = handle.diff(turn, patch=not stat)
    if not found.available:
        from turnback.errors import CheckpointUnavailable

        try:
            handle.diff(turn, patch=True)  # raises CheckpointUnavailable, saying why (exit 1)
        except CheckpointUnavailable as error:
            # on another host the files the turn changed are all stored: only a patch is not
            if not (stat and error.hosts):
                raise
    if found.outside:
        click.echo(f"changed outside any turn, before turn {found.turn.number}:")
        for change in found.outside:
            click.echo(f"  {_KIND_LETTERS[change.kind.value]} {change.path}")
        click.echo()
    if stat or not found.patch:
        labels = [
            f"{_quote(c.old_path)} -> {_quote(c.path)}" if c.old_path else _quote(c.path)
            for c in found.files
        ]
        width = max(map(_width, labels), default=0)
        for c, label in zip(found.files, labels, strict=True):
            counts = (
                "binary"
                if c.binary
                else _colour(f"+{c.additions}", fg="green")
                + " "
                + _colour(f"-{c.deletions}", fg="red")
            )
            padding = " " * (width - _width(label))
            click.echo(f"  {_KIND_LETTERS[c.kind.value]} {label}{padding}  {counts}")
        if not found.files:
            click.echo(f"turn {found.turn.number} changed no files")
        return
    lines = []
    for line in found.patch.splitlines():
        colour = {"+": "green", "-": "red", "@": "cyan"}.get(line[:1])
        bold = line.startswith(("+++", "---", "diff "))
        lines.append(_colour(line, fg=None if bold else colour, bold=bold))
    state.page(lines)


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
@click.option("--dry-run", is_flag=True, help="Show what the revert would do; change nothing.")
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
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Rewind a session to TURN (0: before its first turn): files, conversation, or both.

    Later turns are kept as reverted history, and `turnback revert --undo SESSION` puts
    everything back. Files that existed before the undone turns began, and ignored files,
    are never deleted. `--dry-run` shows the files it would restore, delete and keep, and the
    hand edits in its way, and changes nothing."""
    from turnback.model import RevertRequest
    from turnback.service import PlanRevert, RevertSession, UndoRevert

    if files_only and conversation_only:
        raise click.UsageError("--files-only and --conversation-only exclude each other")
    if undo and turn is not None:
        raise click.UsageError("`revert --undo SESSION` takes no TURN: it undoes the last revert")
    if undo and dry_run:
        raise click.UsageError("--dry-run previews a revert to a TURN, not --undo")
    if not undo and turn is None:
        raise click.UsageError(
            "revert needs the TURN to go back to: a number (0: before the first) or token prefix"
        )
    handle = state.tb.session(session)
    if turn is not None and not turn.strip().isdigit():
        turn = str(handle.get_turn(turn).number)
    request = RevertRequest(int(turn or 0), not conversation_only, not files_only, keep_user_edits)
    what = "undo the last revert" if undo else f"revert session {handle.id[:12]} to turn {turn}"
    if dry_run or not yes:
        if not dry_run and not (sys.stdin.isatty() and sys.stderr.isatty()):
            raise click.UsageError(f"this would {what}; pass --yes to confirm without a terminal")
        plan = (
            None if undo else _conflicts_as_json(as_json, state.run, PlanRevert(handle.id, request))
        )
        if dry_run:
            assert plan is not None
            if as_json:
                from turnback import views

                _emit_json(views.PlanView.of(plan))
            else:
                click.echo(f"{what[0].upper()}{what[1:]} would change:")
                click.echo("\n".join(_plan_lines(plan, keep_user_edits)))
            return
        if plan is not None:
            click.echo("\n".join(_plan_lines(plan, keep_user_edits)), err=True)
        click.confirm(f"{what[0].upper()}{what[1:]}?", abort=True, err=True)
    before = {r.id: r.state for r in handle.reverts()}
    try:
        if undo:
            result = state.run(UndoRevert(handle.id))
        else:
            result = _conflicts_as_json(as_json, state.run, RevertSession(handle.id, request))
    except KeyboardInterrupt:
        _interrupted(handle, before, undo, as_json)
    if as_json:
        from turnback import views

        _emit_json(views.RevertView.of(result))
    elif undo:
        click.echo(f"undid revert {result.id}: files, turns and head are as before it")
    else:
        click.echo(
            f"reverted to turn {turn} (revert {result.id}); "
            f"`turnback revert --undo {handle.id[:12]}` puts it back"
        )


def _interrupted(handle: Session, before: Mapping[int, str], undo: bool, as_json: bool) -> NoReturn:
    """Ctrl-C stopped a revert or undo: settle it here as recovery would (a revert rolled back,
    an undo finished), say what the files are now, and exit with 130 as interrupted commands do.
    A second Ctrl-C while it settles leaves it to `turnback recover`."""
    name = handle.id[:12]
    record: Revert | None = None
    try:
        click.echo("interrupted: stopping safely (Ctrl-C again leaves it half done)", err=True)
        record = handle.settle_interrupted_revert()
        changed = [r for r in handle.reverts() if before.get(r.id) != r.state]
        record = record or (changed[-1] if changed else None)
        if record is None:
            line = f"interrupted before anything changed: session {name} is as it was"
        elif record.state == "rolled_back":
            line = (
                f"interrupted: revert {record.id} was rolled back midway; the files and the "
                "conversation are as before it"
            )
        elif record.state == "undone" and undo:
            line = (
                f"interrupted: the undo of revert {record.id} cannot stop halfway, so it was "
                "finished; the files, turns and head are as before the revert"
            )
        else:  # it had finished when the interrupt landed
            line = f"interrupted, but revert {record.id} had already finished ({record.state})"
    except KeyboardInterrupt:
        record = None
        line = (
            f"interrupted midway: the undo of session {name}'s last revert is half done; "
            "`turnback recover` finishes it"
            if undo
            else f"interrupted midway: session {name}'s workspace is partly reverted; "
            "`turnback recover` rolls the revert back"
        )
    if as_json:
        from turnback import views

        revert = views.RevertView.of(record) if record is not None else None
        _emit_json(views.InterruptedView(line, True, revert))
    click.echo(_colour(line, fg="red"), err=True)
    sys.exit(130)


def _conflicts_as_json(as_json: bool, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``call``, printing the paths of a RevertConflict or a WorkspaceDiverged (exit code 3) or
    of files a restore could not write (exit code 1) as JSON under ``--json``."""
    from turnback.errors import RestoreIncomplete, RevertConflict, WorkspaceDiverged

    try:
        return call(*args, **kwargs)
    except (RevertConflict, RestoreIncomplete, WorkspaceDiverged) as error:
        if not as_json:
            raise
        from turnback import views

        shape = views.IncompleteView if isinstance(error, RestoreIncomplete) else views.ConflictView
        _emit_json(shape(str(error), tuple(error.paths)))
        click.echo(_colour(f"error: {error}", fg="red"), err=True)
        sys.exit(error.exit_code)


def _counts(change: FileChange) -> str:
    if change.binary:
        return "binary"
    return (
        _colour(f"+{change.additions}", fg="green")
        + " "
        + _colour(f"-{change.deletions}", fg="red")
    )


#: Ignored paths a revert leaves alone are listed up to this many; more are one line, a count.
_IGNORED_LISTED = 3


def _plan_lines(plan: RevertPlan, keep_user_edits: bool) -> list[str]:
    """The plan as the user reads it: the hand edits in the way first, then what the revert
    writes, then what it keeps (ignored paths, which it never touches, folded into a count)."""
    clash = (
        "your edit clashes with the agent's change: the revert refuses it and writes nothing"
        if keep_user_edits
        else "your edit: the revert overwrites it, and its undo brings it back"
    )
    lines = [
        f"  {_colour('conflict'.ljust(8), fg='yellow')} {c.path}  ({clash})" for c in plan.conflicts
    ]
    for label, changes, colour in (
        ("restore", plan.restore, "green"),
        ("delete", plan.delete, "red"),
    ):
        for c in changes:
            counts = _counts(c)
            lines.append(f"  {_colour(label.ljust(8), fg=colour)} {c.path}  {counts}")
    ignored = [c for c in plan.keep if plan.kept_because.get(c.path) == "ignored"]
    folded = len(ignored) > _IGNORED_LISTED
    for c in plan.keep:
        if not (folded and plan.kept_because.get(c.path) == "ignored"):
            lines.append(f"  {'keep'.ljust(8)} {c.path}  ({plan.kept_because.get(c.path)})")
    if folded:
        lines.append(f"  {'keep'.ljust(8)} {len(ignored)} ignored paths  (never touched)")
    if plan.conflicts and not keep_user_edits:
        lines.append(
            "  --keep-user-edits refuses instead of overwriting them; "
            "or move your edits aside first"
        )
    return lines or ["  no files"]


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
@click.option("--dry-run", is_flag=True, help="Say what it would prune, and change nothing.")
@json_option
@pass_state
def gc(
    state: Context, keep: int | None, older_than: float | None, dry_run: bool, as_json: bool
) -> None:
    """Prune workspace checkpoints nothing needs and report the bytes freed.

    With --keep N, the turns before each session's last N lose their checkpoints (their diffs
    and reverts of their files); each such session's activities say which."""
    from turnback.service import CollectGarbage

    report = state.run(CollectGarbage(keep, older_than, dry_run))
    if as_json:
        from turnback import views

        _emit_json(views.GcView.of(report))
        return
    if dry_run:
        click.echo(
            f"would release {report.checkpoints_released} turn checkpoint(s) and remove "
            f"{report.refs_removed} ref(s); nothing was changed"
        )
        return
    click.echo(
        f"released {report.checkpoints_released} turn checkpoint(s), removed "
        f"{report.refs_removed} ref(s), freed {_size(report.bytes_freed)}"
    )
    for problem in report.problems:
        click.echo(_colour(f"could not prune {problem}", fg="yellow"), err=True)


@cli.command()
@json_option
@pass_state
def doctor(state: Context, as_json: bool) -> None:
    """Check git, the home, the database and the checkpoints; say what to do for each problem.

    Exits 1 when something needs attention; a home nothing has stored anything in yet is not
    a problem, and doctor creates nothing."""
    from turnback.errors import StoreError

    try:
        checks = state.tb.doctor()
    except StoreError as error:  # the database cannot be opened: the checks that need none
        from turnback.engine.doctor import doctor_unopened
        from turnback.engine.handle import default_home

        home = Path(state.home).expanduser() if state.home else default_home()
        checks = doctor_unopened(home.absolute(), error)
    if as_json:
        from turnback import views

        _emit_json([views.CheckView.of(c) for c in checks])
    else:
        for check in checks:
            mark = (
                _colour("skip", fg="yellow")
                if check.ok is None
                else _colour("ok  ", fg="green")
                if check.ok
                else _colour("FAIL", fg="red")
            )
            click.echo(f"{mark}  {check.name}: {check.detail}")
            if check.fix:
                click.echo(f"      → {check.fix}{remedy_hint(check.remedy, check.session)}")
    if any(c.ok is False for c in checks):
        sys.exit(1)


@cli.command(context_settings={"allow_interspersed_args": False})
@click.option(
    "--home",
    "acp_home",
    type=click.Path(file_okay=False),
    help="turnback's home directory (default: the global --home, $TURNBACK_HOME, else the "
    "platform data dir).",
)
@click.option(
    "--max-frame",
    type=click.IntRange(min=launch.LEAST_MAX_FRAME),
    default=launch.DEFAULT_MAX_FRAME,
    show_default=True,
    help="The largest JSON-RPC message accepted from the editor, in bytes.",
)
@click.option(
    "--initialize-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=launch.DEFAULT_INITIALIZE_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="How long the agent may take to answer initialize when it starts.",
)
@click.option(
    "--restart-attempts",
    type=click.IntRange(min=0),
    default=launch.DEFAULT_RESTART_ATTEMPTS,
    show_default=True,
    metavar="N",
    help="Restarts of an agent that dies during one turn before the turn fails.",
)
@click.option(
    "--on-agent-crash",
    type=click.Choice(launch.ON_AGENT_CRASH),
    default=launch.ON_AGENT_CRASH[0],
    show_default=True,
    help="When the agent dies mid-turn before saving a step checkpoint: restart it and have it "
    "continue the turn, or end the turn as interrupted.",
)
@click.argument("agent_command", nargs=-1, type=click.UNPROCESSED)
@pass_state
def acp(
    state: Context,
    acp_home: str | None,
    max_frame: int,
    initialize_timeout: float,
    restart_attempts: int,
    on_agent_crash: str,
    agent_command: tuple[str, ...],
) -> None:
    """Run AGENT_COMMAND behind an ACP proxy on stdin/stdout: every prompt a durable turn.

    Configure the editor to start `turnback acp -- AGENT_COMMAND…` instead of the agent. Sessions
    are listed, loaded, resumed and forked from turnback's store, and /checkpoints, /diff,
    /rewind and /undo-rewind are answered by turnback.

    Without AGENT_COMMAND it serves only as a proxy component of a chain that a conductor runs
    (draft): the agent is the conductor's successor."""
    # Started before the proxy is imported, so the agent's start-up overlaps the proxy's (the
    # ``turnback`` command serves a plain command line itself, without the CLI).
    early = launch.started(agent_command) if agent_command else launch.Launched(None)
    line = launch.AcpLine(
        list(agent_command),
        home=acp_home or state.home,
        max_frame=max_frame,
        initialize_timeout=initialize_timeout,
        restart_attempts=restart_attempts,
        on_agent_crash=on_agent_crash,
    )
    sys.exit(turnback.acp.run(line, early))


@cli.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to serve on; anything but loopback lets other machines knock "
    "(0.0.0.0: every address, and an address they can use is printed).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="The port to serve on (0: a free one).",
)
@click.option("--no-open", is_flag=True, help="Print the address only; do not open a browser.")
@click.option("--read-only", is_flag=True, help="Serve no action: review only, change nothing.")
@pass_state
def ui(state: Context, host: str, port: int, no_open: bool, read_only: bool) -> None:
    """Serve a local review page: sessions, timelines, diffs, reverts with a preview, undo.

    Prints the page's address, with its token, as the first line, then opens a browser (on a
    one-time address) unless --no-open; serves until interrupted. The page swaps the token for
    a key that every request of its API needs."""
    from turnback.ui import serve

    try:
        serve(state.home, host=host, port=port, open_browser=not no_open, read_only=read_only)
    except OSError as error:
        raise click.ClickException(
            f"cannot serve on {host}:{port}: {error.strerror or error}; "
            "choose another --port (0 picks a free one)"
        ) from None


@cli.command()
@click.option("--keep", is_flag=True, help="Keep the demo's home and workspace afterwards.")
@click.option("--workspace", type=click.Path(file_okay=False), help="Run the demo in this folder.")
@json_option
def demo(keep: bool, workspace: str | None, as_json: bool) -> None:
    """Show turnback at work: durable turns, a crash mid-turn, and its recovery."""
    from turnback.demo import check_workspace, run

    try:
        check_workspace(workspace)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="'--workspace'") from error
    summary = run(keep=keep, workspace=workspace, echo=(lambda _: None) if as_json else click.echo)
    if as_json:
        _emit_json(summary)


@cli.command()
@click.argument("session")
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@click.option(
    "--turn",
    "turn",
    default=None,
    help="The turn whose checkpoints to use (number or token prefix; default: the running "
    "turn, else the last).",
)
@click.option(
    "--before-tool",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Bring the files back as they were just before the turn's K-th shell or write tool "
    "(0: when the turn began).",
)
@click.option(
    "--force", is_flag=True, help="Overwrite paths changed since the turn ended (hand edits)."
)
@click.option("--undo", is_flag=True, help="Put the paths of the last rescue back as before it.")
@json_option
@pass_state
def rescue(
    state: Context,
    session: str,
    paths: tuple[str, ...],
    turn: str | None,
    before_tool: int,
    force: bool,
    undo: bool,
    as_json: bool,
) -> None:
    """Bring files back as they were before a tool of a turn: an agent's `rm`, `git reset
    --hard` or overwrite undone, untracked files included.

    Without PATH, lists the turn's points: its begin (0) and a checkpoint before each shell
    or write tool, with the repository's refs, stash and reflog kept before a destructive git
    command. With PATHs (files or directories, relative to the current directory), writes
    those paths as they were and nothing else. A path changed since the turn ended is a
    conflict (exit code 3), unless --force; `--undo` puts the last rescue's paths back (a
    path changed since the rescue is a conflict too, unless --force)."""
    from turnback import views
    from turnback.service import RescueFiles, UndoRescue

    handle = state.tb.session(session)
    if undo:
        if paths or turn is not None or before_tool:
            raise click.UsageError("`rescue --undo SESSION` takes no PATH, --turn or --before-tool")
        done = _conflicts_as_json(as_json, state.run, UndoRescue(handle.id, force))
        if as_json:
            _emit_json(views.RescueView.of(done))
        else:
            click.echo(
                f"undid rescue {done.id}: {', '.join(map(_quote, done.written))} as before it"
            )
        return
    if not paths:
        points = views.rescue_points(handle, turn)
        if as_json:
            _emit_json(points)
            return
        number = points.turn.number
        click.echo(
            f"turn {number} ({_status(points.turn.status)}): {_short(str(points.turn.prompt))}"
        )
        click.echo("  0  the turn's begin")
        for point in points.tools:
            kept = "  (refs, stash and reflog kept)" if point.git_state else ""
            missing = "  (no checkpoint: see activities)" if point.checkpoint is None else ""
            click.echo(
                f"  {point.number}  before {point.tool}: {_short(point.summary)}{kept}{missing}"
            )
            if isinstance(point.git_state, dict):  # what `git branch NAME SHA` brings back
                kept_git = point.git_state
                click.echo(f"       HEAD was {str(kept_git.get('head') or '-')[:12]}")
                for line in [*kept_git.get("stash", ()), *kept_git.get("refs", ())][:20]:
                    click.echo(f"       {_short(str(line), 70)}")
        click.echo(
            f"`turnback rescue {handle.id[:12]} --turn {number} --before-tool K PATH…` brings "
            "PATHs back as they were"
        )
        return
    command = RescueFiles(handle.id, paths, turn, before_tool, force)
    done = _conflicts_as_json(as_json, state.run, command)
    if as_json:
        _emit_json(views.RescueView.of(done))
        return
    when = f"before tool {before_tool}" if before_tool else "when it began"
    click.echo(
        f"brought back {', '.join(map(_quote, done.written))} as they were {when} "
        f"(rescue {done.id}); `turnback rescue {handle.id[:12]} --undo` puts them back"
    )


@cli.command()
@click.argument("session")
@click.option(
    "--to",
    "to_host",
    required=True,
    help="The machine that takes the session over: this one (its name, as TURNBACK_HOST or "
    "the host name gives it).",
)
@json_option
@pass_state
def handoff(state: Context, session: str, to_host: str, as_json: bool) -> None:
    """Move SESSION to this machine of a fleet, whose workspace is brought to the session's
    head (from the checkpoint remote, TURNBACK_CHECKPOINT_REMOTE, when another machine took
    the checkpoints); its turns then begin only here.

    Run it on the machine named by --to. Refused while a turn of the session runs (exit code
    3), and when this machine's workspace holds changes that are not the session's: they are
    listed (exit code 3), nothing is written, and the session stays where it was."""
    from turnback import views
    from turnback.service import HandOff

    handle = state.tb.session(session)
    done = _conflicts_as_json(as_json, state.run, HandOff(handle.id, to_host))
    if as_json:
        _emit_json(views.HandoffView.of(done))
        return
    where = f"from host {done.from_host} " if done.from_host else ""
    files = f"{len(done.written)} file(s) written" if done.written else "no file to write"
    moment = f", {done.moment}" if done.moment not in ("", "end") else ""
    click.echo(
        f"session {handle.id[:12]} handed off {where}to host {done.to_host} at turn {done.turn} "
        f"({files}{moment}); its turns run here now"
    )
    for path in done.written:
        click.echo(f"  {_quote(path)}")


@cli.command()
@click.argument("agent")  # not a choice: an unknown one is said, and the hook still exits 0
@click.argument("event")
@pass_state
def hook(state: Context, agent: str, event: str) -> None:
    """Run as an agent's hook: the EVENT's JSON on stdin (Claude Code, Codex, Gemini CLI).

    `turnback hooks install AGENT` configures the agent to run it. A prompt begins a turn, a
    shell or write tool is checkpointed first, the end of the agent's turn ends it. It always
    exits 0 and prints nothing on standard output; what went wrong goes to standard error and
    the session's activities."""
    from turnback.hooks import client

    problem = client.run(agent, event, client.read_stdin(), home=state.home)
    if problem:
        click.echo(f"turnback hook {agent} {event}: {problem}", err=True)


@cli.group()
def hooks() -> None:
    """Install or remove turnback's hooks in Claude Code, Codex or Gemini CLI."""


def _hooks_scope(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--project",
        "scope",
        flag_value="project",
        help="The project's configuration (in the current directory).",
    )(command)
    command = click.option(
        "--user",
        "scope",
        flag_value="user",
        default=True,
        help="The user's configuration (the default).",
    )(command)
    command = click.argument("agent", type=click.Choice(AGENTS))(command)
    return json_option(command)


@hooks.command("install")
@_hooks_scope
@pass_state
def hooks_install(state: Context, agent: str, scope: str, as_json: bool) -> None:
    """Configure AGENT to run `turnback hook` on its session, prompt, tool and stop events;
    the user's own hooks stay as they are. Run again, it replaces turnback's hooks. A home
    given here (`--home`, `TURNBACK_HOME`) is the one the hooks write to."""
    from turnback.hooks import install

    with _errors_to_exit_codes():
        done = install.install(
            agent,
            project=Path.cwd() if scope == "project" else None,
            turnback_home=state.home,
        )
    _installed(done, "installed", as_json)


@hooks.command("uninstall")
@_hooks_scope
def hooks_uninstall(agent: str, scope: str, as_json: bool) -> None:
    """Remove turnback's hooks from AGENT's configuration, and nothing else."""
    from turnback.hooks import install

    with _errors_to_exit_codes():
        done = install.uninstall(agent, project=Path.cwd() if scope == "project" else None)
    _installed(done, "removed", as_json)


def _installed(done: Installed, what: str, as_json: bool) -> None:
    if as_json:
        from turnback import views

        _emit_json(views.HooksView.of(done))
        return
    if not done.events:
        click.echo(f"no turnback hooks of {done.agent} to remove")
        return
    click.echo(f"{what} turnback's {done.agent} hooks ({', '.join(done.events)}) in:")
    for path in done.files:
        click.echo(f"  {path}")
    for note in done.notes:
        click.echo(f"note: {note}")


# -- entry point -------------------------------------------------------------------------------


@contextmanager
def _errors_to_exit_codes() -> Iterator[None]:
    from turnback.errors import TurnbackError

    try:
        yield
    except TurnbackError as error:
        fail(error)


def fail(error: TurnbackError) -> NoReturn:
    """Say what went wrong, and what settles it, and exit with the error's status."""
    click.echo(_colour(f"error: {error}{_hint(error)}", fg="red"), err=True)
    sys.exit(error.exit_code)


def _hint(error: Exception) -> str:
    """The CLI's words for what settles an error (its structured ``remedy``)."""
    return remedy_hint(
        getattr(error, "remedy", None),
        getattr(error, "session", None),
        getattr(error, "turn", None),
    )


def remedy_hint(remedy: object, session: str | None, turn: int | None = None) -> str:
    """The CLI's words for a ``remedy`` (see :mod:`turnback.errors`) of ``session``."""
    from turnback.errors import (
        ACTIVITIES,
        DECIDE,
        GC,
        INITIALIZE_TIMEOUT,
        RECOVER,
        SESSIONS,
        SHOW,
        TURNS,
        WAIT,
    )

    name = session[:12] if session else "SESSION"
    hints = {
        WAIT: "; if the process running it died, `turnback recover` settles it",
        RECOVER: "; run `turnback recover`",
        SESSIONS: "; `turnback sessions` lists the sessions",
        TURNS: f"; `turnback log {name}` lists its turns",
        ACTIVITIES: f"; `turnback activities {name}` says why",
        DECIDE: f"; `turnback unrecovered {name}` lists them",
        SHOW: f"; `turnback show {name} {turn or 'TURN'}` shows what was kept",
        INITIALIZE_TIMEOUT: "; `turnback acp --initialize-timeout SECONDS` gives it longer",
        GC: "; `turnback gc --keep 0` does it",
    }
    return hints.get(str(remedy), "")


def main(argv: Sequence[str] | None = None) -> None:
    # A stored string may hold an unpaired surrogate (an agent sent one; the store keeps it):
    # written as its escape it cannot fail, and --json stays the same JSON value
    # (turnback.jsontext). Standard error already writes it so.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    with _errors_to_exit_codes():
        cli.main(args=list(argv) if argv is not None else None, prog_name="turnback")
