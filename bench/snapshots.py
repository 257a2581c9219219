"""Benchmark of workspace checkpoints against plain git on the same generated tree.

    python bench/snapshots.py                 # 50,000 files (the recorded run)
    python bench/snapshots.py --files 10000
    python bench/snapshots.py --smoke         # about 2,000 files, a few seconds (CI)

Every number is the median of a few repetitions, and every goal is a ratio against a baseline
measured in the same run, because absolute times on shared machines drift:

(a)  ``git status --porcelain`` in the tree as a plain git repository, index refreshed
(b)  the common throwaway-index capture: ``read-tree HEAD``, ``add -A``, ``write-tree``
(c)  turnback's warm capture with 10 files changed    goal: <= 1.5x (a), >= 5x faster than (b)
(c') the same with ``fsync=True`` (objects synced too; refs always are)
(d)  turnback's first capture of the git workspace     goal: <= 3x (a)
(e0) ``git checkout -- <10 files>`` in the plain repository
(e)  turnback's restore of those 10 files              goal: <= 2x (e0)
(f)  shadow repository size after 100 turns of small edits, before and after gc
                                                        goal: growth follows the edits
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

try:
    from turnback.workspace import Snapshots
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from turnback.workspace import Snapshots

GIT_ENV = {
    "PATH": os.environ.get("PATH", os.defpath),
    "HOME": "/nonexistent",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**GIT_ENV, **(env or {})},
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def path_of(i: int) -> str:
    return f"d{i % 20}/e{(i // 20) % 25}/f{(i // 500) % 10}/file{i}.txt"


def generate(root: Path, files: int) -> None:
    for i in range(files):
        file = root / path_of(i)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("".join(f"line {n} of file {i}\n" for n in range(8)))


def median(repeat: int, run: Callable[[], float]) -> float:
    return statistics.median(run() for _ in range(repeat))


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def edit(root: Path, paths: list[str], tag: str) -> None:
    for path in paths:
        with open(root / path, "a") as out:
            out.write(f"edit {tag}\n")


def size_of(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--smoke", action="store_true", help="about 2,000 files; seconds")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    files = 2_000 if args.smoke else args.files
    repeat = 3 if args.smoke else args.repeat
    turns = 20 if args.smoke else args.turns
    scratch = Path(tempfile.mkdtemp(prefix="turnback-bench-"))
    try:
        return run(scratch, files, repeat, turns)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(scratch: Path, files: int, repeat: int, turns: int) -> int:
    ws = scratch / "workspace"
    ws.mkdir()
    print(f"generating {files:,} files ...", file=sys.stderr)
    generate(ws, files)
    git(ws, "init", "-q")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "generated")
    git(ws, "status", "--porcelain")  # refresh the index
    step = max(1, files // 10)
    batch = iter([[path_of((r * 977 + j * step) % files) for j in range(10)] for r in range(80)])

    # (a) git status, the cost of finding what changed
    a = median(repeat, lambda: timed(lambda: git(ws, "status", "--porcelain")))

    # (b) throwaway index
    def throwaway() -> float:
        index = scratch / "throwaway-index"
        env = {"GIT_INDEX_FILE": str(index)}
        index.unlink(missing_ok=True)
        return timed(
            lambda: (
                git(ws, "read-tree", "HEAD", env=env),
                git(ws, "add", "-A", env=env),
                git(ws, "write-tree", env=env),
            )
        )

    b = median(max(2, repeat // 2), throwaway)

    # (d) first capture of the git workspace, a fresh turnback home each time
    homes = iter(range(1000))

    def first() -> float:
        snapshots = Snapshots(scratch / f"home-first-{next(homes)}")
        return timed(lambda: snapshots.capture(ws, "s/first"))

    d = median(max(2, repeat // 2), first)

    # (c) warm capture with 10 files changed
    home = scratch / "home"
    snapshots = Snapshots(home)
    baseline = snapshots.capture(ws, "s/base")
    snapshots.capture(ws, "s/warm-up")

    def warm() -> float:
        edit(ws, next(batch), "warm")
        return timed(lambda: snapshots.capture(ws, "s/warm"))

    c = median(repeat, warm)
    synced = Snapshots(home, fsync=True)

    def warm_synced() -> float:
        edit(ws, next(batch), "synced")
        return timed(lambda: synced.capture(ws, "s/warm"))

    c_sync = median(repeat, warm_synced)

    # (e0) git checkout of 10 changed files, (e) turnback restore of 10 changed files
    def checkout() -> float:
        paths = next(batch)
        edit(ws, paths, "e0")
        return timed(lambda: git(ws, "checkout", "--", *paths))

    e0 = median(repeat, checkout)
    git(ws, "checkout", "--", ".")
    before = snapshots.capture(ws, "s/before-restore").commit
    restore_times: list[float] = []
    both_times: list[float] = []
    for _ in range(repeat):
        edit(ws, next(batch), "e")
        started = time.perf_counter()
        current = snapshots.capture(ws, "s/current").commit
        middle = time.perf_counter()
        written = snapshots.restore(ws, before, current=current)
        ended = time.perf_counter()
        assert len(written) == 10, written
        restore_times.append(ended - middle)
        both_times.append(ended - started)
    e = statistics.median(restore_times)
    e_both = statistics.median(both_times)

    # (f) shadow size over many turns of small edits (begin and end checkpoint per turn)
    home_f = scratch / "home-turns"
    turns_snapshots = Snapshots(home_f)
    turns_snapshots.capture(ws, "s/t/0/begin")
    shadow = turns_snapshots._shadow(ws).dir / "objects"
    start_size = size_of(shadow)
    edited_bytes = 0
    for turn in range(1, turns + 1):
        turns_snapshots.capture(ws, f"s/t/{turn}/begin")
        paths = [path_of((turn * 104729 + j * 31) % files) for j in range(3)]
        for path in paths:
            with open(ws / path, "a") as out:
                edited_bytes += out.write(f"turn {turn} adds a line\n")
        turns_snapshots.capture(ws, f"s/t/{turn}/end")
    grown = size_of(shadow)
    turns_snapshots.gc(ws, object_grace=0)
    packed = size_of(shadow)
    tree_size = size_of(ws / ".git" / "objects")
    restored = snapshots.changes(ws, baseline.commit, before)
    assert restored == [], restored

    rows = [
        ("(a)", "git status --porcelain (plain repo, refreshed index)", a, "baseline", ""),
        ("(b)", "throwaway index: read-tree HEAD, add -A, write-tree", b, f"{b / a:.1f}x (a)", ""),
        (
            "(c)",
            "turnback warm capture, 10 files changed",
            c,
            f"{c / a:.2f}x (a); {b / c:.1f}x faster than (b)",
            verdict(c <= 1.5 * a and b >= 5 * c),
        ),
        ("(c')", "  the same with fsync=True", c_sync, f"{c_sync / a:.2f}x (a)", ""),
        (
            "(d)",
            "turnback first capture of the git workspace",
            d,
            f"{d / a:.2f}x (a)",
            verdict(d <= 3 * a),
        ),
        ("(e0)", "git checkout -- <10 files>", e0, "baseline", ""),
        (
            "(e)",
            "turnback restore of 10 changed files",
            e,
            f"{e / e0:.2f}x (e0)",
            verdict(e <= 2 * e0),
        ),
        (
            "(e+)",
            "  the same, with the capture taken before it",
            e_both,
            f"{e_both / e0:.2f}x (e0)",
            "",
        ),
    ]
    print(f"\nworkspace: {files:,} files; median of {repeat} runs; git {git_version()}")
    print()
    print("| step | what | median | ratio | goal |")
    print("|---|---|---:|---|---|")
    for step_name, what, seconds, ratio, goal in rows:
        print(f"| {step_name} | {what} | {seconds * 1000:.1f} ms | {ratio} | {goal} |")
    growth = grown - start_size
    print(
        f"| (f) | shadow objects after {turns} turns of 3 one-line edits "
        f"(2 checkpoints a turn) | {kib(start_size)} → {kib(grown)} (+{kib(growth)}, "
        f"{growth / turns / 1024:.1f} KiB a turn); after gc {kib(packed)} | "
        f"user's objects: {kib(tree_size)}; edited {kib(edited_bytes)} | "
        f"{verdict(packed < tree_size / 4)} |"
    )
    print("\n(f) goal: growth follows what changed (the edited files and the trees above them),")
    print("not the size of the tree; after gc the 100 turns cost less than a quarter of one copy")
    print("of the repository's objects.")
    return 0


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def kib(size: int) -> str:
    return f"{size / 1024:,.0f} KiB"


def git_version() -> str:
    return subprocess.run(
        ["git", "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[2]


if __name__ == "__main__":
    sys.exit(main())
