"""turnback uses only the public names of the ACP SDK: no private module (``acp._transport``),
no internal package (``acp.task``), no private attribute of its objects (``_conn``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: SDK packages that are internal although their names are not underscored.
INTERNAL = {"acp.task", "acp.router", "acp.telemetry"}


def sources() -> list[Path]:
    return sorted(p for d in ("src", "tests", "bench") for p in (ROOT / d).rglob("*.py"))


def private_uses(text: str, where: str, ours: bool = True) -> list[str]:
    """What ``text`` uses of the SDK's private names; ``ours``: turnback's own code, where
    reading any object's private attributes by name is refused too."""
    tree = ast.parse(text, where)
    found = []
    for node in ast.walk(tree):
        modules: list[tuple[str, list[str]]] = []
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [(node.module, [alias.name for alias in node.names])]
        for module, names in modules:
            parts = module.split(".")
            if parts[0] != "acp":
                continue
            internal = any(module == m or module.startswith(m + ".") for m in INTERNAL)
            if (
                internal
                or any(p.startswith("_") for p in parts)
                or any(n.startswith("_") for n in names)
            ):
                found.append(f"{where}:{node.lineno} imports {module} {names}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
            and ours
        ):
            found.append(f"{where}:{node.lineno} reads {node.args[1].value}")
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "_conn"
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
            and ours
        ):
            found.append(f"{where}:{node.lineno} reads ._conn")
    return found


def test_no_module_uses_a_private_name_of_the_sdk() -> None:
    problems = [
        problem
        for path in sources()
        for problem in private_uses(
            path.read_text(), str(path.relative_to(ROOT)), "src" in path.relative_to(ROOT).parts
        )
    ]
    assert problems == []


@pytest.mark.parametrize(
    "source",
    [
        "from acp._transport import NdjsonTransport",
        "import acp.task.supervisor",
        "from acp.task import MessageSender",
        "from acp import _cookies",
        "rpc = getattr(conn, '_conn')",
        "rpc = client._conn",
    ],
)
def test_the_check_catches_each_kind_of_private_use(source: str) -> None:
    assert private_uses(source, "probe.py")
    assert not private_uses("from acp.connection import Connection", "probe.py")
