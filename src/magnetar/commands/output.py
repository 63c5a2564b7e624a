"""Printing an admin answer: indented JSON, or a rich table with ``--table``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table


def _cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


def as_table(result: Any) -> Table:
    """A list of scalars: one column; a list of objects: a column per key; an object:
    key and value rows (nested values as compact JSON)."""
    from rich.table import Table

    table = Table()
    if isinstance(result, list) and result and all(isinstance(r, dict) for r in result):
        columns: list[str] = []
        for row in result:
            columns.extend(k for k in row if k not in columns)
        for column in columns:
            table.add_column(column)
        for row in result:
            table.add_row(*(_cell(row.get(c)) for c in columns))
    elif isinstance(result, list):
        table.add_column("value")
        for item in result:
            table.add_row(_cell(item))
    elif isinstance(result, dict):
        table.add_column("key")
        table.add_column("value")
        for key, value in result.items():
            table.add_row(str(key), _cell(value))
    else:
        table.add_column("value")
        table.add_row(_cell(result))
    return table


def print_result(result: Any, *, table: bool = False) -> None:
    if table:
        from rich.console import Console

        Console(soft_wrap=True).print(as_table(result))
    else:
        print(json.dumps(result, indent=2))
