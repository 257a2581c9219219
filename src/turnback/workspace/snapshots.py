"""Workspace checkpoints: capture, diff, restore, reverse-apply and prune.

:class:`Snapshots` is what the engine uses; each of its jobs is done by one piece, handed the
workspace's shadow repository (:mod:`turnback.workspace.shadow`):

- capturing (:mod:`~turnback.workspace.capture`, its write order), from a scan
  (:mod:`~turnback.workspace.scan`) or a file watcher (:mod:`~turnback.workspace.watched`);
- reading checkpoints (:mod:`~turnback.workspace.compare`);
- restoring files (:mod:`~turnback.workspace.restore`, its order), from plans computed from trees
  (:mod:`~turnback.workspace.plans`);
- deleting refs, gc and repairs (:mod:`~turnback.workspace.housekeeping`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from turnback.errors import CheckpointUnavailable
from turnback.model import FileChange, RevertPlan, WorkspaceCheckpoint
from turnback.workspace import compare, restore
from turnback.workspace.capture import Capture
from turnback.workspace.git import Git
from turnback.workspace.housekeeping import OBJECT_GRACE, Housekeeping
from turnback.workspace.plan import FileReader
from turnback.workspace.plans import revert_plan
from turnback.workspace.remote import CheckpointRemote, PushResult
from turnback.workspace.scan import Scan
from turnback.workspace.shadow import ShadowRepo, ensure_workspace, operation_deadline
from turnback.workspace.watched import Watching
from turnback.workspace.watcher import LIMIT

Progress = Callable[[str, int, int], None]
Problem = Callable[[Path, str], None]


def holds_checkpoints(home: Path) -> bool:
    """Whether ``home`` holds shadow repositories: the checkpoints of some session."""
    return any((Path(home) / "shadow").glob("*.git"))


def _quiet(stage: str, done: int, total: int) -> None:
    pass


class Snapshots:
    """Workspace checkpoints in shadow repositories under ``home / "shadow"``.

    ``git`` names the git executable (default: ``git`` on PATH). Files larger than
    ``max_file_bytes`` are left out of checkpoints (and so left alone by restores). A capture
    taking longer than ``time_budget`` seconds fails with :class:`GitFailed`. ``progress`` is
    called as ``progress(stage, done, total)`` during long captures and gc. ``problems`` is
    called as ``problems(workspace, message)`` for every damaged thing found and repaired on the
    way (a damaged ref, a stale copy of the user's index); the engine turns them into activities.

    Checkpoints are named by commit id or by the ref name given to :meth:`capture` (a name under
    the shadow's ``refs/turnback/``, e.g. ``s/<session>/<turn>/begin``); every method that takes
    a checkpoint accepts either.

    git syncs each ref file it writes, and objects too with ``fsync=True``; by default objects
    are left to the page cache, which survives ``kill -9`` of any process but not a power cut.
    No directory inside the shadow is synced, so neither is a new ref's or pack's name: a power
    cut can lose any checkpoint taken since the file system last persisted them (the shadow
    repository itself is synced when it is created; :mod:`turnback.durable`). After a power
    cut a checkpoint whose objects were lost reads as unavailable (``exists`` is
    false, diffs and restores raise :class:`CheckpointUnavailable`) and :meth:`check` drops its
    ref: it is a missing checkpoint, as after a failed capture, never a corrupt workspace.

    One object may serve several threads: operations on one workspace that write its shadow
    repository wait for each other, as they do across processes.

    With ``remote`` (a URL git accepts), every capture's ref is pushed there in the background
    and :meth:`fetch` brings a session's checkpoints from it (:mod:`turnback.workspace.remote`);
    ``on_push`` hears each background push that failed, or succeeded after failing. Call
    :meth:`close` when done, which lets the pushes asked for run.
    """

    def __init__(
        self,
        home: Path,
        *,
        git: str | None = None,
        max_file_bytes: int = 50 * 2**20,
        time_budget: float = 60.0,
        progress: Progress | None = None,
        problems: Problem | None = None,
        fsync: bool = False,
        remote: str | None = None,
        on_push: Callable[[PushResult], None] | None = None,
    ) -> None:
        self.home = Path(home)
        self.remote = CheckpointRemote(remote, on_push=on_push) if remote else None
        self.fsync = fsync
        self.git = Git(git, home=self.home / "shadow" / "home")
        self.problems = problems
        self._shadows: dict[Path, ShadowRepo] = {}
        self._shadows_lock = threading.Lock()
        reader = FileReader(max_file_bytes)
        self._watching = Watching(reader, home=self.home)
        scan = Scan(reader, home=self.home, progress=progress or _quiet)
        self._capture = Capture(scan, self._watching, time_budget=time_budget)
        self._housekeeping = Housekeeping(progress or _quiet)

    def _shadow(self, workspace: Path) -> ShadowRepo:
        """The shadow repository of the workspace (one object per workspace)."""
        root = ensure_workspace(workspace)
        with self._shadows_lock:
            shadow = self._shadows.get(root)
            if shadow is None:

                def report(message: str, root: Path = root) -> None:
                    if self.problems is not None:
                        self.problems(root, message)

                shadow = ShadowRepo(self.git, self.home, root, report=report, fsync=self.fsync)
                self._shadows[root] = shadow
            return shadow

    def shadow_dir(self, workspace: Path) -> Path:
        """Where the workspace's shadow repository lives."""
        return self._shadow(workspace).dir

    # -- capture --------------------------------------------------------------------------

    def capture(self, workspace: Path, ref: str, *, share: bool = True) -> WorkspaceCheckpoint:
        """Snapshot the workspace's files as a commit and point ``refs/turnback/<ref>`` at it;
        with a remote and ``share``, push it there in the background.

        Objects and ref are written before this returns (synced as the class says). Raises
        :class:`GitFailed` (the time budget ran out, or git failed) or :class:`GitUnavailable`.
        """
        shadow = self._shadow(workspace)
        shared = self.remote is not None and share
        if shared and shadow.created and self.remote is not None:
            # marked before the ref is written: a process killed in between leaves the mark,
            # and recover or doctor pushes (a capture that fails leaves a harmless one)
            self.remote.mark(shadow)
        checkpoint = self._capture.capture(shadow, ref)
        if shared and self.remote is not None:
            self.remote.push_later(shadow, ref.split("/", 1)[0])
        return checkpoint

    # -- sharing through a remote ---------------------------------------------------------

    def push(self, workspace: Path) -> str | None:
        """Push the workspace's checkpoints the remote lacks now (not in the background);
        the error, or ``None`` (also when no remote is set)."""
        if self.remote is None:
            return None
        return self.remote.push_now(self._shadow(workspace))

    def push_later(self, workspace: Path, session: str) -> None:
        """Push the workspace's checkpoints the remote lacks from the background thread, as a
        capture does (``session``: whose activities hear of a failure)."""
        if self.remote is not None:
            self.remote.push_later(self._shadow(workspace), session)

    def unpushed(self, workspace: Path) -> str | None:
        """Why the workspace holds checkpoints the remote may lack (the last push's error, or
        ``""`` when its push has not run yet); ``None`` when it holds none or no remote is set."""
        if self.remote is None:
            return None
        mark = self.remote.unpushed(self._shadow(workspace))
        return None if mark is None else mark.split("\n")[0]

    def fetch(self, workspace: Path, sessions: Sequence[str]) -> None:
        """Bring the checkpoints of ``sessions`` (their refs ``<session>/…``) from the remote;
        :class:`CheckpointUnavailable` when no remote is set or it cannot give them."""
        if self.remote is None:
            raise CheckpointUnavailable(
                "no checkpoint remote is set, so checkpoints taken elsewhere cannot be fetched"
            )
        self.remote.fetch(self._shadow(workspace), sessions, operation_deadline())

    def close(self, timeout: float = 10.0) -> None:
        """Let the background pushes asked for run (up to ``timeout`` seconds); one that has
        not run by then is pushed by the next capture, ``push`` or recovery."""
        if self.remote is not None:
            self.remote.close(timeout)

    def repository_state(self, workspace: Path) -> dict[str, object]:
        """The workspace repository's refs, stash and ``HEAD`` reflog, read without writing
        anything: what a destructive git command (``reset --hard``, ``stash drop``) may take
        away. Each commit it names can be brought back by hand (``git branch NAME SHA``)."""
        deadline = time.monotonic() + 10.0

        def lines(*args: str) -> list[str]:
            done = self.git.run(
                ["-C", str(workspace), *args],
                timeout=max(deadline - time.monotonic(), 0.001),
                check=False,
            )
            text = done.stdout.decode("utf-8", "replace") if done.returncode == 0 else ""
            return [line for line in text.splitlines() if line]

        head = lines("rev-parse", "HEAD")
        return {
            "head": head[0] if head else None,
            "refs": lines("for-each-ref", "--format=%(objectname) %(refname)"),
            "stash": lines("stash", "list", "--format=%H %gd %gs"),
            "reflog": lines("reflog", "show", "-n", "50", "--format=%H %gd %gs", "HEAD", "--"),
        }

    def watch(self, workspace: Path, *, limit: int = LIMIT) -> bool:
        """Watch the workspace's files until :meth:`unwatch`, so that captures look only at the
        paths that changed instead of scanning the workspace. The first capture after this scans
        and sets the baseline. Calls nest (one :meth:`unwatch` each). Returns whether a watcher
        runs: ``False`` where the platform has none (captures scan, as without this)."""
        return self._watching.watch(ensure_workspace(workspace), limit=limit)

    def watching(self, workspace: Path) -> bool:
        """Whether a watcher feeds this workspace's captures."""
        return self._watching.watcher(ensure_workspace(workspace)) is not None

    def unwatch(self, workspace: Path) -> None:
        """Stop what one :meth:`watch` started; the last one stops the watcher."""
        self._watching.unwatch(ensure_workspace(workspace))

    # -- reading checkpoints --------------------------------------------------------------

    def exists(self, workspace: Path, commit: str) -> bool:
        """Whether the checkpoint (commit id or ref name) and its tree can be read.

        A damaged ref found on the way is dropped and reported."""
        return compare.exists(self._shadow(workspace), commit)

    def trees(self, workspace: Path, commits: Sequence[str]) -> list[str | None]:
        """The tree of each checkpoint (``None`` where it cannot be read), and
        :meth:`empty_tree` names a checkpoint of no file."""
        shadow = self._shadow(workspace)
        if not shadow.created:
            return [None for _ in commits]
        names = [f"{commit}^{{tree}}" for commit in commits]
        return [
            found[0] if found else None for found in shadow.object_info(names, operation_deadline())
        ]

    def empty_tree(self, workspace: Path) -> str:
        """The tree of a checkpoint that holds no file, in this workspace's object format."""
        if self._shadow(workspace).sha256:
            return "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"
        return "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

    def changes(self, workspace: Path, old: str, new: str) -> list[FileChange]:
        """What changed from checkpoint ``old`` to ``new``: one :class:`FileChange` per path,
        with renames detected, additions and deletions counted and binary files flagged."""
        return compare.changes(self._shadow(workspace), old, new)

    def patch(self, workspace: Path, old: str, new: str, paths: Sequence[str] | None = None) -> str:
        """The unified patch from checkpoint ``old`` to ``new``, optionally for some paths."""
        return compare.patch(self._shadow(workspace), old, new, paths)

    # -- restoring files ------------------------------------------------------------------

    def restore(
        self,
        workspace: Path,
        target: str,
        *,
        current: str,
        keep: str | None = None,
        paths: Collection[str] | None = None,
    ) -> list[str]:
        """Make the workspace's files equal to checkpoint ``target``; returns the paths written
        or deleted.

        ``current`` must be a capture of the workspace taken just before: only paths that
        differ between ``current`` and ``target`` are written or deleted, so ignored files,
        files too large to capture and anything else outside the checkpoints are never touched.
        ``keep`` is the checkpoint taken when the turns being undone began: a path in ``keep``
        but not in ``target`` (a file the user created before those turns) is never deleted;
        it is set back to its content in ``keep``. Nested repositories and submodules are left
        alone, and so is any path the writer refuses (below a symbolic link, inside a nested
        repository, or on disk while absent from ``current``); each refusal is reported through
        ``problems``. With ``paths``, only those paths (and what lies under them) are written
        or deleted.
        """
        return restore.restore(
            self._shadow(workspace), target, current=current, keep=keep, paths=paths
        )

    def revert_plan(
        self,
        workspace: Path,
        target: str,
        *,
        current: str,
        keep: str | None = None,
        turns: Sequence[tuple[str, str]] = (),
        keep_user_edits: bool = False,
    ) -> RevertPlan:
        """What :meth:`restore` (or, with ``keep_user_edits``, :meth:`reverse_apply` of
        ``turns``) would do to the workspace captured as ``current``; writes no file.

        ``turns`` holds the ``(begin, end)`` checkpoints of the turns being undone, oldest first:
        what changed between them and after the last one are the hand edits, which a plain
        restore overwrites (``conflicts``) and ``keep_user_edits`` keeps, or refuses where they
        clash with the agent's changes (``conflicts`` too)."""
        return revert_plan(
            self._shadow(workspace),
            target,
            current=current,
            keep=keep,
            turns=turns,
            keep_user_edits=keep_user_edits,
        )

    def reverse_apply(
        self, workspace: Path, *, turns: Sequence[tuple[str, str]], current: str
    ) -> list[str]:
        """Undo only what the given turns changed, keeping every other change on disk.

        ``turns`` holds one ``(begin, end)`` checkpoint pair per turn to undo, oldest first;
        they are undone newest first, each as a three-way merge of the current files (ours),
        the turn's end (base) and its begin (theirs). Hand edits made between or after those
        turns, to other files or to other lines of the same files, survive. ``current`` must be
        a capture taken just before. If any path conflicts (the same lines changed by hand,
        binary or symlink changes on both sides, a file the user edited that the turn created,
        or a path the writer refuses) nothing is written and :class:`RevertConflict` lists the
        paths. Returns the paths written or deleted.
        """
        return restore.reverse_apply(self._shadow(workspace), turns=turns, current=current)

    # -- refs and pruning -----------------------------------------------------------------

    def delete_refs(self, workspace: Path, refs: Sequence[str]) -> None:
        """Delete checkpoint refs (missing ones are ignored); their objects go at the next gc."""
        self._housekeeping.delete_refs(self._shadow(workspace), refs)

    def gc(
        self,
        workspace: Path,
        *,
        keep: Collection[str] | None = None,
        older_than: float | None = None,
        object_grace: float = OBJECT_GRACE,
        dry_run: bool = False,
    ) -> tuple[int, int]:
        """Prune checkpoint refs and the objects only they kept; returns (refs removed, bytes
        freed). With ``dry_run``, (refs it would remove, 0), and nothing is changed.

        With ``keep`` (ref names or commit ids still named by the store), every other ref whose
        checkpoint is older than ``older_than`` seconds (any age if ``None``) is deleted. Without
        ``keep`` no ref is deleted and only the object store is repacked. Unreferenced objects
        younger than ``object_grace`` seconds are kept (they may belong to a capture in flight).
        """
        return self._housekeeping.gc(
            self._shadow(workspace),
            keep=keep,
            older_than=older_than,
            object_grace=object_grace,
            dry_run=dry_run,
        )

    def check(self, workspace: Path) -> list[str]:
        """Find and repair damage in the workspace's shadow repository; returns the problems.

        Damaged refs (empty, truncated or garbage files) and refs whose commit is missing are
        dropped, stale lock files removed, a damaged HEAD reset. Every problem is also passed to
        ``problems``. The user's own repository is only ever read and so is never damaged."""
        return self._housekeeping.check(self._shadow(workspace))
