"""Ctrl-C in a sync run (``graph.invoke`` in a script, a notebook cell stopped) while a
call is beginning.

A real SIGINT is sent to the worker process's main thread from the dispatcher's fault hook that
fires right before a dispatch is written (on the portal loop). LangGraph's sync runner
waits for its tasks on the main thread and runs them on threads of its own, so the
``KeyboardInterrupt`` stops the wait and the call's thread goes on. Whichever way the
race goes, the call must end in a state a re-run settles at once: sent and recorded
(``confirmed``, one effect), or handed back before the tool ran (``withdraw``, pending,
no effect). Never a lease held by a thread nobody runs any more, never an operator
asked about a blind tool that was never sent, never a second send.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_leases import ROOT

_WORKER = r"""
import json, signal, sys, threading, time
from langchain_core.messages import HumanMessage
from langgraph.func import entrypoint, task
from langgraph_effects import Effect, OperationQuery, EffectSqliteSaver, current_operation, effectful
from langgraph_effects._runtime import faults, portal
from tests.helpers.agent import Spec, build, provider_for

kind, spec = sys.argv[1], Spec(**json.loads(sys.argv[2]))
main = threading.main_thread().ident
fired = []

def ctrl_c(point, op):
    fired.append(point)
    faults.clear()
    signal.pthread_kill(main, signal.SIGINT)  # Ctrl-C reaches the main thread now
    time.sleep(0.3)  # and this begin writes the dispatch a moment later

faults.install("after_intent", ctrl_c)
provider = provider_for(spec)
config = {"configurable": {"thread_id": spec.thread}}
out = {}
with EffectSqliteSaver.from_conn_string(spec.db) as saver:
    saver.setup()
    if kind == "node":
        graph = build(spec, saver, provider)
        first, again = {"messages": [HumanMessage("go")]}, None
    else:
        keyed = spec.contract != "blind"

        @task
        @effectful(Effect(dedup_window=3600) if keyed else Effect())
        def notify(recipient):
            key = current_operation().provider_key if keyed else None
            return provider.apply({"operation": recipient}, key=key).effect_id

        @entrypoint(checkpointer=saver)
        def graph(recipients):
            return {"messages": [notify(r).result() for r in recipients]}

        first, again = ["ann"], None
    try:
        graph.invoke(first, config, durability="sync")
        out["first"] = "finished"
    except KeyboardInterrupt:
        out["first"] = "KeyboardInterrupt"
    time.sleep(1.0)  # the runner's own thread ends what it was doing
    out["fired"] = fired
    [op] = portal.run(saver.ledger.list_operations(OperationQuery()))
    out["after_ctrl_c"] = op.state.value
    out["effects_after_ctrl_c"] = sum(provider.count_effects().values())
    started = time.monotonic()
    graph.invoke(again, config, durability="sync")  # the same cell run again
    out["rerun_seconds"] = time.monotonic() - started
    out["interrupts"] = len(graph.get_state(config).interrupts)
    [op] = portal.run(saver.ledger.list_operations(OperationQuery()))
    out["state"] = op.state.value
    out["events"] = [e.event for e in portal.run(saver.ledger.audit(op.op_id))]
    out["effects"] = sum(provider.count_effects().values())
print(json.dumps(out))
"""


def run_worker(tmp_path: Path, kind: str, contract: str) -> dict[str, Any]:
    spec = {
        "db": str(tmp_path / "agent.sqlite"),
        "provider": str(tmp_path / "provider.sqlite"),
        "provider_mode": "blind" if contract == "blind" else "dedup",
        "contract": contract,
    }
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, kind, json.dumps(spec)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow  # two worker processes
@pytest.mark.parametrize("contract", ["blind", "dedup"])
@pytest.mark.parametrize("kind", ["node", "functional"])
def test_ctrl_c_while_a_call_begins_leaves_nothing_a_rerun_must_wait_for(
    tmp_path: Path, kind: str, contract: str
) -> None:
    out = run_worker(tmp_path, kind, contract)
    assert out["first"] == "KeyboardInterrupt" and out["fired"] == ["after_intent"], out
    # Either the call's thread sent it and recorded it, or it stood down before the
    # tool ran; nothing in between is left behind.
    ended = (out["after_ctrl_c"], out["effects_after_ctrl_c"])
    assert ended in {("confirmed", 1), ("pending", 0)}, out
    if ended == ("pending", 0):  # handed back (a dedup call's intent carries its dispatch)
        assert out["events"][out["events"].index("withdraw") - 1] in {"intent", "dispatch"}, out
    # Run again: settled without an operator (a blind tool too), sent once in all, and
    # without waiting out a lease (30 s by default; a wide bound for a loaded machine).
    assert (out["interrupts"], out["state"], out["effects"]) == (0, "confirmed", 1), out
    assert out["rerun_seconds"] < 20, out
