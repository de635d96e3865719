"""A model's ids with NUL in them, through ``create_agent`` on every backend.

Measured before the codec escaped text (``ledger.codec.stored_text``): a tool_call_id
or AIMessage id holding NUL made every write of the operation fail on Postgres
(``LedgerError``: text fields cannot contain NUL), so the thread could never finish;
SQLite and memory stored it. Now each backend stores it, and the thread completes with
the effect applied once at a provider that keeps its own records. The run goes
through a timeout (an ambiguous outcome), a review interrupt and a resume, so the
ids are written, found again and compared several times.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_effects import (
    AsyncEffectPostgresSaver,
    AsyncEffectSqliteSaver,
    Effect,
    EffectMiddleware,
    OperationQuery,
    current_operation,
    resume_command,
)
from langgraph_effects.core.operation import State
from langgraph_effects.errors import MalformedToolCallError
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.testing import ScriptedChatModel

from .ledger.conftest import created_schema

CALL_ID = "call-\x00-0"
MESSAGE_ID = "ai-\x00-1"
CONFIG: Any = {"configurable": {"thread_id": "t-nul"}}


@asynccontextmanager
async def backend(name: str, tmp_path: Path) -> AsyncIterator[tuple[Any, Ledger]]:
    """(checkpointer, ledger) of one backend, set up."""
    if name == "memory":
        yield InMemorySaver(), InMemoryLedger()
    elif name == "sqlite":
        async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
            await saver.setup()
            yield saver, saver.ledger
    else:
        with created_schema("lge_nul") as (_, dsn):
            async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
                await saver.setup()
                yield saver, saver.ledger


@pytest.mark.parametrize("name", ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_nul_in_the_models_ids_completes_the_thread_once(tmp_path: Path, name: str) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    seen: list[str] = []

    @tool
    def send(label: str) -> str:
        """Send once; the first attempt times out after the provider applied it."""
        seen.append(current_operation().operation_id)
        provider.apply({"operation": label})  # blind: no key, a re-send would duplicate
        if current_operation().attempt == 1:
            raise TimeoutError("the provider did not answer in time")
        return "sent"

    def script(messages: Sequence[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage(content="done")
        calls = [{"name": "send", "args": {"label": "L"}, "id": CALL_ID, "type": "tool_call"}]
        return AIMessage(content="", id=MESSAGE_ID, tool_calls=calls)

    async with backend(name, tmp_path) as (saver, ledger):
        agent = create_agent(
            ScriptedChatModel(script=script),
            tools=[send],
            middleware=[EffectMiddleware({"send": Effect()}, ledger=ledger)],
            checkpointer=saver,
        )
        await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
        state = await agent.aget_state(CONFIG)
        assert state.interrupts, "a blind timeout goes to review"
        [op] = await ledger.unresolved(thread_id="t-nul")
        assert (op.tool_call_id, op.message_id) == (CALL_ID, MESSAGE_ID)
        await agent.ainvoke(None, CONFIG, durability="sync")  # a plain resume: asks again
        state = await agent.aget_state(CONFIG)
        answer = resume_command(state.interrupts, {op.op_id: {"type": "landed"}})
        await agent.ainvoke(answer, CONFIG, durability="sync")
        final = await agent.aget_state(CONFIG)
        ops = await ledger.list_operations(OperationQuery(thread_id="t-nul"))
    assert provider.count_effects() == {"L": 1} and provider.count_requests("apply") == 1
    assert seen == [op.op_id]
    assert [(o.state, o.tool_call_id, o.message_id) for o in ops] == [(State.CONFIRMED, CALL_ID, MESSAGE_ID)]
    assert final.next == () and final.interrupts == ()
    [message] = [m for m in final.values["messages"] if isinstance(m, ToolMessage)]
    assert message.tool_call_id == CALL_ID and "landed" in str(message.content)
    assert final.values["messages"][-1].content == "done"


@pytest.mark.parametrize("name", ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_surrogates_in_the_models_ids_behave_alike_on_every_backend(tmp_path: Path, name: str) -> None:
    """A lone surrogate in a tool_call_id is refused before anything is sent (the
    checkpoint stores it as ``?``, so a resume could not find the call again), on every
    backend alike; one in the AIMessage id (not part of any identity) is stored."""
    provider = Provider(tmp_path / "provider.sqlite", "dedup")

    @tool
    def send(label: str) -> str:
        """Send under our provider key."""
        provider.apply({"operation": label}, key=current_operation().provider_key)
        return "sent"

    def script(messages: Sequence[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage(content="done")
        calls = [
            {"name": "send", "args": {"label": "refused"}, "id": "call-\ud800", "type": "tool_call"},
            {"name": "send", "args": {"label": "sent"}, "id": "call-ok", "type": "tool_call"},
        ]
        return AIMessage(content="", id="ai-\udc00", tool_calls=calls)

    async with backend(name, tmp_path) as (saver, ledger):
        agent = create_agent(
            ScriptedChatModel(script=script),
            tools=[send],
            middleware=[EffectMiddleware({"send": Effect(dedup_window=3600)}, ledger=ledger)],
            checkpointer=saver,
        )
        out = await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
        again = await agent.ainvoke(None, CONFIG, durability="sync")  # resuming does not raise
        ops = await ledger.list_operations(OperationQuery(thread_id="t-nul"))
    assert provider.count_effects() == {"sent": 1} and provider.count_requests("apply") == 1
    assert [(o.state, o.tool_call_id, o.message_id) for o in ops] == [
        (State.CONFIRMED, "call-ok", "ai-\udc00")
    ]
    replies = {
        m.content if m.status == "success" else m.artifact["error"]
        for m in out["messages"]
        if isinstance(m, ToolMessage)
    }
    assert replies == {"sent", MalformedToolCallError.__name__}
    assert out["messages"][-1].content == "done" and len(again["messages"]) == len(out["messages"])
