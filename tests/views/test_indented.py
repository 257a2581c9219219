"""The CLI's ``--json`` text is written by :func:`turnback.jsontext.indented`, which must give
exactly what ``json.dumps(value, indent=2, ensure_ascii=False, default=str)`` gives, for any
value a view can hold and the odd ones it cannot."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnback.jsontext import indented


class Colour(enum.StrEnum):
    RED = "red"


class Shown:
    def __str__(self) -> str:
        return "shown \u00e9"


def stdlib(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities too
    | st.text(st.characters(exclude_categories=()))  # lone surrogates, controls, quotes
    | st.sampled_from([Colour.RED, Shown()])
)
keys = st.text() | st.integers() | st.floats() | st.booleans() | st.none()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5)
    | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(keys, inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_the_text_is_json_dumps_text(value: Any) -> None:
    assert indented(value) == stdlib(value)


def test_a_key_json_cannot_write_is_the_same_error() -> None:
    with pytest.raises(TypeError):
        stdlib({(1, 2): 3})
    with pytest.raises(TypeError):
        indented({(1, 2): 3})
