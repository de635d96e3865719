"""MCP agents a user might write, for ``crashtest --points mcp-lost``: tools from the
example MCP server (``examples/mcp_server.py``, streamable HTTP at ``MCP_URL``)
through ``MultiServerMCPClient``, and a probe counting the server's own records.

The title of each ticket names the run's thread (an interceptor puts it there), so
:func:`probe` counts one thread's tickets. ``plain``: ``create_agent`` with no
middleware, as today; ``safe``: ``EffectMiddleware`` with the server's dedup on the
key in ``_meta`` (``EffectKeyInterceptor``).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from langchain.agents import create_agent
from langchain_mcp_adapters.client import MultiServerMCPClient
from langgraph.config import get_config

from langgraph_effects import Effect, EffectKeyInterceptor, EffectMiddleware
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

CALLS = [("open_ticket", {"title": "printer on fire"})]


async def title_names_the_thread(request: Any, handler: Any) -> Any:
    """A ``tool_interceptors`` entry: the title starts with the run's thread id."""
    thread = get_config()["configurable"]["thread_id"]
    return await handler(
        request.override(args={**request.args, "title": f"{thread}: {request.args['title']}"})
    )


async def _agent(checkpointer: Any, *, safe: bool) -> Any:
    connections: Any = {"tickets": {"transport": "streamable_http", "url": os.environ["MCP_URL"]}}
    interceptors: list[Any] = [title_names_the_thread]
    if safe:
        interceptors.append(EffectKeyInterceptor(connections))
    tools = await MultiServerMCPClient(connections, tool_interceptors=interceptors).get_tools()
    middleware = [EffectMiddleware({"open_ticket": Effect(dedup_window=3600)})] if safe else []
    model = ScriptedChatModel(script=call_each_then_finish(CALLS, final="Ticket opened."))
    return create_agent(model, tools=tools, middleware=middleware, checkpointer=checkpointer)


async def plain(checkpointer: Any) -> Any:
    """``create_agent`` over the adapter's tools, no middleware."""
    return await _agent(checkpointer, safe=False)


async def safe(checkpointer: Any) -> Any:
    """The same agent under ``EffectMiddleware``, the key carried in ``_meta``."""
    return await _agent(checkpointer, safe=True)


def probe(thread_id: str) -> int:
    """Tickets the server holds for the thread (its own SQLite file, ``TICKETS_DB``)."""
    with sqlite3.connect(os.environ["TICKETS_DB"]) as db:
        [(count,)] = db.execute("SELECT COUNT(*) FROM tickets WHERE title LIKE ?", (f"{thread_id}: %",))
    return int(count)


#: Contracts declared for two of the example server's four tools (``mcp-tools --effects``).
DECLARED = {
    "create_ticket": Effect(dedup_window=3600, key_argument="idempotency_key"),
    "find_ticket": Effect.read_only(),
}
