"""The Postgres ledger's control rows (budgets, circuit breakers): statements and steps.

`LockControls` first inserts an empty row for each key nobody charged
yet (``ON CONFLICT DO NOTHING``), then holds them all with ``SELECT ... FOR UPDATE`` in
key order: two transactions charging the same new budget queue on its row instead
of both starting from zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from ..core.controls import ControlRow
from .codec import stored_text
from .controls import row_from, row_values
from .steps import ListControls, LockControls, WriteControls

_KEYS = "SELECT * FROM unnest(%s::text[], %s::text[]) AS k (control, scope)"


@dataclass(frozen=True)
class ControlStatements:
    """The statements on ``{prefix}effect_controls``."""

    create: str
    lock: str
    write: str
    listing: str

    @classmethod
    def on(cls, prefix: str) -> ControlStatements:
        """The statements for tables qualified by ``prefix`` (a quoted schema and a dot, or empty)."""
        table = f"{prefix}effect_controls"
        return cls(
            create=(
                f"INSERT INTO {table} (control, scope, state, updated_at) "
                f"SELECT control, scope, '{{}}', 0 FROM ({_KEYS}) AS k ON CONFLICT DO NOTHING"
            ),
            lock=(
                f"SELECT * FROM {table} WHERE (control, scope) IN ({_KEYS}) "
                "ORDER BY control, scope FOR UPDATE"
            ),
            write=(
                f"INSERT INTO {table} (control, scope, state, updated_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (control, scope) DO UPDATE SET state = excluded.state, "
                "updated_at = excluded.updated_at"
            ),
            listing=f"SELECT * FROM {table} WHERE control <> 'hold' ORDER BY control, scope",
        )


async def lock_controls(
    cur: psycopg.AsyncCursor[dict[str, Any]], sql: ControlStatements, step: LockControls
) -> dict[tuple[str, str], ControlRow]:
    if not step.keys:
        return {}
    params = [[stored_text(k[0]) for k in step.keys], [stored_text(k[1]) for k in step.keys]]
    await cur.execute(sql.create, params)
    await cur.execute(sql.lock, params)
    return {(row := row_from(r)).key: row for r in await cur.fetchall()}


async def write_controls(
    cur: psycopg.AsyncCursor[dict[str, Any]], sql: ControlStatements, step: WriteControls
) -> None:
    values = [row_values(row) for row in step.rows]
    params = [(v["control"], v["scope"], v["state"], v["updated_at"]) for v in values]
    await cur.executemany(sql.write, params)


async def list_controls(
    cur: psycopg.AsyncCursor[dict[str, Any]], sql: ControlStatements, step: ListControls
) -> list[ControlRow]:
    await cur.execute(sql.listing)
    return [row_from(r) for r in await cur.fetchall()]
