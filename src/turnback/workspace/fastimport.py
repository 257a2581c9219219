"""Writing a checkpoint: one ``git fast-import`` that writes its blobs, trees and commit as one
pack, and moves refs to it only once that pack is complete."""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

from turnback.errors import GitFailed
from turnback.records import record
from turnback.workspace.git import IDENTITY
from turnback.workspace.shadow import TREE, Entry, ShadowRepo

EMPTY_TREE_SHA1 = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
EMPTY_TREE_SHA256 = "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"
IDENTITY_NAME = IDENTITY["GIT_COMMITTER_NAME"]
IDENTITY_EMAIL = IDENTITY["GIT_COMMITTER_EMAIL"]


@record
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
        self._deadline = deadline
        self._output = b""
        self._started: subprocess.Popen[bytes] | None = None

    @property
    def _process(self) -> subprocess.Popen[bytes]:
        """The fast-import, started when first needed: a capture that writes nothing and looks
        nothing up (the same checkpoint again) starts no process."""
        if self._started is None:
            shadow = self._shadow
            self._started = shadow.git.start(
                ["fast-import", "--quiet", "--done", "--force"],
                env=shadow.env(),
                cwd=shadow.workspace,
                pass_fds=shadow.lock_fds,
                # fast-import would explode a small pack into loose objects, one file each
                config=(*shadow.config, "fastimport.unpackLimit=0"),
            )
            self._send(b"feature done\n")
        return self._started

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

    def finish(self) -> None:
        """Send ``done``: fast-import completes the pack, then moves the refs."""
        if self._started is None:
            return  # never needed
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
        if self._started is None:
            return
        if self._process.returncode is None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
