"""The git runner: the one place where turnback starts a git process.

Every command runs the same git binary, found once by absolute path, in an environment built from
scratch. Nothing the user has configured can change what a command does or make it write
somewhere else:

- no inherited ``GIT_*`` variable (a ``GIT_DIR`` or ``GIT_INDEX_FILE`` left in the environment by an
  editor or a hook would point turnback's commands at the user's repository);
- no system or global config (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``) and a
  ``HOME`` that holds no dotfiles, so aliases, credential helpers, ``core.fsmonitor`` daemons and
  signing programs configured by the user never run;
- every command also gets ``-c`` overrides for the settings that would run a program or rewrite
  content (hooks, fsmonitor, gpg, autocrlf, automatic gc);
- ``LC_ALL=C`` so messages, which end up in errors, are stable; literal pathspecs, so a path is only
  ever a path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from turnback.errors import GitFailed, GitUnavailable

#: Settings passed to every command. They win over any repository config.
OVERRIDES: tuple[str, ...] = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.symlinks=true",
    "core.filemode=true",
    "core.ignoreCase=false",
    "core.quotePath=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
    "index.sparse=false",
    "protocol.allow=never",
)

#: Identity of every checkpoint commit.
IDENTITY = {
    "GIT_AUTHOR_NAME": "turnback",
    "GIT_AUTHOR_EMAIL": "turnback@localhost",
    "GIT_COMMITTER_NAME": "turnback",
    "GIT_COMMITTER_EMAIL": "turnback@localhost",
}

MINIMUM_VERSION = (2, 30)


def find_git(executable: str | None = None) -> str:
    """The absolute path of the git binary to run, or :class:`GitUnavailable` saying what to do."""
    if executable is not None:
        found = shutil.which(executable)
        if found is None:
            raise GitUnavailable(
                f"git was not found at {executable!r}; pass the path of an installed git "
                "executable, or install git (for example `apt install git` or `brew install git`)"
            )
        return os.path.abspath(found)
    found = shutil.which("git")
    if found is None:
        path = os.environ.get("PATH", "")
        raise GitUnavailable(
            f"git is not on PATH ({path or 'PATH is empty'}); workspace checkpoints need git "
            f"{MINIMUM_VERSION[0]}.{MINIMUM_VERSION[1]} or newer: install it (for example "
            "`apt install git` or `brew install git`) or put it on PATH"
        )
    return os.path.abspath(found)


class Git:
    """Runs git commands with an isolated environment, a timeout and classified failures."""

    def __init__(self, executable: str | None = None, *, home: Path) -> None:
        self.executable = find_git(executable)
        home.mkdir(parents=True, exist_ok=True)
        self._base_env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home),
            "LC_ALL": "C",
            "LANG": "C",
            "TZ": "UTC",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_LITERAL_PATHSPECS": "1",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_ADVICE": "0",
            **IDENTITY,
        }
        self.version = self._version()

    def _version(self) -> tuple[int, int]:
        out = self.run(["version"], timeout=30.0).stdout.decode("ascii", "replace")
        # "git version 2.39.5" (vendors append suffixes such as ".windows.1" or " (Apple Git-1)")
        try:
            numbers = out.split()[2].split(".")
            version = (int(numbers[0]), int(numbers[1]))
        except (IndexError, ValueError):
            raise GitUnavailable(
                f"{self.executable} did not report a version ({out.strip()!r}); "
                "install a standard git"
            ) from None
        if version < MINIMUM_VERSION:
            raise GitUnavailable(
                f"{self.executable} is git {version[0]}.{version[1]}; workspace checkpoints need "
                f"git {MINIMUM_VERSION[0]}.{MINIMUM_VERSION[1]} or newer: upgrade git"
            )
        return version

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(self._base_env)
        if extra:
            env.update(extra)
        return env

    def start(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        pass_fds: Sequence[int] = (),
        config: Sequence[str] = (),
        stdin: bool = True,
        output: bool = True,
    ) -> subprocess.Popen[bytes]:
        """Start ``git <overrides> <args>`` with pipes for stdout and stderr (and stdin);
        without ``output`` both go nowhere (a process nobody waits to read)."""
        command = [self.executable]
        for setting in (*OVERRIDES, *config):
            command += ["-c", setting]
        command += list(args)
        try:
            return subprocess.Popen(
                command,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE if output else subprocess.DEVNULL,
                stderr=subprocess.PIPE if output else subprocess.DEVNULL,
                env=self.environment(env),
                cwd=cwd if cwd is not None else "/",
                pass_fds=tuple(pass_fds),
            )
        except OSError as error:
            raise GitUnavailable(f"cannot run {self.executable}: {error}") from error

    def run(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        timeout: float,
        check: bool = True,
        cwd: Path | None = None,
        pass_fds: Sequence[int] = (),
        config: Sequence[str] = (),
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``git <overrides> <args>``; raise :class:`GitFailed` on a timeout or, with
        ``check``, a non-zero exit. ``env`` adds to the isolated environment (``GIT_DIR`` …);
        ``config`` adds ``name=value`` settings to the overrides."""
        started = time.monotonic()
        process = self.start(
            args, env=env, cwd=cwd, pass_fds=pass_fds, config=config, stdin=input is not None
        )
        with process:
            try:
                stdout, stderr = process.communicate(input, timeout=max(timeout, 0.001))
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                raise GitFailed(
                    f"`git {' '.join(args)}` did not finish within {timeout:.1f}s "
                    f"(stopped after {time.monotonic() - started:.1f}s)"
                ) from None
            # Its pipes are closed, so it has exited or is about to: wait without a timeout,
            # which blocks in waitpid instead of polling with sleeps as a timed wait does.
            returncode = process.wait()
        result = subprocess.CompletedProcess(process.args, returncode, stdout, stderr)
        if check and result.returncode != 0:
            raise failure(args, result)
        return result


def failure(args: Sequence[str], result: subprocess.CompletedProcess[bytes]) -> GitFailed:
    """A :class:`GitFailed` naming the command, its exit status and what it wrote on stderr."""
    stderr = result.stderr.decode("utf-8", "replace").strip()
    if len(stderr) > 2000:
        stderr = stderr[:2000] + " …"
    return GitFailed(
        f"`git {' '.join(args)}` failed with exit status {result.returncode}"
        + (f": {stderr}" if stderr else "")
    )
