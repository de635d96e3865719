"""Malformed input the fuzz tests (tests/test_fuzz_tool_calls.py) keep out, because it
would hide everything else: an id shared with an invalid sibling, duplicate ids under
``create_agent``, and an invalid bare review answer followed by a partial one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pydantic
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langgraph_effects import (
    Effect,
    InMemoryLedger,
    OperationQuery,
    State,
    attach_ledger,
    current_operation,
    resume_command,
)
from langgraph_effects.lab.providers import Provider
from langgraph_effects.testing import ScriptedChatModel
from tests.helpers.one_call import call, make_sender, one_call_graph

ALL_STATES = frozenset(State)


# -- malformed input the fuzz tests keep out (known bugs) -------------------------------


@pytest.mark.parametrize("sibling", ["unknown_tool", "invalid_args"])
def test_node_refuses_an_id_shared_with_an_invalid_sibling(tmp_path: Path, sibling: str) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    ledger = InMemoryLedger()
    other = call("nope", "dup", q="x") if sibling == "unknown_tool" else call("send", "dup", body=1)
    graph = one_call_graph(
        [make_sender(provider)], {"send": Effect(dedup_window=3600)},
        attach_ledger(InMemorySaver(), ledger), [call("send", "dup", label="L"), other],
    )
    out = graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t1"}})
    messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(messages) == 2 and all(m.status == "error" for m in messages)
    assert provider.count_requests() == 0
    assert asyncio.run(ledger.list_operations(OperationQuery(states=ALL_STATES))) == []


def test_middleware_refuses_duplicate_ids_like_the_node(tmp_path: Path) -> None:
    from langchain.agents import create_agent  # the 'agents' extra

    from langgraph_effects._integrations.middleware import EffectMiddleware

    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    ledger = InMemoryLedger()
    calls = [call("send", "dup", label="A"), call("send", "dup", label="B")]
    message = AIMessage("", tool_calls=calls, id="ai-1")

    def script(messages: Any) -> AIMessage:
        return AIMessage("done") if any(isinstance(m, ToolMessage) for m in messages) else message

    agent = create_agent(
        ScriptedChatModel(script=script),
        tools=[make_sender(provider)],
        middleware=[EffectMiddleware({"send": Effect(dedup_window=3600)})],
        checkpointer=attach_ledger(InMemorySaver(), ledger),
    )
    out = agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t1"}})
    messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(messages) == 2 and all(m.status == "error" for m in messages)
    assert provider.count_requests() == 0


@pytest.mark.xfail(
    strict=True,
    raises=pydantic.ValidationError,
    reason=(
        "BUG (LangGraph 1.2.24, reached through EffectToolNode's several interrupt() rounds "
        "per node execution): an invalid *bare* Command(resume=...) is kept as the task's "
        "pending null-resume write even though interrupt() raised ValidationError, and the "
        "node's next interrupt() (round 1, after a valid partial answer) consumes it and "
        "fails again with the old error; the valid decision was applied, but invoke raises."
    ),
)
def test_invalid_bare_answer_does_not_poison_the_next_round(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    @tool
    def notify(label: str) -> str:
        """Fails before the request leaves on the first attempt."""
        if current_operation().attempt == 1:
            raise ConnectionError("connection reset")
        return provider.apply({"operation": label}).effect_id

    ledger = InMemoryLedger()
    graph = one_call_graph([notify], {}, attach_ledger(InMemorySaver(), ledger),
                           [call("notify", "c0", label="A"), call("notify", "c1", label="B")])
    config: Any = {"configurable": {"thread_id": "t1"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config)
    [pending] = graph.get_state(config).interrupts
    first, second = (e["operation_id"] for e in pending.value["operations"])
    with pytest.raises(pydantic.ValidationError):
        graph.invoke(Command(resume={first: {"type": "approve"}}), config)  # bare and invalid
    state = graph.get_state(config)
    graph.invoke(resume_command(state.interrupts, {first: {"type": "abandon", "reason": "dup"}}), config)
    [still] = graph.get_state(config).interrupts
    assert [e["operation_id"] for e in still.value["operations"]] == [second]
