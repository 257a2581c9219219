"""turnback's records behave as the dataclasses they replace, built without compiling methods."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from turnback.model import JournalEntry, Turn
from turnback.records import record


@dataclass(frozen=True, slots=True)
class Plain:
    name: str
    size: int
    tags: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list, compare=False, repr=False)


@record
class Made:
    name: str
    size: int
    tags: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list, compare=False, repr=False)


@record
class Child(Made):
    depth: int = 0


@record(frozen=False)
class Mutable:
    name: str
    count: int = 0


def same(made: Made, plain: Plain) -> None:
    assert [(f.name, f.type) for f in dataclasses.fields(made)] == [
        (f.name, f.type) for f in dataclasses.fields(plain)
    ]
    assert repr(made).replace("Made", "Plain") == repr(plain)
    assert dataclasses.asdict(made) == dataclasses.asdict(plain)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("a", 1), {}),
        (("a", 1, ("x",), ["n"]), {}),
        ((), {"name": "a", "size": 1}),
        (("a",), {"size": 2, "tags": ("y",)}),
        ((), {"size": 3, "name": "b", "notes": ["m"], "tags": ()}),
    ],
)
def test_a_record_is_built_compared_and_shown_as_its_dataclass_is(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    made, plain = Made(*args, **kwargs), Plain(*args, **kwargs)  # type: ignore[arg-type]
    same(made, plain)
    assert made == Made(*args, **kwargs)  # type: ignore[arg-type]
    assert hash(made) == hash(Made(*args, **kwargs)) == hash(plain)  # type: ignore[arg-type]
    assert made != plain  # another class, as between two dataclasses
    assert made != dataclasses.replace(made, size=made.size + 1)
    # a field left out of comparing is left out of equality and hashing
    assert made == dataclasses.replace(made, notes=["other"])
    assert hash(made) == hash(dataclasses.replace(made, notes=["other"]))
    assert made.__match_args__ == plain.__match_args__
    assert not hasattr(made, "__dict__")


def test_each_default_factory_is_called_for_each_record() -> None:
    first, second = Made("a", 1), Made("a", 1)
    first.notes.append("x")
    assert second.notes == []


def test_a_frozen_record_refuses_changes_and_survives_copying_and_pickling() -> None:
    made = Made("a", 1, ("t",))
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'size'"):
        made.size = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'name'"):
        del made.name  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.other = 1  # type: ignore[attr-defined]
    assert made.size == 1
    for again in (copy.copy(made), copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert again == made and again is not made


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Made(), r"missing required argument\(s\): 'name', 'size'"),
        (lambda: Made("a"), r"missing required argument\(s\): 'size'"),
        (lambda: Made(size=1), r"missing required argument\(s\): 'name'"),
        (lambda: Made("a", 1, (), [], 5), "takes 5 positional arguments but 6 were given"),
        (lambda: Made("a", name="b", size=1), "got multiple values for 'name'"),
        (lambda: Made("a", 1, colour="red"), "unexpected keyword argument 'colour'"),
        (lambda: Made(name="a", size=1, tags=(), colour="red"), "unexpected keyword argument"),
    ],
)
def test_wrong_arguments_are_refused_with_what_was_wrong(build: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        build()  # type: ignore[operator]


def test_a_record_inherits_its_parents_fields() -> None:
    child = Child("a", 1, depth=2)
    assert [f.name for f in dataclasses.fields(child)] == ["name", "size", "tags", "notes", "depth"]
    assert repr(child) == "Child(name='a', size=1, tags=(), depth=2)"
    assert child != Made("a", 1)
    assert Child("a", 1) == Child(name="a", size=1, depth=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        child.depth = 3  # type: ignore[misc]


def test_a_mutable_record_changes_and_is_not_hashable() -> None:
    item = Mutable("a")
    item.count += 1
    assert item == Mutable("a", 1)
    assert repr(item) == "Mutable(name='a', count=1)"
    with pytest.raises(TypeError, match="unhashable"):
        hash(item)


def test_a_method_the_class_writes_itself_is_kept() -> None:
    @record
    class Shown:
        name: str

        def __repr__(self) -> str:
            return f"<{self.name}>"

    assert repr(Shown("a")) == "<a>"
    assert Shown("a") == Shown("a")


def test_what_a_record_does_not_do_is_refused_when_it_is_defined() -> None:
    with pytest.raises(TypeError, match="no __post_init__; use dataclass"):

        @record
        class Checked:
            name: str

            def __post_init__(self) -> None:
                pass

    with pytest.raises(TypeError, match="given to __init__, by position or by name"):

        @record
        class Hidden:
            name: str
            secret: str = field(default="", init=False)


def test_a_frozen_records_methods_are_not_compiled_from_source() -> None:
    """What records are for: dataclass compiles each method it writes from text, which is most
    of what defining one costs; a frozen record's methods are made in turnback.records, and a
    mutable one's are too but for ``__init__``, compiled."""
    methods = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")
    for cls in (Made, Child, Turn):
        assert {getattr(cls, name).__module__ for name in methods} == {"turnback.records"}
    assert Plain.__init__.__code__.co_filename == "<string>"  # a dataclass's, compiled
    assert Mutable.__init__.__code__.co_filename == "<string>"
    assert Mutable.__repr__.__module__ == Mutable.__eq__.__module__ == "turnback.records"
    assert Turn.__init__.__qualname__ == "Turn.__init__"
    assert JournalEntry.__hash__ is None  # mutable
