"""``EffectPostgresSaver``: LangGraph's ``AsyncPostgresSaver`` plus a ledger in the same
database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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
    ) -> AsyncIterator[EffectPostgresSaver]:
        """Open the checkpoints and the ledger in the Postgres database ``conn_string``.

        The checkpoints use one connection (as ``AsyncPostgresSaver`` does), the
        ledger its own pool of up to ``ledger_max_size`` connections, in
        ``ledger_schema`` if given (else the connection's ``search_path``).
        """
        async with (
            PostgresLedger.from_conn_string(
                conn_string, schema=ledger_schema, max_size=ledger_max_size
            ) as ledger,
            # The same connection settings AsyncPostgresSaver.from_conn_string uses.
            await AsyncConnection.connect(
                conn_string, autocommit=True, prepare_threshold=0, row_factory=dict_row
            ) as conn,
        ):
            if pipeline:
                async with conn.pipeline() as pipe:
                    yield cls(conn, ledger, pipe=pipe, serde=serde)
            else:
                yield cls(conn, ledger, serde=serde)

    async def setup(self) -> None:
        """Create or migrate both the checkpoint tables and the ledger tables."""
        await self.ledger.setup()
        await super().setup()


__all__ = ["EffectPostgresSaver"]
