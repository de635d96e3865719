"""A Functional API workflow whose @task performs an effect, run as a killable worker:
``python -m tests.helpers.functional_agent SPEC_JSON`` prints one JSON line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from langgraph.func import entrypoint, task

from langgraph_effects import AsyncEffectSqliteSaver, Effect, current_operation, resume_command
from langgraph_effects._integrations.functional import effectful
from langgraph_effects._runtime import faults as _faults
from langgraph_effects.lab.providers import Provider


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    provider = Provider(spec["provider"], spec["provider_mode"])
    if spec.get("crash"):
        _faults.install(spec["crash"], lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
    effect = Effect(dedup_window=3600) if spec["contract"] == "dedup" else None

    @task
    @effectful(effect)
    async def send(operation: str) -> str:
        op = current_operation()
        keyed = spec["provider_mode"] != "blind"
        return provider.apply({"operation": operation}, key=op.provider_key if keyed else None).effect_id

    async with AsyncEffectSqliteSaver.from_conn_string(spec["db"]) as saver:
        await saver.setup()

        @entrypoint(checkpointer=saver)
        async def workflow(n: int) -> list[Any]:
            return [await send(f"wf:{i}") for i in range(n)]

        config: Any = {"configurable": {"thread_id": "wf-1"}}
        payload: Any = None if spec.get("resume") else spec.get("calls", 2)
        if spec.get("answer"):
            payload = resume_command((await workflow.aget_state(config)).interrupts, spec["answer"])
        result = await workflow.ainvoke(payload, config)
        state = await workflow.aget_state(config)
        return {
            "result": [getattr(r, "content", r) for r in result] if isinstance(result, list) else None,
            "interrupts": [{"id": i.id, "value": i.value} for i in state.interrupts],
        }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[1]))), default=str))
