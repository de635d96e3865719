"""Contracts are checked when they are made (issue 40, item 1).

A wrong option (type, unit, name) is refused where it is written, with an
``InvalidOptionError`` naming the option, what was given and what is accepted; a
misspelled ``effects`` key is refused on every integration before anything is sent
(``EffectMiddleware`` included, which learns its tools only from the running agent).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    Budget,
    CircuitBreaker,
    Effect,
    EffectMiddleware,
    EffectToolNode,
    Undo,
    effectful,
)
from langgraph_effects.core import contract, controls
from langgraph_effects.errors import ConfigurationError, InvalidOptionError
from langgraph_effects.ledger.query import OperationQuery
from langgraph_effects.testing import Provider, ScriptedChatModel, call_each_then_finish

CONFIG: Any = {"configurable": {"thread_id": "t1"}}


def refused(make: Any) -> InvalidOptionError:
    with pytest.raises(InvalidOptionError) as caught:
        make()
    assert isinstance(caught.value, ConfigurationError)
    return caught.value


def test_a_dedup_window_written_as_text_is_refused_with_what_to_write() -> None:
    error = refused(lambda: Effect(dedup_window="24h"))
    assert (error.owner, error.option, error.given) == ("Effect", "dedup_window", "24h")
    assert str(error) == (
        "Effect(dedup_window='24h'): dedup_window takes a timedelta or a number of seconds "
        "(above 0), or None, not the str '24h'. Write timedelta(hours=24) (or 86400 seconds)."
    )
    assert Effect(dedup_window=timedelta(hours=24)).dedup_seconds == 86400
    assert Effect(dedup_window=86400).kind == "dedup"


@pytest.mark.parametrize(
    ("make", "option", "phrase"),
    [
        (lambda: Effect(lookup_consistency="eventually"), "lookup_consistency", "Did you mean 'eventual'?"),
        (lambda: Effect(approval=True), "approval", "takes 'never' or 'always'"),
        (lambda: Effect(max_attempts="3"), "max_attempts", "a whole number of at least 1"),
        (lambda: Effect(max_attempts=0), "max_attempts", "a whole number of at least 1"),
        (lambda: Effect(settle_after=-1), "settle_after", "(of 0 or more)"),
        (lambda: Effect(lookup_timeout="10s"), "lookup_timeout", "Write timedelta(seconds=10)"),
        (lambda: Effect(secret_fields="card"), "secret_fields", "A single name goes in a tuple: ('card',)."),
        (lambda: Effect(definite_errors=ValueError), "definite_errors", "(ValueError,)"),
        (lambda: Effect(definite_errors=(ValueError(),)), "definite_errors", "not instances"),
        (lambda: Effect(lookup="find_ticket"), "lookup", "an async function"),
        (lambda: Effect(budgets=("daily",)), "budgets", "a list or tuple of Budget objects"),
        (lambda: Effect(circuit="billing"), "circuit", "a CircuitBreaker"),
        (lambda: Effect(read_only_tool="yes"), "read_only_tool", "True or False"),
        (lambda: Budget("b", max_sends=5, window="1d"), "window", "Write timedelta(days=1)"),
        (lambda: Budget("b", max_sends=5, per="thred"), "per", "Did you mean 'thread'?"),
        (lambda: Budget("b"), "max_sends", "limits nothing"),
        (lambda: Budget("b", max_total=10), "total_of", "max_total needs total_of"),
        (lambda: CircuitBreaker("p", cooldown="30s"), "cooldown", "a timedelta or a number of seconds"),
        (lambda: CircuitBreaker("p", failures=0), "failures", "a whole number of at least 1"),
        (lambda: CircuitBreaker(""), "name", "a non-empty name"),
        (lambda: Undo("cancel"), "action", "a LangChain tool or a function"),
        (lambda: Effect(dedup_windw=3600), "dedup_windw", "Did you mean 'dedup_window'?"),
        (lambda: Effect.blind(max_attempt=2), "max_attempt", "Did you mean 'max_attempts'?"),
        (lambda: Budget("b", max_send=3), "max_send", "Did you mean 'max_sends'?"),
    ],
)
def test_each_wrong_option_is_named_with_what_it_takes(make: Any, option: str, phrase: str) -> None:
    error = refused(make)
    assert error.option == option
    assert phrase in str(error), str(error)


@pytest.mark.parametrize(
    ("cls", "table"),
    [
        (Effect, contract._EFFECT_OPTIONS),
        (Undo, contract._UNDO_OPTIONS),
        (Budget, controls._BUDGET_OPTIONS),
        (CircuitBreaker, controls._BREAKER_OPTIONS),
    ],
)
def test_every_option_has_a_check(cls: type, table: dict[str, Any]) -> None:
    """One mechanism: a new option without an entry in its table fails here."""
    declared = [f.name for f in dataclasses.fields(cls) if f.init]
    assert list(table) == declared


@tool
def email_receipt(to: str) -> str:
    """Email a receipt."""
    return "sent"


def test_integrations_refuse_wrong_options() -> None:
    for make, option in [
        (lambda: EffectToolNode([email_receipt], lease_seconds="5m"), "lease_seconds"),
        (lambda: EffectToolNode([email_receipt], effects={"email_receipt": Effect}), "effects"),
        (lambda: EffectMiddleware({"email_receipt": {"dedup_window": 60}}), "effects"),
        (lambda: EffectMiddleware(hash_key="secret"), "hash_key"),
        (lambda: EffectMiddleware(ledger="agent.sqlite"), "ledger"),
        (lambda: effectful(lambda x: x), "effect"),
        (lambda: effectful(Effect(), name=""), "name"),
    ]:
        assert refused(make).option == option
    assert "Call it: Effect(...)" in str(
        refused(lambda: EffectToolNode([email_receipt], effects={"email_receipt": Effect}))
    )


def _agent(provider: Provider, effects: dict[str, Effect], **kwargs: Any) -> Any:
    @tool
    def email_receipt(to: str) -> str:
        """Email a receipt."""
        provider.apply({"to": to})
        return "sent"

    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        provider.apply({"order": order})
        return "refunded"

    model = ScriptedChatModel(script=call_each_then_finish([("email_receipt", {"to": "ada@example.com"})]))
    middleware = [EffectMiddleware(effects)]
    return create_agent(model, tools=[email_receipt, refund], middleware=middleware, **kwargs)


async def _operations(saver: AsyncEffectSqliteSaver) -> list[Any]:
    return await saver.ledger.list_operations(OperationQuery())


@pytest.mark.parametrize("declared", [Effect(dedup_window=3600), Effect.read_only()])
def test_middleware_refuses_a_misspelled_tool_before_anything_is_sent(
    tmp_path: Path, declared: Effect
) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    async def go() -> tuple[InvalidOptionError, list[Any]]:
        async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
            await saver.setup()
            agent = _agent(provider, {"email_reciept": declared}, checkpointer=saver)
            with pytest.raises(InvalidOptionError) as caught:
                await agent.ainvoke({"messages": [HumanMessage("send the receipt")]}, CONFIG)
            return caught.value, await _operations(saver)

    error, ops = asyncio.run(go())
    assert str(error).startswith(
        "EffectMiddleware(effects={'email_reciept': ...}): 'email_reciept' names no tool of this "
        "agent. Did you mean 'email_receipt'? Its tools: email_receipt, refund."
    )
    assert "Nothing was sent" in str(error)
    assert sum(provider.count_effects().values()) == 0 and provider.count_requests() == 0
    assert ops == []


def test_middleware_refuses_a_misspelled_tool_in_a_sync_run(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    from langgraph.checkpoint.memory import InMemorySaver

    agent = _agent(provider, {"email_reciept": Effect(dedup_window=3600)}, checkpointer=InMemorySaver())
    with pytest.raises(InvalidOptionError, match="Did you mean 'email_receipt'"):
        agent.invoke({"messages": [HumanMessage("send the receipt")]}, CONFIG)
    assert provider.count_requests() == 0


def test_middleware_refuses_a_misspelled_tool_when_a_resume_starts_at_the_tools(tmp_path: Path) -> None:
    """After a crash the resume runs the pending tool calls first, with no model call
    before them: the check must fire there too, before the call is sent."""
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    async def go() -> tuple[InvalidOptionError, list[Any]]:
        async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
            await saver.setup()
            first = _agent(provider, {"email_receipt": Effect(dedup_window=3600)}, checkpointer=saver,
                           interrupt_before=["tools"])
            await first.ainvoke({"messages": [HumanMessage("send the receipt")]}, CONFIG)
            assert (await first.aget_state(CONFIG)).next == ("tools",)
            resumed = _agent(provider, {"email_reciept": Effect(dedup_window=3600)}, checkpointer=saver)
            with pytest.raises(InvalidOptionError) as caught:
                await resumed.ainvoke(None, CONFIG)
            return caught.value, await _operations(saver)

    error, ops = asyncio.run(go())
    assert "'email_reciept' names no tool of this agent. Did you mean 'email_receipt'?" in str(error)
    assert provider.count_requests() == 0 and ops == []


def test_middleware_accepts_every_real_tool_name(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    async def go() -> None:
        async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
            await saver.setup()
            agent = _agent(provider, {"email_receipt": Effect(dedup_window=3600), "refund": Effect()},
                           checkpointer=saver)
            await agent.ainvoke({"messages": [HumanMessage("send the receipt")]}, CONFIG)

    asyncio.run(go())
    assert provider.count_effects() and sum(provider.count_effects().values()) == 1
