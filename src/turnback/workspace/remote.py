"""Sharing checkpoints through a git remote: pushed in the background, fetched on demand.

A fleet's machines each keep their own shadow repositories; a remote that all of them can reach
(any URL git accepts: a bare repository on shared storage, ``ssh://``, ``git://``, a git server)
holds every checkpoint ref they took, under the same names (``refs/turnback/<session>/…``), so
any machine can read any turn's checkpoints.

Some facts this relies on:

- checkpoint refs are named by session and turn token, both unique across the fleet, so two
  machines never push different commits under one name; the push is forced all the same (a ref
  that a capture moved is moved on the remote too) and never deletes a ref there (a gc on one
  machine removes its own refs, not the fleet's);
- a push sends what the remote lacks, as git reckons it: the objects reachable from the new
  tips and not from the remote's -- but it excludes another commit's *trees* only where that
  commit is a parent of one it sends. Checkpoints have no parents (so that gc can drop any of
  them), so a plain push of a new checkpoint would send its whole tree again. Each push
  therefore also sends a *carrier*: a commit of the newest checkpoint's tree whose parents are
  that checkpoint and the newest one the remote is known to hold (the note ``turnback-pushed``),
  under ``refs/turnback-carriers/<shadow>`` on the remote. With it a small edit costs a pack of
  its blobs, the trees above them and two commits, plus the remote's ref advertisement. No ref
  of the shadow names a carrier, so the shadow's gc drops it;
- git reads a repository while another process writes it (objects are immutable, refs are
  replaced atomically), so a push needs no lock of the shadow and never holds up a capture;
- a fetch of a session's refs (``refs/turnback/<session>/*``) brings every checkpoint of that
  session in one command; the fetched refs are the same commits as the pushing machine's. It
  asks for no file (``--filter=blob:none``): where the remote allows it
  (``uploadpack.allowFilter``) only commits and trees come, and git fetches each file a diff
  or a restore reads when it reads it (the shadow is then a partial clone, marked
  ``turnback-partial``, and its git commands may use the remote's transport); elsewhere git
  says the filter is ignored and fetches the files too.

Nothing is lost when the remote is down: a capture first marks its shadow as holding unpushed
checkpoints (the file ``turnback-unpushed`` in it), and only a push that succeeds removes the
mark. So a push that fails, or a process killed before its push ran, leaves the mark, and the
next capture, ``recover`` or ``doctor`` pushes again (every ref, so whatever the remote lacks).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from turnback.errors import CheckpointUnavailable, InvalidOption, TurnbackError
from turnback.records import record
from turnback.workspace import creation
from turnback.workspace.shadow import NAMESPACE, OID, PARTIAL, ShadowRepo

#: The mark of a shadow whose checkpoints the remote may lack; it holds the last push's error.
UNPUSHED = "turnback-unpushed"

#: The shadow's note of the newest checkpoint the remote is known to hold.
PUSHED = "turnback-pushed"

#: Where on the remote each shadow's carrier commit goes (see the module's doc).
CARRIER = "refs/turnback-carriers/"

#: The checkpoint remote's name in a shadow's config, where a fetch records it.
REMOTE = "turnback"

#: Longest a push or a fetch may take.
TRANSFER_TIMEOUT = 300.0

#: What remote commands may use: turnback's other git commands may use no transport at all.
TRANSPORTS = ("protocol.allow=always",)

#: What the ssh transport needs of the environment, which git's runner otherwise leaves out.
PASSED = ("SSH_AUTH_SOCK", "GIT_SSH_COMMAND", "GIT_SSH")


@record
class PushResult:
    """One push of a workspace's checkpoints: ``error`` is ``None`` when it succeeded;
    ``recovered`` says a push that had failed before succeeded now."""

    workspace: Path
    sessions: tuple[str, ...]
    error: str | None
    recovered: bool = False
    seconds: float = 0.0


def check_url(url: str) -> str:
    """``url`` if git could take it as a remote, else :class:`InvalidOption` saying why."""
    text = url.strip()
    if not text or text.startswith("-") or "\n" in text or "\0" in text:
        raise InvalidOption(
            f"the checkpoint remote must be a URL git accepts (a path to a bare repository, "
            f"ssh://…, git://…, https://…), not {url!r}"
        )
    if "://" not in text and ":" not in text.split("/")[0] and not os.path.isabs(text):
        return os.path.abspath(text)  # a path: git runs in each workspace, so made whole here
    return text


def shown(url: str) -> str:
    """``url`` as said in messages and activities (which a fleet's database and review page
    show): without the user and password a URL may carry (``https://user:token@host/…``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url  # a path, or ssh's user@host:path (a name, no secret)
    where, slash, path = rest.partition("/")
    return f"{scheme}://{where.rpartition('@')[2]}{slash}{path}"


class CheckpointRemote:
    """The remote at ``url``; ``on_push`` hears each background push's :class:`PushResult`
    (from the pushing thread)."""

    def __init__(self, url: str, *, on_push: Callable[[PushResult], None] | None = None) -> None:
        self.url = check_url(url)
        self.on_push = on_push
        self._pending: dict[Path, tuple[ShadowRepo, set[str]]] = {}
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._busy = 0
        self._closed = False
        #: workspaces whose last push from this process failed (the pushing thread's own)
        self._failing: set[Path] = set()
        self._pushing: dict[Path, threading.Lock] = {}

    # -- running git against the remote ---------------------------------------------------

    def _run(self, shadow: ShadowRepo, args: Sequence[str], deadline: float) -> tuple[int, str]:
        env = shadow.env()
        env.update({name: os.environ[name] for name in PASSED if name in os.environ})
        result = shadow.git.run(
            args,
            env=env,
            timeout=deadline - time.monotonic(),
            check=False,
            cwd=shadow.workspace if shadow.workspace.is_dir() else None,
            config=(*shadow.config, *TRANSPORTS),
        )
        return result.returncode, result.stderr.decode("utf-8", "replace").strip()

    def push_now(self, shadow: ShadowRepo, deadline: float | None = None) -> str | None:
        """Push every checkpoint ref of ``shadow`` the remote lacks; the error, or ``None``.
        The mark of unpushed checkpoints goes only once the push succeeded."""
        if not shadow.created:
            return None
        with self._condition:
            serial = self._pushing.setdefault(shadow.dir, threading.Lock())
        # one push of a shadow at a time in this process: two would race for the remote's refs
        with serial:
            return self._push(shadow, deadline)

    def _push(self, shadow: ShadowRepo, deadline: float | None) -> str | None:
        mark = shadow.dir / UNPUSHED
        deadline = deadline or time.monotonic() + TRANSFER_TIMEOUT
        before = self.unpushed(shadow)
        head: str | None = None
        try:
            specs = [f"+{NAMESPACE}*:{NAMESPACE}*"]
            carrier = self._carrier(shadow, deadline)
            if carrier is not None:
                head, commit = carrier
                specs.append(f"+{commit}:{CARRIER}{shadow.dir.stem}")
            push = ["push", "--quiet", "--no-verify", self.url]
            code, stderr = self._run(shadow, [*push, *specs], deadline)
        except TurnbackError as problem:
            code, stderr = -1, str(problem)
        if code == 0:
            with contextlib.suppress(OSError):  # the mark stays: pushed again, nothing lost
                if head is not None:
                    _put(shadow.dir / PUSHED, head.encode() + b"\n")
                _unmark(mark, before)
            return None
        stderr = " ".join(stderr.split())  # one line: the mark's first line is its error
        error = f"`git push` to {shown(self.url)} failed" + (f": {stderr}" if stderr else "")
        with contextlib.suppress(OSError):
            _put(mark, f"{error}\n{uuid.uuid4().hex}".encode("utf-8", "replace"))
        return error

    def _carrier(self, shadow: ShadowRepo, deadline: float) -> tuple[str, str] | None:
        """``(head, carrier)``: the shadow's newest checkpoint, and a commit of its tree whose
        parents are it and the checkpoint last pushed (see the module's doc); ``None`` when
        there is no such pair (nothing pushed yet, or that checkpoint was pruned here)."""
        try:
            base = (shadow.dir / PUSHED).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            base = ""
        if not OID.fullmatch(base):
            base = ""
        names = ["HEAD^{commit}", "HEAD^{tree}", f"{base or 'HEAD'}^{{commit}}"]
        head, tree, found = shadow.object_info(names, deadline)
        if head is None or tree is None:
            return None
        if not base or found is None or base == head[0]:
            return head[0], head[0]  # nothing to lean on: the push sends what it must
        made = shadow.run(
            "commit-tree",
            tree[0],
            "-p",
            head[0],
            "-p",
            base,
            "-m",
            "turnback: what the checkpoint remote holds, and the newest checkpoint",
            deadline=deadline,
        )
        return head[0], made.stdout.decode("ascii").strip()

    def fetch(self, shadow: ShadowRepo, prefixes: Sequence[str], deadline: float) -> None:
        """Bring the checkpoint refs under each of ``prefixes`` (``<session>``) from the
        remote into ``shadow``; :class:`CheckpointUnavailable` when the remote cannot give
        them."""
        with shadow.locked(deadline):
            creation.ensure(shadow, deadline)
            specs = [f"+{NAMESPACE}{p}/*:{NAMESPACE}{p}/*" for p in prefixes]
            # the shadow may fetch a file it lacks from now on: marked before git records the
            # remote as the one it lazily fetches from (a crash between leaves a harmless mark)
            _put(shadow.dir / PARTIAL, self.url.encode() + b"\n")
            try:
                # git fetches lazily from a named remote only (a path cannot name one)
                shadow.run("config", f"remote.{REMOTE}.url", self.url, deadline=deadline)
                fetch = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head"]
                fetch += ["--filter=blob:none", REMOTE]
                code, stderr = self._run(shadow, [*fetch, *specs], deadline)
            except TurnbackError as error:
                code, stderr = -1, str(error)
        if code == 0 and not (shadow.dir / PUSHED).exists():
            # what the remote holds: the next push of this shadow's own checkpoints leans on it
            newest = (
                shadow.run(
                    "for-each-ref",
                    "--sort=-committerdate",
                    "--count=1",
                    "--format=%(objectname)",
                    *(f"{NAMESPACE}{p}/" for p in prefixes),
                    deadline=deadline,
                )
                .stdout.decode("ascii", "replace")
                .strip()
            )
            if OID.fullmatch(newest):
                _put(shadow.dir / PUSHED, newest.encode() + b"\n")
        if code != 0:
            raise CheckpointUnavailable(
                f"the workspace checkpoints could not be fetched from the checkpoint remote "
                f"{shown(self.url)}: {stderr or 'git gave no reason'}; check that it is "
                "reachable and try again"
            )

    # -- pushing in the background --------------------------------------------------------

    def mark(self, shadow: ShadowRepo) -> None:
        """Mark ``shadow`` as holding checkpoints the remote may lack (before its push). Each
        mark is new (a push that began before it leaves it in place) and keeps the last push's
        error. It takes no lock: a capture's background repack may hold the shadow's."""
        error = (self.unpushed(shadow) or "").split("\n")[0]
        _put(shadow.dir / UNPUSHED, f"{error}\n{uuid.uuid4().hex}".encode())

    def unpushed(self, shadow: ShadowRepo) -> str | None:
        """What ``shadow``'s mark of unpushed checkpoints holds (its first line: the last
        push's error, empty when no push failed); ``None`` when it holds no mark."""
        try:
            return (shadow.dir / UNPUSHED).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None

    def push_later(self, shadow: ShadowRepo, session: str) -> None:
        """Push ``shadow``'s checkpoints from a background thread; calls for a workspace whose
        push has not started yet join it."""
        self.mark(shadow)
        with self._condition:
            if self._closed:
                return
            entry = self._pending.setdefault(shadow.workspace, (shadow, set()))
            entry[1].add(session)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="turnback-checkpoint-push", daemon=True
                )
                self._thread.start()
            self._condition.notify_all()

    def _work(self) -> None:
        while True:
            with self._condition:
                while not self._pending and not self._closed:
                    self._condition.wait()
                if not self._pending:
                    return
                workspace = next(iter(self._pending))
                shadow, sessions = self._pending.pop(workspace)
                self._busy += 1
            try:
                before = (self.unpushed(shadow) or "").split("\n")[0]
                started = time.monotonic()
                try:
                    error = self.push_now(shadow)
                except Exception as problem:  # one push that fails so must not end the pushing
                    error = f"`git push` to {shown(self.url)} failed: {problem}"
                # whether an earlier push failed: the mark says so across processes, and this
                # thread remembers it too (a capture marking beside a push may lose its line)
                failed = bool(before) or workspace in self._failing
                result = PushResult(
                    workspace,
                    tuple(sorted(sessions)),
                    error,
                    recovered=error is None and failed,
                    seconds=time.monotonic() - started,
                )
                first = error is not None and not failed  # later failures were said already
                if error is None:
                    self._failing.discard(workspace)
                else:
                    self._failing.add(workspace)
                if self.on_push is not None and (first or result.recovered):
                    with contextlib.suppress(Exception):  # a report must not end the pushing
                        self.on_push(result)
            finally:
                with self._condition:
                    self._busy -= 1
                    self._condition.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait until every push asked for so far has run (or ``timeout`` seconds); whether
        they all have."""
        end = time.monotonic() + timeout
        with self._condition:
            while self._pending or self._busy:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._condition.wait(left)
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Let the pushes asked for run (up to ``timeout`` seconds), then stop the thread. A
        push that has not run leaves its mark: the next capture, recover or doctor pushes."""
        self.wait(timeout)
        with self._condition:
            self._closed = True
            self._pending.clear()
            self._condition.notify_all()


def _put(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` whole, from any number of threads and processes at once
    (each writes a temporary file of its own)."""
    temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def _unmark(mark: Path, pushed: str | None) -> None:
    """Remove the mark a push that succeeded saw as ``pushed`` when it began, without a lock: a
    capture that marked the shadow since then keeps its own mark (and the error the mark
    carried is gone: this push went through)."""
    claimed = mark.with_name(f"{mark.name}.{uuid.uuid4().hex}.claimed")
    try:
        os.rename(mark, claimed)  # atomic: whatever a capture writes after this is a new mark
    except FileNotFoundError:
        return
    try:
        text = claimed.read_text(encoding="utf-8", errors="replace")
        if text != pushed:  # a capture marked it meanwhile: put its mark back, error cleared
            _put(claimed, f"\n{text.partition(chr(10))[2]}".encode())
            with contextlib.suppress(FileExistsError):
                os.link(claimed, mark)  # unless a newer mark is there already
    finally:
        claimed.unlink()
