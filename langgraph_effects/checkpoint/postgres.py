"""``EffectPostgresSaver``: LangGraph's ``AsyncPostgresSaver`` plus a ledger in the same
database, and one runner per thread (see :mod:`langgraph_effects.checkpoint._fence`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from contextvars import ContextVar
from typing import Any, TypeVar

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver, Conn
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline, sql
from psycopg.rows import DictRow, dict_row

from .._private import postgres_connection, postgres_saver_cursor
from ..errors import ConfigurationError, ThreadConflictError
from ..ledger.postgres import PostgresLedger
from . import _fence
from ._fence import Put

_T = TypeVar("_T")

# The cursor of the fenced transaction in progress: LangGraph's aput/aput_writes run
# their own statements through ``self._cursor()``, which then hands them this one, so
# they land inside our transaction (tests/test_langgraph_contract.py pins that).
_IN_FENCE: ContextVar[AsyncCursor[DictRow] | None] = ContextVar("_IN_FENCE", default=None)


class EffectPostgresSaver(_fence.FencedSaver, AsyncPostgresSaver):
    """An ``AsyncPostgresSaver`` whose database also holds the operation ledger.

    The ledger runs on its own connection pool to the same database: sharing the
    saver's connection is unsafe (a ledger transaction would capture the saver's
    writes, and the saver's autocommit would split ours). Open it with
    :meth:`from_conn_string` and call :meth:`setup` once::

        async with EffectPostgresSaver.from_conn_string("postgresql://...") as saver:
            await saver.setup()
            graph = builder.compile(checkpointer=saver)
    """

    ledger: PostgresLedger

    def __init__(
        self,
        conn: Conn,
        ledger: PostgresLedger,
        pipe: AsyncPipeline | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(conn, pipe=pipe, serde=serde)
        if ledger.pool is conn:
            raise ValueError("the ledger must have its own pool, not the checkpointer's connection")
        self.ledger = ledger
        self._written = _fence.Written()

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        serde: SerializerProtocol | None = None,
        ledger_schema: str | None = None,
        ledger_max_size: int = 10,
        connect_timeout: float | None = None,
    ) -> AsyncIterator[EffectPostgresSaver]:
        """Open the checkpoints and the ledger in the Postgres database ``conn_string``.

        The checkpoints use one connection (as ``AsyncPostgresSaver`` does), the
        ledger its own pool of up to ``ledger_max_size`` connections, in
        ``ledger_schema`` if given (else the connection's ``search_path``).
        ``connect_timeout`` (seconds) bounds every connection attempt.
        """
        extra: dict[str, Any] = {}
        ledger_timeout: dict[str, Any] = {}
        if connect_timeout is not None:
            extra["connect_timeout"] = max(2, round(connect_timeout))
            ledger_timeout = {"timeout": connect_timeout, "connect_timeout": connect_timeout}
        async with (
            PostgresLedger.from_conn_string(
                conn_string, schema=ledger_schema, max_size=ledger_max_size, **ledger_timeout
            ) as ledger,
            # The same connection settings AsyncPostgresSaver.from_conn_string uses.
            await AsyncConnection.connect(
                conn_string, autocommit=True, prepare_threshold=0, row_factory=dict_row, **extra
            ) as conn,
        ):
            if pipeline:
                async with conn.pipeline() as pipe:
                    yield cls(conn, ledger, pipe=pipe, serde=serde)
            else:
                yield cls(conn, ledger, serde=serde)

    async def setup(self) -> None:
        """Create or migrate both the checkpoint tables and the ledger tables.

        Safe from many processes at once (a deploy starting its workers together):
        LangGraph's own migrations take no lock, so concurrent first setups collide on
        ``CREATE TABLE`` (``UniqueViolation``); here they run under a session advisory
        lock, one process after the other, and the later ones find nothing to do.
        """
        await self.ledger.setup()
        async with self.ledger.migration_lock("checkpoints"):
            await super().setup()
        await self.setup_fencing()

    async def setup_fencing(self) -> None:
        """Create what the one-runner-per-thread check needs (idempotent): the index it
        probes and its function, in the schema of LangGraph's ``checkpoints`` table.

        Run after LangGraph's migrations. Serialised by an advisory lock (concurrent
        ``CREATE INDEX IF NOT EXISTS`` or ``CREATE OR REPLACE FUNCTION`` can fail); a
        function already as this version defines it is left alone, so a role that does
        not own it (it was set up by another) can still run setup.
        """
        async with postgres_connection(self.conn) as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('langgraph-effects/fence-setup', 0))"
            )
            await conn.execute(_fence.INDEX_SQL)
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(_FENCE_FOUND_SQL, (_FENCE_FUNCTION,))
            row = await cur.fetchone()
            if row is None or row["body"] != _FENCE_BODY:
                schema = row["schema"] if row is not None else await self._checkpoints_schema(conn)
                await conn.execute(_fence_function_sql(schema))

    @staticmethod
    async def _checkpoints_schema(conn: AsyncConnection[Any]) -> str:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(
            "SELECT n.nspname AS schema FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = to_regclass('checkpoints')"
        )
        row = await cur.fetchone()
        if row is None:
            raise ConfigurationError("no checkpoints table on the search_path: run LangGraph's setup() first")
        return str(row["schema"])

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        """LangGraph's cursor, or inside a fenced transaction the transaction's own."""
        fenced = _IN_FENCE.get()
        if fenced is not None:
            yield fenced
            return
        async with postgres_saver_cursor(super(), pipeline=pipeline) as cur:
            yield cur

    async def _fenced(
        self, thread_id: str, ns: str, parent: str | None, check: tuple[str, str] | None,
        store: Callable[[], Awaitable[_T]],
    ) -> _T:
        """``store()`` (LangGraph's own statements) in one transaction with the fence.

        The fence function takes the thread and namespace's advisory lock and, if
        ``check`` is ``(what, own id)``, raises when ``parent`` already has a child
        other than ``own``. In pipeline mode on an autocommit connection (LangGraph's
        setting) all of it is one implicit transaction ended by one Sync: one round
        trip, nothing fetched in between; an error rolls all of it back (a store()
        cancelled halfway leaves at most what LangGraph's own pipeline would: blobs
        without their checkpoint row, which nothing reads). Without pipeline mode, or
        on a connection that is not autocommit, it is an explicit transaction instead.
        """
        what, own = check if check is not None else ("lock", "")
        args = (_fence.lock_key(thread_id, ns), what, thread_id, ns, parent, own)
        try:
            async with self.lock, postgres_connection(self.conn) as conn, AsyncExitStack() as stack:
                pipe: AsyncPipeline | None = None
                if self.supports_pipeline and conn.autocommit:
                    pipe = await stack.enter_async_context(conn.pipeline())
                else:
                    await stack.enter_async_context(conn.transaction())
                cur = await stack.enter_async_context(conn.cursor(binary=True, row_factory=dict_row))
                await cur.execute(_FENCE_CALL, args)
                token = _IN_FENCE.set(cur)
                try:
                    return await store()
                except psycopg.Error:
                    if pipe is not None:
                        # Collect the statements the error aborted now: left to the
                        # pipeline's exit they are logged as an ignored error.
                        with suppress(psycopg.Error):
                            await pipe.sync()
                    raise
                finally:
                    _IN_FENCE.reset(token)
        except psycopg.Error as error:
            if error.sqlstate == _REFUSED:
                child = error.diag.message_detail
                refused = ThreadConflictError(thread_id, ns, parent, child, what=_WHAT[what])
                _fence.on_refused(refused)
                raise refused from None
            if error.sqlstate == "42883" and _FENCE_FUNCTION in str(error):
                raise ConfigurationError(
                    "the checkpoint database has no one-runner-per-thread function yet: run the "
                    "saver's setup() (or `langgraph-effects --db DSN setup`) once after upgrading"
                ) from error
            raise

    async def _put_fenced(self, put: Put) -> RunnableConfig:
        thread_id, ns, parent = _fence.coordinates(put.config)
        check = ("checkpoint", put.checkpoint["id"]) if put.check else None
        return await self._fenced(
            thread_id, ns, parent, check,
            lambda: AsyncPostgresSaver.aput(self, put.config, put.checkpoint, put.metadata, put.new_versions),
        )

    async def _put_writes_fenced(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> None:
        thread_id, ns, checkpoint_id = _fence.coordinates(config)
        # A checkpoint this saver already moved past takes its own late writes; on any
        # other, a child means another runner moved past it.
        own_late = checkpoint_id is None or self._written.has_child(checkpoint_id)
        await self._fenced(
            thread_id, ns, checkpoint_id, None if own_late else ("writes", ""),
            lambda: AsyncPostgresSaver.aput_writes(self, config, writes, task_id, task_path),
        )


# -- the fence function (created by setup_fencing, called by _fenced) ---------------------

_FENCE_FUNCTION = "effect_checkpoint_fence"
#: The SQLSTATE it raises when a save would fork the thread (DETAIL: the child's id).
_REFUSED = "LGE01"
_WHAT = {"checkpoint": "checkpoint", "writes": "task results"}
_FENCE_CALL = f"SELECT {_FENCE_FUNCTION}(%s, %s, %s, %s, %s, %s)"
_FENCE_BODY = """
DECLARE
    child text;
BEGIN
    -- Held until the caller's transaction ends: the check and the caller's own
    -- statements that follow it are atomic for every runner of this thread.
    PERFORM pg_advisory_xact_lock(hashtextextended(p_lock_key, 0));
    IF p_what = 'lock' THEN
        RETURN;
    ELSIF p_parent IS NULL THEN
        SELECT c.checkpoint_id INTO child FROM checkpoints c
         WHERE c.thread_id = p_thread AND c.checkpoint_ns = p_ns
           AND c.parent_checkpoint_id IS NULL AND c.checkpoint_id <> p_own LIMIT 1;
    ELSE
        SELECT c.checkpoint_id INTO child FROM checkpoints c
         WHERE c.thread_id = p_thread AND c.checkpoint_ns = p_ns
           AND c.parent_checkpoint_id = p_parent AND c.checkpoint_id <> p_own LIMIT 1;
    END IF;
    IF child IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LGE01', DETAIL = child, MESSAGE = format(
            'langgraph-effects: %s refused, thread %L (namespace %L) already moved on from %s to %s',
            p_what, p_thread, p_ns, coalesce(p_parent, 'its start'), child);
    END IF;
END
"""
_FENCE_FOUND_SQL = (
    "SELECT n.nspname AS schema, p.prosrc AS body FROM pg_proc p "
    "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.proname = %s "
    "AND n.oid = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass('checkpoints'))"
)


def _fence_function_sql(schema: str) -> sql.Composed:
    return sql.SQL(
        "CREATE OR REPLACE FUNCTION {}.{}(p_lock_key text, p_what text, p_thread text, p_ns text, "
        "p_parent text, p_own text) RETURNS void LANGUAGE plpgsql AS {}"
    ).format(sql.Identifier(schema), sql.Identifier(_FENCE_FUNCTION), sql.Literal(_FENCE_BODY))


__all__ = ["EffectPostgresSaver"]
