"""What the benchmarks here share: rounds that interleave their sides, and how a row is read.

A benchmark compares a measurement with a baseline taken in the same run, in rounds that
alternate which side goes first, so a slow stretch of a shared machine hits both sides alike;
each row reports the min, median and max of its rounds.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def interleaved(rounds: int, sides: Mapping[str, Callable[[int], T]]) -> dict[str, list[T]]:
    """Run each side once per round (called with the round's index), in turn, reversing the
    order every other round; what each side returned, by side, in round order."""
    results: dict[str, list[T]] = {side: [] for side in sides}
    for index in range(rounds):
        order = list(sides) if index % 2 == 0 else list(reversed(sides))
        for side in order:
            results[side].append(sides[side](index))
    return results


def spread(values: list[float]) -> dict[str, float]:
    """The min, median and max of a row's rounds."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


#: ``--dir``'s help, the same in every benchmark
DIR_HELP = "where the scratch directory goes (made if missing; default: the system's temporary one)"


def scratch_dir(parent: Path | None, prefix: str) -> Path:
    """A new scratch directory in ``parent`` (made first if it is missing), else in the
    system's temporary directory."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def verdict(met: bool | None) -> str:
    """The last cell of a row: PASS, **MISS**, or nothing for a row with no goal."""
    if met is None:
        return ""
    return "PASS" if met else "**MISS**"


def machine() -> str:
    """The machine a run measured, with its load (others' work skews every absolute time)."""
    return (
        f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}), load average {os.getloadavg()[0]:.1f}"
    )
