"""Chromium as turnback's browser tests and the review page's benchmark launch it: Debian's
``/usr/bin/chromium``, headless, through Playwright, on a fresh profile."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Playwright, ViewportSize

CHROMIUM = "/usr/bin/chromium"
# Without the networking flags Chromium waits on services a closed network never answers.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDE: ViewportSize = {"width": 1280, "height": 800}


def launch(driver: Playwright, profile: Path, viewport: ViewportSize = WIDE) -> BrowserContext:
    """A headless Chromium on a fresh profile in ``profile``; close it when done."""
    return driver.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS, viewport=viewport
    )
