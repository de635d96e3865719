"""``EffectPostgresSaver``: LangGraph's ``AsyncPostgresSaver`` plus a ledger in the same
database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.postgres import _ainternal
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, AsyncPipeline
from psycopg.rows import dict_row

from ..ledger.postgres import PostgresLedger


class EffectPostgresSaver(AsyncPostgresSaver):
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
        conn: _ainternal.Conn,
        ledger: PostgresLedger,
        pipe: AsyncPipeline | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(conn, pipe=pipe, serde=serde)
        if ledger.pool is conn:
            raise ValueError("the ledger must have its own pool, not the checkpointer's connection")
        self.ledger = ledger

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


__all__ = ["EffectPostgresSaver"]
