"""The support agent of the README's "When something crashed" and "Crash-test your own agent".

Two tools against two providers that keep their own records in SQLite files in
the current directory:

* ``open_ticket`` (helpdesk, ``helpdesk.sqlite``): undeclared, so *blind*: no key,
  no lookup. After a crash only a human can say whether the ticket exists.
* ``send_invoice`` (billing, ``billing.sqlite``): ``Effect(dedup_window=24 h)``,
  the provider dedups on our key, so recovery settles it alone.

Each effect carries the thread id it was made for, so :func:`probe` can count one
thread's effects from the providers' own records. Run everything from the directory
that holds this file (``cd examples``)::

    python support_agent.py crash   # two workers, each SIGKILLed right after its provider applied the effect
    python support_agent.py count   # what the providers hold
    langgraph-effects --db agent.sqlite recover --graph support_agent:make_graph
    langgraph-effects crashtest support_agent:make_plain_graph --probe support_agent:probe  # today's graph
    langgraph-effects crashtest support_agent:make_graph --probe support_agent:probe        # protected

``make_graph(checkpointer)`` is the protected agent (``EffectMiddleware``), the
factory ``recover --graph`` imports; ``make_plain_graph`` is the same agent without
it. ``crash`` starts the walk-through over (it removes the files of an earlier run).
No API key is needed: a scripted model plays the LLM (swap in any chat model).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# langgraph_effects first: without langchain installed, it names the extra that brings it.
from langgraph_effects import AsyncEffectSqliteSaver, Effect, EffectMiddleware, maybe_current_operation
from langgraph_effects.testing import Provider, ScriptedChatModel

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool

DB = "agent.sqlite"
helpdesk = Provider("helpdesk.sqlite", "blind")
billing = Provider("billing.sqlite", "dedup")
FILES = (DB, "helpdesk.sqlite", "billing.sqlite")  # what a walk-through leaves in the directory
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
# Any other thread (a crashtest run starts fresh ones): open a ticket, then invoice.
CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("open_ticket", {"customer": "acme", "subject": "Refund order 1042"}),
    ("send_invoice", {"customer": "acme", "amount": 1200}),
)


def _crash_if_asked() -> None:
    if os.environ.get(CRASH_ENV):
        os.kill(os.getpid(), signal.SIGKILL)


@tool
def open_ticket(customer: str, subject: str, config: RunnableConfig) -> str:
    """Open a helpdesk ticket for a customer."""
    thread = config["configurable"]["thread_id"]
    receipt = helpdesk.apply(
        {"operation": "ticket", "customer": customer, "subject": subject, "thread": thread}
    )
    _crash_if_asked()
    return f"ticket {receipt.effect_id} opened"


@tool
def send_invoice(customer: str, amount: int, config: RunnableConfig) -> str:
    """Send an invoice to a customer."""
    payload = {"operation": "invoice", "customer": customer, "amount": amount}
    op = maybe_current_operation()  # None in make_plain_graph
    # Protected: the operation's key, the same on every re-send. Plain: a fresh key per
    # request, as code without a ledger sends; nothing ties a re-send to the first.
    key = op.provider_key if op is not None else uuid.uuid4().hex
    receipt = billing.apply({**payload, "thread": config["configurable"]["thread_id"]}, key=key)
    _crash_if_asked()
    return f"invoice {receipt.effect_id} sent"


def script(messages: Sequence[BaseMessage]) -> AIMessage:
    """The model: the thread's tool call(s), one at a time, then a final answer."""
    request = next(m for m in messages if isinstance(m, HumanMessage))
    done = sum(isinstance(m, ToolMessage) for m in messages)
    calls = (THREADS[str(request.id)][1],) if request.id in THREADS else CALLS
    if done == len(calls):
        return AIMessage(f"Done: {messages[-1].content}")
    name, args = calls[done]
    call = {"name": name, "args": args, "id": f"call_{done + 1}", "type": "tool_call"}
    return AIMessage("", tool_calls=[call], id=f"ai-{request.id}" + (f"-{done + 1}" if done else ""))


def make_graph(checkpointer: Any) -> Any:
    """The agent, compiled with ``checkpointer`` (the factory ``recover --graph`` uses)."""
    return create_agent(
        ScriptedChatModel(script=script),  # swap in a real chat model here
        tools=[open_ticket, send_invoice],
        middleware=[EffectMiddleware({"send_invoice": Effect(dedup_window=24 * 3600)})],
        checkpointer=checkpointer,
    )


def make_plain_graph(checkpointer: Any) -> Any:
    """The same agent as most code runs it today: no ``EffectMiddleware``, no ledger."""
    return create_agent(
        ScriptedChatModel(script=script), tools=[open_ticket, send_invoice], checkpointer=checkpointer
    )


def probe(thread_id: str) -> int:
    """Effects the two providers hold for ``thread_id``, from their own records (for crashtest)."""
    held = [*helpdesk.effects(), *billing.effects()]
    return sum(1 for effect in held if effect.payload.get("thread") == thread_id)


async def start(thread: str) -> None:
    """Start ``thread`` (a worker's job)."""
    async with AsyncEffectSqliteSaver.from_conn_string(DB) as saver:
        await saver.setup()
        graph = make_graph(saver)
        request = HumanMessage(THREADS[thread][0], id=thread)
        config = {"configurable": {"thread_id": thread}}
        await graph.ainvoke({"messages": [request]}, config, durability="sync")


def start_over() -> None:
    """Remove what an earlier walk-through left here: its threads have finished."""
    left = [name for name in FILES if Path(name).exists()]
    for name in FILES:
        for suffix in ("", "-wal", "-shm"):
            Path(name + suffix).unlink(missing_ok=True)
    if left:
        print(f"starting over: removed {', '.join(left)} of an earlier run")


def crash() -> int:
    """Run each thread in a worker process that is SIGKILLed inside its tool call."""
    start_over()
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
    tickets, invoices = (
        sum(e.payload.get("thread") in THREADS for e in p.effects()) for p in (helpdesk, billing)
    )
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
