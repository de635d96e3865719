"""One charge under the user's retry configuration, with or without this package, for
the retry tests (``tests/test_retries.py``): in-process, or as a worker process
(``python -m tests.helpers.retry_agent SPEC_JSON``, one JSON line out) that the crash
tests SIGKILL and resume in a fresh process.

The provider (``langgraph_effects.lab.providers``, dedup mode) keeps its own records
and answers the first ``limited`` requests with a 429 (:class:`RateLimited`), which
the contract declares definite. Three shapes, each with its own retry mechanism:

``node``   model -> tools, ``ToolNode`` or ``EffectToolNode``, ``RetryPolicy`` on the node;
``agent``  ``create_agent``, ``ToolRetryMiddleware`` above ``EffectMiddleware`` (or alone);
``task``   a Functional API ``@task(retry_policy=...)`` over ``@effectful`` (or bare).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph.message import add_messages
from langgraph.types import RetryPolicy

from langgraph_effects import AsyncEffectSqliteSaver, Effect
from langgraph_effects._runtime.context import maybe_current_operation
from langgraph_effects.lab.providers import Provider, RateLimited
from tests.helpers.agent import tool_loop

OPERATION = "t1:0"
CHARGE = Effect(dedup_window=3600, definite_errors=(RateLimited,))


@dataclass
class RetrySpec:
    db: str
    provider: str
    kind: str = "node"  # node | agent | task
    plain: bool = False  # the same graph without this package
    retry: bool = True  # RetryPolicy / ToolRetryMiddleware / the task's retry_policy
    handle_errors: bool = False  # node: ToolNode(handle_tool_errors=...)
    limited: int = 1  # 429s the provider answers before it serves (set on a fresh run)
    kill_on_retry: bool = False  # SIGKILL when the retry mechanism decides to retry
    kill_after_answer: bool = False  # node: SIGKILL once the call answered an error message
    resume: bool = False  # invoke(None): resume the thread
    policy_version: str | None = None  # config["configurable"]["policy_version"]


class _Messages(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def provider_of(spec: RetrySpec) -> Provider:
    return Provider(spec.provider, "dedup")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def retry_on(spec: RetrySpec) -> Any:
    """Retry on a 429; with ``kill_on_retry``, die at the moment the retry is decided
    (the failure is recorded by then: the tool's task raised it)."""

    def decide(error: BaseException) -> bool:
        if spec.kill_on_retry and isinstance(error, RateLimited):
            _die()
        return isinstance(error, RateLimited)

    return decide


def charge_tool(provider: Provider) -> BaseTool:
    @tool
    def charge(operation: str) -> str:
        """Charge the customer for ``operation``."""
        info = maybe_current_operation()
        key = info.provider_key if info is not None else f"plain:{operation}"
        return provider.apply({"operation": operation}, key=key).effect_id

    return charge


def _model(state: _Messages) -> dict[str, Any]:
    """Asks for one charge, then finishes once it sees any answer to it."""
    if any(isinstance(m, ToolMessage) for m in state["messages"]):
        return {"messages": [AIMessage("done", id="final")]}
    call = {"name": "charge", "args": {"operation": OPERATION}, "id": "call-0", "type": "tool_call"}
    return {"messages": [AIMessage("", tool_calls=[call], id="ai-1")]}


def _kill_after_error(request: Any, execute: Any) -> Any:
    result = execute(request)
    if isinstance(result, ToolMessage) and result.status == "error":
        _die()
    return result


def build_node(spec: RetrySpec, saver: Any, provider: Provider) -> Any:
    from langgraph.prebuilt import ToolNode

    from langgraph_effects._integrations.node import EffectToolNode

    options: dict[str, Any] = {"handle_tool_errors": spec.handle_errors}
    if spec.kill_after_answer:
        options["wrap_tool_call"] = _kill_after_error
    tools = [charge_tool(provider)]
    if spec.plain:
        node = ToolNode(tools, **options)
    else:
        node = EffectToolNode(tools, effects={"charge": CHARGE}, **options)
    policy = RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=retry_on(spec))
    return tool_loop(_model, node, saver, state=_Messages, retry_policy=policy if spec.retry else None)


def build_agent(spec: RetrySpec, saver: Any, provider: Provider) -> Any:
    from langchain.agents import create_agent
    from langchain.agents.middleware import ToolRetryMiddleware

    from langgraph_effects._integrations.middleware import EffectMiddleware
    from langgraph_effects.testing import ScriptedChatModel

    middleware: list[Any] = []
    if spec.retry:
        middleware.append(ToolRetryMiddleware(max_retries=2, initial_delay=0.0, retry_on=retry_on(spec)))
    if not spec.plain:
        middleware.append(EffectMiddleware({"charge": CHARGE}))
    model = ScriptedChatModel(script=lambda messages: _model({"messages": list(messages)})["messages"][0])
    return create_agent(model, tools=[charge_tool(provider)], middleware=middleware, checkpointer=saver)


def build_task(spec: RetrySpec, saver: Any, provider: Provider) -> Any:
    from langgraph.func import entrypoint, task

    from langgraph_effects._integrations.functional import effectful

    async def charge(operation: str) -> str:
        info = maybe_current_operation()
        key = info.provider_key if info is not None else f"plain:{operation}"
        return provider.apply({"operation": operation}, key=key).effect_id

    body = charge if spec.plain else effectful(CHARGE, name="charge")(charge)
    policy = RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=retry_on(spec))
    charge_task: Any = task(retry_policy=policy if spec.retry else None)(body)  # type: ignore[arg-type]

    @entrypoint(checkpointer=saver)
    async def workflow(operation: str) -> str:
        receipt: str = await charge_task(operation)
        return receipt

    return workflow


BUILDERS = {"node": build_node, "agent": build_agent, "task": build_task}


@asynccontextmanager
async def _saver(spec: RetrySpec) -> AsyncIterator[Any]:
    if spec.plain:  # plain LangGraph: its own SQLite checkpointer, no ledger
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(spec.db) as plain:
            yield plain
        return
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        yield saver


async def run(spec: RetrySpec) -> dict[str, Any]:
    """Run (or resume) the thread once: what the model saw, the interrupts, and the
    error the run ended with (``None`` if it ended normally)."""
    provider = provider_of(spec).setup()
    if not spec.resume:
        provider.rate_limit(spec.limited)
    config: Any = {"configurable": {"thread_id": "t1", "policy_version": spec.policy_version}}
    async with _saver(spec) as saver:
        graph = BUILDERS[spec.kind](spec, saver, provider)
        # A Functional API run saves its input checkpoint in the background: a worker
        # killed early may leave none, and then the thread is started again, as a user
        # would, rather than resumed (LangGraph refuses None with no checkpoint).
        started = (await graph.aget_state(config)).created_at is not None
        if spec.resume and started:
            payload: Any = None
        elif spec.kind == "task":
            payload = OPERATION
        else:
            payload = {"messages": [HumanMessage("charge it")]}
        error: str | None = None
        try:
            await graph.ainvoke(payload, config, durability="sync")
        except RateLimited as raised:
            error = f"{type(raised).__name__}: {raised}"
        state = await graph.aget_state(config)
    values = state.values
    messages = values.get("messages", []) if isinstance(values, dict) else []
    return {
        "tool_messages": [
            {"content": m.content, "status": m.status, "artifact": m.artifact}
            for m in messages
            if isinstance(m, ToolMessage)
        ],
        "result": None if isinstance(values, dict) else values,
        "interrupts": [i.value for i in state.interrupts],
        "error": error,
    }


def provider_requests(spec: RetrySpec) -> list[tuple[str, str]]:
    """(key, outcome) of every ``apply`` the provider received, in order."""
    with sqlite3.connect(spec.provider) as db:
        rows = db.execute("SELECT key, outcome FROM requests WHERE kind = 'apply' ORDER BY id")
        return [(str(key), str(outcome)) for key, outcome in rows]


def provider_effects(spec: RetrySpec) -> int:
    return sum(provider_of(spec).count_effects().values())


def ledger_rows(spec: RetrySpec) -> list[dict[str, Any]]:
    """Every operation of the ledger with its audit trail (events in order)."""
    if not Path(spec.db).exists():
        return []
    with sqlite3.connect(spec.db) as db:
        ops = db.execute("SELECT op_id, state, attempts, provider_key FROM effect_operations").fetchall()
        trail = "SELECT event FROM effect_audit WHERE op_id = ? ORDER BY seq"
        return [
            {
                "op_id": op_id,
                "state": state,
                "attempts": attempts,
                "provider_key": key,
                "events": [event for (event,) in db.execute(trail, (op_id,))],
            }
            for op_id, state, attempts, key in ops
        ]


def main() -> None:
    print(json.dumps(asyncio.run(run(RetrySpec(**json.loads(sys.argv[1])))), default=str))


def spec_json(spec: RetrySpec) -> str:
    return json.dumps(asdict(spec))


if __name__ == "__main__":
    main()
