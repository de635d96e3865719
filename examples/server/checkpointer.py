"""The server's checkpointer for ``langgraph.checkpointer.json``: ``AsyncEffectSqliteSaver``,
checkpoints and the effect ledger in one SQLite file (``LANGGRAPH_EFFECTS_DB``,
default ``agent.sqlite``). LangGraph's server enters this at start-up."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langgraph_effects import AsyncEffectSqliteSaver


@asynccontextmanager
async def make_saver() -> AsyncIterator[AsyncEffectSqliteSaver]:
    """Open and set up the saver; closed when the server stops."""
    path = os.environ.get("LANGGRAPH_EFFECTS_DB", "agent.sqlite")
    async with AsyncEffectSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
        yield saver
