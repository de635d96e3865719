"""Quickstart: an agent whose worker is killed in the middle of a tool call, then resumed.

Runs as is on a fresh install, no API key: a scripted model plays the LLM and a
Stripe-like billing provider keeps its own records in a SQLite file. The worker
process SIGKILLs itself right after the provider charged the invoice, before the
result is recorded; resuming the thread sends nothing twice.
"""

import asyncio
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

# langgraph_effects first: without langchain installed, it names the extra that brings it.
from langgraph_effects import AsyncEffectSqliteSaver, Effect, EffectMiddleware, current_operation
from langgraph_effects.testing import Provider, ScriptedChatModel, call_each_then_finish

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

if "QUICKSTART_DIR" not in os.environ:  # a directory of our own, shared with the worker, removed at exit
    os.environ["QUICKSTART_DIR"] = tempfile.mkdtemp(prefix="quickstart-")
    atexit.register(shutil.rmtree, os.environ["QUICKSTART_DIR"], ignore_errors=True)
DATA = Path(os.environ["QUICKSTART_DIR"])
billing = Provider(DATA / "billing.sqlite", "dedup")  # dedups on the Idempotency-Key
CRASH = "--crash" in sys.argv


@tool
def send_invoice(customer: str, amount: int) -> str:
    """Send an invoice to a customer."""
    op = current_operation()  # operation id, provider key, attempt: stable across crashes
    receipt = billing.apply({"customer": customer, "amount": amount}, key=op.provider_key)
    if CRASH:
        os.kill(os.getpid(), signal.SIGKILL)  # the provider charged it; the worker dies now
    return f"invoice {receipt.effect_id} sent"


# Swap in a real chat model here, e.g. ChatOpenAI(model="gpt-4.1").
model = ScriptedChatModel(
    script=call_each_then_finish([("send_invoice", {"customer": "acme", "amount": 100})])
)


async def run(inputs: object) -> dict:
    async with AsyncEffectSqliteSaver.from_conn_string(str(DATA / "agent.sqlite")) as saver:
        await saver.setup()  # checkpoints and the effect ledger, in one file
        agent = create_agent(
            model,
            tools=[send_invoice],
            middleware=[EffectMiddleware({"send_invoice": Effect(dedup_window=timedelta(hours=24))})],
            checkpointer=saver,
        )
        config = {"configurable": {"thread_id": "t-42"}}
        return await agent.ainvoke(inputs, config, durability="sync")


if __name__ == "__main__":
    if CRASH:  # the worker: starts the thread and is killed inside send_invoice
        asyncio.run(run({"messages": [HumanMessage("Invoice acme for 100.")]}))
        sys.exit("not reached")
    worker = subprocess.run([sys.executable, __file__, "--crash"])
    print(f"worker killed by signal {-worker.returncode} after the provider charged the invoice")
    result = asyncio.run(run(None))  # resume the thread, as after any crash
    print("the model read:", result["messages"][-2].content)
    print(
        f"billing provider: {len(billing.effects())} invoice(s), {billing.count_requests('apply')} request(s)"
    )
