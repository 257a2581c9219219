"""When to try capturing a workspace again after captures keep failing. Pure: no clock, no I/O."""

from __future__ import annotations

from turnback.records import record


@record(frozen=False)
class CaptureBackoff:
    """Consecutive capture failures of one workspace, and when the next attempt is due.

    The first ``threshold`` failures in a row are retried at once (a capture that fails once
    usually succeeds next time); after that each further failure doubles the wait, from ``base``
    seconds up to ``limit``. One success resets everything. The engine asks :meth:`should_try`
    before a capture and records the outcome; a skipped capture is recorded as a missing
    checkpoint, exactly like a failed one.
    """

    threshold: int = 3
    base: float = 30.0
    limit: float = 3600.0
    failures: int = 0
    next_try: float = 0.0

    def should_try(self, now: float) -> bool:
        return now >= self.next_try

    def record_failure(self, now: float) -> float:
        """Count a failure at ``now``; returns the seconds until the next attempt is allowed."""
        self.failures += 1
        if self.failures < self.threshold:
            self.next_try = now
            return 0.0
        delay = min(self.limit, self.base * 2.0 ** (self.failures - self.threshold))
        self.next_try = now + delay
        return delay

    def record_success(self) -> None:
        self.failures = 0
        self.next_try = 0.0
