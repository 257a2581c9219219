"""docs/design.md's layer picture is the list the import contract enforces, and its table says
what each of those packages owns."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"


def contract_layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [layers] = [c for c in config["contracts"] if c["id"] == "layers"]
    [container] = layers["containers"]
    return [
        [f"{container}.{name.strip().strip('()')}" for name in layer.split("|")]
        for layer in layers["layers"]
    ]


def pictured_layers() -> list[list[str]]:
    text = DESIGN.read_text(encoding="utf-8")
    block = text.split("<!-- layers:", 1)[1].split("<!-- end of layers -->", 1)[0]
    picture = block.split("```\n", 1)[1].split("```", 1)[0]
    rows = [re.split(r" {2,}", line)[0] for line in picture.splitlines() if line.strip()]
    return [[name.strip() for name in row.split("|")] for row in rows]


def test_the_picture_is_the_contract() -> None:
    assert pictured_layers() == contract_layers()


def test_the_table_says_what_each_pictured_package_owns() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `turnback.")]
    described = {
        name for row in rows for name in re.findall(r"`(turnback\.\w+)`", row.split(" | ")[0])
    }
    pictured = {name for layer in pictured_layers() for name in layer} - {"turnback.__main__"}
    assert pictured <= described, pictured - described
    assert "turnback.agents" in described
