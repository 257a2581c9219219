"""Who runs a turn, and whether they are still alive (docs/design.md, invariant 5).

An owner is a process named by host, boot, pid and the process's start time. The start time is
what makes a reused pid harmless: after the original owner died, another process may get the same
pid, but it cannot have the same start time, so its turns are not mistaken for the dead owner's.
A zombie (killed, not yet reaped) is dead. A reboot kills every owner of the previous boot.

Owners on another host cannot be checked by pid: they are alive until their lease expires.
A lease is an expiry time on the owner's row, in the database's clock (``Tx.now()``), so machines
whose clocks disagree still agree on it; :class:`Lease` sets it when this process begins a turn
and a heartbeat thread renews it every third of its length. An owner whose lease was never set
(a turn begun before leases existed) on another host cannot be judged and is never touched.
Recovery only ever touches turns whose owner is dead.

The lease says when others may take a turn over; the fencing token says whether a write still
may land. Each begin (or reopen) of a turn draws a fresh token into the turn's row, and every
write of the turn checks it, in the same transaction, under the session's lock: a takeover
changes the turn's status, so a process that was stopped past its lease and wakes up finds its
token no longer names a running turn and gets ``OwnershipLost``; nothing it writes lands.

So a process loses a turn only when another actually took it over, never because its heartbeat
was late. A heartbeat that cannot write (another process holds the write lock, the database is
out of reach) tries again at the next beat, for as long as it takes: until another process
takes the turn over -- which it may once the lease has run out, and then the fencing token
refuses this one's next write -- the turn is still this process's, and its writes land. (Losing
it on a late heartbeat would only stop a live owner while nobody else runs its turn: same-host
owners are judged by their pid, not their lease, so on one machine nobody ever would.) The one
lease the heartbeat gives up is one whose owner row is gone (removed by hand): every other
process then takes the owner for dead, so this one stops writing its turns (``on_lost``) and
runs later ones as a new owner.

``TURNBACK_HOST`` overrides the host name in owner records (one machine can then stand in for
several), and ``TURNBACK_LEASE_SECONDS`` the lease's length (default 30).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from turnback.errors import CheckpointUnavailable, InvalidOption
from turnback.model import Owner, Turn

if TYPE_CHECKING:
    from turnback.store import Store, Tx

DEFAULT_LEASE_SECONDS = 30.0

_PROC = Path("/proc")


def host_identity() -> tuple[str, str]:
    """(host name, boot id): ``TURNBACK_HOST`` if set, else the machine's name. The boot id is
    empty where the platform has none."""
    try:
        boot_id = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot_id = ""
    return os.environ.get("TURNBACK_HOST") or socket.gethostname(), boot_id


def lease_seconds(configured: float | None = None) -> float:
    """The lease's length: ``configured``, else ``TURNBACK_LEASE_SECONDS``, else 30 seconds.
    InvalidOption for anything but a positive, finite number of seconds."""
    if configured is not None:
        if not 0 < configured < math.inf:
            raise InvalidOption(
                f"lease_seconds must be a positive number of seconds, such as "
                f"{DEFAULT_LEASE_SECONDS:g}, not {configured!r}"
            )
        return configured
    text = os.environ.get("TURNBACK_LEASE_SECONDS")
    if not text:
        return DEFAULT_LEASE_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise InvalidOption(
            f"TURNBACK_LEASE_SECONDS must be a positive number of seconds, such as "
            f"{DEFAULT_LEASE_SECONDS:g}, not {text!r}; set it so, or unset it for the default"
        )
    return seconds


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
_generation = 0  # how many times this process lost its lease


def owner_of(pid: int, generation: int = 0) -> Owner:
    """Process ``pid`` of this host as an owner: the same process always gets the same id."""
    host, boot_id = host_identity()
    state = process_state(pid)
    start_time = state[1] if state else 0
    who = f"{host}\0{boot_id}\0{pid}\0{start_time}" + (f"\0{generation}" if generation else "")
    digest = hashlib.sha256(who.encode()).hexdigest()
    return Owner(
        id=digest[:24],
        host=host,
        boot_id=boot_id,
        pid=pid,
        start_time=start_time,
        created_at=time.time(),
    )


def current_owner() -> Owner:
    """This process as an owner; recomputed after a fork, a change of ``TURNBACK_HOST`` or a
    lost lease."""
    global _current
    pid = os.getpid()
    if _current is None or _current.pid != pid or _current.host != host_identity()[0]:
        _current = owner_of(pid, _generation)
    return _current


def require_here(turns: Sequence[Turn], what: str) -> None:
    """Raise CheckpointUnavailable unless these turns' workspace checkpoints are on this host:
    snapshots stay on the machine that took them, and another's workspace would give a wrong
    answer."""
    here = host_identity()[0]
    away = sorted({t.host for t in turns if t.host and t.host != here})
    if away:
        numbers = sorted({t.number for t in turns if t.host in away})
        which = f"turn {numbers[0]}" if len(numbers) == 1 else f"turns {listed(numbers)}"
        hosts = f"host {away[0]}" if len(away) == 1 else f"hosts {listed(away)}"
        raise CheckpointUnavailable(
            f"the workspace checkpoints of {which} are on {hosts}, not on this one ({here}): "
            f"{what} can only be made there",
            hosts=tuple(away),
        )


def listed(items: Sequence[object]) -> str:
    """``1, 3 and 4``."""
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def retire_owner() -> None:
    """Run later turns as a new owner: this one's lease was lost."""
    global _current, _generation
    _generation += 1
    _current = None


def is_alive(owner: Owner | None, now: float | None = None) -> bool:
    """Whether ``owner`` may still be running its turns. An unknown owner is dead. ``now`` is
    the database's clock (``Tx.now()``), by which leases are judged."""
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


class Lease:
    """This process's lease as an owner, and the heartbeat that renews it.

    :meth:`claim` is called inside the transaction that begins (or reopens) a turn: it writes
    the owner's row with a lease from the database's clock and starts the heartbeat. A renewal
    that fails is tried again at the next beat, however late; when the owner's row is found gone,
    ``on_lost`` is told why, once, and the owner is retired.

    The heartbeat has a connection of its own (``connect`` opens it, at the first beat): on the
    process's connection it would wait behind any transaction that waits for a lock, and a lease
    must not run out because the process is busy."""

    def __init__(
        self,
        connect: Callable[[], Store],
        seconds: float | None = None,
        on_lost: Callable[[str], None] | None = None,
        process: int | None = None,
    ) -> None:
        self.connect = connect
        #: the process whose turns these are, when not this one (an agent whose hooks write its
        #: turns): it is judged by its pid on this host, so no heartbeat runs for it
        self.process = process
        self._store: Store | None = None
        self.seconds = lease_seconds(seconds)
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owner: Owner | None = None

    def claim(self, tx: Tx) -> Owner:
        if self.process is not None:
            owner = owner_of(self.process)
            tx.upsert_owner(owner)
            return owner
        owner = current_owner()
        tx.upsert_owner(dataclasses.replace(owner, lease_expires=tx.now() + self.seconds))
        self._owner = owner
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(
                target=self._beat, name="turnback-heartbeat", daemon=True
            )
            self._thread.start()
        return owner

    def owner(self) -> Owner:
        """The owner this lease claims turns for."""
        return owner_of(self.process) if self.process is not None else current_owner()

    def renew(self) -> None:
        """One heartbeat: renew the lease, or find its owner's row gone. A renewal that fails
        is tried again at the next beat: a late heartbeat loses nothing by itself."""
        owner = self._owner
        if owner is None:
            return
        from turnback.errors import StoreError

        try:
            if self._store is None:
                self._store = self.connect()
            with self._store.atomic() as tx:
                renewed = tx.renew_lease(owner.id, self.seconds)
        except StoreError:
            return  # the turns stay this process's until another takes them over (fencing)
        if renewed is None:
            self._lose(owner, "its owner record was removed")

    def _lose(self, owner: Owner, reason: str) -> None:
        if self._owner is owner:
            self._owner = None
            retire_owner()
            if self.on_lost is not None:
                self.on_lost(reason)

    def _beat(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            self.renew()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._store is not None:
            self._store.close()
