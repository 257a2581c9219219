"""Benchmark of sharing checkpoints through a git remote: bytes and time a small edit's push costs.

    python bench/remote.py                    # the recorded run: 2,000 files, 20 edits, 2,000 refs
    python bench/remote.py --smoke            # 100 files, 3 edits, 50 refs: a few seconds
    python bench/remote.py --files 20000 --edits 10 --refs 10000 --json

A workspace of N files is captured and pushed once to a bare remote (a path), with R more
checkpoint refs (the fleet's history: each push hears of every ref the remote holds, which the
pack bytes do not count and the time does; every baseline's remote holds them too). Then, per
edit,
one line is appended to one file, the workspace is captured (``Snapshots.capture``, not timed)
and its checkpoints are pushed the way a capture's background push does (``Snapshots.push``:
every checkpoint ref the remote lacks). Two baselines, in the same run, each to a bare remote of
its own: a plain ``git push`` of the same checkpoint commit (``git push URL
+COMMIT:refs/heads/main``), and a git repository of the same workspace that commits the same
edit and pushes it (its commits have parents, so git sends only the edit: the floor). Every
remote keeps what it receives as a pack (``receive.unpackLimit=1``), so the bytes pushed are
the pack the push wrote.

(bytes)  pack bytes a small edit's push sends; goal: <= 1.5x the git commit's (the edit's blob,
         the trees above it and a commit travel, and one more commit: no bundle, no re-send).
(time)   seconds a small edit's push takes; goal: <= 2x the git commit's push (turnback's push
         names every checkpoint ref and writes its carrier commit first).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    import turnback  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(SRC))

from rounds import DIR_HELP, machine, scratch_dir, verdict  # noqa: E402

from turnback.workspace import Snapshots  # noqa: E402

GOALS = {"bytes": 1.5, "time": 2.0}
#: turnback's push; a plain push of the same checkpoint commit; a git repository's own commit
#: of the same edit, pushed (the floor: git's commits have parents)
SIDES = ("ours", "same", "git")


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "--quiet", "--bare", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "config", "receive.unpackLimit", "1"], check=True)
    return path


def pack_bytes(remote: Path) -> int:
    return sum(p.stat().st_size for p in (remote / "objects" / "pack").glob("*.pack"))


def plain_push(shadow: Path, remote: Path, what: str, to: str = "refs/heads/main") -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_DIR"] = str(shadow)
    subprocess.run(
        ["git", "push", "--quiet", str(remote), f"+{what}:{to}"],
        env=env,
        check=True,
        capture_output=True,
    )


def git_repo(workspace: Path, gitdir: Path) -> dict[str, str]:
    """The environment of a plain git repository whose work tree is ``workspace``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_DIR=str(gitdir),
        GIT_WORK_TREE=str(workspace),
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@localhost",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@localhost",
    )
    subprocess.run(["git", "init", "--quiet"], env=env, check=True)
    return env


def commit(env: dict[str, str]) -> None:
    for args in (["add", "-A"], ["commit", "--quiet", "--no-verify", "-m", "edit"]):
        subprocess.run(["git", *args], env=env, check=True, capture_output=True)


def push(env: dict[str, str], remote: Path) -> None:
    subprocess.run(
        ["git", "push", "--quiet", str(remote), "+HEAD:refs/heads/main"],
        env=env,
        check=True,
        capture_output=True,
    )


def run(root: Path, files: int, edits: int, refs: int) -> dict[str, object]:
    workspace = root / "workspace"
    for n in range(files):
        path = workspace / f"d{n % 50}" / f"f{n}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"file {n}\n" * 20)
    remotes = {side: bare(root / f"{side}.git") for side in SIDES}
    snapshots = Snapshots(root / "home", remote=str(remotes["ours"]))
    first = snapshots.capture(workspace, "bench/0/end", share=False)
    shadow = snapshots.shadow_dir(workspace)
    # the fleet's history: every push hears of each of these refs from the remote
    history = "".join(f"create refs/turnback/old/{n}/end {first.commit}\n" for n in range(refs))
    subprocess.run(
        ["git", "update-ref", "--stdin"],
        input=history.encode(),
        env={**os.environ, "GIT_DIR": str(shadow)},
        check=True,
    )
    assert snapshots.push(workspace) is None
    plain_push(shadow, remotes["same"], first.commit)
    for side in ("same", "git"):  # the same history on every remote: each push hears of it
        plain_push(shadow, remotes[side], "refs/turnback/old/*", "refs/turnback/old/*")
    repository = git_repo(workspace, root / "plain-git")
    commit(repository)
    push(repository, remotes["git"])
    sent: dict[str, list[float]] = {side: [] for side in SIDES}
    took: dict[str, list[float]] = {side: [] for side in SIDES}
    for edit in range(1, edits + 1):
        target = workspace / f"d{edit % 50}" / f"f{edit}.txt"
        with target.open("a") as out:
            out.write(f"edit {edit}\n")
        checkpoint = snapshots.capture(workspace, f"bench/{edit}/end", share=False).commit
        commit(repository)  # untimed, as the capture is
        # alternate the order, so that no side always finds the page cache warm
        for side in SIDES if edit % 2 else tuple(reversed(SIDES)):
            remote = remotes[side]
            before = pack_bytes(remote)
            started = time.perf_counter()
            if side == "ours":
                assert snapshots.push(workspace) is None
            elif side == "same":
                plain_push(shadow, remote, checkpoint)
            else:
                push(repository, remote)
            took[side].append(time.perf_counter() - started)
            sent[side].append(pack_bytes(remote) - before)
    snapshots.close()
    rows = []
    for key, values, unit in (("bytes", sent, "B"), ("time", took, "s")):
        medians = {side: statistics.median(values[side]) for side in SIDES}
        ratio = medians["ours"] / medians["git"] if medians["git"] else 1.0
        rows.append(
            {
                "id": key,
                **medians,
                "unit": unit,
                "ratio": ratio,
                "ratio_same": medians["ours"] / medians["same"] if medians["same"] else 1.0,
                "goal": GOALS[key],
                "met": ratio <= GOALS[key],
            }
        )
    return {"files": files, "edits": edits, "refs": refs, "machine": machine(), "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument(
        "--refs", type=int, default=2000, help="checkpoint refs the remote holds already"
    )
    parser.add_argument("--smoke", action="store_true", help="100 files, 3 edits, 50 refs")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--dir", type=Path, help=DIR_HELP)
    args = parser.parse_args()
    files, edits, refs = (100, 3, 50) if args.smoke else (args.files, args.edits, args.refs)
    root = scratch_dir(args.dir, "turnback-bench-remote-")
    try:
        report = run(root, files, edits, refs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{files} files, {edits} small edits of one line, {refs} checkpoint refs on the remote "
        f"already; {report['machine']}\n"
    )
    print(
        "| row | what | turnback | plain push of the same commit | git commit of the same edit "
        "| ratio to the git commit | goal |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in report["rows"]:  # type: ignore[attr-defined]
        what = "pack bytes per edit" if row["id"] == "bytes" else "seconds per push (median)"
        fmt = "{:,.0f} B" if row["id"] == "bytes" else "{:.4f} s"
        print(
            f"| ({row['id']}) | {what} | {fmt.format(row['ours'])} | "
            f"{fmt.format(row['same'])} ({row['ratio_same']:.2f}x) | {fmt.format(row['git'])} | "
            f"{row['ratio']:.2f}x | <= {row['goal']}x {verdict(row['met'])} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
