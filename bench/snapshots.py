"""Benchmark of workspace checkpoints against plain git on the same generated tree.

    python bench/snapshots.py                          # 1,000, 10,000, 50,000 and 200,000 files
    python bench/snapshots.py --files 10000,50000 --rounds 9
    python bench/snapshots.py --smoke                  # 1,000 files, a few seconds (CI)

Each size's warm rows run in interleaved rounds: every round first appends a line to 10 files,
then runs each candidate once, in an order that rotates from round to round, so a slow stretch
of the shared machine hits every candidate alike. Each row gives min, median and max, and every
goal is a ratio of medians against a baseline measured in the same run:

(a)  ``git status --porcelain`` in the tree as a plain git repository (baseline)
(s)  ``git stash create`` there: the tracked files as a commit, one process
(b)  t3code's capture, step for step: ``rev-parse --verify HEAD``, then in a temporary index
     ``read-tree HEAD``, ``add -A -- .``, ``write-tree``, ``commit-tree``, and ``update-ref``
(p)  floor: one git process that reads nothing (``git rev-parse HEAD``)
(a2) floor: the status a capture runs, alone (shadow index, untracked cache)
(c)  turnback's warm capture, 10 files changed        goal: <= 1.2x (a), and <= (s)
(w)  the same, fed by a file watcher (no status)      goal at 200,000 files: <= (a) / 10, and
                                                     the absolute 50 ms
Then, at each size, turns through the public API in rounds of their own (each turn edits 10
files; nothing else changes the workspace between them), interleaved with a ``git status``:
(ta) ``git status --porcelain``, as (a), measured in these rounds (baseline)
(t0) ``with session.turn()`` with checkpoints off (its workspace a directory of 10 files)
(t)  the same with checkpoints on (the default), in the generated tree
(tc) (t) - (t0) round by round: a turn's two checkpoints and its diff   goal: <= 2.4x (ta)
At 50,000 files (and the smoke size), medians:
(d)  turnback's first capture of the git workspace   goal: <= 3x (a)
(e0) ``git checkout -- <10 files>`` in the plain repository
(e)  turnback's restore of those 10 files             goal: <= 2x (e0)
(f)  shadow repository size after 100 turns of small edits, before and after gc

Generated trees are kept between runs under ``$TMPDIR/turnback-bench-trees`` (``--fresh`` builds
them again), because a 200,000-file tree takes minutes to write and commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    import turnback
    from turnback.workspace import Snapshots
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import turnback
    from turnback.workspace import Snapshots

from rounds import DIR_HELP, interleaved, machine, scratch_dir

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
TREES = Path(tempfile.gettempdir()) / "turnback-bench-trees"


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


def tree(trees: Path, files: int, fresh: bool) -> Path:
    """A committed tree of ``files`` files, built once and reset to its commit on every use."""
    ws = trees / f"{files}-v1"
    ready = trees / f"{files}-v1.ready"
    if fresh or not ready.exists():
        shutil.rmtree(ws, ignore_errors=True)
        ready.unlink(missing_ok=True)
        ws.mkdir(parents=True)
        print(f"generating {files:,} files ...", file=sys.stderr)
        generate(ws, files)
        git(ws, "init", "-q")
        git(ws, "add", "-A")
        git(ws, "commit", "-qm", "generated")
        ready.touch()
    git(ws, "checkout", "-q", "--", ".")
    git(ws, "clean", "-fdqx")
    for ref in git(ws, "for-each-ref", "--format=%(refname)", "refs/t3").split():
        git(ws, "update-ref", "-d", ref)
    git(ws, "status", "--porcelain")  # refresh the index
    return ws


def t3code(ws: Path, scratch: Path, n: int) -> None:
    """t3code's CheckpointStore.captureCheckpoint, one git process per step as it runs them."""
    git(ws, "rev-parse", "--verify", "HEAD")
    temporary = Path(tempfile.mkdtemp(prefix="t3-fs-checkpoint-", dir=scratch))
    try:
        env = {"GIT_INDEX_FILE": str(temporary / f"index-{uuid.uuid4()}")}
        git(ws, "read-tree", "HEAD", env=env)
        git(ws, "add", "-A", "--", ".", env=env)
        tree_oid = git(ws, "write-tree", env=env).strip()
        commit = git(ws, "commit-tree", tree_oid, "-m", f"t3 checkpoint {n}", env=env).strip()
        git(ws, "update-ref", f"refs/t3/checkpoint/{n}", commit)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


class Row:
    def __init__(self, key: str, what: str) -> None:
        self.key, self.what, self.times = key, what, list[float]()

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def cells(self) -> str:
        spread = (min(self.times), self.median, max(self.times))
        return " | ".join(f"{t * 1000:,.1f} ms" for t in spread)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", default="1000,10000,50000,200000")
    parser.add_argument("--smoke", action="store_true", help="1,000 files; seconds")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--fresh", action="store_true", help="generate the trees again")
    parser.add_argument("--dir", type=Path, default=None, help=DIR_HELP)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    args = parser.parse_args()
    sizes = [1000] if args.smoke else [int(n) for n in args.files.split(",")]
    rounds = 3 if args.smoke else args.rounds
    turns = 10 if args.smoke else args.turns
    scratch = scratch_dir(args.dir, "turnback-bench-")
    if not args.json:
        print(f"git {git_version()}; {rounds} interleaved rounds per size")
    rows: list[dict[str, Any]] = []
    try:
        for files in sizes:
            # the smoke size is built afresh in the scratch directory, which is removed after
            ws = tree(scratch / "trees" if args.smoke else TREES, files, args.fresh)
            detailed = args.smoke or files == 50_000  # the size (d), (e) and (f) were set at
            found = run(ws, scratch / str(files), files, rounds, turns if detailed else 0)
            rows += found
            if not args.json:
                print_tables(files, rounds, found)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        report = {
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "git": git_version(),
            "sizes": sizes,
            "rounds": rounds,
            "turns": turns,
            "rows": rows,
            "goals_met": all(row["met"] is not False for row in rows),
        }
        print(json.dumps(report, indent=2))
    return 0


def print_tables(files: int, rounds: int, rows: list[dict[str, Any]]) -> None:
    """One size's tables: the warm rows with their spread, then the detailed rows if any."""
    print(f"\nworkspace: {files:,} files; {rounds} interleaved rounds")
    print()
    print("| step | what | min | median | max | ratio of medians | goal |")
    print("|---|---|---:|---:|---:|---|---|")
    warm = [row for row in rows if "min" in row]
    for row in warm:
        cells = " | ".join(f"{row[k] * 1000:,.1f} ms" for k in ("min", "median", "max"))
        print(
            f"| ({row['id']}) | {row['what']} | {cells} | {row['ratio']} | {verdict(row['met'])} |"
        )
    detailed = {row["id"]: row for row in rows if "min" not in row}
    if not detailed:
        return
    print()
    print("| step | what | median | ratio | goal |")
    print("|---|---|---:|---|---|")
    for key in ("d", "e0", "e", "e+"):
        row = detailed[key]
        print(
            f"| ({key}) | {row['what']} | {row['value'] * 1000:.1f} ms | {row['ratio']} | "
            f"{verdict(row['met'])} |"
        )
    f = detailed["f"]
    growth = f["grown"] - f["start"]
    print(
        f"| (f) | {f['what']} | {kib(f['start'])} → {kib(f['grown'])} (+{kib(growth)}, "
        f"{growth / f['turns'] / 1024:.1f} KiB a turn); after gc {kib(f['value'])} | "
        f"user's objects: {kib(f['tree'])}; edited {kib(f['edited'])} | {verdict(f['met'])} |"
    )


def run(ws: Path, scratch: Path, files: int, rounds: int, turns: int) -> list[dict[str, Any]]:
    scratch.mkdir(parents=True)
    step = max(1, files // 10)
    batches = iter([[path_of((r * 977 + j * step) % files) for j in range(10)] for r in range(400)])
    plain = Snapshots(scratch / "home")
    plain.capture(ws, "s/base")
    plain.capture(ws, "s/warm-up")
    watched = Snapshots(scratch / "home-watched")
    assert watched.watch(ws)
    watched.capture(ws, "s/base")
    shadow = plain._shadow(ws)

    def shadow_status() -> None:
        shadow.run(
            "status",
            "--porcelain=v2",
            "-z",
            "--untracked-files=normal",
            "--ignore-submodules=dirty",
            "--no-renames",
            deadline=time.monotonic() + 600,
        )

    rows = [
        Row("(a)", "git status --porcelain (plain repo, refreshed index)"),
        Row("(s)", "git stash create"),
        Row("(b)", "t3code's capture (temporary index: read-tree, add -A, write-tree, ...)"),
        Row("(p)", "floor: one git process (rev-parse HEAD)"),
        Row("(a2)", "floor: the capture's own status, alone"),
        Row("(c)", "turnback warm capture, 10 files changed"),
        Row("(w)", "turnback watched capture, 10 files changed"),
    ]
    names = iter(range(100_000))
    actions: dict[str, Callable[[], object]] = {
        "(a)": lambda: git(ws, "status", "--porcelain"),
        "(s)": lambda: git(ws, "stash", "create"),
        "(b)": lambda: t3code(ws, scratch, next(names)),
        "(p)": lambda: git(ws, "rev-parse", "HEAD"),
        "(a2)": shadow_status,
        "(c)": lambda: plain.capture(ws, f"s/c/{next(names)}"),
        "(w)": lambda: watched.capture(ws, f"s/w/{next(names)}"),
    }
    watched_runs = 0
    for r in range(rounds):
        edit(ws, next(batches), f"round {r}")
        for row in rows[r % len(rows) :] + rows[: r % len(rows)]:
            started = time.perf_counter()
            result = actions[row.key]()
            row.times.append(time.perf_counter() - started)
            watched_runs += row.key == "(w)" and getattr(result, "watched", False)
    watched.unwatch(ws)
    by = {row.key: row for row in rows}
    a, s, c, w = (by[k].median for k in ("(a)", "(s)", "(c)", "(w)"))
    goals: dict[str, tuple[str, bool | None]] = {
        "(b)": (
            f"{by['(b)'].median / a:.1f}x (a); (c) is {by['(b)'].median / c:.1f}x faster",
            None,
        ),
        "(s)": (f"{s / a:.2f}x (a)", None),
        "(p)": (f"{by['(p)'].median / a:.3f}x (a)", None),
        "(a2)": (f"{by['(a2)'].median / a:.2f}x (a)", None),
        "(c)": (f"{c / a:.2f}x (a); {c / s:.2f}x (s)", c <= 1.2 * a and c <= s),
        "(w)": (
            f"{w / a:.3f}x (a); {w / c:.2f}x (c); {watched_runs}/{rounds} watched",
            (w <= a / 10 and w <= 0.050) if files >= 200_000 else None,
        ),
    }
    found: list[dict[str, Any]] = []
    for row in rows:
        ratio, met = goals.get(row.key, ("baseline", None))
        found.append(
            {
                "id": row.key.strip("()"),
                "files": files,
                "what": row.what,
                "min": min(row.times),
                "median": row.median,
                "max": max(row.times),
                "value": row.median,
                "unit": "s",
                "ratio": ratio,
                "met": met,
            }
        )
    found += turn_rows(ws, scratch, files, rounds)
    if turns:
        found += details(ws, scratch, files, rounds, turns, batches, a, plain)
    return found


def turn_rows(ws: Path, scratch: Path, files: int, rounds: int) -> list[dict[str, Any]]:
    """A turn's checkpoint cost through the public API: the same turn with and without them."""
    bare = scratch / "bare-workspace"
    bare.mkdir()
    step = max(1, files // 10)
    edited = [[path_of((r * 7919 + j * step + 3) % files) for j in range(10)] for r in range(2)]
    for path in edited[0]:
        (bare / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ws / path, bare / path)
    on = turnback.open(scratch / "turns-on")
    off = turnback.open(scratch / "turns-off", checkpoints=False)
    try:
        with_checkpoints = on.create_session(workspace=ws)
        without = off.create_session(workspace=bare)

        def turn(session: Any, root: Path, paths: list[str], tag: str) -> float:
            started = time.perf_counter()
            with session.turn(f"edit 10 files ({tag})"):
                edit(root, paths, tag)
            return time.perf_counter() - started

        for r in range(3):  # warm up: the shadow made, its index written, a watcher set
            turn(with_checkpoints, ws, edited[r % 2], f"warm-up {r}")
            turn(without, bare, edited[0], f"warm-up {r}")
        times = interleaved(
            rounds,
            {
                "(ta)": lambda r: timed(lambda: git(ws, "status", "--porcelain")),
                "(t0)": lambda r: turn(without, bare, edited[0], f"t0 {r}"),
                "(t)": lambda r: turn(with_checkpoints, ws, edited[r % 2], f"t {r}"),
            },
        )
        kept = with_checkpoints.turns()[-1]
        assert kept.begin_checkpoint and kept.end_checkpoint, "a turn took no checkpoint"
    finally:
        on.close()
        off.close()
    cost = [on_ - off_ for on_, off_ in zip(times["(t)"], times["(t0)"], strict=True)]
    ta, t0, t, tc = (
        statistics.median(v) for v in (times["(ta)"], times["(t0)"], times["(t)"], cost)
    )
    found: list[dict[str, Any]] = []
    for key, what, values, ratio, met in (
        ("ta", "git status --porcelain, in the turns' rounds", times["(ta)"], "baseline", None),
        ("t0", "a turn editing 10 files, checkpoints off", times["(t0)"], "baseline", None),
        ("t", "the same turn, checkpoints on", times["(t)"], f"{t / t0:.1f}x (t0)", None),
        (
            "tc",
            "  its checkpoints: (t) - (t0), round by round",
            cost,
            f"{tc / ta:.2f}x (ta)",
            tc <= 2.4 * ta,
        ),
    ):
        found.append(
            {
                "id": key,
                "files": files,
                "what": what,
                "min": min(values),
                "median": statistics.median(values),
                "max": max(values),
                "value": statistics.median(values),
                "unit": "s",
                "ratio": ratio,
                "met": met,
            }
        )
    return found


def details(
    ws: Path,
    scratch: Path,
    files: int,
    repeat: int,
    turns: int,
    batches: Iterator[list[str]],
    a: float,
    snapshots: Snapshots,
) -> list[dict[str, Any]]:
    homes = iter(range(1000))

    def first() -> float:
        fresh = Snapshots(scratch / f"home-first-{next(homes)}")
        return timed(lambda: fresh.capture(ws, "s/first"))

    d = statistics.median(first() for _ in range(max(2, repeat // 2)))

    def checkout() -> float:
        paths = next(batches)
        edit(ws, paths, "e0")
        return timed(lambda: git(ws, "checkout", "--", *paths))

    e0 = statistics.median(checkout() for _ in range(repeat))
    git(ws, "checkout", "--", ".")
    before = snapshots.capture(ws, "s/before-restore").commit
    restore_times: list[float] = []
    both_times: list[float] = []
    for _ in range(repeat):
        edit(ws, next(batches), "e")
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
    turns_snapshots = Snapshots(scratch / "home-turns")
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

    def median_row(
        key: str, what: str, value: float, ratio: str, met: bool | None
    ) -> dict[str, Any]:
        return {
            "id": key,
            "files": files,
            "what": what,
            "value": value,
            "unit": "s",
            "ratio": ratio,
            "met": met,
        }

    return [
        median_row(
            "d", "turnback first capture of the git workspace", d, f"{d / a:.2f}x (a)", d <= 3 * a
        ),
        median_row("e0", "git checkout -- <10 files>", e0, "baseline", None),
        median_row(
            "e", "turnback restore of 10 changed files", e, f"{e / e0:.2f}x (e0)", e <= 2 * e0
        ),
        median_row(
            "e+",
            "  the same, with the capture taken before it",
            e_both,
            f"{e_both / e0:.2f}x (e0)",
            None,
        ),
        {
            "id": "f",
            "files": files,
            "what": f"shadow objects after {turns} turns of 3 one-line edits "
            "(2 checkpoints a turn)",
            "value": packed,  # after gc
            "unit": "B",
            "start": start_size,
            "grown": grown,
            "turns": turns,
            "tree": tree_size,
            "edited": edited_bytes,
            "met": packed < tree_size / 4,
        },
    ]


def verdict(met: bool | None) -> str:
    """The goal cell: met, MISSED, or nothing for a row with no goal."""
    if met is None:
        return ""
    return "met" if met else "MISSED"


def kib(size: int) -> str:
    return f"{size / 1024:,.0f} KiB"


def git_version() -> str:
    return subprocess.run(
        ["git", "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[2]


if __name__ == "__main__":
    sys.exit(main())
