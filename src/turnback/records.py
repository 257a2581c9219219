"""turnback's records: dataclasses whose methods are not compiled from source text.

``dataclasses.dataclass`` writes each method it adds (``__init__``, ``__repr__``, ``__eq__``,
``__hash__`` and, for a frozen class, ``__setattr__`` and ``__delattr__``) as source text and
compiles it, about 0.1 ms a method. turnback defines over a hundred records, and ``turnback
acp`` loads 70 of them before it serves: compiling their methods was about a quarter of the
proxy's loading (not compiling them saves 28 of 102 ms of CPU), taken from the agent starting
beside it, and it was paid again by every CLI command. :func:`record` asks ``dataclass`` only
to read the fields (so ``fields``, ``replace`` and ``asdict`` see an ordinary dataclass) and to
make the slots, and gives the class methods that behave as ``dataclass``'s would: closures over
its fields, made here. A mutable record keeps ``dataclass``'s compiled ``__init__``, five
times as fast as a closure: a journal entry, built for every event a turn records, is one.

A record's fields have a default, a ``default_factory`` or neither. What turnback's records do
not use is refused when one is defined (``__post_init__``, ``kw_only``, a field left out of
``__init__``): a class that needs it is a plain dataclass. To ``dataclass``, a record is a class
it made no methods for and did not freeze (its ``__dataclass_params__`` say so), so a class that
inherits from a record is made a record too: ``dataclass(frozen=True)`` refuses a frozen class
whose parent is not frozen.
"""

from __future__ import annotations

import dataclasses
import reprlib
from operator import attrgetter
from typing import dataclass_transform

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

_set = object.__setattr__
_MISSING = dataclasses.MISSING


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[T] | None = None, /, *, frozen: bool = True) -> Any:
    """``@record`` for ``@dataclass(frozen=True, slots=True)``; ``@record(frozen=False)`` for
    ``@dataclass(slots=True)``."""

    def make(cls: type[T]) -> type[T]:
        if "__post_init__" in cls.__dict__:
            raise TypeError(f"{cls.__qualname__}: a record has no __post_init__; use dataclass")
        documented = cls.__dict__.get("__doc__") is not None
        # a mutable record's __init__ is dataclass's, the one method compiled for it (see above)
        made: Any = dataclasses.dataclass(cls, init=not frozen, repr=False, eq=False, slots=True)
        fields = dataclasses.fields(made)
        for field in fields:
            if not field.init or field.kw_only:
                raise TypeError(
                    f"{cls.__qualname__}.{field.name}: a record's fields are all given to "
                    "__init__, by position or by name; use dataclass"
                )
        names = tuple(field.name for field in fields)
        if frozen and not documented:  # dataclass wrote one from an __init__ not yet made
            made.__doc__ = f"{made.__name__}({', '.join(map(_parameter, fields))})"
        own = cls.__dict__  # what the class defines itself, as dataclass, it keeps
        methods: dict[str, Any] = {
            "__repr__": _repr(tuple(field.name for field in fields if field.repr)),
            "__eq__": _eq(tuple(field.name for field in fields if field.compare)),
        }
        explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
        if frozen:
            if "__setattr__" in own or "__delattr__" in own:
                raise TypeError(f"{cls.__qualname__}: a frozen record sets no attribute itself")
            hashed = (f.name for f in fields if f.compare and (f.hash is None or f.hash))
            methods["__init__"] = _init(made, fields)
            methods["__setattr__"], methods["__delattr__"] = _frozen(made, frozenset(names))
            methods["__getstate__"], methods["__setstate__"] = _state(names)
            if not explicit_hash:
                made.__hash__ = _hash(tuple(hashed))
        elif not explicit_hash:
            made.__hash__ = None  # equal by value, and mutable
        for name, method in methods.items():
            if name not in own:
                method.__qualname__ = f"{made.__qualname__}.{name}"
                setattr(made, name, method)
        return made  # type: ignore[no-any-return]

    return make if cls is None else make(cls)


def _init(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> Callable[..., None]:
    names = tuple(field.name for field in fields)
    # each slot's own setter, which a frozen record's __setattr__ does not stand in front of
    setters = tuple(getattr(cls, name).__set__ for name in names)
    defaults = tuple(field.default for field in fields)
    factories = tuple(field.default_factory for field in fields)
    count = len(names)
    all_named = frozenset(names).issuperset

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        given = len(args)
        if given == count and not kwargs:
            for set_value, value in zip(setters, args, strict=True):
                set_value(self, value)
            return
        if not args and len(kwargs) == count and all_named(kwargs):
            for name, set_value in zip(names, setters, strict=True):
                set_value(self, kwargs[name])
            return
        if given > count:
            raise TypeError(
                f"{cls.__qualname__}.__init__() takes {count + 1} positional arguments "
                f"but {given + 1} were given"
            )
        for set_value, value in zip(setters, args, strict=False):
            set_value(self, value)
        for index in range(given, count):
            name = names[index]
            if name in kwargs:
                value = kwargs.pop(name)
            elif defaults[index] is not _MISSING:
                value = defaults[index]
            elif factories[index] is not _MISSING:
                value = factories[index]()  # type: ignore[misc]
            else:
                missing = [n for n in names[index:] if n not in kwargs and _required(cls, n)]
                raise TypeError(
                    f"{cls.__qualname__}.__init__() missing required argument(s): "
                    + ", ".join(map(repr, missing))
                )
            setters[index](self, value)
        if kwargs:  # unknown names, or a field given both by position and by name
            name = next(iter(kwargs))
            if name in names:
                raise TypeError(f"{cls.__qualname__}.__init__() got multiple values for {name!r}")
            raise TypeError(
                f"{cls.__qualname__}.__init__() got an unexpected keyword argument {name!r}"
            )

    return __init__


def _parameter(field: dataclasses.Field[Any]) -> str:
    """A field as ``inspect.signature`` shows a dataclass's ``__init__`` parameter."""
    text = f"{field.name}: {field.type!r}" if isinstance(field.type, str) else field.name
    if field.default is not _MISSING:
        return f"{text} = {field.default!r}"
    return text if field.default_factory is _MISSING else f"{text} = <factory>"


def _required(cls: type, name: str) -> bool:
    field = cls.__dataclass_fields__[name]  # type: ignore[attr-defined]
    return field.default is _MISSING and field.default_factory is _MISSING


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The fields' values as a tuple, as ``dataclass`` compares and hashes them."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        name = names[0]
        return lambda self: (getattr(self, name),)
    return lambda self: ()


def _eq(names: tuple[str, ...]) -> Callable[[Any, Any], Any]:
    values = _values(names)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hash(names: tuple[str, ...]) -> Callable[[Any], int]:
    values = _values(names)
    return lambda self: hash(values(self))


def _frozen(
    cls: Any, names: frozenset[str]
) -> tuple[Callable[[Any, str, Any], None], Callable[[Any, str], None]]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


def _state(
    names: tuple[str, ...],
) -> tuple[Callable[[Any], list[Any]], Callable[[Any, list[Any]], None]]:
    """``copy`` and ``pickle`` for a frozen record, whose ``__setattr__`` refuses them."""

    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, name) for name in names]

    def __setstate__(self: Any, state: list[Any]) -> None:
        for name, value in zip(names, state, strict=True):
            _set(self, name, value)

    return __getstate__, __setstate__
