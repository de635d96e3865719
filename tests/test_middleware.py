"""The same guarantees through ``create_agent`` + ``EffectMiddleware`` (one task per
call) and ``create_react_agent(tools=EffectToolNode(...))``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

from langgraph_effects import AsyncEffectSqliteSaver, Effect, current_operation, resume_command
from langgraph_effects._integrations.middleware import EffectMiddleware
from langgraph_effects.lab.providers import Provider
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish
from tests.helpers.agent import Spec, build
from tests.test_node_crash import effects, requests, run_worker, spec, tool_messages

CONFIG: Any = {"configurable": {"thread_id": "t1"}}
KINDS = ["create_agent", "react"]


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("kind", KINDS)
def test_kill_after_effect_dedup(tmp_path: Path, kind: str) -> None:
    s = spec(tmp_path, contract="dedup", provider_mode="dedup", kind=kind)
    run_worker(replace(s, crash="before_outcome"), expect_kill=True)
    out = run_worker(replace(s, resume=True))
    assert out["interrupts"] == []
    assert effects(s) == 1 and requests(s) == 2
    [message] = tool_messages(out)
    assert message["artifact"]["state"] == "confirmed"


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("kind", KINDS)
def test_kill_after_effect_blind_review_landed(tmp_path: Path, kind: str) -> None:
    s = spec(tmp_path, contract="blind", provider_mode="blind", kind=kind)
    run_worker(replace(s, crash="before_outcome"), expect_kill=True)
    out = run_worker(replace(s, resume=True))
    [pending] = out["interrupts"]
    op_id = pending["value"]["operations"][0]["operation_id"]
    out = run_worker(replace(s, answer={op_id: {"type": "landed", "receipt": "R-9"}}))
    assert out["interrupts"] == []
    assert effects(s) == 1 and requests(s) == 1
    [message] = tool_messages(out)
    assert "landed" in message["content"] and message["artifact"]["receipt"] == "R-9"


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("kind", KINDS)
def test_kill_before_effect_loses_nothing(tmp_path: Path, kind: str) -> None:
    s = spec(tmp_path, contract="lookup", provider_mode="lookup", kind=kind, calls=2)
    run_worker(replace(s, crash="after_intent"), expect_kill=True)
    out = run_worker(replace(s, resume=True))
    assert out["interrupts"] == []
    assert effects(s) == 2 and requests(s) == 2


async def test_tool_retry_middleware_does_not_multiply_a_timeout(tmp_path: Path) -> None:
    """ToolRetryMiddleware retries any exception; under ours, a timeout after the
    effect landed is reconciled (re-sent under the same key), never re-sent blind."""
    provider = Provider(tmp_path / "provider.sqlite", "dedup")

    @tool
    def send(operation: str) -> str:
        """Send."""
        op = current_operation()
        provider.apply({"operation": operation}, key=op.provider_key)
        if op.attempt == 1:
            raise TimeoutError("read timed out")
        return "sent"

    agent = create_agent(
        ScriptedChatModel(script=call_each_then_finish([("send", {"operation": "t1:0"})])),
        tools=[send],
        middleware=[
            ToolRetryMiddleware(max_retries=2, initial_delay=0.0),
            EffectMiddleware({"send": Effect(dedup_window=3600)}),
        ],
    )
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
        await saver.setup()
        agent.checkpointer = saver
        out = await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
    assert sum(provider.count_effects().values()) == 1
    assert provider.count_requests("apply") == 2  # first send + one re-send under the same key
    [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert message.content == "sent"


async def test_tool_retry_middleware_with_a_blind_tool_asks_instead(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    @tool
    def send(operation: str) -> str:
        """Send."""
        provider.apply({"operation": operation})
        raise TimeoutError("read timed out")

    agent = create_agent(
        ScriptedChatModel(script=call_each_then_finish([("send", {"operation": "t1:0"})])),
        tools=[send],
        middleware=[ToolRetryMiddleware(max_retries=2, initial_delay=0.0), EffectMiddleware()],
    )
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
        await saver.setup()
        agent.checkpointer = saver
        await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        state = await agent.aget_state(CONFIG)
        [pending] = state.interrupts
        assert pending.value["type"] == "effect_review"
        assert provider.count_requests("apply") == 1  # not 3


async def test_several_review_interrupts_resume_together(tmp_path: Path) -> None:
    s = Spec(
        db=str(tmp_path / "agent.sqlite"),
        provider=str(tmp_path / "provider.sqlite"),
        contract="blind",
        provider_mode="blind",
        calls=2,
        timeout_after_effect=[0, 1],
        kind="create_agent",
    )
    provider = Provider(s.provider, "blind")
    async with AsyncEffectSqliteSaver.from_conn_string(s.db) as saver:
        await saver.setup()
        agent = build(s, saver, provider)
        await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        state = await agent.aget_state(CONFIG)
        assert len(state.interrupts) == 2  # one task, so one interrupt, per call
        ops = [i.value["operations"][0]["operation_id"] for i in state.interrupts]
        command = resume_command(
            state.interrupts,
            {ops[0]: {"type": "landed"}, ops[1]: {"type": "abandon", "reason": "duplicate request"}},
        )
        await agent.ainvoke(command, CONFIG)
        state = await agent.aget_state(CONFIG)
        assert state.interrupts == ()
        messages = [m for m in state.values["messages"] if isinstance(m, ToolMessage)]
        assert sorted(m.artifact["state"] for m in messages) == ["abandoned", "confirmed"]
        assert provider.count_requests("apply") == 2


async def test_dangling_calls_are_answered_from_the_ledger(tmp_path: Path) -> None:
    """The user moves on instead of answering the review: the model is told the truth
    (outcome not known yet), not that the call was cancelled."""
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    seen: list[list[Any]] = []

    @tool
    def send(operation: str) -> str:
        """Send."""
        provider.apply({"operation": operation})
        raise TimeoutError("read timed out")

    def script(messages: Any) -> Any:
        seen.append(list(messages))
        if isinstance(messages[-1], HumanMessage) and messages[-1].content == "go":
            return call_each_then_finish([("send", {"operation": "t1:0"})])(messages)
        from langchain_core.messages import AIMessage

        return AIMessage("ok")

    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
        await saver.setup()
        agent = create_agent(
            ScriptedChatModel(script=script),
            tools=[send],
            middleware=[EffectMiddleware()],
            checkpointer=saver,
        )
        await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        assert (await agent.aget_state(CONFIG)).interrupts  # the blind call awaits review
        await agent.ainvoke({"messages": [HumanMessage("never mind, what's next?")]}, CONFIG)
        kept = (await agent.aget_state(CONFIG)).values["messages"]
    assert [m.type for m in kept] == ["human", "ai", "tool", "human", "ai"]  # the thread keeps it
    assert "not known yet" in kept[2].content
    last_view = seen[-1]
    [patch] = [m for m in last_view if isinstance(m, ToolMessage)]
    assert patch.status == "error" and "not known yet" in patch.content
    assert patch.artifact["state"] == "review"
    assert provider.count_requests("apply") == 1
