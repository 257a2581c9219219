"""The shadow repository: a git directory per workspace that turnback owns.

It lives at ``<home>/shadow/<hash of the workspace's real path>.git`` and is run with
``GIT_DIR=<shadow>`` and ``GIT_WORK_TREE=<workspace>``, so it reads the workspace's files and
never writes in it. Its own persistent index keeps stat data between captures: a warm capture is
one ``git status`` (a stat of every tracked file and a walk for new ones, hashing only what
changed) followed by small plumbing steps.

When the workspace is a git repository the shadow borrows the user's object store read-only
(``objects/info/alternates``) and starts from a copy of the user's index, so the first capture
of a large repository re-hashes nothing the user's index already knows. The user's ``.git`` is
only ever read: its index is copied, its ``info/exclude`` is named as ``core.excludesFile`` and its
objects are read through the alternates file. (git may refresh the modification time of one of
the user's object files when a capture writes an object the user already has; that is how git
marks objects as recently used, and changes no content.) :mod:`turnback.workspace.creation`
builds it; :mod:`turnback.workspace.fastimport` writes checkpoints into it.

Concurrency and crashes: every operation that writes the shadow holds its lock, an exclusive
``flock`` on ``<hash>.lock`` next to it that the git processes it starts inherit, taken by one
thread at a time (:mod:`turnback.workspace.lock`). The lock is therefore held until the last of
them exits, even when turnback itself was killed; whoever takes it next knows that any ``*.lock``
file left inside the shadow is stale and removes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from turnback.errors import CheckpointUnavailable, GitFailed, InvalidId, WorkspaceError
from turnback.records import record
from turnback.workspace.git import Git, failure
from turnback.workspace.lock import ShadowLock

#: Longest any operation other than a capture may take.
OPERATION_TIMEOUT = 600.0

OID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_REF_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
NAMESPACE = "refs/turnback/"

#: Note files in the shadow. ``INDEX_TREE`` holds the tree whose content the shadow's index
#: holds (its stat data may be older): a capture that finds only tracked files modified writes
#: its tree from that tree and those files, without rewriting the index. It is removed before
#: anything changes the index and written again after, so it never names a tree the index does
#: not hold. ``INDEX_NEXT`` holds the tree of the last capture fed by a watcher, which never
#: touches the index: the next capture that scans first brings the index to it.
#: The index a diff between checkpoints runs with: a file never made. git's diff reads the
#: index, when it has one, to take a blob's content from the workspace file where the index says
#: that file holds it; reading a 50,000-file index costs a diff-tree five times its own work,
#: and the objects hold the same content.
NO_INDEX = "turnback-no-index"
INDEX_TREE = "turnback-index-tree"
INDEX_NEXT = "turnback-index-next"

#: The mark of a shadow that holds checkpoints fetched without their files (a partial clone
#: of the checkpoint remote, :mod:`turnback.workspace.remote`).
PARTIAL = "turnback-partial"

GITLINK = "160000"
TREE = "040000"
SYMLINK = "120000"
REGULAR = ("100644", "100755")


def ref_name(name: str) -> str:
    """The full ref for a checkpoint name such as ``s/<session>/<turn>/begin``."""
    parts = name.split("/")
    if not name or any(
        not _REF_PART.fullmatch(part) or part.endswith((".lock", ".")) or ".." in part
        for part in parts
    ):
        raise InvalidId(
            f"{name!r} cannot name a workspace checkpoint: use path segments of letters, digits, "
            "'.', '_' and '-' separated by '/'"
        )
    return NAMESPACE + name


@record
class Entry:
    """One tree entry: a git mode (``100644``, ``100755``, ``120000``, ``160000``) and an object."""

    mode: str
    oid: str

    @property
    def gitlink(self) -> bool:
        return self.mode == GITLINK


@record
class Change:
    """One line of ``git diff-tree --raw``: a path and its entry on each side (``None``: absent)."""

    path: str
    old: Entry | None
    new: Entry | None
    status: str  # A, D, M, T, R
    old_path: str | None = None
    additions: int = 0
    deletions: int = 0
    binary: bool = False


@record
class UserRepository:
    """The workspace's own git repository, which turnback only reads."""

    git_dir: Path
    common_dir: Path

    @property
    def objects(self) -> Path:
        return self.common_dir / "objects"

    @property
    def index(self) -> Path:
        return self.git_dir / "index"

    @property
    def exclude(self) -> Path:
        return self.common_dir / "info" / "exclude"


def find_user_repository(workspace: Path) -> UserRepository | None:
    """The repository whose work tree is exactly ``workspace``, if there is one."""
    dotgit = workspace / ".git"
    try:
        if dotgit.is_dir():
            git_dir = dotgit
        elif dotgit.is_file():
            text = dotgit.read_text(encoding="utf-8", errors="surrogateescape").strip()
            if not text.startswith("gitdir:"):
                return None
            git_dir = (workspace / text[len("gitdir:") :].strip()).resolve()
        else:
            return None
        common_dir = git_dir
        commondir = git_dir / "commondir"
        if commondir.is_file():
            common_dir = (git_dir / commondir.read_text(encoding="utf-8").strip()).resolve()
        if not (git_dir / "HEAD").is_file() or not (common_dir / "objects").is_dir():
            return None
    except OSError:
        return None
    return UserRepository(git_dir=git_dir, common_dir=common_dir)


def ref_file_ok(data: bytes) -> bool:
    """Whether ``data`` is a whole ref file: a symbolic ref, or an object id, and a newline."""
    text = data.decode("ascii", "replace")
    if text.startswith("ref: refs/") and text.endswith("\n") and "\n" not in text[:-1]:
        return True
    return text.endswith("\n") and OID.fullmatch(text[:-1]) is not None


def write_file(path: Path, data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` whole (a reader sees the old or the new)."""
    temporary = path.with_name(path.name + ".turnback-tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


class ShadowRepo:
    """The shadow git directory of one workspace, and the git plumbing that runs in it."""

    def __init__(
        self,
        git: Git,
        home: Path,
        workspace: Path,
        *,
        report: Callable[[str], None],
        fsync: bool = False,
    ) -> None:
        self.git = git
        self.fsync = fsync
        self._fsync = ("core.fsync=loose-object,pack,reference",) if fsync else ()
        self.workspace = workspace
        self.home = home
        key = hashlib.sha256(os.fsencode(str(workspace))).hexdigest()[:32]
        self.dir = home / "shadow" / f"{key}.git"
        self.lock_path = home / "shadow" / f"{key}.lock"
        self.report = report
        self._lock = ShadowLock.of(self.lock_path)
        self._sha256: bool | None = None
        #: checkpoints this process wrote and the paths each left out (``Skipped:`` lines), so
        #: comparing them asks git for neither; forgotten when a gc may have pruned one
        self.captured: dict[str, frozenset[str]] = {}

    # -- running git ----------------------------------------------------------------------

    @property
    def config(self) -> tuple[str, ...]:
        """Settings every git command in the shadow gets besides the runner's overrides. A
        shadow that fetched checkpoints without their files (:data:`PARTIAL`) lets git fetch
        a file it lacks from the checkpoint remote when a command reads it; any other may
        use no transport at all."""
        if (self.dir / PARTIAL).exists():
            return (*self._fsync, "protocol.allow=always")
        return self._fsync

    def env(self, index: Path | None = None) -> dict[str, str]:
        env = {"GIT_DIR": str(self.dir), "GIT_WORK_TREE": str(self.workspace)}
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        return env

    def run(
        self,
        *args: str,
        deadline: float,
        input: bytes | None = None,
        index: Path | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        started = time.time_ns()
        try:
            return self.git.run(
                args,
                env=self.env(index),
                input=input,
                timeout=deadline - time.monotonic(),
                check=check,
                cwd=self.workspace,
                pass_fds=self.lock_fds,
                config=self.config,
            )
        finally:
            if index is None:
                self._date_index(started)

    def _date_index(self, started: int) -> None:
        """Date the shadow's index a whole second before the git command that may have written
        it started (``started``, from ``time.time_ns``).

        git as it is usually built (without ``USE_NSEC``) compares files' times in whole
        seconds, and trusts an entry whose time is older than its index file's. A command that
        read a file (``status`` checking it, or ``update-index`` hashing it) and wrote the index
        in a later second would let a rewrite of that file to the same size, in the second it
        was read, pass for unchanged until it changed again: a checkpoint missing an edit the
        workspace made while another capture ran. Dated before the command, the index makes git
        read again any file changed since. Only ever moved back, which makes git read more,
        never less: at most the files changed in the second or two before the last command."""
        path = self.dir / "index"
        before = (started // 1_000_000_000 - 1) * 1_000_000_000  # the file clock may lag a tick
        with contextlib.suppress(OSError):
            info = os.stat(path)
            if info.st_mtime_ns > before:
                os.utime(path, ns=(info.st_atime_ns, before))

    # -- the lock -------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, deadline: float) -> Iterator[None]:
        """Hold the shadow's lock until the block ends: another thread or process waits for it
        (until ``deadline``); the thread that holds it may take it again."""
        what = f"the checkpoint repository of {self.workspace}"
        with self._lock.hold(deadline, what=what, taken=self._remove_stale_locks):
            yield

    @property
    def lock_fds(self) -> tuple[int, ...]:
        """What a git process started now must inherit: the lock, when this thread holds it."""
        return self._lock.fds

    def _remove_stale_locks(self) -> None:
        # Holding the flock proves no git process of ours is running here (see module doc).
        for name in ("index.lock", "HEAD.lock", "packed-refs.lock", "config.lock"):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()

    # -- its state ------------------------------------------------------------------------

    @property
    def created(self) -> bool:
        # The config is written before the directory is renamed into place, and never removed.
        return (self.dir / "config").is_file()

    def unseed(self) -> None:
        """Forget the index (and HEAD) copied from the user: the next capture hashes afresh."""
        for name in ("index", "turnback-seeded", INDEX_TREE, INDEX_NEXT):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()
        write_file(self.dir / "HEAD", b"ref: refs/heads/main\n")

    @property
    def seeded(self) -> bool:
        return (self.dir / "turnback-seeded").exists()

    @property
    def sha256(self) -> bool:
        """Whether objects are named by SHA-256 (the shadow of a SHA-256 repository)."""
        if self._sha256 is None:
            config = (self.dir / "config").read_text(encoding="utf-8")
            self._sha256 = "objectFormat = sha256" in config
        return self._sha256

    def noted_tree(self, name: str) -> str | None:
        """The tree written in the note file ``name`` (:data:`INDEX_TREE`, :data:`INDEX_NEXT`)."""
        try:
            text = (self.dir / name).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text if OID.fullmatch(text) else None

    def note_tree(self, name: str, tree: str | None) -> None:
        """Write (or, with ``None``, remove) the note file ``name``."""
        if tree is None:
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()
        else:
            write_file(self.dir / name, tree.encode() + b"\n")

    # -- refs -----------------------------------------------------------------------------

    def ref_path(self, ref: str) -> Path:
        return self.dir.joinpath(*ref.split("/"))

    def repair_ref(self, ref: str) -> bool:
        """Drop the loose file of ``ref`` if it is damaged (empty, truncated, garbage).

        Returns whether it was damaged. Call with the lock held."""
        path = self.ref_path(ref)
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            (path.with_name(path.name + ".lock")).unlink()
        try:
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return False
        if ref_file_ok(data) and not data.startswith(b"ref:"):
            return False
        path.unlink()
        self.report(
            f"checkpoint ref {ref} of {self.workspace} was damaged ({len(data)} bytes) and "
            "has been dropped; the checkpoint it named is unavailable"
        )
        return True

    def resolve(self, spec: str, deadline: float) -> str:
        """The commit named by ``spec`` (a commit id, or a checkpoint name under
        ``refs/turnback/``); :class:`CheckpointUnavailable` when there is none."""
        return self.resolve_all([spec], deadline)[0]

    def resolve_all(self, specs: Sequence[str], deadline: float) -> list[str]:
        """:meth:`resolve` for several checkpoints with one git process. A damaged ref met on
        the way is dropped and reported."""
        if not self.created:
            raise CheckpointUnavailable(
                f"workspace checkpoint {specs[0]} does not exist: {self.workspace} has no "
                "checkpoints yet"
            )
        names = [spec if OID.fullmatch(spec) else ref_name(spec) for spec in specs]
        for name in names:
            if not name.startswith(NAMESPACE):
                continue
            try:
                data = self.ref_path(name).read_bytes()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                continue
            if not ref_file_ok(data) or data.startswith(b"ref:"):
                with self.locked(deadline):
                    self.repair_ref(name)
        commits = []
        for spec, found in zip(
            specs, self.object_info([f"{name}^{{commit}}" for name in names], deadline), strict=True
        ):
            if found is None:
                raise CheckpointUnavailable(
                    f"workspace checkpoint {spec} of {self.workspace} does not exist (it was never "
                    "captured, or it has been pruned)"
                )
            commits.append(found[0])
        return commits

    def object_info(self, names: Sequence[str], deadline: float) -> list[tuple[str, str] | None]:
        """``(oid, type)`` for each name, or ``None`` where no such object exists."""
        if not names:
            return []
        out = self.run(
            "cat-file",
            "--batch-check=%(objectname) %(objecttype)",
            deadline=deadline,
            input="".join(name + "\n" for name in names).encode(),
        ).stdout.decode("utf-8", "surrogateescape")
        results: list[tuple[str, str] | None] = []
        for line in out.splitlines():
            fields = line.split(" ")
            if len(fields) == 2 and OID.fullmatch(fields[0]):
                results.append((fields[0], fields[1]))
            else:
                results.append(None)
        if len(results) != len(names):
            raise GitFailed(f"`git cat-file --batch-check` answered {len(results)} of {len(names)}")
        return results

    def update_refs(self, updates: Iterable[tuple[str, str | None]], deadline: float) -> None:
        """Create, move (``oid``) or delete (``None``) refs in one atomic transaction."""
        lines: list[bytes] = []
        for ref, oid in updates:
            if ref == "HEAD":
                lines.append(b"option no-deref\0")
            if oid is None:
                lines.append(b"delete " + ref.encode() + b"\0\0")
            else:
                lines.append(b"update " + ref.encode() + b"\0" + oid.encode() + b"\0\0")
        if lines:
            self.run("update-ref", "-z", "--stdin", deadline=deadline, input=b"".join(lines))

    def head(self) -> str | None:
        """The commit the shadow's HEAD names, read from its file (and the loose ref it points
        to, if it is symbolic); None when it cannot be told so."""
        path = self.dir / "HEAD"
        for _ in range(2):
            try:
                text = path.read_bytes().decode("ascii", "replace").strip()
            except OSError:
                return None
            if not text.startswith("ref: "):
                return text if OID.fullmatch(text) else None
            path = self.ref_path(text.removeprefix("ref: "))
        return None

    def point_refs(self, refs: Sequence[str], commit: str) -> None:
        """Point ``refs`` (``HEAD`` detached) at ``commit``, an existing checkpoint, as git moves
        a loose ref: its new content is written to ``<ref>.lock``, made exclusively, then renamed
        over the ref, so a reader sees the old or the new, and a crash leaves at most a lock file
        that the next holder of the shadow's lock removes. No git process is started: the
        commit is already whole, so the order of invariant 4 holds. Call with the lock held."""
        for ref in refs:
            path = self.ref_path(ref)
            lock = path.with_name(path.name + ".lock")
            made = False
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                made = True
                try:
                    os.write(fd, commit.encode() + b"\n")
                    if self.fsync:  # as git's own writes under core.fsync=reference
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(lock, path)
            except OSError as error:
                if made:
                    with contextlib.suppress(OSError):
                        lock.unlink()
                raise GitFailed(
                    f"checkpoint ref {ref} of {self.workspace} could not be moved to {commit}: "
                    f"{error}"
                ) from error

    def list_refs(self, deadline: float) -> list[tuple[str, str, int]]:
        """``(ref, commit, commit time)`` for every checkpoint ref."""
        out = self.run(
            "for-each-ref",
            "--format=%(refname)%00%(objectname)%00%(committerdate:unix)",
            NAMESPACE,
            deadline=deadline,
        ).stdout.decode("utf-8", "surrogateescape")
        refs = []
        for line in out.splitlines():
            ref, oid, when = line.split("\0")
            refs.append((ref, oid, int(when or 0)))
        return refs

    def loose_ref_files(self) -> Iterator[tuple[str, Path]]:
        root = self.dir / "refs" / "turnback"
        for directory, _dirs, files in os.walk(root):
            for name in files:
                path = Path(directory, name)
                yield path.relative_to(self.dir).as_posix(), path

    # -- trees ----------------------------------------------------------------------------

    def diff(
        self,
        old: str,
        new: str,
        deadline: float,
        *,
        renames: bool = False,
        numstat: bool = False,
    ) -> list[Change]:
        """The entries that differ between two commits or trees (recursively, no directories)."""
        args = ["diff-tree", "-r", "-z", "--raw", "--no-commit-id"]
        args += ["-M"] if renames else ["--no-renames"]
        if numstat:
            args.append("--numstat")
        out = self.run(*args, old, new, "--", deadline=deadline, index=self.dir / NO_INDEX).stdout
        return parse_diff(out, numstat=numstat)

    def blobs(self, oids: Iterable[str], deadline: float) -> dict[str, bytes]:
        """The contents of blobs, read in one ``cat-file --batch``."""
        wanted = sorted(set(oids))
        if not wanted:
            return {}
        out = self.run(
            "cat-file",
            "--batch",
            deadline=deadline,
            input="".join(o + "\n" for o in wanted).encode(),
        ).stdout
        contents: dict[str, bytes] = {}
        position = 0
        for oid in wanted:
            end = out.index(b"\n", position)
            header = out[position:end].decode("ascii", "replace").split(" ")
            if len(header) != 3:
                raise CheckpointUnavailable(
                    f"object {oid} of a workspace checkpoint of {self.workspace} is missing; "
                    "the checkpoint cannot be restored"
                )
            size = int(header[2])
            contents[oid] = out[end + 1 : end + 1 + size]
            position = end + 1 + size + 1
        return contents

    def ignored(self, paths: Sequence[bytes], deadline: float) -> set[bytes]:
        """Which of these untracked paths the ignore rules exclude from checkpoints."""
        if not paths:
            return set()
        # check-ignore refuses literal pathspecs; "./" keeps a leading ":" from reading as magic
        result = self.git.run(
            ["check-ignore", "--no-index", "-z", "--stdin"],
            env={**self.env(), "GIT_LITERAL_PATHSPECS": "0"},
            input=b"".join(b"./" + path + b"\0" for path in paths),
            timeout=deadline - time.monotonic(),
            check=False,
            cwd=self.workspace,
        )
        if result.returncode not in (0, 1):
            raise failure(["check-ignore"], result)
        return {path[2:] for path in result.stdout.split(b"\0") if path}

    def write_blob(self, data: bytes, deadline: float) -> str:
        return (
            self.run("hash-object", "-w", "--stdin", deadline=deadline, input=data)
            .stdout.decode()
            .strip()
        )

    def size(self) -> int:
        """Bytes used by the shadow's object store."""
        total = 0
        for directory, _dirs, files in os.walk(self.dir / "objects"):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(directory, name)).st_size
        return total


def _path(raw: bytes) -> str:
    return os.fsdecode(raw)


def parse_diff(out: bytes, *, numstat: bool) -> list[Change]:
    """Parse ``git diff-tree -r -z --raw [--numstat]`` output."""
    tokens = out.split(b"\0")
    changes: list[Change] = []
    i = 0
    while i < len(tokens) and tokens[i].startswith(b":"):
        meta = tokens[i][1:].decode("ascii").split(" ")
        old_mode, new_mode, old_oid, new_oid, status = meta
        letter = status[:1]
        if letter in ("R", "C"):
            old_path, path = _path(tokens[i + 1]), _path(tokens[i + 2])
            i += 3
        else:
            old_path, path = None, _path(tokens[i + 1])
            i += 2
        old = None if letter == "A" else Entry(old_mode, old_oid)
        new = None if letter == "D" else Entry(new_mode, new_oid)
        changes.append(Change(path=path, old=old, new=new, status=letter, old_path=old_path))
    if not numstat:
        return changes
    counts: dict[str, tuple[str, str]] = {}
    while i < len(tokens) and tokens[i]:
        added, deleted, path = tokens[i].decode("utf-8", "surrogateescape").split("\t", 2)
        if path:
            counts[_path(tokens[i].split(b"\t", 2)[2])] = (added, deleted)
            i += 1
        else:  # a rename: "added TAB deleted TAB" NUL old NUL new
            counts[_path(tokens[i + 2])] = (added, deleted)
            i += 3
    counted: list[Change] = []
    for change in changes:
        added, deleted = counts.get(change.path, ("0", "0"))
        binary = added == "-"
        counted.append(
            Change(
                path=change.path,
                old=change.old,
                new=change.new,
                status=change.status,
                old_path=change.old_path,
                additions=0 if binary else int(added),
                deletions=0 if binary else int(deleted),
                binary=binary,
            )
        )
    return counted


def operation_deadline() -> float:
    """When an operation other than a capture that starts now must have finished."""
    return time.monotonic() + OPERATION_TIMEOUT


def ensure_workspace(workspace: Path) -> Path:
    """The real path of an existing workspace directory."""
    real = Path(os.path.realpath(workspace))
    if not real.is_dir():
        raise WorkspaceError(f"workspace {workspace} is not a directory; check the path")
    return real
