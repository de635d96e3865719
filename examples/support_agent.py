"""The support agent of the README's "When something crashed" walkthrough.

Two tools against two providers that keep their own records in SQLite files in
the current directory:

* ``open_ticket`` (helpdesk, ``helpdesk.sqlite``): undeclared, so *blind*: no key,
  no lookup. After a crash only a human can say whether the ticket exists.
* ``send_invoice`` (billing, ``billing.sqlite``): ``Effect(dedup_window=24 h)``,
  the provider dedups on our key, so recovery settles it alone.

    python support_agent.py crash   # two workers, each SIGKILLed right after its provider applied the effect
    python support_agent.py count   # what the providers hold
    langgraph-effects --db agent.sqlite recover --graph support_agent:make_graph

``make_graph(checkpointer)`` is the factory ``recover --graph`` imports. No API key
is needed: a scripted model plays the LLM (swap in any chat model).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from langgraph_effects import Effect, EffectMiddleware, EffectSqliteSaver, current_operation
from langgraph_effects.testing import Provider, ScriptedChatModel

DB = "agent.sqlite"
helpdesk = Provider("helpdesk.sqlite", "blind")
billing = Provider("billing.sqlite", "dedup")
CRASH_ENV = "SUPPORT_AGENT_CRASH"  # set in a worker: it dies right after the provider applied it

# thread -> (what the user asks, the call the model makes)
THREADS: dict[str, tuple[str, tuple[str, dict[str, Any]]]] = {
    "support-1042": (
        "Acme wants a refund for order 1042.",
        ("open_ticket", {"customer": "acme", "subject": "Refund order 1042"}),
    ),
    "billing-77": (
        "Invoice acme for the March support plan.",
        ("send_invoice", {"customer": "acme", "amount": 1200}),
    ),
}


def _crash_if_asked() -> None:
    if os.environ.get(CRASH_ENV):
        os.kill(os.getpid(), signal.SIGKILL)


@tool
def open_ticket(customer: str, subject: str) -> str:
    """Open a helpdesk ticket for a customer."""
    receipt = helpdesk.apply({"operation": "ticket", "customer": customer, "subject": subject})
    _crash_if_asked()
    return f"ticket {receipt.effect_id} opened"


@tool
def send_invoice(customer: str, amount: int) -> str:
    """Send an invoice to a customer."""
    payload = {"operation": "invoice", "customer": customer, "amount": amount}
    receipt = billing.apply(payload, key=current_operation().provider_key)
    _crash_if_asked()
    return f"invoice {receipt.effect_id} sent"


def script(messages: Sequence[BaseMessage]) -> AIMessage:
    """The model: one tool call for the thread's request, then a final answer."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(f"Done: {messages[-1].content}")
    thread = next(str(m.id) for m in messages if isinstance(m, HumanMessage))
    name, args = THREADS[thread][1]
    call = {"name": name, "args": args, "id": "call_1", "type": "tool_call"}
    return AIMessage("", tool_calls=[call], id=f"ai-{thread}")


def make_graph(checkpointer: Any) -> Any:
    """The agent, compiled with ``checkpointer`` (the factory ``recover --graph`` uses)."""
    return create_agent(
        ScriptedChatModel(script=script),  # swap in a real chat model here
        tools=[open_ticket, send_invoice],
        middleware=[EffectMiddleware({"send_invoice": Effect(dedup_window=24 * 3600)})],
        checkpointer=checkpointer,
    )


async def start(thread: str) -> None:
    """Start ``thread`` (a worker's job)."""
    async with EffectSqliteSaver.from_conn_string(DB) as saver:
        await saver.setup()
        graph = make_graph(saver)
        request = HumanMessage(THREADS[thread][0], id=thread)
        config = {"configurable": {"thread_id": thread}}
        await graph.ainvoke({"messages": [request]}, config, durability="sync")


def crash() -> int:
    """Run each thread in a worker process that is SIGKILLed inside its tool call."""
    for thread in THREADS:
        env = {**os.environ, CRASH_ENV: "1"}
        worker = subprocess.run([sys.executable, __file__, "worker", thread], env=env)
        if worker.returncode != -signal.SIGKILL:
            print(f"worker for {thread} was not killed (exit {worker.returncode})")
            return 1
        print(f"worker for {thread}: SIGKILLed right after the provider applied the effect")
    return 0


def count() -> int:
    """Print what the providers hold; exit 1 unless each holds exactly one effect."""
    tickets, invoices = len(helpdesk.effects()), len(billing.effects())
    print(f"helpdesk: {tickets} ticket(s); billing: {invoices} invoice(s)")
    return 0 if tickets == invoices == 1 else 1


if __name__ == "__main__":
    command = sys.argv[1:2]
    if command == ["worker"]:
        asyncio.run(start(sys.argv[2]))
        sys.exit(0)
    if command == ["crash"]:
        sys.exit(crash())
    if command == ["count"]:
        sys.exit(count())
    sys.exit(f"usage: python {os.path.basename(__file__)} crash | count")
