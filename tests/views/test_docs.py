"""The README's ``--json`` shapes are written from :mod:`turnback.views`: each shape's fields and
docstring. A field the README names that no view has, or a view field it leaves out, fails here.

``TURNBACK_UPDATE_PINNED=1 pytest tests/views/test_docs.py`` rewrites the README's section.
"""

from __future__ import annotations

import dataclasses
import os
import re
import textwrap
import types
import typing
from pathlib import Path

from turnback import views
from turnback.records import record
from turnback.views import View

README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN = "<!-- the --json shapes, written from turnback.views by tests/views/test_docs.py -->"
END = "<!-- end of the --json shapes -->"

#: The shapes others include, defined first.
NAMED: list[type[View]] = [
    views.TurnView,
    views.SessionView,
    views.ChangeView,
    views.RevertView,
    views.MessageView,
    views.ActivityView,
    views.UnrecoveredView,
]
#: Each command's shape, as the README lists them.
COMMANDS: list[tuple[str, object]] = [
    ("`sessions`", list[views.ListedSession]),
    ("`log`", views.LogView),
    ("`diff`", views.DiffView),
    ("`show`", views.ShowView),
    ("`revert` (and `revert --undo`)", views.RevertView),
    ("`revert --dry-run`", views.PlanView),
    ("`revert` with hand edits in the way", views.ConflictView),
    ("`revert` that could not write some files", views.IncompleteView),
    ("`revert` interrupted", views.InterruptedView),
    ("`recover`", views.RecoverView),
    ("`unrecovered`", list[views.UnrecoveredView]),
    ("`unrecovered SESSION apply TURN`", views.AppliedView),
    ("`unrecovered SESSION discard TURN`", views.DiscardedView),
    ("`sweep`", views.SweepView),
    ("`gc`", views.GcView),
    ("`activities`", list[views.ActivityView]),
    ("`doctor`", list[views.CheckView]),
    ("`rescue SESSION`", views.RescuePointsView),
    ("`rescue SESSION PATH…` (and `rescue --undo`)", views.RescueView),
    ("`handoff`", views.HandoffView),
    ("`hooks install` (and `hooks uninstall`)", views.HooksView),
    ("`demo`", views.DemoView),
]
#: The review page's own answers, each checked in the README's row of its route.
ROUTES: dict[str, type[View]] = {
    "GET /api/sessions/ID`": views.SummaryView,
    "GET /api/sessions/ID/turns/N/patch": views.PatchView,
    "GET /api/sessions/ID/range": views.RangeView,
    "GET /api/sessions/ID/timeline": views.TimelineView,
    "GET /api/sessions/ID/stream": views.RunningView,
    "POST /api/sessions/ID/review-mark": views.ReviewMarkView,
}


def _named(cls: type) -> str | None:
    return cls.__dict__.get("called") if issubclass(cls, View) else None


def _fields(cls: type[View]) -> list[tuple[str, object]]:
    hints = typing.get_type_hints(cls)
    return [(f.metadata.get("json", f.name), hints[f.name]) for f in dataclasses.fields(cls)]  # type: ignore[arg-type]


def _holds_views(hint: object) -> bool:
    if isinstance(hint, type):
        return issubclass(hint, View)
    return any(_holds_views(arg) for arg in typing.get_args(hint))


def shape(hint: object) -> str:
    """How a field's type reads: a named shape by its name, others spelled out."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        [value] = [a for a in args if a is not type(None)]
        return f"{shape(value)} or null"
    if typing.get_origin(hint) in (tuple, list):
        return f"[{shape(args[0])}]"
    assert isinstance(hint, type) and issubclass(hint, View), hint
    return _named(hint) or body(hint)


def body(cls: type[View]) -> str:
    """A shape's keys; a shape that extends a named one, as that name and the keys it adds."""
    base = next((b for b in cls.__mro__[1:] if _named(b)), None)
    inherited = {key for key, _ in _fields(base)} if base else set()
    keys = ", ".join(
        f'"{key}": {shape(hint)}' if _holds_views(hint) else f'"{key}"'
        for key, hint in _fields(cls)
        if key not in inherited
    )
    return f"{_named(base)} + {keys}" if base else "{" + keys + "}"


def _words(cls: type[View]) -> str:
    """The docstring, as a clause of the README's sentence."""
    text = " ".join((cls.__doc__ or "").split()).replace("``", "`").removesuffix(".")
    return text[:1].lower() + text[1:]


def _item(text: str) -> str:
    return textwrap.fill(
        text, 100, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    )


def section() -> str:
    lines = [BEGIN]
    for cls in NAMED:
        article = "An" if _named(cls)[0] in "aeiou" else "A"  # type: ignore[index]
        lines += [_item(f"{article} *{_named(cls)}* is `{body(cls)}`: {_words(cls)}."), ""]
    for label, hint in COMMANDS:
        cls = typing.get_args(hint)[0] if typing.get_origin(hint) is list else hint
        said = "" if _named(cls) else f": {_words(cls)}"  # type: ignore[arg-type]
        lines.append(_item(f"- {label}: `{shape(hint)}`{said}"))
    lines.append(END)
    return "\n".join(lines)


def test_the_readme_shows_each_shape_as_the_views_define_it() -> None:
    text = README.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    written = section()
    if os.environ.get("TURNBACK_UPDATE_PINNED"):
        README.write_text(text[:start] + written + text[end:], encoding="utf-8")
        text, end = written, len(written)
        start = 0
    assert text[start:end] == written, (
        "the README's --json shapes differ from turnback.views; "
        "TURNBACK_UPDATE_PINNED=1 pytest tests/views/test_docs.py writes them"
    )


def test_the_api_table_shows_each_answer_of_its_own_as_the_views_define_it() -> None:
    rows = [line for line in README.read_text(encoding="utf-8").splitlines() if line[:3] == "| `"]
    for route, cls in ROUTES.items():
        [row] = [r for r in rows if r.startswith(f"| `{route}")]
        answer = re.findall(r"`(\{[^`]*)`", row)[-1]  # the last object the row shows
        documented = re.findall(r'"(\w+)"', answer)
        assert documented == [key for key, _ in _fields(cls)], (route, answer)


def test_a_field_the_readme_does_not_show_fails() -> None:
    """The check can fail: a view with one more field reads differently."""

    @record  # a record's subclass is a record: dataclass takes a record for a mutable class
    class Wider(views.SweepView):
        seconds: float

    assert body(Wider) == '{"step_checkpoints", "owners", "seconds"}'
    assert body(Wider) != body(views.SweepView)
