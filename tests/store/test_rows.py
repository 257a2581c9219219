"""Rows become records by column name (store/sql/rows.py): whatever the order of the select
list or of the record's fields, each value lands in the field of its column's name."""

from __future__ import annotations

import dataclasses

from turnback.model import TurnStatus
from turnback.store.sql.rows import Columns


@dataclasses.dataclass(frozen=True)
class Record:
    a: str
    b: int
    status: TurnStatus
    c: str = "default"


def test_a_row_maps_onto_its_record_by_name_in_any_order() -> None:
    columns = Columns(Record, "status", "b", convert={"status": TurnStatus}, a="upper(x)")
    assert columns.names == ("status", "b", "a")
    assert columns.select("r") == "r.status, r.b, upper(x)"
    assert columns.record(("running", 2, "one")) == Record("one", 2, TurnStatus.RUNNING)
    assert columns.records([("completed", 3, "two")]) == [Record("two", 3, TurnStatus.COMPLETED)]


def test_columns_past_the_first_missing_parameter_go_by_keyword() -> None:
    columns = Columns(Record, "a", "c", "status", "b")
    assert columns.record(("one", "set", TurnStatus.FAILED, 4)) == Record(
        "one", 4, TurnStatus.FAILED, "set"
    )
