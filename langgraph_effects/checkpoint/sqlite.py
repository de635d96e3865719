"""``AsyncEffectSqliteSaver``: LangGraph's ``AsyncSqliteSaver`` plus a ledger in the same file,
and one runner per thread (see `langgraph_effects.checkpoint._fence`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from .._private import (
    INSERT_CHECKPOINT_SQL,
    INSERT_WRITES_SQL,
    UPSERT_WRITES_SQL,
    run_in_connection_thread,
    sqlite_saver_is_setup,
)
from ..errors import ThreadConflictError
from ..ledger.sqlite import SqliteLedger, connect
from . import _fence, _sides, _unfinished
from ._fence import Put


class AsyncEffectSqliteSaver(_sides.AsyncOnly, _fence.FencedSaver, AsyncSqliteSaver):
    """An ``AsyncSqliteSaver`` whose database also holds the operation ledger.

    The ledger uses its own connection to the same file: sharing the saver's
    connection is unsafe (the saver's commits would swallow the ledger's
    transactions). Open it with
    [`from_conn_string`][langgraph_effects.AsyncEffectSqliteSaver.from_conn_string] and
    call [`setup`][langgraph_effects.AsyncEffectSqliteSaver.setup] once:

        async with AsyncEffectSqliteSaver.from_conn_string("agent.sqlite") as saver:
            await saver.setup()
            graph = builder.compile(checkpointer=saver)

    One runner per thread: saving a second child of a checkpoint (two runners
    resumed the thread from it) raises
    [`ThreadConflictError`][langgraph_effects.errors.ThreadConflictError] and saves nothing. Runs
    started from an earlier ``checkpoint_id`` (time travel, new input there),
    ``update_state`` and subgraphs replayed under time travel still branch.
    """

    ledger: SqliteLedger
    sync_name = "EffectSqliteSaver"

    def __init__(self, conn: aiosqlite.Connection, ledger: SqliteLedger, **kwargs: Any) -> None:
        super().__init__(conn, **kwargs)
        self.ledger = ledger
        self._written = _fence.Written()

    @classmethod
    def from_conn_string(  # type: ignore[override]  # async with as before; a sync with is refused
        cls, conn_string: str | Path, **kwargs: Any
    ) -> _sides.AsyncOpener[AsyncEffectSqliteSaver]:
        """Open the checkpoints and the ledger in the SQLite file ``conn_string``
        (``async with``; sync code opens ``EffectSqliteSaver`` instead)."""
        return _sides.AsyncOpener(cls._open(conn_string, **kwargs), cls.__name__, cls.sync_name)

    @classmethod
    @asynccontextmanager
    async def _open(cls, conn_string: str | Path, **kwargs: Any) -> AsyncIterator[AsyncEffectSqliteSaver]:
        path = str(conn_string)
        ledger_conn = await connect(path)
        try:
            async with aiosqlite.connect(path) as conn:
                yield cls(conn, SqliteLedger(ledger_conn, where=f"sqlite:{path}"), **kwargs)
        finally:
            await ledger_conn.close()

    async def setup(self) -> None:
        """Create or migrate the checkpoint tables, the ledger tables and the fencing index.

        Call it once after opening the saver: unlike ``AsyncSqliteSaver``, which calls
        ``setup()`` at the start of its methods, this saver refuses a database never set
        up (`NotSetUpError`), as the Postgres saver does,
        and never migrates an older ledger behind your back. Once it ran (or the check
        found it done), LangGraph's own calls of it return at once.
        """
        if self._setup_seen or sqlite_saver_is_setup(self):
            self._setup_seen = True
            return
        await self.ledger.setup()
        await super().setup()
        async with self.lock:
            await self.conn.execute(_fence.INDEX_SQL)
            await self.conn.commit()
        await self._fenced(_open_threads)
        self._setup_seen = True

    async def _has_checkpoint_tables(self) -> bool:
        async with self.lock, self.conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('checkpoints', 'writes')"
        ) as cur:
            row = await cur.fetchone()
        return row is not None and int(row[0]) == 2

    async def unfinished_threads(self) -> list[str]:
        """Threads whose newest checkpoint has input or a step no checkpoint finished
        (see `_unfinished`), oldest first."""
        await self._ready_for_use()
        sql = _unfinished.unfinished_sql("writes", _SOURCE, "?")
        async with self.lock, self.conn.execute(sql, _unfinished.PARAMS) as cur:
            return [str(row[0]) for row in await cur.fetchall()]

    async def _fenced(self, fn: Any) -> Any:
        """Run ``fn(sqlite3_connection)`` in one ``BEGIN IMMEDIATE`` transaction.

        The write lock is taken before the check, so no other process can save a
        child between our check and our insert.
        """

        def transaction(db: sqlite3.Connection) -> Any:
            if db.in_transaction:  # LangGraph's saver always commits; never leave ours mixed
                db.commit()
            db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(db)
            except BaseException:
                db.rollback()
                raise
            db.commit()
            return result

        async with self.lock:
            try:
                return await run_in_connection_thread(self.conn, transaction)
            except ThreadConflictError as error:
                _fence.on_refused(error)
                raise

    async def _put_fenced(self, put: Put) -> RunnableConfig:
        await self._ready_for_use()
        config, checkpoint = put.config, put.checkpoint
        thread_id, ns, parent = _fence.coordinates(config)
        type_, blob = self.serde.dumps_typed(checkpoint)
        meta = json.dumps(get_checkpoint_metadata(config, put.metadata), ensure_ascii=False).encode(
            "utf-8", "ignore"
        )
        sql = _fence.children_sql(parent, "?")
        params = _fence.children_params(thread_id, ns, parent, checkpoint["id"])

        def write(db: sqlite3.Connection) -> None:
            if put.check:
                children = [str(r[0]) for r in db.execute(sql, params)]
                _fence.refuse_checkpoint(thread_id, ns, parent, children)
            db.execute(
                INSERT_CHECKPOINT_SQL, (thread_id, ns, checkpoint["id"], parent, type_, blob, meta)
            )

        await self._fenced(write)
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    async def _put_writes_fenced(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str,
        check: bool,
    ) -> None:
        await self._ready_for_use()
        thread_id, ns, checkpoint_id = _fence.coordinates(config)
        query = UPSERT_WRITES_SQL if all(w[0] in WRITES_IDX_MAP for w in writes) else INSERT_WRITES_SQL
        rows = [
            (
                thread_id,
                ns,
                str(checkpoint_id),
                task_id,
                task_path,
                WRITES_IDX_MAP.get(channel, idx),
                channel,
                *self.serde.dumps_typed(value),
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        sql = _fence.children_sql(checkpoint_id, "?")
        params = _fence.children_params(thread_id, ns, checkpoint_id, "")
        written = self._written

        def write(db: sqlite3.Connection) -> None:
            if check and checkpoint_id is not None:
                children = [str(r[0]) for r in db.execute(sql, params)]
                _fence.refuse_writes(thread_id, ns, checkpoint_id, children, written)
            db.executemany(query, rows)

        await self._fenced(write)

    async def _has_child(self, thread_id: str, ns: str, parent: str | None) -> bool:
        await self._ready_for_use()
        sql = _fence.children_sql(parent, "?")
        params = _fence.children_params(thread_id, ns, parent, "")
        async with self.lock, self.conn.execute(sql, params) as cur:
            return await cur.fetchone() is not None

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints the given runs saved (their metadata ``run_id``) and
        the task results stored on them: what LangGraph's server asks of its
        checkpointer when a run is rolled back (``multitask_strategy="rollback"``)."""
        ids = [str(r) for r in run_ids]
        if not ids:
            return
        await self._ready_for_use()
        marks = ", ".join("?" * len(ids))
        runs = f"json_extract(CAST(metadata AS TEXT), '$.run_id') IN ({marks})"
        writes = (
            "DELETE FROM writes WHERE (thread_id, checkpoint_ns, checkpoint_id) IN "
            f"(SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints WHERE {runs})"
        )

        def delete(db: sqlite3.Connection) -> None:
            db.execute(writes, ids)
            db.execute(f"DELETE FROM checkpoints WHERE {runs}", ids)

        await self._fenced(delete)


_SOURCE = "json_extract(CAST(c.metadata AS TEXT), '$.source')"


def _open_threads(db: sqlite3.Connection) -> None:
    """Create `_unfinished.OPEN_TABLE` and its triggers, and fill it, once (in the
    setup's one write transaction: no save falls between the fill and the triggers)."""
    found = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (_unfinished.OPEN_TABLE,)
    ).fetchone()
    for statement in _unfinished.SQLITE_SETUP:
        db.execute(statement)
    if found is None:
        db.execute(_unfinished.fill_sql("writes", _SOURCE, "?"), _unfinished.PARAMS)
