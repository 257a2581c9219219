"""JSON text as turnback reads and writes it: lossless, bounded, never fatal.

Some facts about JSON and Python that the rest of turnback depends on:

* JSON strings are UTF-16 at heart: ``"\\ud800"`` (an unpaired surrogate) is valid JSON, and
  JavaScript and Python agents both write it. Python reads it into a ``str`` that cannot be
  encoded as UTF-8, so ``json.dumps(..., ensure_ascii=False).encode()`` -- and SQLite, which
  stores UTF-8 -- fail on it. :func:`dumps` writes such a value with ``\\uXXXX`` escapes
  instead: the same JSON value, so it is stored losslessly and replayed as it was sent. In JSON
  text a surrogate can only stand inside a string, so encoding the text with Python's
  ``backslashreplace`` writes each one as exactly that escape (:func:`utf8`): output that must
  not fail -- the CLI's standard output, the review page's answers -- is written that way.
* ``json.loads`` recurses once per nesting level, so a line of a few thousand ``[`` raises
  ``RecursionError`` -- not ``ValueError`` -- wherever it is parsed; code that catches only
  ``ValueError`` dies of it. :func:`loads` refuses nesting deeper than :data:`MAX_DEPTH` levels
  with :class:`TooDeep` (a ``ValueError``), whatever the depth.
* A JSON-RPC message that parses may still be unusable: an ``id`` that is an object cannot key
  a table of pending requests, an ``error`` that is a string has no code.
  :func:`rpc_problem` says what is wrong with one before anything acts on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

#: The deepest nesting of arrays and objects turnback accepts in a message or an event. ACP's
#: own messages nest a dozen levels; tool inputs a few more.
MAX_DEPTH = 128

_ASCII = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)
_SURROGATE = re.compile("[\ud800-\udfff]")
_DECODER = json.JSONDecoder()
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")')


class TooDeep(ValueError):
    """JSON nested deeper than :data:`MAX_DEPTH`."""

    def __init__(self) -> None:
        super().__init__(f"JSON nested deeper than {MAX_DEPTH} levels is refused")


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds an unpaired surrogate (and so cannot be written as UTF-8)."""
    if text.isascii():
        return False
    try:  # a third to a fifth of the regular expression's time on kilobytes of prose
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def readable(text: str) -> str:
    """``text`` with each unpaired surrogate replaced by U+FFFD, for text meant to be read."""
    return _SURROGATE.sub("\ufffd", text) if has_surrogates(text) else text


def file_name(path: str) -> str:
    """A path read from the file system as text every store and terminal can hold: a name that
    is not UTF-8 (``os.fsdecode`` keeps its bytes as lone surrogates) has each such byte
    written as ``\\xNN``, as ``ls --quoting-style=escape`` shows it. For showing and listing;
    the workspace checkpoint keeps the name's real bytes."""
    if not has_surrogates(path):
        return path
    try:
        raw = path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no byte stands for
        return readable(path)
    return raw.decode("utf-8", "backslashreplace")


def safe_text(text: str, value: Any) -> str:
    """``text`` (``value`` written with ``ensure_ascii=False``), or ``value`` written with
    escapes when ``text`` holds an unpaired surrogate: UTF-8 encodable either way."""
    return _ASCII.encode(value) if has_surrogates(text) else text


def utf8(text: str) -> bytes:
    """JSON ``text`` as UTF-8, each unpaired surrogate written as its ``\\uXXXX`` escape (the
    same JSON value; see the module docstring)."""
    return text.encode("utf-8", "backslashreplace")


def dumps(value: Any) -> str:
    """Compact JSON text of ``value`` that always encodes as UTF-8 (see the module docstring)."""
    return safe_text(json.dumps(value, separators=(",", ":"), ensure_ascii=False), value)


def indented(value: Any) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False, default=str)``: the same text, written
    in one pass into a list instead of through a generator per nesting level (the standard
    library's only way to indent, in Python), which costs a long ``--json`` output its most."""
    out: list[str] = []
    _indented(value, "\n", out.append)
    return "".join(out)


def _indented(value: Any, newline: str, put: Callable[[str], object]) -> None:
    if isinstance(value, str):
        put(encode_basestring(value))
    elif value is None:
        put("null")
    elif value is True:
        put("true")
    elif value is False:
        put("false")
    elif isinstance(value, int):
        put(int.__repr__(value))
    elif isinstance(value, float):
        put(_float(value))
    elif isinstance(value, (list, tuple)):
        if not value:
            put("[]")
            return
        inner = newline + "  "
        lead, between = "[" + inner, "," + inner
        for item in value:
            put(lead)
            lead = between
            _indented(item, inner, put)
        put(newline + "]")
    elif isinstance(value, dict):
        if not value:
            put("{}")
            return
        inner = newline + "  "
        lead, between = "{" + inner, "," + inner
        for key, item in value.items():
            put(lead)
            lead = between
            put(encode_basestring(key if isinstance(key, str) else _key(key)))
            put(": ")
            _indented(item, inner, put)
        put(newline + "}")
    else:
        put(encode_basestring(str(value)))


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _key(key: Any) -> str:
    """A key that is not a string, as ``json.dumps`` writes it (or its TypeError)."""
    if isinstance(key, float):
        return _float(key)
    if key is True or key is False or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def loads(text: str | bytes) -> Any:
    """The JSON value of one stripped line; ``ValueError`` (:class:`TooDeep` when nested deeper
    than :data:`MAX_DEPTH`) when it is not one."""
    # as json.loads reads bytes: a surrogate written raw in UTF-8 is read as that surrogate
    line = text.decode("utf-8", "surrogatepass") if isinstance(text, bytes) else text
    try:
        value, end = _DECODER.raw_decode(line)
    except RecursionError:
        raise TooDeep() from None
    if end != len(line):
        raise ValueError(f"Extra data: line 1 column {end + 1} (char {end})")
    check_depth(line, value)
    return value


#: ``scan(text, index)``: the JSON value that begins at ``index`` in ``text`` and the index just
#: past it (what :func:`loads` reads with): a string's when ``text[index]`` is its opening
#: quote. ``ValueError`` when no value begins there, ``RecursionError`` when it nests too
#: deeply to read.
scan: Callable[[str, int], tuple[Any, int]] = _DECODER.raw_decode


def check_depth(text: str, value: Any) -> None:
    """:class:`TooDeep` when ``value`` (read from ``text``) nests deeper than :data:`MAX_DEPTH`."""
    if text.count("[") + text.count("{") > MAX_DEPTH and depth(value) > MAX_DEPTH:
        raise TooDeep()


def finite(text: str) -> bool:
    """Whether JSON ``text`` certainly holds no ``NaN`` or ``Infinity`` (which Python reads but
    JSON has no text for); false also when a string in it merely contains those words."""
    return "NaN" not in text and "Infinity" not in text


def depth(value: Any) -> int:
    """How deep ``value``'s arrays and objects nest (0 for a scalar), without recursing."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def request_id(head: bytes) -> Any:
    """The ``id`` written in the first bytes of a frame that cannot be parsed whole (JSON-RPC
    clients write it before the params), or None."""
    found = _ID.search(head)
    if found is None:
        return None
    try:
        return json.loads(found[1])
    except ValueError:
        return None


def rpc_problem(message: Any) -> tuple[int, str] | None:
    """What makes ``message`` (a parsed line) unusable as a JSON-RPC 2.0 message, as an error
    code and a sentence; None when it is usable."""
    if not isinstance(message, dict):
        kind = "a batch (array)" if isinstance(message, list) else type(message).__name__
        return (
            -32600,
            f"Invalid request: a JSON-RPC message must be an object, not {kind}; batches are "
            "not part of ACP",
        )
    rpc_id = message.get("id")
    if rpc_id is not None and (isinstance(rpc_id, bool) or not isinstance(rpc_id, int | str)):
        return (-32600, "Invalid request: 'id' must be a string, a number or null")
    method = message.get("method")
    if "method" in message and not isinstance(method, str):
        return (-32600, "Invalid request: 'method' must be a string")
    if method is None:
        if "id" not in message or not ({"result", "error"} & message.keys()):
            return (
                -32600,
                "Invalid request: a message needs a 'method' (a request or notification) or "
                "an 'id' with a 'result' or an 'error' (a response)",
            )
        error = message.get("error")
        usable = isinstance(error, dict) and isinstance(error.get("code"), int)
        if "error" in message and not usable:
            return (-32600, "Invalid response: 'error' must be an object with an integer 'code'")
        return None
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return (-32602, f"Invalid params: the params of {method!r} must be an object")
    return None
