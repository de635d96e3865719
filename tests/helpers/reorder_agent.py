"""A Functional API entrypoint that notifies each recipient through one ``@task
@effectful`` call, in an order that may change between processes, run as a killable
worker: ``python -m tests.helpers.reorder_agent SPEC_JSON`` prints one JSON line.

``shape="set"`` iterates ``set(recipients)`` (its order follows ``PYTHONHASHSEED``);
``shape="list"`` reads the recipients from ``list_file`` inside the entrypoint (not
checkpointed: a file changed before a resume changes the calls); ``shape="sorted"``
iterates ``sorted(set(recipients))`` (the documented fix). ``kill_after=n`` SIGKILLs
the worker once the n-th send has reached the provider and before its outcome is
recorded (``wait_saved``: once LangGraph saved the earlier calls' results, which it
does in the background). ``replay_from`` replays the thread from that checkpoint id.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from typing import Any

from langgraph.func import entrypoint, task

from langgraph_effects import AsyncEffectSqliteSaver, EffectsError, current_operation
from langgraph_effects._integrations.functional import effectful
from langgraph_effects.core.contract import Effect
from langgraph_effects.lab.providers import Provider
from langgraph_effects.recovery import recover


def targets(spec: dict[str, Any], recipients: list[str]) -> list[str]:
    if spec["shape"] == "set":
        return list(set(recipients))
    if spec["shape"] == "sorted":
        return sorted(set(recipients))
    with open(spec["list_file"]) as f:
        return list(json.load(f))


async def saved_results(db: str, n: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sqlite3.connect(db) as conn:
            (found,) = conn.execute("SELECT count(*) FROM writes WHERE channel = '__return__'").fetchone()
        if found >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"LangGraph did not save {n} results within {timeout}s")


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    mode = spec.get("provider_mode", "dedup")
    provider = Provider(spec["provider"], mode)
    sent = [0]
    effect = Effect(dedup_window=3600) if mode == "dedup" else None

    async def maybe_kill() -> None:
        sent[0] += 1
        if sent[0] != spec.get("kill_after"):
            return
        if spec.get("wait_saved"):
            # Crash once LangGraph saved the results of the calls before this one (it
            # saves a task's writes in the background, so a plain kill races them).
            await saved_results(spec["db"], sent[0] - 1)
        os.kill(os.getpid(), signal.SIGKILL)

    @task
    @effectful(effect)
    async def notify(recipient: str) -> str:
        key = current_operation().provider_key if mode != "blind" else None
        receipt = provider.apply({"operation": recipient}, key=key)
        await maybe_kill()
        return f"{recipient}:{receipt.effect_id}"

    async with AsyncEffectSqliteSaver.from_conn_string(spec["db"]) as saver:
        await saver.setup()

        @entrypoint(checkpointer=saver)
        async def notify_all(recipients: list[str]) -> list[str]:
            return [await notify(r) for r in targets(spec, recipients)]

        config: Any = {"configurable": {"thread_id": "notify-1"}}
        payload: Any = spec.get("recipients")
        if spec.get("resume"):
            payload = None
        if spec.get("replay_from"):
            payload = None
            config = {"configurable": {"thread_id": "notify-1", "checkpoint_id": spec["replay_from"]}}
        out: dict[str, Any] = {"order": targets(spec, spec.get("recipients") or [])}
        if spec.get("recover"):
            report = await recover(notify_all, durability=spec.get("durability", "sync"))
            return {**out, "report": report.to_json(), "summary": report.summary()}
        try:
            durability = spec.get("durability", "sync")
            out["result"] = await notify_all.ainvoke(payload, config, durability=durability)
        except EffectsError as error:
            fields = {k: v for k, v in vars(error).items() if not k.startswith("_")}
            out["error"] = {"type": type(error).__name__, "message": str(error), **fields}
        state = await notify_all.aget_state({"configurable": {"thread_id": "notify-1"}})
        out["next"] = list(state.next)
        out["interrupts"] = [{"id": i.id, "value": i.value} for i in state.interrupts]
        return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[1]))), default=str))
