"""A small agent graph over a provider that keeps its own records, for the node tests.

Used in-process by the tests and as a worker process (``python -m
tests.helpers.agent SPEC_JSON``) that the crash tests SIGKILL at a fault point and
then resume in a fresh process. The worker prints one JSON line: the messages
the model saw and any pending interrupts.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, RetryPolicy

from langgraph_effects import AsyncEffectSqliteSaver, Effect, Inconclusive, Landed, NotLanded
from langgraph_effects._integrations.middleware import EffectMiddleware
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime import faults as _faults
from langgraph_effects._runtime.context import current_operation
from langgraph_effects._runtime.decisions import resume_command
from langgraph_effects.core.contract import LookupRequest
from langgraph_effects.lab.providers import EffectRecord, Provider, Withdrawn
from langgraph_effects.testing import ScriptedChatModel


@dataclass
class Spec:
    db: str
    provider: str
    provider_mode: str = "dedup"
    contract: str = "dedup"  # dedup | lookup | eventual | blind
    thread: str = "t1"
    calls: int = 1
    crash: str | None = None  # after_intent | before_outcome
    resume: bool = False
    answer: dict[str, Any] | None = None
    hitl: list[dict[str, Any]] | None = None  # resume with {"decisions": hitl} (Agent Inbox's shape)
    lag: float = 0.0
    timeout_after_effect: list[int] = field(default_factory=list)  # call indexes that time out
    durability: str = "sync"
    retry: bool = False
    sync: bool = False  # run with graph.invoke on a SyncEffect*Saver (db: a path or a postgresql:// DSN)
    kind: str = "graph"  # graph | subgraph | create_agent | react
    kill_before_send: bool = False  # the tool SIGKILLs its own worker before the provider sees it


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def model_for(spec: Spec) -> Any:
    """Driven by the conversation, so a resumed process continues where it was."""

    def model(state: State) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage("done", id="final")]}
        calls = [
            {
                "name": "send",
                "args": {"operation": f"{spec.thread}:{i}"},
                "id": f"call-{i}",
                "type": "tool_call",
            }
            for i in range(spec.calls)
        ]
        return {"messages": [AIMessage("", tool_calls=calls, id=f"ai-{spec.thread}")]}

    return model


def provider_for(spec: Spec) -> Provider:
    return Provider(spec.provider, spec.provider_mode, lag=spec.lag)  # type: ignore[arg-type]


def send_tool(spec: Spec, provider: Provider) -> BaseTool:
    keyed = spec.provider_mode != "blind"

    @tool
    def send(operation: str) -> str:
        """Send the notification for ``operation``."""
        op = current_operation()
        if spec.kill_before_send:
            os.kill(os.getpid(), signal.SIGKILL)
        receipt = provider.apply({"operation": operation}, key=op.provider_key if keyed else None)
        index = int(operation.rsplit(":", 1)[1])
        if index in spec.timeout_after_effect and op.attempt == 1:
            raise TimeoutError("the provider did not answer in time")
        return f"sent {receipt.effect_id}"

    return send


def effect_for(spec: Spec, provider: Provider) -> dict[str, Effect]:
    async def lookup(request: LookupRequest) -> Any:
        found = provider.get(request.provider_key)
        if isinstance(found, Withdrawn):
            return Landed(receipt={"effect_id": found.record.effect_id}, withdrawn=True)
        if isinstance(found, EffectRecord):
            return Landed(receipt={"effect_id": found.effect_id})
        return NotLanded()

    async def listing(request: LookupRequest) -> Any:
        found = provider.list_by_reference(request.provider_key)
        return Landed(receipt={"effect_id": found[0].effect_id}) if found else NotLanded()

    async def hangs(request: LookupRequest) -> Any:
        return Inconclusive("provider lookup returned 503")

    if spec.contract == "dedup":
        return {"send": Effect(dedup_window=3600)}
    if spec.contract == "lookup":
        return {"send": Effect(lookup=lookup)}
    if spec.contract == "eventual":
        return {
            "send": Effect(lookup=listing, lookup_consistency="eventual", settle_after=spec.lag + 1.0)
        }
    if spec.contract == "inconclusive":
        return {"send": Effect(lookup=hangs, lookup_attempts=2)}
    return {}  # blind


def build(spec: Spec, saver: Any, provider: Provider) -> Any:
    if spec.kind == "subgraph":
        # The same agent as a subgraph of a parent graph; resumed from the parent.
        inner = build(replace(spec, kind="graph"), None, provider)
        parent = StateGraph(State)
        parent.add_node("agent", inner)
        parent.add_edge(START, "agent")
        parent.add_edge("agent", END)
        return parent.compile(checkpointer=saver)
    if spec.kind != "graph":
        return build_agent(spec, saver, provider)
    node = EffectToolNode([send_tool(spec, provider)], effects=effect_for(spec, provider))
    retry = RetryPolicy(max_attempts=3, initial_interval=0.01) if spec.retry else None
    return tool_loop(model_for(spec), node, saver, retry_policy=retry)


def tool_loop(model: Any, tools: Any, saver: Any, *, state: Any = State, **tools_options: Any) -> Any:
    """The agent graph: ``model``, then ``tools`` while the model asks for calls, compiled on
    ``saver`` (``tools_options`` go to the tools node: ``retry_policy``)."""
    builder = StateGraph(state)
    builder.add_node("model", model)
    builder.add_node("tools", tools, **tools_options)
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def build_agent(spec: Spec, saver: Any, provider: Provider) -> Any:
    """The same agent through ``create_agent`` + ``EffectMiddleware`` (one task per call),
    or ``create_react_agent(tools=EffectToolNode(...))``."""
    node_fn = model_for(spec)
    model = ScriptedChatModel(script=lambda messages: node_fn({"messages": list(messages)})["messages"][0])
    send = send_tool(spec, provider)
    effects = effect_for(spec, provider)
    if spec.kind == "create_agent":
        from langchain.agents import create_agent

        return create_agent(
            model, tools=[send], middleware=[EffectMiddleware(effects)], checkpointer=saver
        )
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():  # deprecated, still supported: exercised on purpose
        warnings.filterwarnings("ignore", "create_react_agent has been moved", DeprecationWarning)
        return create_react_agent(model, tools=EffectToolNode([send], effects=effects), checkpointer=saver)


def describe(result: Any, state: Any) -> dict[str, Any]:
    messages = [
        {
            "type": m.type,
            "content": m.content,
            "status": getattr(m, "status", None),
            "artifact": getattr(m, "artifact", None),
            "tool_call_id": getattr(m, "tool_call_id", None),
        }
        for m in state.values.get("messages", [])
    ]
    return {
        "messages": messages,
        "interrupts": [{"id": i.id, "value": i.value} for i in state.interrupts],
    }


async def run(spec: Spec) -> dict[str, Any]:
    provider = provider_for(spec)
    if spec.crash:
        _faults.install(spec.crash, lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
    config: Any = {"configurable": {"thread_id": spec.thread}}
    async with open_async(spec.db) as saver:
        await saver.setup()
        graph = build(spec, saver, provider)
        if spec.answer is not None:
            pending = (await graph.aget_state(config)).interrupts
            payload: Any = resume_command(pending, spec.answer)
        elif spec.hitl is not None:
            payload = Command(resume={"decisions": spec.hitl})
        elif spec.resume:
            payload = None
        else:
            payload = {"messages": [HumanMessage("go")]}
        result = await graph.ainvoke(payload, config, durability=spec.durability)
        return describe(result, await graph.aget_state(config))


def payload_for(spec: Spec, graph: Any, config: Any) -> Any:
    """What a sync run sends: the operator's answer, Agent Inbox's decisions, a bare
    resume or the first message (as :func:`run` does)."""
    if spec.answer is not None:
        return resume_command(graph.get_state(config).interrupts, spec.answer)
    if spec.hitl is not None:
        return Command(resume={"decisions": spec.hitl})
    return None if spec.resume else {"messages": [HumanMessage("go")]}


def open_async(db: str) -> Any:
    """The async saver of ``db``'s backend (a path, or a postgresql:// DSN), to open."""
    if "://" in db or "dbname=" in db:
        from langgraph_effects import AsyncEffectPostgresSaver

        return AsyncEffectPostgresSaver.from_conn_string(db)
    return AsyncEffectSqliteSaver.from_conn_string(db)


def run_sync(spec: Spec) -> dict[str, Any]:
    """:func:`run` through ``graph.invoke`` on the sync saver of ``spec.db``'s backend."""
    from langgraph_effects import EffectPostgresSaver, EffectSqliteSaver

    provider = provider_for(spec)
    if spec.crash:
        _faults.install(spec.crash, lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
    config: Any = {"configurable": {"thread_id": spec.thread}}
    postgres = "://" in spec.db or "dbname=" in spec.db
    opened = (EffectPostgresSaver if postgres else EffectSqliteSaver).from_conn_string(spec.db)
    with opened as saver:
        saver.setup()
        graph = build(spec, saver, provider)
        result = graph.invoke(payload_for(spec, graph, config), config, durability=spec.durability)
        return describe(result, graph.get_state(config))


def main() -> None:
    spec = Spec(**json.loads(sys.argv[1]))
    started = time.time()
    out = run_sync(spec) if spec.sync else asyncio.run(run(spec))
    out["seconds"] = time.time() - started
    print(json.dumps(out, default=str))


def spec_json(spec: Spec) -> str:
    return json.dumps(asdict(spec))


if __name__ == "__main__":
    main()
