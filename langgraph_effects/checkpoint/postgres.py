"""``EffectPostgresSaver``: LangGraph's ``AsyncPostgresSaver`` plus a ledger in the same
database, and one runner per thread (see :mod:`langgraph_effects.checkpoint._fence`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver, Conn
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline
from psycopg.rows import DictRow, dict_row

from .._private import postgres_connection, postgres_saver_cursor
from ..errors import ThreadConflictError
from ..ledger.postgres import PostgresLedger
from . import _fence
from ._fence import Put

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
        """Create the index the one-runner-per-thread check probes (idempotent).

        Run after LangGraph's migrations (the index is on its ``checkpoints`` table).
        Serialised by an advisory lock: concurrent ``CREATE INDEX IF NOT EXISTS``
        can fail with a unique violation.
        """
        async with postgres_connection(self.conn) as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('langgraph-effects/fence-setup', 0))"
            )
            await conn.execute(_fence.INDEX_SQL)

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        """LangGraph's cursor, or inside a fenced transaction the transaction's own."""
        fenced = _IN_FENCE.get()
        if fenced is not None:
            yield fenced
            return
        async with postgres_saver_cursor(super(), pipeline=pipeline) as cur:
            yield cur

    @asynccontextmanager
    async def _fence(self, thread_id: str, ns: str) -> AsyncIterator[AsyncCursor[DictRow]]:
        """One transaction holding the thread and namespace's advisory lock.

        In pipeline mode (where libpq has it) the lock and the check go in one round
        trip, LangGraph's statements and the commit in another.
        """
        async with self.lock, postgres_connection(self.conn) as conn, AsyncExitStack() as stack:
            if self.supports_pipeline:
                await stack.enter_async_context(conn.pipeline())
            await stack.enter_async_context(conn.transaction())
            cur = await stack.enter_async_context(conn.cursor(binary=True, row_factory=dict_row))
            await cur.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_fence.lock_key(thread_id, ns),)
            )
            token = _IN_FENCE.set(cur)
            try:
                yield cur
            except ThreadConflictError as error:
                _fence.on_refused(error)
                raise
            finally:
                _IN_FENCE.reset(token)

    @staticmethod
    async def _children(cur: AsyncCursor[DictRow], thread_id: str, ns: str, parent: str | None,
                        own: str) -> list[str]:
        await cur.execute(
            _fence.children_sql(parent, "%s"), _fence.children_params(thread_id, ns, parent, own)
        )
        return [str(row["checkpoint_id"]) for row in await cur.fetchall()]

    async def _put_fenced(self, put: Put) -> RunnableConfig:
        thread_id, ns, parent = _fence.coordinates(put.config)
        async with self._fence(thread_id, ns) as cur:
            if put.check:
                children = await self._children(cur, thread_id, ns, parent, put.checkpoint["id"])
                _fence.refuse_checkpoint(thread_id, ns, parent, children)
            return await AsyncPostgresSaver.aput(
                self, put.config, put.checkpoint, put.metadata, put.new_versions
            )

    async def _put_writes_fenced(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> None:
        thread_id, ns, checkpoint_id = _fence.coordinates(config)
        async with self._fence(thread_id, ns) as cur:
            if checkpoint_id is not None:
                children = await self._children(cur, thread_id, ns, checkpoint_id, "")
                _fence.refuse_writes(thread_id, ns, checkpoint_id, children, self._written)
            await AsyncPostgresSaver.aput_writes(self, config, writes, task_id, task_path)


__all__ = ["EffectPostgresSaver"]
