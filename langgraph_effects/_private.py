"""The private LangGraph, LangChain and driver pieces we rely on, behind one door.

Nothing else in the package touches them directly. Each one has a contract test in
``tests/test_langgraph_contract.py`` that fails loudly when an upgrade moves it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import aiosqlite

_T = TypeVar("_T")

# -- checkpoint savers and database drivers


async def run_in_connection_thread(
    conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], _T]
) -> _T:
    """Run ``fn(sqlite3_connection)`` on aiosqlite's worker thread, as one hop.

    aiosqlite's public API runs one statement per hop; a transaction of several
    statements would cost a hop each and let other coroutines interleave.
    ``Connection._execute`` (private, stable since aiosqlite 0.17) runs any function
    on that thread.
    """
    return await conn._execute(fn, conn._conn)  # type: ignore[no-any-return,no-untyped-call]


def sqlite_saver_is_setup(saver: Any) -> bool:
    """Whether an ``AsyncSqliteSaver`` already created its tables (its undocumented
    ``is_setup`` flag, set by its ``setup()``)."""
    return bool(saver.is_setup)


def postgres_connection(conn: Any) -> AbstractAsyncContextManager[Any]:
    """A connection out of an ``AsyncPostgresSaver``'s ``conn`` (a connection or a
    pool), as LangGraph's own ``_ainternal.get_connection`` hands it out."""
    from langgraph.checkpoint.postgres import _ainternal

    return _ainternal.get_connection(conn)


def postgres_saver_cursor(parent: Any, *, pipeline: bool) -> AbstractAsyncContextManager[Any]:
    """``AsyncPostgresSaver._cursor``: where its ``aput``/``aput_writes`` get the cursor
    their statements run on. ``EffectPostgresSaver`` overrides that method to hand
    them its fenced transaction's cursor; ``parent`` is its ``super()``."""
    return parent._cursor(pipeline=pipeline)  # type: ignore[no-any-return]


# The statements AsyncSqliteSaver.aput / aput_writes run (langgraph-checkpoint-sqlite
# 3.x); EffectSqliteSaver runs them again inside its own fenced transaction.
INSERT_CHECKPOINT_SQL = (
    "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
    "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
UPSERT_WRITES_SQL = (
    "INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    "task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_WRITES_SQL = (
    "INSERT OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    "task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
