"""Pinned output: what scripts read, captured once and compared byte for byte.

Each capture is the exact text a command printed (or an API route answered), with only what
differs from run to run replaced by a placeholder: ids by ``<idN>`` (the same id the same
placeholder everywhere in a file, so the links between shapes stay pinned), checkpoint commits
by ``<commit>``, times by ``<time>``, the test's directory by ``<tmp>``, and a few values that
depend on the machine.

``TURNBACK_UPDATE_PINNED=1 pytest tests/views`` rewrites the files (then read the diff!).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

HERE = Path(__file__).parent / "pinned"

_ID = re.compile(r"\b[0-9a-f]{32}\b")
# a commit's id depends on the second it was made in: which two are the same is not pinned
_COMMIT = re.compile(r"\b[0-9a-f]{40}\b")
_PREFIX = re.compile(r"\b[0-9a-f]{8,12}\b")
_TIME = re.compile(r"\b1[6-9][0-9]{8}(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?\b")
_MACHINE = [
    (re.compile(r'"bytes_freed": *[0-9]+'), '"bytes_freed": "<n>"'),
    # two checkpoints of one tree made in the same second are one commit, and gc keeps a ref
    # whose commit a live checkpoint names: how many refs go depends on the clock
    (re.compile(r'"refs_removed": *[0-9]+'), '"refs_removed": "<n>"'),
    (re.compile(r"git [0-9][0-9.]* at [^\"]+"), "git <version> at <path>"),
    (re.compile(r"\b[0-9.]+ (?:[KMGT]i)?B\b"), "<size>"),
]


class Pinned:
    """The captures of one file, normalised as they are added."""

    def __init__(self, name: str, tmp: Path, *varying: tuple[re.Pattern[str], str]) -> None:
        """``varying``: more patterns of what differs between runs, and their placeholders."""
        self.path = HERE / f"{name}.txt"
        self.tmp = str(tmp)
        self.varying = [*_MACHINE, *varying]
        self.ids: dict[str, str] = {}
        self.parts: list[str] = []

    def add(self, title: str, text: str) -> None:
        self.parts.append(f"### {self.normalise(title)}\n{self.normalise(text).rstrip()}\n")

    def normalise(self, text: str) -> str:
        text = text.replace(self.tmp, "<tmp>")
        text = _COMMIT.sub("<commit>", text)
        text = _ID.sub(self._id, text)
        text = _PREFIX.sub(self._prefix, text)
        text = _TIME.sub("<time>", text)
        for pattern, placeholder in self.varying:
            text = pattern.sub(placeholder, text)
        return text

    def _id(self, match: re.Match[str]) -> str:
        return self.ids.setdefault(match[0], f"<id{len(self.ids) + 1}>")

    def _prefix(self, match: re.Match[str]) -> str:
        for value, name in self.ids.items():
            if value.startswith(match[0]):
                return f"{name[:-1]}:{len(match[0])}>"
        return match[0]

    def check(self) -> None:
        text = "\n".join(self.parts)
        if os.environ.get("TURNBACK_UPDATE_PINNED"):
            HERE.mkdir(exist_ok=True)
            self.path.write_text(text)
        expected = self.path.read_text()
        assert text == expected, f"the output differs from {self.path}: a script would see it"
