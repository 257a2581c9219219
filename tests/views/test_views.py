"""The views themselves: built fast (``_make``) they equal what their constructor builds, their
JSON has their fields in order, and a view never uses its parent's written functions."""

from __future__ import annotations

import dataclasses
import json

import pytest

from turnback import views
from turnback.model import ChangeKind, TurnStatus

TURN = ("t0k3n", 2, "p4r3nt", TurnStatus.INTERRUPTED, [{"type": "text", "text": "hi"}], 1.5, 2.5)


def test_made_fast_a_view_is_what_its_constructor_makes() -> None:
    made = views.ChangeView._make("a.py", ChangeKind.RENAMED, 1, 2, False, "b.py")
    assert made == views.ChangeView("a.py", ChangeKind.RENAMED, 1, 2, False, "b.py")
    assert hash(made) == hash(views.ChangeView("a.py", ChangeKind.RENAMED, 1, 2, False, "b.py"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.path = "c.py"  # type: ignore[misc]


def test_a_view_never_uses_its_parents_functions() -> None:
    parent = views.TurnView(*TURN, 7, None)
    child = views.UnrecoveredView(*TURN, 7, None, "s3ss10n", "unreadable")
    assert list(parent.to_json()) == [f.name for f in dataclasses.fields(parent)]
    assert list(child.to_json())[-2:] == ["session", "reason"]
    assert views.UnrecoveredView._make(*TURN, 7, None, "s3ss10n", "unreadable") == child


def test_json_keys_nesting_and_enums() -> None:
    change = views.ChangeView("a.py", ChangeKind.ADDED, 3, 0, False, None)
    ranged = views.RangeView(1, 4, (change,), None)
    data = views.to_json([ranged])
    assert list(data[0]) == ["from", "to", "files", "patch"]
    assert json.loads(json.dumps(data)) == [
        {
            "from": 1,
            "to": 4,
            "files": [
                {
                    "path": "a.py",
                    "kind": "added",
                    "additions": 3,
                    "deletions": 0,
                    "binary": False,
                    "old_path": None,
                }
            ],
            "patch": None,
        }
    ]
