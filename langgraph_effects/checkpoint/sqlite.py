"""``EffectSqliteSaver``: LangGraph's ``AsyncSqliteSaver`` plus a ledger in the same file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from ..ledger.sqlite import SqliteLedger, connect


class EffectSqliteSaver(AsyncSqliteSaver):
    """An ``AsyncSqliteSaver`` whose database also holds the operation ledger.

    The ledger uses its own connection to the same file: sharing the saver's
    connection is unsafe (the saver's commits would swallow the ledger's
    transactions). Open it with :meth:`from_conn_string` and call :meth:`setup` once::

        async with EffectSqliteSaver.from_conn_string("agent.sqlite") as saver:
            await saver.setup()
            graph = builder.compile(checkpointer=saver)
    """

    ledger: SqliteLedger

    def __init__(self, conn: aiosqlite.Connection, ledger: SqliteLedger, **kwargs: Any) -> None:
        super().__init__(conn, **kwargs)
        self.ledger = ledger

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str | Path, **kwargs: Any
    ) -> AsyncIterator[EffectSqliteSaver]:
        """Open the checkpoints and the ledger in the SQLite file ``conn_string``."""
        path = str(conn_string)
        ledger_conn = await connect(path)
        try:
            async with aiosqlite.connect(path) as conn:
                yield cls(conn, SqliteLedger(ledger_conn, where=f"sqlite:{path}"), **kwargs)
        finally:
            await ledger_conn.close()

    async def setup(self) -> None:
        """Create or migrate both the checkpoint tables and the ledger tables.

        ``AsyncSqliteSaver`` calls ``setup()`` at the start of every method; the ledger's
        part runs once, not as an empty write transaction on every checkpoint call.
        """
        if not self.is_setup:
            await self.ledger.setup()
        await super().setup()
