"""Reviews in LangChain's HITL shape (what Agent Inbox and LangGraph Studio show):
the ``effect_review`` interrupt carries ``action_requests`` / ``review_configs``, and an
answer ``{"decisions": [...]}`` maps onto landed / not landed / abandon, through
``EffectToolNode`` and through ``EffectMiddleware``. The provider keeps its own records."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command

from langgraph_effects import AsyncEffectSqliteSaver, State
from langgraph_effects._runtime.decisions import HITL_REVIEW_DECISIONS, EffectAnswer
from langgraph_effects.lab.providers import Provider
from tests.helpers.agent import Spec, build

CONFIG: Any = {"configurable": {"thread_id": "t1"}}
KINDS = ["graph", "create_agent"]  # EffectToolNode, EffectMiddleware


def blind_spec(tmp_path: Path, kind: str, calls: int = 1) -> Spec:
    # A blind tool whose call times out after the provider applied it: only a human
    # can settle it, so the run stops at a review.
    return Spec(
        db=str(tmp_path / "agent.sqlite"),
        provider=str(tmp_path / "provider.sqlite"),
        contract="blind",
        provider_mode="blind",
        calls=calls,
        timeout_after_effect=list(range(calls)),
        kind=kind,
    )


async def paused_at_review(spec: Spec, saver: Any, provider: Provider) -> tuple[Any, Any]:
    agent = build(spec, saver, provider)
    await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
    state = await agent.aget_state(CONFIG)
    [pending] = state.interrupts
    return agent, pending


@asynccontextmanager
async def at_review(
    tmp_path: Path, kind: str, calls: int = 1
) -> AsyncIterator[tuple[Any, Any, Any, Provider]]:
    """``calls`` blind calls paused at their review, the saver open: the agent, the
    pending review interrupt, the saver and the provider."""
    spec = blind_spec(tmp_path, kind, calls)
    provider = Provider(spec.provider, "blind")
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        agent, pending = await paused_at_review(spec, saver, provider)
        yield agent, pending, saver, provider


def tool_messages(state: Any) -> list[ToolMessage]:
    return [m for m in state.values["messages"] if isinstance(m, ToolMessage)]


async def answered(tmp_path: Path, kind: str, decision: dict[str, Any]) -> tuple[Any, Any, Provider]:
    """Pause a blind call at its review and answer it with one HITL ``decision``: the
    thread's state after the answer, its operation as recorded, and the provider."""
    async with at_review(tmp_path, kind) as (agent, pending, saver, provider):
        await agent.ainvoke(Command(resume={pending.id: {"decisions": [decision]}}), CONFIG)
        state = await agent.aget_state(CONFIG)
        op = await saver.ledger.get(pending.value["operations"][0]["operation_id"])
    return state, op, provider


@pytest.mark.parametrize("kind", KINDS)
async def test_review_interrupt_carries_the_hitl_request_shape(tmp_path: Path, kind: str) -> None:
    async with at_review(tmp_path, kind) as (_, pending, _, _):
        value = pending.value
    assert value["type"] == "effect_review"
    [entry] = value["operations"]
    [request] = value["action_requests"]
    [config] = value["review_configs"]
    assert request["name"] == entry["tool"] == "send"
    assert request["args"] == entry["args"] == {"operation": "t1:0"}
    description = request["description"]
    assert entry["operation_id"] in description
    assert entry["provider_key"] not in description  # blind: the provider never kept our key
    assert "own records at the provider" in description
    assert json.dumps(entry["evidence"], sort_keys=True) in description  # the evidence, in full
    assert config == {"action_name": "send", "allowed_decisions": list(HITL_REVIEW_DECISIONS)}
    assert "ignore" not in config["allowed_decisions"] and "edit" not in config["allowed_decisions"]
    assert entry["state"] in (State.REVIEW.value, State.UNKNOWN.value)


@pytest.mark.parametrize("kind", KINDS)
async def test_respond_means_landed(tmp_path: Path, kind: str) -> None:
    respond = {"type": "respond", "message": '{"effect_id": "eff_1"}'}
    state, op, provider = await answered(tmp_path, kind, respond)
    assert not state.interrupts
    [message] = tool_messages(state)
    assert message.status == "success"
    assert message.content.startswith("The send effect landed: an operator checked")
    assert 'Receipt: {"effect_id": "eff_1"}' in message.content
    assert message.artifact["receipt"] == {"effect_id": "eff_1"}
    assert op is not None and op.state is State.CONFIRMED
    assert provider.count_requests("apply") == 1 and sum(provider.count_effects().values()) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_approve_means_not_landed_and_sends_again(tmp_path: Path, kind: str) -> None:
    # "approve" in a review: the operator says it did not land; it is sent again,
    # once, as the same operation.
    state, op, provider = await answered(tmp_path, kind, {"type": "approve"})
    assert not state.interrupts
    [message] = tool_messages(state)
    assert message.status == "success" and message.content.startswith("sent eff_")
    assert op is not None and op.state is State.CONFIRMED and op.attempts == 2
    assert provider.count_requests("apply") == 2  # the operator said it had not landed


@pytest.mark.parametrize("kind", KINDS)
async def test_reject_means_abandon(tmp_path: Path, kind: str) -> None:
    state, op, provider = await answered(tmp_path, kind, {"type": "reject", "message": "customer cancelled"})
    [message] = tool_messages(state)
    assert message.status == "error"
    assert "NOT confirmed" in message.content and "Reason: customer cancelled" in message.content
    assert op is not None and op.state is State.ABANDONED
    assert op.evidence is not None and op.evidence["reason"] == "customer cancelled"
    assert provider.count_requests("apply") == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_unfit_hitl_answers_keep_the_review_pending(tmp_path: Path, kind: str) -> None:
    async with at_review(tmp_path, kind) as (agent, pending, saver, provider):
        op_id = pending.value["operations"][0]["operation_id"]
        # An edit is not a verdict, and two decisions for one operation do not fit.
        edit = {"type": "edit", "edited_action": {"name": "send", "args": {"operation": "x"}}}
        for answer in ({"decisions": [edit]}, {"decisions": [{"type": "approve"}] * 2}):
            await agent.ainvoke(Command(resume={pending.id: answer}), CONFIG)
            state = await agent.aget_state(CONFIG)
            [again] = state.interrupts
            assert again.value["operations"][0]["operation_id"] == op_id
            op = await saver.ledger.get(op_id)
            assert op is not None and not op.terminal
            pending = again
        assert not tool_messages(state)
        # The answer by operation id still works, as before.
        await agent.ainvoke(Command(resume={pending.id: {op_id: {"type": "landed"}}}), CONFIG)
        op = await saver.ledger.get(op_id)
    assert op is not None and op.state is State.CONFIRMED
    assert provider.count_requests("apply") == 1


async def test_several_operations_in_one_node_review_answered_in_order(tmp_path: Path) -> None:
    async with at_review(tmp_path, "graph", calls=2) as (agent, pending, saver, provider):
        assert [r["args"]["operation"] for r in pending.value["action_requests"]] == ["t1:0", "t1:1"]
        answer = {"decisions": [{"type": "respond", "message": "eff_1"}, {"type": "reject"}]}
        await agent.ainvoke(Command(resume={pending.id: answer}), CONFIG)
        state = await agent.aget_state(CONFIG)
        ops = [await saver.ledger.get(e["operation_id"]) for e in pending.value["operations"]]
    assert [op.state for op in ops if op] == [State.CONFIRMED, State.ABANDONED]
    first, second = tool_messages(state)
    assert "landed" in first.content and "Receipt: eff_1" in first.content
    assert second.status == "error" and "rejected by the reviewer" in second.content
    assert provider.count_requests("apply") == 2


def test_answer_schema_takes_both_shapes_and_never_ignore() -> None:
    """The interrupt's response schema (published to clients such as the server's API)
    takes the answer by operation id (what ``resume_command`` builds) and the HITL
    shape, and refuses Agent Inbox's "ignore"."""
    parsed = EffectAnswer.model_validate({"op_1": {"type": "landed", "receipt": {"ticket": "HD-1"}}})
    assert parsed.root.root["op_1"].receipt == {"ticket": "HD-1"}  # type: ignore[union-attr]
    with pytest.raises(Exception, match="validation"):
        EffectAnswer.model_validate({"decisions": [{"type": "ignore"}]})


async def test_a_replayed_approval_answer_is_not_read_as_a_review_verdict(tmp_path: Path) -> None:
    # Agent Inbox answers by position. Round 0 asks for an approval; the approved call
    # times out after the effect landed, so round 1 asks for a review. On that resume the
    # node re-runs from the top and LangGraph hands the round-0 answer ("approve") back to
    # the first question asked, now the review: read as "not landed" it would re-send a
    # blind effect nobody said was missing.
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, StateGraph
    from langgraph.graph.message import MessagesState

    from langgraph_effects import Effect, EffectToolNode

    sent: list[str] = []

    @tool
    def send(to: str) -> str:
        """Send a message."""
        sent.append(to)
        raise TimeoutError("the provider did not answer in time")

    def model(state: MessagesState) -> dict[str, Any]:
        call = {"name": "send", "args": {"to": "ada"}, "id": "call-1", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call], id="ai-1")]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", EffectToolNode([send], effects={"send": Effect(approval="always")}))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        graph = builder.compile(checkpointer=saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        [approval] = (await graph.aget_state(CONFIG)).interrupts
        assert approval.value["type"] != "effect_review"
        await graph.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), CONFIG)
        [review] = (await graph.aget_state(CONFIG)).interrupts
        assert review.value["type"] == "effect_review"
        assert sent == ["ada"]
        landed = {"decisions": [{"type": "respond", "message": '{"id": "r1"}'}]}
        await graph.ainvoke(Command(resume=landed), CONFIG)
        state = await graph.aget_state(CONFIG)
        [op] = await saver.ledger.unresolved() or [None]
    assert sent == ["ada"]  # never re-sent on the replayed "approve"
    assert op is None and not state.interrupts
    [message] = tool_messages(state)
    assert message.status != "error" and "r1" in str(message.artifact or message.content)


@pytest.mark.parametrize("kind", KINDS)
async def test_checkpoints_hold_no_package_types(tmp_path: Path, kind: str) -> None:
    # Evidence travels into checkpoints (the review interrupt, the landed message's
    # artifact). LangGraph's serializer warns on, and will refuse, types it was not told
    # about: what we put there must be plain JSON values.
    async with at_review(tmp_path, kind) as (agent, _, saver, _):
        answer = {"decisions": [{"type": "respond", "message": '{"effect_id": "eff_1"}'}]}
        await agent.ainvoke(Command(resume=answer), CONFIG)
        blobs: list[bytes] = []
        async for saved in saver.alist(CONFIG):
            blobs.append(saver.serde.dumps_typed(saved.checkpoint)[1])
            blobs += [saver.serde.dumps_typed(value)[1] for _, _, value in saved.pending_writes or []]
    assert len(blobs) > 3
    assert not [b for b in blobs if b"langgraph_effects" in b]
async def test_an_ignored_positional_answer_is_not_applied_when_the_review_shrinks(
    tmp_path: Path,
) -> None:
    # Round 0 answers a review of two operations with one positional decision: it does
    # not fit and is ignored. Round 1 settles the first operation by id. Every later
    # resume re-runs the node, and LangGraph hands the round-0 answer back to round 0,
    # where only the second operation is still under review: read again, "approve"
    # would now fit and re-send a blind effect nobody said was missing. (EffectToolNode
    # only: under create_agent each call is its own task with its own one-item review.)
    async with at_review(tmp_path, "graph", calls=2) as (agent, pending, saver, provider):
        first, second = (e["operation_id"] for e in pending.value["operations"])
        await agent.ainvoke(Command(resume={pending.id: {"decisions": [{"type": "approve"}]}}), CONFIG)
        [pending] = (await agent.aget_state(CONFIG)).interrupts
        assert [e["operation_id"] for e in pending.value["operations"]] == [first, second]
        by_id = {pending.id: {first: {"type": "landed"}}}
        await agent.ainvoke(Command(resume=by_id), CONFIG)
        await agent.ainvoke(Command(resume=by_id), CONFIG)  # the same answer again
        [pending] = (await agent.aget_state(CONFIG)).interrupts
        assert [e["operation_id"] for e in pending.value["operations"]] == [second]
        op = await saver.ledger.get(second)
        assert op is not None and op.state is State.REVIEW and not op.decisions
        assert provider.count_requests("apply") == 2  # the two first attempts only
        await agent.ainvoke(Command(resume={pending.id: {second: {"type": "landed"}}}), CONFIG)
        state = await agent.aget_state(CONFIG)
        ops = [await saver.ledger.get(i) for i in (first, second)]
    assert not state.interrupts
    assert [op.state for op in ops if op] == [State.CONFIRMED, State.CONFIRMED]
    assert provider.count_requests("apply") == 2
