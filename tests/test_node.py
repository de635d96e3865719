"""EffectToolNode in one process: re-runs that LangGraph makes on its own (RetryPolicy,
interrupt re-runs, time travel, timeouts) must never duplicate an effect."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent
from langgraph.types import Command, RetryPolicy

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    DurabilityError,
    Effect,
    InMemoryLedger,
    NoLedgerError,
    State,
    attach_ledger,
)
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime.context import current_operation
from langgraph_effects._runtime.decisions import resume_command
from langgraph_effects.lab.providers import Provider
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish
from tests.helpers.agent import Spec, build, model_for, send_tool
from tests.helpers.agent import State as AgentState

CONFIG: Any = {"configurable": {"thread_id": "t1"}}

# create_react_agent is deprecated (create_agent + EffectMiddleware is the recommended
# path); it stays supported, so this suite keeps exercising it, without the warning.
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved:DeprecationWarning")


def make_spec(tmp_path: Path, **kw: Any) -> Spec:
    return Spec(db=str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"), **kw)


def provider_of(spec: Spec) -> Provider:
    return Provider(spec.provider, spec.provider_mode)  # type: ignore[arg-type]


@asynccontextmanager
async def after_go(spec: Spec) -> AsyncIterator[tuple[Any, Any, Any, Provider]]:
    """``spec``'s graph run once from "go", the saver open: the graph, its state, the
    saver and the provider."""
    provider = provider_of(spec)
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        graph = build(spec, saver, provider)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        yield graph, await graph.aget_state(CONFIG), saver, provider


def model_then_send(spec: Spec, send: Any) -> StateGraph[Any]:
    """START -> the model ``spec`` scripts -> an ``EffectToolNode`` running ``send``
    (deduplicated for 60 s) -> END, not yet compiled."""
    builder = StateGraph(AgentState)
    builder.add_node("model", model_for(spec))
    builder.add_node("tools", EffectToolNode([send], effects={"send": Effect(dedup_window=60)}))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    return builder


def tool_messages(state: Any) -> list[ToolMessage]:
    return [m for m in state.values["messages"] if isinstance(m, ToolMessage)]


async def test_parallel_calls_with_one_review_execute_siblings_once(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, contract="blind", provider_mode="blind", calls=3, timeout_after_effect=[1])
    async with after_go(spec) as (graph, state, saver, provider):
        [pending] = state.interrupts
        [entry] = pending.value["operations"]
        assert entry["tool_call_id"] == "call-1" and entry["evidence"]["cause"]["kind"] == "timeout"
        assert provider.count_requests("apply") == 3

        # Re-running the node (interrupt re-run) must replay the siblings, not send them.
        command = resume_command(state.interrupts, {entry["operation_id"]: {"type": "landed"}})
        await graph.ainvoke(command, CONFIG)
        state = await graph.aget_state(CONFIG)
        assert state.interrupts == ()
        assert provider.count_requests("apply") == 3
        assert sum(provider.count_effects().values()) == 3
        messages = tool_messages(state)
        assert [m.tool_call_id for m in messages] == ["call-0", "call-1", "call-2"]
        assert messages[1].artifact["evidence"] == "verdict"
        assert {m.artifact["state"] for m in messages} == {"confirmed"}
        ops = await saver.ledger.list_operations(
            __import__("langgraph_effects").OperationQuery(states=frozenset({State.CONFIRMED}))
        )
        assert len(ops) == 3


async def test_timeout_under_dedup_is_resent_under_the_same_key(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, contract="dedup", provider_mode="dedup", timeout_after_effect=[0])
    async with after_go(spec) as (_, state, saver, provider):
        assert state.interrupts == ()
        assert provider.count_requests("apply") == 2
        assert sum(provider.count_effects().values()) == 1
        [message] = tool_messages(state)
        assert message.status == "success" and message.artifact["attempts"] == 2
        trail = [a.event for a in await saver.ledger.audit(message.artifact["operation_id"])]
        assert trail == ["intent", "lose", "resend", "succeed"]


async def test_retry_policy_rerun_replays(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    failures = {"left": 1}

    @tool
    def send(operation: str) -> str:
        """Send."""
        return provider.apply({"operation": operation}).effect_id

    def flaky_after_the_call(request: Any, execute: Any) -> Any:
        result = execute(request)
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("the node crashed after the effect")  # RetryPolicy re-runs it
        return result

    spec = make_spec(tmp_path, calls=2)
    builder = StateGraph(AgentState)
    builder.add_node("model", model_for(spec))
    builder.add_node(
        "tools",
        EffectToolNode([send], handle_tool_errors=False, wrap_tool_call=flaky_after_the_call),
        retry_policy=RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=RuntimeError),
    )
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        graph = builder.compile(checkpointer=saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        assert failures["left"] == 0
        assert provider.count_requests("apply") == 2  # both calls once, across the retry
        assert len(tool_messages(await graph.aget_state(CONFIG))) == 2


async def test_durability_exit_is_refused_before_dispatch(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, contract="dedup", provider_mode="dedup", durability="exit")
    provider = provider_of(spec)
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        graph = build(spec, saver, provider)
        with pytest.raises(DurabilityError, match="durability='exit'"):
            await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="exit")
        assert provider.count_requests() == 0
        assert await saver.ledger.list_operations(__import__("langgraph_effects").OperationQuery()) == []


class SlowSaver(AsyncEffectSqliteSaver):
    """Checkpoint writes that take a while, as on a loaded disk."""

    saved: set[str]

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        await asyncio.sleep(0.3)
        result = await super().aput(config, checkpoint, metadata, new_versions)
        self.saved.add(checkpoint["id"])
        return result


async def test_durability_async_waits_for_the_checkpoint(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    seen: list[bool] = []
    saver_ref: dict[str, SlowSaver] = {}

    @tool
    def send(operation: str) -> str:
        """Send."""
        from langgraph.config import get_config

        parent = get_config()["configurable"]["checkpoint_map"][""]
        seen.append(parent in saver_ref["saver"].saved)  # durable before the request left?
        return provider.apply({"operation": operation}).effect_id

    spec = make_spec(tmp_path)
    builder = model_then_send(spec, send)
    async with SlowSaver.from_conn_string(spec.db) as saver:
        saver.saved = set()
        saver_ref["saver"] = saver
        await saver.setup()
        graph = builder.compile(checkpointer=saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="async")
    assert seen == [True]
    assert provider.count_requests("apply") == 1


async def test_time_travel_replays_and_an_edit_is_a_new_operation(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, contract="dedup", provider_mode="blind")
    provider = provider_of(spec)
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        graph = build(spec, saver, provider)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        assert provider.count_requests("apply") == 1

        history = [s async for s in graph.aget_state_history(CONFIG)]
        before_tools = next(s for s in history if s.next == ("tools",))
        await graph.ainvoke(None, before_tools.config)  # time travel: replay from there
        assert provider.count_requests("apply") == 1  # replayed from the ledger, not re-sent
        state = await graph.aget_state(CONFIG)
        assert tool_messages(state)[-1].content.startswith("sent eff_1")

        # update_state edits the arguments: a new decision, so a new operation.
        ai = before_tools.values["messages"][-1]
        edited = AIMessage(
            content="",
            id=ai.id,
            tool_calls=[{**ai.tool_calls[0], "args": {"operation": "t1:9"}}],
        )
        edit_config = await graph.aupdate_state(before_tools.config, {"messages": [edited]}, as_node="model")
        await graph.ainvoke(None, edit_config)
        assert provider.count_requests("apply") == 2
        assert len(await saver.ledger.list_operations(__import__("langgraph_effects").OperationQuery())) == 2


def test_sync_invoke_and_current_operation(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    seen: list[tuple[str, int]] = []

    @tool
    def send(operation: str) -> str:
        """Send."""
        op = current_operation()
        seen.append((op.provider_key, op.attempt))
        return provider.apply({"operation": operation}, key=op.provider_key).effect_id

    ledger = InMemoryLedger()
    saver = attach_ledger(InMemorySaver(), ledger)
    spec = make_spec(tmp_path, calls=2)
    builder = model_then_send(spec, send)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"messages": [HumanMessage("go")]}, CONFIG)
    graph.invoke(None, next(s for s in graph.get_state_history(CONFIG) if s.next == ("tools",)).config)
    assert len(seen) == 2 and all(key.startswith("lge_") and attempt == 1 for key, attempt in seen)
    assert provider.count_requests("apply") == 2
    assert ledger.commits == 3  # one intent commit for both calls, one outcome each


def test_read_only_tools_bypass_the_ledger(tmp_path: Path) -> None:
    calls = {"n": 0}

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        calls["n"] += 1
        return q.upper()

    ledger = InMemoryLedger()
    agent = create_react_agent(
        ScriptedChatModel(script=call_each_then_finish([("lookup", {"q": "x"})])),
        tools=EffectToolNode([lookup], effects={"lookup": Effect.read_only()}, ledger=ledger),
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke({"messages": [HumanMessage("go")]}, CONFIG)
    assert out["messages"][-1].content == "done" and calls["n"] == 1
    assert ledger.commits == 0


def test_no_ledger_is_a_clear_error(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    provider = provider_of(spec)
    builder = StateGraph(AgentState)
    builder.add_node("model", model_for(spec))
    builder.add_node("tools", EffectToolNode([send_tool(spec, provider)]))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    graph = builder.compile(checkpointer=InMemorySaver())
    with pytest.raises(NoLedgerError, match="attach_ledger"):
        graph.invoke({"messages": [HumanMessage("go")]}, CONFIG)
    assert provider.count_requests() == 0


def test_effects_must_name_known_tools() -> None:
    @tool
    def send(x: str) -> str:
        """Send."""
        return x

    with pytest.raises(ValueError, match=r"'sned' names no tool of this node\. Did you mean 'send'"):
        EffectToolNode([send], effects={"sned": Effect(dedup_window=1)})


def test_is_a_drop_in_toolnode() -> None:
    @tool
    def send(x: str) -> str:
        """Send."""
        return x

    node = EffectToolNode([send], name="act", handle_tool_errors=False, messages_key="msgs")
    assert isinstance(node, ToolNode)
    assert node.name == "act" and node._messages_key == "msgs"


def test_invalid_arguments_never_reach_the_ledger(tmp_path: Path) -> None:
    @tool
    def send(count: int) -> str:
        """Send."""
        return str(count)

    ledger = InMemoryLedger()
    agent = create_react_agent(
        ScriptedChatModel(script=call_each_then_finish([("send", {"count": "many"})])),
        tools=EffectToolNode([send], ledger=ledger),
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke({"messages": [HumanMessage("go")]}, CONFIG)
    [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert message.status == "error"
    assert ledger.commits == 0


def test_command_resume_with_unrelated_answer_keeps_asking(tmp_path: Path) -> None:
    """An answer that names no pending operation leaves the review pending (no guessing)."""
    ledger = InMemoryLedger()

    @tool
    def send(x: str) -> str:
        """Send."""
        raise TimeoutError("no answer")

    agent = create_react_agent(
        ScriptedChatModel(script=call_each_then_finish([("send", {"x": "1"})])),
        tools=EffectToolNode([send], ledger=ledger),
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": [HumanMessage("go")]}, CONFIG)
    [pending] = agent.get_state(CONFIG).interrupts
    agent.invoke(Command(resume={pending.id: {"op_unknown": {"type": "not_landed"}}}), CONFIG)
    [again] = agent.get_state(CONFIG).interrupts
    assert again.value["operations"][0]["operation_id"] == pending.value["operations"][0]["operation_id"]


def test_ledger_file_holds_both_checkpoints_and_operations(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, contract="dedup", provider_mode="dedup")

    async def go() -> None:
        async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
            await saver.setup()
            await build(spec, saver, provider_of(spec)).ainvoke({"messages": [HumanMessage("go")]}, CONFIG)

    asyncio.run(go())
    with sqlite3.connect(spec.db) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"checkpoints", "writes", "effect_operations", "effect_audit", "effect_migrations"} <= tables
        assert db.execute("SELECT state FROM effect_operations").fetchall() == [("confirmed",)]
