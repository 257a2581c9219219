"""The crash suite runs on both backends. On PostgreSQL it runs lean: every fault point once
(the first durability mode planned for it), two random kills instead of five, and the checks
that the suite covers every point only once, since they read no database."""

from __future__ import annotations

import pytest

_ONCE = ("test_every_fault_point_in_the_source_is_declared", "test_every_declared_fault_point")


@pytest.fixture(autouse=True, params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The store the killed processes and the checks use: TURNBACK_DATABASE_URL, or the home's
    SQLite file."""
    if request.param == "postgresql":
        monkeypatch.setenv("TURNBACK_DATABASE_URL", request.getfixturevalue("postgres_url"))
    return str(request.param)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    points: set[str] = set()
    for item in items:
        params = getattr(item, "callspec", None)
        params = params.params if params else {}
        if params.get("backend") != "postgresql":
            kept.append(item)
            continue
        name = getattr(item, "originalname", item.name)
        lean = name.startswith(_ONCE) or params.get("seed", 0) >= 2
        if name == "test_killed_while_running_a_turn":
            lean = params["point"] in points
            points.add(params["point"])
        (dropped if lean else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
