"""A support agent served by LangGraph's server (``langgraph dev`` / LangGraph Platform).

The server owns the checkpointer and ignores one compiled into the graph, so the
ledger comes from configuration: ``LANGGRAPH_EFFECTS_DB`` (a SQLite path, default
``agent.sqlite``; the operator console reads the same variable). ``make_graph`` is
a graph factory the server enters for every run, opening the ledger beside the
server's own checkpointer and passing it as ``EffectMiddleware(ledger=...)``.

``graph`` is the same agent for ``langgraph.checkpointer.json``, where the server
uses ``AsyncEffectSqliteSaver`` (``checkpointer.py``) as its checkpointer: the ledger
then comes with the checkpointer, in the same file, and nothing else is needed.

``open_ticket`` is an undeclared tool, so it is blind: after an ambiguous failure
only a person can say whether the ticket exists, and the run stops at a review
(in LangChain's HITL shape, so Agent Inbox and LangGraph Studio show it). The
helpdesk is simulated by a provider that keeps its own records in
``HELPDESK_DB`` (default ``helpdesk.sqlite``); with ``HELPDESK_TIMEOUT=1`` its
first answer is lost after it opened the ticket (a read timeout).

No API key needed: a scripted model plays the LLM (swap in any chat model).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool

from langgraph_effects import EffectMiddleware, SqliteLedger, current_operation
from langgraph_effects.testing import Provider, ScriptedChatModel, call_each_then_finish

helpdesk = Provider(os.environ.get("HELPDESK_DB", "helpdesk.sqlite"), "blind")


@tool
def open_ticket(customer: str, subject: str) -> str:
    """Open a helpdesk ticket for a customer."""
    receipt = helpdesk.apply({"operation": "ticket", "customer": customer, "subject": subject})
    if os.environ.get("HELPDESK_TIMEOUT") and current_operation().attempt == 1:
        raise TimeoutError("the helpdesk did not answer in time")  # ...but it opened the ticket
    return f"ticket {receipt.effect_id} opened"


model = ScriptedChatModel(  # swap in a real chat model here
    script=call_each_then_finish(
        [("open_ticket", {"customer": "acme", "subject": "Refund order 1042"})],
        final="The ticket is open.",
    )
)


@asynccontextmanager
async def make_graph(config: Any) -> AsyncIterator[Any]:
    """The agent, with its ledger from ``LANGGRAPH_EFFECTS_DB`` (the server's checkpointer)."""
    path = os.environ.get("LANGGRAPH_EFFECTS_DB", "agent.sqlite")
    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()  # creates or migrates the ledger's tables
        yield create_agent(model, tools=[open_ticket], middleware=[EffectMiddleware(ledger=ledger)])


# For langgraph.checkpointer.json: the ledger comes with the server's AsyncEffectSqliteSaver.
graph = create_agent(model, tools=[open_ticket], middleware=[EffectMiddleware()])
