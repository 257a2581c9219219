"""A disk that can lose power: :mod:`powerfs` mounted over a backing directory in a process of
its own. ``lose_power()`` unmounts it, which drops everything not yet synced (powerfs rebuilds
the backing directory from what was durable), and mounts it again, as a machine that comes back
up would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

POWERFS = Path(__file__).with_name("powerfs.py")


def why_not() -> str | None:
    """Why a power-loss disk cannot be mounted here, or None when it can."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is absent: the kernel offers no FUSE here"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing: `make pytest` installs Debian's fuse3"
    return None


class PowerDisk:
    def __init__(self, root: Path) -> None:
        self.backing = root / "backing"
        self.mountpoint = root / "disk"
        self.log = root / "powerfs.log"
        self.backing.mkdir()
        self.mountpoint.mkdir()
        self._process: subprocess.Popen[bytes] | None = None
        self.cuts = 0

    @property
    def path(self) -> Path:
        """Where the disk is mounted."""
        return self.mountpoint

    def mount(self) -> None:
        assert self._process is None, "mounted already"
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, str(POWERFS), str(self.backing), str(self.mountpoint)],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 30
        while not os.path.ismount(self.mountpoint):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"powerfs did not mount: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)

    def _unmount(self) -> None:
        """Detach the mount; powerfs exits (losing power) once nothing holds a file on it."""
        assert self._process is not None, "not mounted"
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], check=True)
        try:
            code = self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            raise AssertionError(
                f"the disk could not lose power: files on it are still open ({self.holders()})"
            ) from None
        finally:
            self._process = None
        assert code == 0, f"powerfs failed ({code}): {self.log.read_text()[-2000:]}"

    def holders(self) -> list[str]:
        """The processes (pid and command) with a file open under the mount."""
        found = []
        for fds in Path("/proc").glob("[0-9]*/fd"):
            try:
                names = [os.readlink(fd) for fd in fds.iterdir()]
                if any(name.startswith(str(self.mountpoint)) for name in names):
                    command = (fds.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                    found.append(f"{fds.parent.name}: {command.decode(errors='replace')}")
            except OSError:
                continue
        return found

    def lose_power(self) -> None:
        """Everything not synced is gone; the disk is mounted again. Whoever still had files
        open on it must have been killed first."""
        self._unmount()
        self.cuts += 1
        self.mount()

    def close(self) -> None:
        if self._process is not None:
            self._unmount()
