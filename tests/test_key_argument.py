"""``Effect(key_argument=...)``: the operation's provider key written into a tool
argument, the same on every send of one operation, under EffectToolNode and
EffectMiddleware, for a provider that deduplicates on that argument."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    ConfigurationError,
    Effect,
    EffectSqliteSaver,
    OperationQuery,
)
from langgraph_effects._integrations.middleware import EffectMiddleware
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime import faults as _faults
from langgraph_effects.lab.providers import Provider
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish
from tests.helpers.one_call import call, one_call_graph

CONFIG: Any = {"configurable": {"thread_id": "t1"}}
DEDUP = Effect(dedup_window=3600, key_argument="idempotency_key")


class LostOutcome(Exception):
    """The worker lost the call's outcome after the provider applied it."""


def ticket_tool(provider: Provider, seen: list[str]) -> BaseTool:
    @tool
    def create_ticket(title: str, idempotency_key: str = "") -> str:
        """Open a ticket (the provider deduplicates on ``idempotency_key``)."""
        seen.append(idempotency_key)
        return provider.apply({"operation": title}, key=idempotency_key or None).effect_id

    return create_ticket


def ticket_agent(provider: Provider, seen: list[str], saver: Any, effect: Effect = DEDUP) -> Any:
    """``create_agent`` with :func:`ticket_tool` under ``EffectMiddleware`` (``effect``),
    its model scripted to create one ticket "T"."""
    return create_agent(
        ScriptedChatModel(script=call_each_then_finish([("create_ticket", {"title": "T"})])),
        tools=[ticket_tool(provider, seen)],
        middleware=[EffectMiddleware({"create_ticket": effect})],
        checkpointer=saver,
    )


def lose_first_outcome() -> None:
    fired: list[str] = []

    def hook(point: str, op: Any) -> None:
        if not fired:
            fired.append(op.op_id)
            raise LostOutcome(op.op_id)

    _faults.install("before_outcome", hook)


@pytest.fixture(autouse=True)
def _no_faults() -> Any:
    _faults.clear()
    yield
    _faults.clear()


async def provider_keys(saver: Any) -> list[str]:
    return [op.provider_key for op in await saver.ledger.list_operations(OperationQuery())]


async def test_node_sends_one_key_on_every_send_and_the_provider_dedups(tmp_path: Path) -> None:
    provider, seen = Provider(tmp_path / "provider.sqlite", "dedup"), []
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        # The model's own value for the argument is never what is sent.
        graph = one_call_graph(
            [ticket_tool(provider, seen)],
            {"create_ticket": DEDUP},
            saver,
            [call("create_ticket", title="T", idempotency_key="made-up-by-the-model")],
        )
        lose_first_outcome()
        with pytest.raises(LostOutcome):
            await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        _faults.clear()
        assert provider.count_effects() == {"T": 1}

        await graph.ainvoke(None, CONFIG)  # the same operation, re-dispatched under its key
        [key] = await provider_keys(saver)
        assert seen == [key, key] and key != "made-up-by-the-model"
        assert provider.count_requests("apply") == 2
        assert provider.count_effects() == {"T": 1}
        state = await graph.aget_state(CONFIG)
        [message] = [m for m in state.values["messages"] if isinstance(m, ToolMessage)]
        assert message.artifact["state"] == "confirmed"


async def test_middleware_sends_the_key_and_the_provider_dedups(tmp_path: Path) -> None:
    provider, seen = Provider(tmp_path / "provider.sqlite", "dedup"), []
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        agent = ticket_agent(provider, seen, saver)
        lose_first_outcome()
        with pytest.raises(LostOutcome):
            await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        _faults.clear()
        await agent.ainvoke(None, CONFIG)
        [key] = await provider_keys(saver)
        assert seen == [key, key]
        assert provider.count_requests("apply") == 2 and provider.count_effects() == {"T": 1}


def test_sync_middleware_sends_the_key(tmp_path: Path) -> None:
    provider, seen = Provider(tmp_path / "provider.sqlite", "dedup"), []
    with EffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
        saver.setup()
        agent = ticket_agent(provider, seen, saver)
        agent.invoke({"messages": [HumanMessage("go")]}, CONFIG)
    with sqlite3.connect(tmp_path / "agent.sqlite") as db:
        [(key,)] = db.execute("SELECT provider_key FROM effect_operations").fetchall()
    assert seen == [key] and provider.count_effects() == {"T": 1}


def test_node_refuses_a_key_argument_the_tool_lacks(tmp_path: Path) -> None:
    tool_ = ticket_tool(Provider(tmp_path / "p.sqlite", "dedup"), [])
    with pytest.raises(ConfigurationError, match=r"no argument 'request_id'.*ToolNode"):
        EffectToolNode([tool_], effects={"create_ticket": Effect(key_argument="request_id")})


async def test_middleware_refuses_a_key_argument_the_tool_lacks_before_sending(tmp_path: Path) -> None:
    provider, seen = Provider(tmp_path / "provider.sqlite", "dedup"), []
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        agent = ticket_agent(provider, seen, saver, Effect(key_argument="request_id"))
        with pytest.raises(ConfigurationError, match="no argument 'request_id'"):
            await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        assert seen == [] and provider.count_requests() == 0


def test_key_argument_must_name_an_argument() -> None:
    with pytest.raises(ValueError, match="key_argument"):
        Effect(key_argument="")


async def test_mcp_lookup_without_a_server_answer_is_inconclusive(tmp_path: Path) -> None:
    """A lookup that cannot reach its server never proves absence."""
    pytest.importorskip("langchain_mcp_adapters", reason='needs the mcp extra: pip install -e ".[mcp]"')
    from langgraph_effects import Inconclusive, LookupRequest, mcp_lookup

    missing: Any = {"transport": "streamable_http", "url": "http://127.0.0.1:9/mcp"}
    lookup = mcp_lookup(missing, "find_ticket")
    asked = LookupRequest(operation_id="op_1", provider_key="k", tool="open_ticket", args={}, attempt=1)
    outcome = await lookup(asked)
    assert isinstance(outcome, Inconclusive) and "find_ticket" in outcome.reason


def test_effectful_tasks_refuse_a_key_argument() -> None:
    from langgraph_effects import effectful

    with pytest.raises(ConfigurationError, match=r"current_operation\(\)\.provider_key"):

        @effectful(Effect(dedup_window=60, key_argument="idempotency_key"))
        def send(idempotency_key: str = "") -> None:
            """Never decorated."""


def test_what_the_model_puts_in_the_key_argument_does_not_change_the_operation() -> None:
    """A model that re-plans a call may invent another value for the parameter each time:
    the same call must still bind to the same operation (the runtime overwrites it)."""
    from langgraph_effects._runtime.binding import Coordinates, identify
    from langgraph_effects._runtime.calls import Settings
    from langgraph_effects.core.operation import Scope

    def op_of(effect: Effect, **args: Any) -> tuple[str, str, str]:
        at = Coordinates(
            settings=Settings.build({"create_ticket": effect}, hash_key=None, lease_seconds=30),
            scope=Scope(tenant="", policy_version=None),
            thread_id="t1",
            namespace="",
            config={},
        )
        return identify({"name": "create_ticket", "args": args, "id": "c1"}, at=at, turn="t:1")

    keyed = Effect(dedup_window=60, key_argument="idempotency_key")
    assert op_of(keyed, title="T", idempotency_key="a") == op_of(keyed, title="T", idempotency_key="b")
    assert op_of(keyed, title="T", idempotency_key="a") == op_of(keyed, title="T")
    assert op_of(keyed, title="T")[0] != op_of(keyed, title="U")[0]
    plain = Effect(dedup_window=60)  # without key_argument every argument counts
    assert op_of(plain, title="T", idempotency_key="a") != op_of(plain, title="T", idempotency_key="b")
