"""A worker whose tool can stall mid-dispatch, for the lease tests: ``python -m
tests.helpers.lease_agent SPEC_JSON`` prints one JSON line: the thread's messages
once the run ended, this worker's pid, ``outcome`` (``ok``, or ``refused`` when the
checkpoint saver refused the run with
:class:`~langgraph_effects.errors.ThreadConflictError` because another runner
already moved the thread on) and ``sends`` (how many times the tool body reached
the provider in this process).

The tool writes ``<marker>`` once its lease is confirmed and it is about to send,
then stalls the way the spec says:

* ``stop``: the process SIGSTOPs itself (the test SIGCONTs it later);
* ``block``: it blocks the event loop (``time.sleep`` inside ``async def``, the
  common bug) until the file ``<release>`` exists;
* ``child:run``, ``child:system``, ``child:asyncio``: it shells out the way a tool
  wrapping ``gh`` or ``kubectl`` does (``subprocess.run`` with its defaults,
  ``os.system``, ``asyncio.create_subprocess_exec``) and waits for the child, which
  does the sending: the child writes ``<marker>.child`` (its pid) and sends once
  ``<release>`` exists. Kill the worker meanwhile and the child sends anyway.

Logs of ``langgraph_effects`` go to stderr, so the test can see a second worker
wait for the first (``waiting for``) instead of guessing with sleeps.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, StateGraph

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime.context import current_operation
from langgraph_effects.errors import ThreadConflictError
from langgraph_effects.lab.providers import Provider
from tests.helpers.agent import Spec as AgentSpec
from tests.helpers.agent import State, describe, effect_for, model_for


@dataclass
class LeaseSpec:
    db: str
    provider: str
    provider_mode: str = "lookup"
    contract: str = "lookup"
    thread: str = "t1"
    lease_seconds: float = 2.0
    stall: str | None = None  # stop | block | child:run | child:system | child:asyncio
    marker: str = ""
    release: str = ""
    resume: bool = False


def send_tool(spec: LeaseSpec, provider: Provider, sends: list[str]) -> BaseTool:
    @tool
    async def send(operation: str) -> str:
        """Send the notification for ``operation``."""
        op = current_operation()
        key = op.provider_key if spec.provider_mode != "blind" else None
        if spec.stall and spec.stall.startswith("child:"):
            sends.append(operation)
            await shell_out(spec, spec.stall.removeprefix("child:"), operation, key)
            return f"sent by the child of {os.getpid()}"
        if spec.stall and spec.marker:
            Path(spec.marker).write_text(json.dumps({"pid": os.getpid(), "at": time.time()}))
        if spec.stall == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif spec.stall == "block":
            while not Path(spec.release).exists():
                time.sleep(0.02)  # the bug under test: a blocked event loop
        sends.append(operation)
        receipt = provider.apply({"operation": operation}, key=key)
        return f"sent {receipt.effect_id} by {os.getpid()}"

    return send


async def shell_out(spec: LeaseSpec, how: str, operation: str, key: str | None) -> None:
    """Start the sending child ``how`` a tool would, and wait for it."""
    Path(spec.marker).write_text(json.dumps({"pid": os.getpid(), "at": time.time()}))
    argv = [sys.executable, "-m", "tests.helpers.lease_agent", "child", spec_json(spec), operation, key or ""]
    if how == "run":
        subprocess.run(argv, check=True)  # the defaults: close_fds=True
    elif how == "system":
        assert os.system(shlex.join(argv)) == 0
    elif how == "asyncio":
        proc = await asyncio.create_subprocess_exec(*argv)
        assert await proc.wait() == 0
    else:
        raise ValueError(f"unknown way to start a child: {how!r}")


def child(spec: LeaseSpec, operation: str, key: str) -> None:
    """The sending child: says it runs, waits for ``<release>``, then sends."""
    Path(spec.marker + ".child").write_text(json.dumps({"pid": os.getpid(), "ppid": os.getppid()}))
    while not Path(spec.release).exists():
        time.sleep(0.02)
    provider = Provider(spec.provider, spec.provider_mode)  # type: ignore[arg-type]
    provider.apply({"operation": operation}, key=key or None)


def build(spec: LeaseSpec, saver: Any, provider: Provider, sends: list[str]) -> Any:
    agent = AgentSpec(db=spec.db, provider=spec.provider, contract=spec.contract, thread=spec.thread)
    builder = StateGraph(State)
    builder.add_node("model", model_for(agent))
    builder.add_node(
        "tools",
        EffectToolNode(
            [send_tool(spec, provider, sends)],
            effects=effect_for(agent, provider),
            lease_seconds=spec.lease_seconds,
        ),
    )
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


async def run(spec: LeaseSpec) -> dict[str, Any]:
    provider = Provider(spec.provider, spec.provider_mode)  # type: ignore[arg-type]
    config: Any = {"configurable": {"thread_id": spec.thread}}
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        sends: list[str] = []
        graph = build(spec, saver, provider, sends)
        payload = None if spec.resume else {"messages": [HumanMessage("go")]}
        try:
            await graph.ainvoke(payload, config, durability="sync")
            outcome = "ok"
        except ThreadConflictError:  # the other runner saved first: one runner per thread
            outcome = "refused"
        out = describe(None, await graph.aget_state(config))
    out.update(pid=os.getpid(), outcome=outcome, sends=len(sends))
    return out


def main() -> None:
    if sys.argv[1] == "child":
        child(LeaseSpec(**json.loads(sys.argv[2])), sys.argv[3], sys.argv[4])
        return
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    spec = LeaseSpec(**json.loads(sys.argv[1]))
    print(json.dumps(asyncio.run(run(spec)), default=str), flush=True)


def spec_json(spec: LeaseSpec) -> str:
    return json.dumps(asdict(spec))


if __name__ == "__main__":
    main()
