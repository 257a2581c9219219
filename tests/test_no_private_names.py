"""turnback builds on the public names of Python and of its dependencies only: a private one
(``_json.make_encoder``, ``acp._transport``) can change or vanish in any release, and breaks
on another interpreter."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "turnback"

#: Documented public names that merely start with an underscore.
DOCUMENTED = {"os._exit"}
#: Undocumented internals that carry no underscore.
INTERNALS = {"scanstring", "scan_once", "make_encoder", "c_make_encoder", "encode_basestring"}


def private_uses(tree: ast.AST) -> list[str]:
    modules: set[str] = set()  # names this file binds to modules and names it imported
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if any(part.startswith("_") for part in alias.name.split(".")):
                    found.append(f"import {alias.name}")
                modules.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "__future__" or node.module.startswith("turnback"):
                continue
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"from {node.module} import …")
            for alias in node.names:
                if alias.name.startswith("_") or alias.name in INTERNALS:
                    found.append(f"from {node.module} import {alias.name}")
                modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            if name in INTERNALS:
                found.append(f"….{name}")
            elif (
                name.startswith("_")
                and not name.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and f"{node.value.id}.{name}" not in DOCUMENTED
            ):
                found.append(f"{node.value.id}.{name}")
    return found


def test_src_uses_no_private_name_of_python_or_a_dependency() -> None:
    uses = {
        str(path.relative_to(SRC)): found
        for path in sorted(SRC.rglob("*.py"))
        if (found := private_uses(ast.parse(path.read_text(), str(path))))
    }
    assert uses == {}


def test_the_check_sees_what_it_looks_for() -> None:
    code = (
        "import json\nfrom _json import make_encoder\nimport acp\n"
        "json.decoder.scanstring\nacp._transport\nos._exit(0)\n"
    )
    assert private_uses(ast.parse(code)) == [
        "from _json import …",
        "from _json import make_encoder",
        "….scanstring",
        "acp._transport",
    ]
