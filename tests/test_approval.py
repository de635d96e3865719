"""Approval before dispatch: one interrupt in LangChain's HITL shape, bound to the
arguments' hash, single use, consumed in the dispatch commit."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
from langgraph.types import Command

from langgraph_effects import (
    ApprovalError,
    AsyncEffectSqliteSaver,
    Effect,
    InMemoryLedger,
    Operation,
    State,
)
from langgraph_effects._integrations.middleware import EffectMiddleware
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime.lease import new_owner, release
from langgraph_effects.core.operation import Change, Event, Owner
from langgraph_effects.lab.providers import Provider
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

CONFIG: Any = {"configurable": {"thread_id": "t1"}}

# create_react_agent is deprecated (create_agent + EffectMiddleware is the recommended
# path); it stays supported, so this suite keeps exercising it, without the warning.
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved:DeprecationWarning")


def agent_with(provider: Provider, saver: Any, *, middleware: bool = False) -> Any:
    @tool
    def pay(invoice: str, amount: int) -> str:
        """Pay an invoice."""
        return provider.apply({"operation": invoice, "amount": amount}).effect_id

    model = ScriptedChatModel(
        script=call_each_then_finish([("pay", {"invoice": "inv-1", "amount": 100})])
    )
    effects = {"pay": Effect(approval="always")}
    if middleware:
        return create_agent(model, tools=[pay], middleware=[EffectMiddleware(effects)], checkpointer=saver)
    return create_react_agent(model, tools=EffectToolNode([pay], effects=effects), checkpointer=saver)


async def ask(agent: Any) -> Any:
    await agent.ainvoke({"messages": [HumanMessage("pay it")]}, CONFIG)
    [pending] = (await agent.aget_state(CONFIG)).interrupts
    return pending


@pytest.mark.parametrize("middleware", [False, True])
async def test_approve_dispatches_once(tmp_path: Path, middleware: bool) -> None:
    provider = Provider(tmp_path / "p.sqlite", "blind")
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "a.sqlite") as saver:
        await saver.setup()
        agent = agent_with(provider, saver, middleware=middleware)
        pending = await ask(agent)
        value = pending.value
        assert value["type"] == "effect_approval"
        assert value["action_requests"][0]["name"] == "pay"
        assert value["action_requests"][0]["args"] == {"invoice": "inv-1", "amount": 100}
        assert value["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject"]
        assert provider.count_requests("apply") == 0  # nothing leaves before approval

        await agent.ainvoke(Command(resume={pending.id: {"decisions": [{"type": "approve"}]}}), CONFIG)
        state = await agent.aget_state(CONFIG)
        assert state.interrupts == ()
        assert provider.count_requests("apply") == 1
        op_id = value["operations"][0]["operation_id"]
        trail = await saver.ledger.audit(op_id)
        assert [a.event for a in trail] == ["intent", "dispatch", "succeed"]
        assert trail[1].evidence is not None and trail[1].evidence["kind"] == "approval"

        # Re-running the thread from the approved checkpoint replays; the approval is not reused.
        history = [s async for s in agent.aget_state_history(CONFIG)]
        await agent.ainvoke(None, next(s for s in history if s.next == ("tools",)).config)
        assert provider.count_requests("apply") == 1


async def test_reject_tells_the_model_and_sends_nothing(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "p.sqlite", "blind")
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "a.sqlite") as saver:
        await saver.setup()
        agent = agent_with(provider, saver)
        pending = await ask(agent)
        reject = {"decisions": [{"type": "reject", "message": "wrong amount"}]}
        out = await agent.ainvoke(Command(resume={pending.id: reject}), CONFIG)
        [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert message.status == "error"
        assert "rejected" in message.content and "wrong amount" in message.content
        assert message.artifact["state"] == "abandoned"
        assert provider.count_requests() == 0


async def test_edit_is_a_new_operation_with_the_edited_payload(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "p.sqlite", "blind")
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "a.sqlite") as saver:
        await saver.setup()
        agent = agent_with(provider, saver)
        pending = await ask(agent)
        original = pending.value["operations"][0]["operation_id"]
        edit = {
            "decisions": [
                {"type": "edit", "edited_action": {"name": "pay", "args": {"invoice": "inv-1", "amount": 90}}}
            ]
        }
        out = await agent.ainvoke(Command(resume={pending.id: edit}), CONFIG)
        [record] = provider.effects()
        assert record.payload == {"operation": "inv-1", "amount": 90}
        [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert message.artifact["operation_id"] != original
        old = await saver.ledger.get(original)
        new = await saver.ledger.get(message.artifact["operation_id"])
        assert old is not None and old.state is State.ABANDONED
        assert old.evidence is not None and old.evidence["superseded_by"] == new.op_id  # type: ignore[union-attr]
        assert new is not None and new.state is State.CONFIRMED
        assert new.args == {"invoice": "inv-1", "amount": 90}

        # A re-run of the edited call replays the new operation.
        await agent.ainvoke(None, CONFIG)
        assert provider.count_requests("apply") == 1


async def test_an_approval_for_another_payload_is_refused(request: pytest.FixtureRequest) -> None:
    ledger = InMemoryLedger()
    op = Operation(
        op_id="op_gated",
        thread_id="t",
        tool="pay",
        tool_call_id="c",
        args={"amount": 100},
        args_hash="h1:amount-100",
        provider_key="k",
        contract="blind",
        extra={"approval": "required"},
    )
    [stored] = await ledger.record_intents([op])
    lease = time.time() + 30
    # Each attempt a fresh owner, all released at the end: a held owner is
    # process-wide state and would read as a live dispatch to the tests after this one.
    owners: list[Owner] = []

    def release_all() -> None:
        for o in owners:
            release(o)

    request.addfinalizer(release_all)

    def dispatch(args_hash: str | None, approval_id: str | None, kind: str = "approval") -> Change:
        evidence = {"kind": kind, "decision": "approve", "args_hash": args_hash}
        owners.append(new_owner())
        return Change(Event.DISPATCH, owner=owners[-1], lease_expires_at=lease, evidence=evidence,
                      decision_id=approval_id, decision={"type": "approve", "args_hash": args_hash})

    with pytest.raises(ApprovalError, match="other arguments"):
        await ledger.transition(op.op_id, dispatch("h1:amount-90", "a1"), expected_version=1)
    with pytest.raises(ApprovalError, match="needs a human approval"):
        await ledger.transition(op.op_id, dispatch(op.args_hash, "a1", kind="intent"), expected_version=1)
    assert (await ledger.get(op.op_id)) == stored  # nothing written

    sent = await ledger.transition(op.op_id, dispatch(op.args_hash, "a1"), expected_version=1)
    assert sent.state is State.DISPATCHED
    # The same approval replayed is a no-op: it cannot dispatch a second time.
    assert await ledger.transition(op.op_id, dispatch(op.args_hash, "a1"), expected_version=None) == sent


async def test_interoperates_with_human_in_the_loop_middleware_before_ours(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "p.sqlite", "blind")

    @tool
    def pay(invoice: str, amount: int) -> str:
        """Pay an invoice."""
        return provider.apply({"operation": invoice, "amount": amount}).effect_id

    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "a.sqlite") as saver:
        await saver.setup()
        agent = create_agent(
            ScriptedChatModel(script=call_each_then_finish([("pay", {"invoice": "inv-1", "amount": 100})])),
            tools=[pay],
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"pay": True}), EffectMiddleware()],
            checkpointer=saver,
        )
        await agent.ainvoke({"messages": [HumanMessage("pay")]}, CONFIG)
        [pending] = (await agent.aget_state(CONFIG)).interrupts
        edit = {"type": "edit", "edited_action": {"name": "pay", "args": {"invoice": "inv-1", "amount": 80}}}
        answer: Any = {"decisions": [edit]} if "action_requests" in pending.value else edit
        await agent.ainvoke(Command(resume={pending.id: answer}), CONFIG)
        assert (await agent.aget_state(CONFIG)).interrupts == ()
        [record] = provider.effects()
        assert record.payload["amount"] == 80  # the ledger recorded what HITL let through
        [op] = await saver.ledger.list_operations(__import__("langgraph_effects").OperationQuery())
        assert op.args == {"invoice": "inv-1", "amount": 80} and op.state is State.CONFIRMED
