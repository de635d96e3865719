"""Sync quickstart: a synchronous app (``agent.invoke``, no asyncio) whose worker is
killed in the middle of a tool call, then resumed.

The same agent as ``quickstart.py`` on ``EffectSqliteSaver``, the sync twin of
``AsyncEffectSqliteSaver`` (as LangGraph's ``SqliteSaver`` is of ``AsyncSqliteSaver``): a
Flask view, a Celery task or a script calls ``invoke``/``stream`` as it always has.
Runs as is on a fresh install, no API key: a scripted model plays the LLM and a
Stripe-like billing provider keeps its own records in a SQLite file. The worker
SIGKILLs itself right after the provider charged the invoice, before the result is
recorded; resuming the thread sends nothing twice. Prints OK at the end.
"""

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
from langgraph_effects import Effect, EffectMiddleware, EffectSqliteSaver, current_operation
from langgraph_effects.testing import Provider, ScriptedChatModel, call_each_then_finish

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

if "QUICKSTART_DIR" not in os.environ:  # a directory of our own, shared with the worker, removed at exit
    os.environ["QUICKSTART_DIR"] = tempfile.mkdtemp(prefix="sync-quickstart-")
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


def run(inputs: object) -> dict:
    with EffectSqliteSaver.from_conn_string(DATA / "agent.sqlite") as saver:
        saver.setup()  # checkpoints and the effect ledger, in one file
        agent = create_agent(
            model,
            tools=[send_invoice],
            middleware=[EffectMiddleware({"send_invoice": Effect(dedup_window=timedelta(hours=24))})],
            checkpointer=saver,
        )
        config = {"configurable": {"thread_id": "t-42"}}
        return agent.invoke(inputs, config, durability="sync")


if __name__ == "__main__":
    if CRASH:  # the worker: starts the thread and is killed inside send_invoice
        run({"messages": [HumanMessage("Invoice acme for 100.")]})
        sys.exit("not reached")
    worker = subprocess.run([sys.executable, __file__, "--crash"])
    print(f"worker killed with SIGKILL ({-worker.returncode}) after the provider charged the invoice")
    assert worker.returncode == -signal.SIGKILL
    result = run(None)  # resume the thread, as after any crash
    print("the model read:", result["messages"][-2].content)
    invoices, requests = len(billing.effects()), billing.count_requests("apply")
    print(f"billing provider: {invoices} invoice(s), {requests} request(s)")
    assert invoices == 1 and result["messages"][-1].content == "done"
    print("OK")
