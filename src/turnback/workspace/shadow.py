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
marks objects as recently used, and changes no content.)

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
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from turnback.errors import CheckpointUnavailable, GitFailed, InvalidId, WorkspaceError
from turnback.workspace.git import IDENTITY, Git
from turnback.workspace.lock import ShadowLock

EMPTY_TREE_SHA1 = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
EMPTY_TREE_SHA256 = "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"
IDENTITY_NAME = IDENTITY["GIT_COMMITTER_NAME"]
IDENTITY_EMAIL = IDENTITY["GIT_COMMITTER_EMAIL"]

OID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_REF_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
NAMESPACE = "refs/turnback/"

#: Note files in the shadow. ``INDEX_TREE`` holds the tree whose content the shadow's index
#: holds (its stat data may be older): a capture that finds only tracked files modified writes
#: its tree from that tree and those files, without rewriting the index. It is removed before
#: anything changes the index and written again after, so it never names a tree the index does
#: not hold. ``INDEX_NEXT`` holds the tree of the last capture fed by a watcher, which never
#: touches the index: the next capture that scans first brings the index to it.
INDEX_TREE = "turnback-index-tree"
INDEX_NEXT = "turnback-index-next"

GITLINK = "160000"
TREE = "040000"
SYMLINK = "120000"
REGULAR = ("100644", "100755")

#: Attributes that would make a capture or a restore differ from the bytes on disk. The
#: shadow's ``info/attributes`` wins over every ``.gitattributes`` in the workspace.
ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding\n"


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


@dataclass(frozen=True, slots=True)
class Entry:
    """One tree entry: a git mode (``100644``, ``100755``, ``120000``, ``160000``) and an object."""

    mode: str
    oid: str

    @property
    def gitlink(self) -> bool:
        return self.mode == GITLINK


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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


def _config_value(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _exclude_pattern(relative: str) -> str:
    escaped = re.sub(r"([\\*?\[\]!# ])", r"\\\1", relative)
    return "/" + escaped + "/\n"


def _ref_file_ok(data: bytes) -> bool:
    text = data.decode("ascii", "replace")
    if text.startswith("ref: refs/") and text.endswith("\n") and "\n" not in text[:-1]:
        return True
    return text.endswith("\n") and OID.fullmatch(text[:-1]) is not None


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
        self.config = ("core.fsync=loose-object,pack,reference",) if fsync else ()
        self.workspace = workspace
        self.home = home
        key = hashlib.sha256(os.fsencode(str(workspace))).hexdigest()[:32]
        self.dir = home / "shadow" / f"{key}.git"
        self.lock_path = home / "shadow" / f"{key}.lock"
        self.report = report
        self._lock = ShadowLock.of(self.lock_path)
        self._sha256: bool | None = None

    # -- running git ----------------------------------------------------------------------

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

    # -- creating the repository ----------------------------------------------------------

    @property
    def created(self) -> bool:
        # The config is written before the directory is renamed into place, and never removed.
        return (self.dir / "config").is_file()

    def ensure(self, deadline: float) -> None:
        """Create the shadow repository if it does not exist yet (under the lock).

        It is built in a temporary directory and renamed into place, so it either exists
        completely or not at all."""
        if self.created:
            self._repair_head()
            exclude = self.dir / "info" / "exclude"
            with contextlib.suppress(OSError):  # made by an older turnback, or the home moved
                if exclude.read_text(encoding="utf-8") != self._own_excludes():
                    exclude.write_text(self._own_excludes(), encoding="utf-8")
            return
        user = find_user_repository(self.workspace)
        temporary = self.dir.with_name(f"{self.dir.name}.tmp-{os.getpid()}")
        shutil.rmtree(temporary, ignore_errors=True)
        if self.dir.exists():  # not built by turnback (created() is false): never reuse it
            shutil.rmtree(self.dir)
        sha256 = user is not None and self._user_object_format(user, deadline) == "sha256"
        args = ["init", "--bare", "--quiet", "--template="]
        if sha256:
            args.append("--object-format=sha256")
        self.git.run([*args, str(temporary)], timeout=deadline - time.monotonic())
        (temporary / "info").mkdir(exist_ok=True)
        (temporary / "info" / "attributes").write_text(ATTRIBUTES, encoding="utf-8")
        (temporary / "info" / "exclude").write_text(self._own_excludes(), encoding="utf-8")
        (temporary / "turnback-workspace").write_text(str(self.workspace) + "\n", "utf-8")
        config = [
            "[core]",
            f"\trepositoryformatversion = {1 if sha256 else 0}",
            "\tbare = false",
            "\tlogAllRefUpdates = false",
            "\tfsync = reference",
            "\tfsyncMethod = batch",
            # A warm capture's status only re-reads directories that changed, and writes only
            # the small part of the index that changed.
            "\tuntrackedCache = true",
            "\tsplitIndex = true",
            "[gc]",
            "\tauto = 0",
            "[index]",
            "\tthreads = true",
        ]
        if sha256:
            config += ["[extensions]", "\tobjectFormat = sha256"]
        if user is not None:
            config[1:1] = [f"\texcludesFile = {_config_value(str(user.exclude))}"]
            (temporary / "objects" / "info").mkdir(parents=True, exist_ok=True)
            (temporary / "objects" / "info" / "alternates").write_text(
                str(user.objects) + "\n", encoding="utf-8"
            )
        (temporary / "config").write_text("\n".join(config) + "\n", encoding="utf-8")
        if user is not None:
            self._seed(user, temporary, deadline)
        os.replace(temporary, self.dir)

    def _user_object_format(self, user: UserRepository, deadline: float) -> str:
        result = self.git.run(
            ["config", "--file", str(user.common_dir / "config"), "extensions.objectFormat"],
            timeout=deadline - time.monotonic(),
            check=False,
        )
        return result.stdout.decode("ascii", "replace").strip().lower() or "sha1"

    def _own_excludes(self) -> str:
        """turnback's home, wherever it sits in the workspace: the whole directory, or when
        the workspace is the home itself, what turnback keeps there."""
        lines = "# written by turnback: paths the shadow repository never captures\n"
        try:
            relative = self.home.resolve().relative_to(self.workspace)
        except ValueError:
            return lines
        if relative == Path("."):
            return lines + "/shadow/\n/turnback.db\n/turnback.db-*\n"
        return lines + _exclude_pattern(relative.as_posix())

    def _seed(self, user: UserRepository, temporary: Path, deadline: float) -> None:
        """Start from a copy of the user's index (with its stat data) and the user's HEAD.

        Skipped when the user's index is split (its other half lives in the user's .git)."""
        if not user.index.is_file() or any(user.git_dir.glob("sharedindex.*")):
            return
        env = {"GIT_DIR": str(temporary), "GIT_WORK_TREE": str(self.workspace)}
        try:
            # copy2 keeps the file's mtime, which git compares with entries' mtimes to spot
            # files changed in the same instant the index was written ("racy git").
            shutil.copy2(user.index, temporary / "index")
            head = self.git.run(
                ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
                env={"GIT_DIR": str(user.git_dir)},
                timeout=deadline - time.monotonic(),
                check=False,
            )
            oid = head.stdout.decode("ascii", "replace").strip()
            if head.returncode == 0 and OID.fullmatch(oid):
                self.git.run(
                    ["update-ref", "--no-deref", "HEAD", oid],
                    env=env,
                    timeout=deadline - time.monotonic(),
                )
            # Entries the user marked assume-unchanged or skip-worktree would hide changes.
            listing = self.git.run(
                ["ls-files", "-z", "-v", "-t"], env=env, timeout=deadline - time.monotonic()
            ).stdout
            flagged = [
                item[2:]
                for item in listing.split(b"\0")
                if len(item) > 2 and (item[:1].islower() or item[:1] == b"S")
            ]
            if flagged:
                clear = ("--no-assume-unchanged", "--no-skip-worktree", "-z", "--stdin")
                self.git.run(
                    ["update-index", *clear],
                    env=env,
                    input=b"\0".join(flagged) + b"\0",
                    timeout=deadline - time.monotonic(),
                )
            (temporary / "turnback-seeded").write_text("1\n", encoding="utf-8")
        except (GitFailed, OSError):
            for name in ("index", "turnback-seeded"):
                with contextlib.suppress(FileNotFoundError):
                    (temporary / name).unlink()
            (temporary / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")

    def unseed(self) -> None:
        """Forget the index (and HEAD) copied from the user: the next capture hashes afresh."""
        for name in ("index", "turnback-seeded", INDEX_TREE, INDEX_NEXT):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()
        self._write_file(self.dir / "HEAD", b"ref: refs/heads/main\n")

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
            self._write_file(self.dir / name, tree.encode() + b"\n")

    def _repair_head(self) -> None:
        head = self.dir / "HEAD"
        try:
            ok = _ref_file_ok(head.read_bytes())
        except OSError:
            ok = False
        if not ok:
            self._write_file(head, b"ref: refs/heads/main\n")
            self.report(f"the checkpoint repository's HEAD of {self.workspace} was damaged; reset")

    @staticmethod
    def _write_file(path: Path, data: bytes) -> None:
        temporary = path.with_name(path.name + ".turnback-tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)

    # -- refs -----------------------------------------------------------------------------

    def ref_path(self, ref: str) -> Path:
        return self.dir.joinpath(*ref.split("/"))

    def repair_ref(self, ref: str) -> bool:
        """Drop the loose file of ``ref`` if it is damaged (empty, truncated, garbage).

        Returns whether it was damaged. Call with the lock held."""
        path = self.ref_path(ref)
        with contextlib.suppress(FileNotFoundError):
            (path.with_name(path.name + ".lock")).unlink()
        try:
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return False
        if _ref_file_ok(data) and not data.startswith(b"ref:"):
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
            if not _ref_file_ok(data) or data.startswith(b"ref:"):
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
        out = self.run(*args, old, new, "--", deadline=deadline).stdout
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


@dataclass(frozen=True, slots=True)
class Blob:
    """The content of a file (``100644``/``100755``) or symbolic link (``120000``) to commit."""

    mode: str
    data: bytes

    def oid(self, sha256: bool) -> str:
        header = b"blob %d\0" % len(self.data)
        return hashlib.new("sha256" if sha256 else "sha1", header + self.data).hexdigest()


def _quote(path: bytes) -> bytes:
    """A path as fast-import reads it: C-style quoted, so any byte but NUL can appear."""
    escaped = path.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")
    return b'"' + escaped + b'"'


class FastImport:
    """One ``git fast-import`` in the shadow: looks paths up in trees, then writes one checkpoint
    commit (blobs, trees and commit together as a single pack) and moves refs to it.

    It runs with ``--done``: the refs move only after the pack and its index are complete, when
    :meth:`finish` sends ``done``. If turnback dies before that, fast-import stops at the end of
    its input without moving any ref; what it wrote is unreferenced, and gc prunes it."""

    def __init__(self, shadow: ShadowRepo, deadline: float) -> None:
        self._shadow = shadow
        self._process = shadow.git.start(
            ["fast-import", "--quiet", "--done", "--force"],
            env=shadow.env(),
            cwd=shadow.workspace,
            pass_fds=shadow.lock_fds,
            # fast-import would explode a small pack into loose objects, one file each
            config=(*shadow.config, "fastimport.unpackLimit=0"),
        )
        self._deadline = deadline
        self._output = b""
        self._send(b"feature done\n")

    def __enter__(self) -> FastImport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, data: bytes) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(data)
        except (BrokenPipeError, ValueError):
            raise self._failed() from None

    def _answer(self) -> bytes:
        """The next line fast-import writes (an answer to ``ls`` or ``get-mark``)."""
        assert self._process.stdin is not None
        try:
            self._process.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise self._failed() from None
        while b"\n" not in self._output:
            data = self._read()
            if not data:
                raise self._failed()
            self._output += data
        line, _, self._output = self._output.partition(b"\n")
        return line

    def _read(self) -> bytes:
        """Read what fast-import wrote (``b""``: it exited); past the deadline, stop it."""
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        remaining = self._deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(remaining, 0.0))
        if not ready:
            self._process.kill()
            raise self._failed()
        return os.read(fd, 65536)

    def _failed(self) -> GitFailed:
        self.close()
        assert self._process.stderr is not None
        stderr = self._process.stderr.read().decode("utf-8", "replace").strip()
        status = self._process.returncode
        why = "was stopped at its time limit" if status == -signal.SIGKILL else f"failed ({status})"
        return GitFailed(f"`git fast-import` {why}" + (f": {stderr[:2000]}" if stderr else ""))

    def entries(self, tree: str, paths: Sequence[bytes]) -> list[Entry | None]:
        """The entry at each path of ``tree`` (``040000`` for a directory), or ``None``."""
        if not paths:
            return []
        self._send(b"".join(b"ls " + tree.encode() + b" " + _quote(p) + b"\n" for p in paths))
        found: list[Entry | None] = []
        for _path in paths:
            answer = self._answer()
            if answer.startswith(b"missing "):
                found.append(None)
                continue
            mode, _kind, oid = answer.split(b"\t", 1)[0].decode("ascii").split(" ")
            found.append(Entry(mode.rjust(6, "0"), oid))
        return found

    def commit(
        self,
        refs: Sequence[str],
        base: str | None,
        edits: Mapping[bytes, Blob | None],
        message: str,
    ) -> tuple[str, str]:
        """Send a commit of ``base`` (a tree) with ``edits`` applied (``None`` deletes a path
        and anything below it), with no parent, for ``refs``; returns (commit, tree). Nothing
        is durable before :meth:`finish`."""
        text = message.encode()
        parts = [
            b"commit " + refs[0].encode() + b"\nmark :1\n",
            b"committer %s <%s> %d +0000\n"
            % (IDENTITY_NAME.encode(), IDENTITY_EMAIL.encode(), int(time.time())),
            b"data %d\n" % len(text) + text + b"\n",
        ]
        if base is not None:
            parts.append(b"M " + TREE.encode() + b" " + base.encode() + b' ""\n')
        for path in sorted(p for p, blob in edits.items() if blob is None):
            parts.append(b"D " + _quote(path) + b"\n")
        for path, blob in sorted((p, b) for p, b in edits.items() if b is not None):
            header = b"M " + blob.mode.encode() + b" inline " + _quote(path) + b"\n"
            parts.append(header + b"data %d\n" % len(blob.data) + blob.data + b"\n")
        # The tree's entry, then (the commit ended) its mark: both asked at once, one round trip.
        parts.append(b'ls ""\n\n')
        parts += [b"reset " + r.encode() + b"\nfrom :1\n\n" for r in refs[1:]]
        parts.append(b"get-mark :1\n")
        self._send(b"".join(parts))
        answer = self._answer()
        if answer.startswith(b"missing "):  # nothing at all: the empty tree
            tree = EMPTY_TREE_SHA256 if self._shadow.sha256 else EMPTY_TREE_SHA1
        else:
            tree = answer.split(b"\t", 1)[0].decode("ascii").split(" ")[2]
        return self._answer().decode("ascii"), tree

    def reset(self, refs: Sequence[str], commit: str) -> None:
        """Move ``refs`` to an existing commit (at :meth:`finish`)."""
        self._send(
            b"".join(b"reset " + r.encode() + b"\nfrom " + commit.encode() + b"\n\n" for r in refs)
        )

    def finish(self) -> None:
        """Send ``done``: fast-import completes the pack, then moves the refs."""
        self._send(b"done\n")
        assert self._process.stdin is not None
        try:
            self._process.stdin.close()
        except BrokenPipeError:
            raise self._failed() from None
        while self._read():  # its output ends when it exits
            pass
        if self._process.wait() != 0:
            raise self._failed()
        self.close()

    def close(self) -> None:
        """Stop fast-import if it still runs (no ref moves) and release its pipes."""
        if self._process.returncode is None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


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


def ensure_workspace(workspace: Path) -> Path:
    """The real path of an existing workspace directory."""
    real = Path(os.path.realpath(workspace))
    if not real.is_dir():
        raise WorkspaceError(f"workspace {workspace} is not a directory; check the path")
    return real
