"""Who runs a turn, and whether they are still alive (DESIGN.md invariant 5).

An owner is a process named by host, boot, pid and the process's start time. The start time is
what makes a reused pid harmless: after the original owner died, another process may get the same
pid, but it cannot have the same start time, so its turns are not mistaken for the dead owner's.
A zombie (killed, not yet reaped) is dead. A reboot kills every owner of the previous boot.

Owners on another host cannot be checked by pid: they are alive until their lease (if they hold
one) expires. Recovery only ever touches turns whose owner is dead.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from pathlib import Path

from turnback.model import Owner

_PROC = Path("/proc")


def host_identity() -> tuple[str, str]:
    """(host name, boot id). The boot id is empty where the platform has none."""
    try:
        boot_id = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot_id = ""
    return socket.gethostname(), boot_id


def process_state(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a process, None if it is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return _fallback_state(pid)
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _fallback_state(pid: int) -> tuple[str, int] | None:
    """Without /proc only the pid can be checked."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # exists, owned by someone else
    return "R", 0


_current: Owner | None = None


def current_owner() -> Owner:
    """This process as an owner; recomputed after a fork."""
    global _current
    pid = os.getpid()
    if _current is None or _current.pid != pid:
        host, boot_id = host_identity()
        state = process_state(pid)
        start_time = state[1] if state else 0
        digest = hashlib.sha256(f"{host}\0{boot_id}\0{pid}\0{start_time}".encode()).hexdigest()
        _current = Owner(
            id=digest[:24],
            host=host,
            boot_id=boot_id,
            pid=pid,
            start_time=start_time,
            created_at=time.time(),
        )
    return _current


def is_alive(owner: Owner | None, now: float | None = None) -> bool:
    """Whether ``owner`` may still be running its turns. An unknown owner is dead."""
    if owner is None:
        return False
    host, boot_id = host_identity()
    if owner.host != host:
        if owner.lease_expires is None:
            return True  # another machine without a lease: it cannot be checked, so never touch
        return owner.lease_expires > (time.time() if now is None else now)
    if owner.boot_id and boot_id and owner.boot_id != boot_id:
        return False
    state = process_state(owner.pid)
    if state is None or state[0] in ("Z", "X"):
        return False
    return owner.start_time == 0 or state[1] == owner.start_time
