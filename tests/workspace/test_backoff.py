from __future__ import annotations

from turnback.workspace import CaptureBackoff


def test_backoff_waits_longer_after_repeated_failures_and_resets_on_success() -> None:
    backoff = CaptureBackoff(threshold=2, base=10, limit=35)
    assert backoff.should_try(0)
    assert backoff.record_failure(0) == 0 and backoff.should_try(0)
    assert backoff.record_failure(1) == 10
    assert not backoff.should_try(10) and backoff.should_try(11)
    assert backoff.record_failure(11) == 20
    assert backoff.record_failure(31) == 35  # capped
    assert not backoff.should_try(65)
    backoff.record_success()
    assert backoff.should_try(65) and backoff.failures == 0
