"""Keeping shadow repositories sound and small: deleting checkpoint refs, pruning what no ref
keeps, and finding and repairing damage."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from turnback.workspace import creation
from turnback.workspace.shadow import OID, ShadowRepo, operation_deadline, ref_name

#: Objects younger than this survive :meth:`Housekeeping.gc` even when unreferenced, so a capture
#: running in another process cannot lose its objects before its ref is written.
OBJECT_GRACE = 3600.0

Progress = Callable[[str, int, int], None]


class Housekeeping:
    """Ref deletion, gc and repairs of shadow repositories; ``progress(stage, done, total)``
    hears how a gc goes."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def delete_refs(self, shadow: ShadowRepo, refs: Sequence[str]) -> None:
        """Delete checkpoint refs (missing ones are ignored)."""
        if not shadow.created or not refs:
            return
        deadline = operation_deadline()
        names = [ref_name(ref) for ref in refs]
        with shadow.locked(deadline):
            for name in names:
                shadow.repair_ref(name)
            shadow.update_refs(((name, None) for name in names), deadline)

    def gc(
        self,
        shadow: ShadowRepo,
        *,
        keep: Collection[str] | None = None,
        older_than: float | None = None,
        object_grace: float = OBJECT_GRACE,
        dry_run: bool = False,
    ) -> tuple[int, int]:
        """Prune refs and the objects only they kept (see :meth:`Snapshots.gc`); returns (refs
        removed, bytes freed)."""
        if not shadow.created:
            return 0, 0
        deadline = operation_deadline()
        if not dry_run:
            self.check(shadow)
        with shadow.locked(deadline):
            shadow.captured.clear()  # what it remembers may be pruned now
            removed: list[str] = []
            if keep is not None:
                kept = {ref_name(k) if not OID.fullmatch(k) else k for k in keep}
                now = time.time()
                for ref, oid, when in shadow.list_refs(deadline):
                    if ref in kept or oid in kept:
                        continue
                    if older_than is not None and now - when < older_than:
                        continue
                    removed.append(ref)
                if not dry_run:
                    shadow.update_refs(((ref, None) for ref in removed), deadline)
            if dry_run:
                return len(removed), 0
            self.progress("gc", 1, 3)
            before = shadow.size()
            expiry = "now" if object_grace <= 0 else f"{int(object_grace)}.seconds.ago"
            shadow.run(
                "repack",
                "-A",
                "-d",
                "-l",
                "-q",
                f"--unpack-unreachable={expiry}",
                deadline=deadline,
            )
            self.progress("gc", 2, 3)
            shadow.run("prune", f"--expire={expiry}", deadline=deadline)
            self.progress("gc", 3, 3)
            freed = max(0, before - shadow.size())
        return len(removed), freed

    def check(self, shadow: ShadowRepo) -> list[str]:
        """Find and repair damage in the shadow (see :meth:`Snapshots.check`); returns the
        problems."""
        if not shadow.created:
            return []
        found: list[str] = []
        deadline = operation_deadline()
        with shadow.locked(deadline):  # every report is made under the lock
            original = shadow.report

            def collect(message: str) -> None:
                found.append(message)
                original(message)

            shadow.report = collect
            try:
                creation.ensure(shadow, deadline)
                # the report fast-import leaves when a capture was killed (or failed) under it
                for report in shadow.dir.glob("fast_import_crash_*"):
                    report.unlink()
                for ref, path in list(shadow.loose_ref_files()):
                    if path.name.endswith(".lock"):
                        path.unlink()
                        continue
                    shadow.repair_ref(ref)
                packed = shadow.dir / "packed-refs"
                if packed.exists() and not _packed_refs_ok(packed.read_bytes()):
                    packed.unlink()
                    collect(f"the packed refs of {shadow.workspace}'s checkpoints were damaged")
                refs = shadow.list_refs(deadline)
                infos = shadow.object_info([f"{oid}^{{tree}}" for _r, oid, _w in refs], deadline)
                missing = [ref for (ref, _o, _w), info in zip(refs, infos, strict=True) if not info]
                for ref in missing:
                    collect(
                        f"checkpoint ref {ref} of {shadow.workspace} names a missing commit or "
                        "tree and has been dropped"
                    )
                shadow.update_refs(((ref, None) for ref in missing), deadline)
                alternates = shadow.dir / "objects" / "info" / "alternates"
                if alternates.exists():
                    for line in alternates.read_text(encoding="utf-8").splitlines():
                        if line and not Path(line).is_dir():
                            collect(
                                f"the object store {line} that checkpoints of "
                                f"{shadow.workspace} borrow from is gone; older checkpoints may "
                                "be unavailable"
                            )
            finally:
                shadow.report = original
        return found


def _packed_refs_ok(data: bytes) -> bool:
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("^"):
            if not OID.fullmatch(line[1:]):
                return False
            continue
        oid, _, ref = line.partition(" ")
        if not OID.fullmatch(oid) or not ref.startswith("refs/"):
            return False
    return True
