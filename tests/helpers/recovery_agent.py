"""The agent of ``tests/helpers/agent.py``, made for the recovery tests.

Three additions:

* ``gate``: the tool applies its effect, then waits (asynchronously, so the
  lease heartbeat keeps running) until the file ``gate`` exists. A worker started
  with ``LANGGRAPH_EFFECTS_HOST=other-host`` and a gate plays "a worker on another
  machine, sending right now": its lease is live and can only expire by time.
  It touches ``gate + ".inside"`` once the effect has landed.
* ``tenant`` / ``policy_version``: run under ``configurable`` tenant and policy;
  ``timeout_after_effect`` as in ``tests.helpers.agent`` (the call times out after
  its effect landed, on its first attempt).
* ``db`` may be a Postgres DSN (set up beforehand), for the console's Postgres path.
* :func:`make_graph`: the factory the console's ``recover --graph`` imports
  (``tests.helpers.recovery_agent:make_graph``); it reads its spec from the
  environment variable ``RECOVERY_AGENT_SPEC`` (JSON of :class:`RecoverySpec`).

As a worker: ``python -m tests.helpers.recovery_agent SPEC_JSON`` prints one JSON
line (the messages and pending interrupts), like ``tests.helpers.agent``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime import faults as _faults
from langgraph_effects._runtime.context import current_operation
from langgraph_effects.lab.providers import Provider
from tests.helpers.agent import Spec, describe, effect_for, model_for, provider_for, tool_loop

SPEC_ENV = "RECOVERY_AGENT_SPEC"


@dataclass
class RecoverySpec(Spec):
    gate: str | None = None
    lease_seconds: float = 30.0
    tenant: str | None = None
    policy_version: str | None = None


def send_tool(spec: RecoverySpec, provider: Provider) -> BaseTool:
    keyed = spec.provider_mode != "blind"

    @tool
    async def send(operation: str) -> str:
        """Send the notification for ``operation``."""
        op = current_operation()
        receipt = provider.apply({"operation": operation}, key=op.provider_key if keyed else None)
        if spec.gate:
            Path(spec.gate + ".inside").touch()
            while not os.path.exists(spec.gate):
                await asyncio.sleep(0.05)
        if int(operation.rsplit(":", 1)[1]) in spec.timeout_after_effect and op.attempt == 1:
            raise TimeoutError("the provider did not answer in time")
        return f"sent {receipt.effect_id}"

    return send


def build(spec: RecoverySpec, saver: Any, provider: Provider | None = None) -> Any:
    provider = provider or provider_for(spec)
    node = EffectToolNode(
        [send_tool(spec, provider)], effects=effect_for(spec, provider), lease_seconds=spec.lease_seconds
    )
    return tool_loop(model_for(spec), node, saver)


def make_graph(checkpointer: Any) -> Any:
    """The factory for ``langgraph-effects recover --graph tests.helpers.recovery_agent:make_graph``."""
    return build(RecoverySpec(**json.loads(os.environ[SPEC_ENV])), checkpointer)


def config_for(spec: RecoverySpec) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": spec.thread}
    if spec.tenant is not None:
        configurable["tenant_id"] = spec.tenant
    if spec.policy_version is not None:
        configurable["policy_version"] = spec.policy_version
    return {"configurable": configurable}


def open_saver(db: str) -> Any:
    """``AsyncEffectPostgresSaver`` for a Postgres DSN (already set up), else ``AsyncEffectSqliteSaver``."""
    if db.startswith(("postgres://", "postgresql://")):
        from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver

        return AsyncEffectPostgresSaver.from_conn_string(db, ledger_max_size=2)
    return AsyncEffectSqliteSaver.from_conn_string(db)


#: ``crash`` value: the worker dies once the ``__start__`` task's writes (the input)
#: are saved, before the first checkpoint after them (its connection dies there).
BEFORE_FIRST_CHECKPOINT = "before_first_checkpoint"


def die_before_first_checkpoint(saver: Any) -> None:
    """SIGKILL this process when ``saver`` is asked to save the step-0 checkpoint, once
    the ``__start__`` task's writes are saved (LangGraph submits both without waiting
    for one before the other)."""
    save, save_writes = saver.aput, saver.aput_writes
    written = asyncio.Event()

    async def aput_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> Any:
        done = await save_writes(config, writes, task_id, task_path)
        if "__start__" in task_path:
            written.set()
        return done

    async def aput(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if metadata.get("source") == "loop" and metadata.get("step") == 0:
            await asyncio.wait_for(written.wait(), timeout=30)
            os.kill(os.getpid(), signal.SIGKILL)
        return await save(config, checkpoint, metadata, new_versions)

    saver.aput, saver.aput_writes = aput, aput_writes


async def run(spec: RecoverySpec) -> dict[str, Any]:
    if spec.crash and spec.crash != BEFORE_FIRST_CHECKPOINT:
        _faults.install(spec.crash, lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
    config = config_for(spec)
    async with open_saver(spec.db) as saver:
        if isinstance(saver, AsyncEffectSqliteSaver):
            await saver.setup()
        if spec.crash == BEFORE_FIRST_CHECKPOINT:
            die_before_first_checkpoint(saver)
        graph = build(spec, saver)
        payload = None if spec.resume else {"messages": [HumanMessage("go")]}
        result = await graph.ainvoke(payload, config, durability=spec.durability)
        return describe(result, await graph.aget_state(config))


def spec_json(spec: RecoverySpec) -> str:
    return json.dumps(asdict(spec))


def main() -> None:
    spec = RecoverySpec(**json.loads(sys.argv[1]))
    print(json.dumps(asyncio.run(run(spec)), default=str))


if __name__ == "__main__":
    main()
