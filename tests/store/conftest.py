"""The store suite's backends: a test that takes ``store`` runs on each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from turnback.store import Store, open_store, sqlite_url

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return sqlite_url(tmp_path / "home")


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url, busy_timeout=2.0)
    try:
        yield opened
    finally:
        opened.close()
