"""Operator answers can never wedge a thread (issue 28).

LangGraph stores an interrupt's answer that passes its ``response_schema`` and replays
it on every resume, so an answer the node raised on used to wedge the thread for good.
Now the documented limits are part of the schema (an oversized answer is refused at
the door, nothing stored, the same question stays open), and whatever the schema lets
through is either applied or refused and asked again in a new round whose description
says why. An approver's edit is checked against the tool's schema before anything is
recorded. Effects are counted from the provider's own records; states from the ledger.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.errors import is_invalid_resume
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import MessagesState
from langgraph.types import Command
from pydantic import ValidationError

from langgraph_effects import AsyncEffectSqliteSaver, Effect, State
from langgraph_effects._integrations.middleware import EffectMiddleware
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime.context import current_operation
from langgraph_effects._runtime.decisions import resume_command
from langgraph_effects._runtime.messages import MAX_EVIDENCE_CHARS, MAX_RECEIPT_BYTES
from langgraph_effects.ledger.base import OperationQuery
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.testing import Provider, ScriptedChatModel
from tests.test_node_crash import run_worker
from tests.test_review_hitl import KINDS, at_review, blind_spec, tool_messages

CONFIG: Any = {"configurable": {"thread_id": "t1"}}
REFUSED = "Your previous answer was not applied"


async def refused_at_the_door(agent: Any, answer: Any) -> None:
    """LangGraph refuses ``answer`` against the response schema: nothing is stored."""
    with pytest.raises(ValidationError) as caught:
        await agent.ainvoke(Command(resume=answer), CONFIG)
    assert is_invalid_resume(caught.value)


async def asked_again(agent: Any, answer: Any, before: Any) -> Any:
    """``answer`` passes the schema, is stored, refused, and asked again in a new round."""
    await agent.ainvoke(Command(resume=answer), CONFIG)
    [again] = (await agent.aget_state(CONFIG)).interrupts
    assert again.id != before.id  # a new interrupt: the next answer reaches a live question
    assert again.value["operations"] == before.value["operations"]
    for request in again.value["action_requests"]:
        assert request["description"].startswith(REFUSED)
    assert again.value["refused_answer"].startswith(REFUSED)
    return again


# -- the limits are in the schema the client sees ------------------------------------


async def test_the_response_schema_publishes_the_limits(tmp_path: Path) -> None:
    async with at_review(tmp_path, "graph") as (_, pending, _, _):
        schema = pending.response_schema  # what LangGraph surfaces to clients (JSON schema)
    assert isinstance(schema, dict)
    defs = schema["$defs"]
    assert defs["RespondDecision"]["properties"]["message"]["maxLength"] == MAX_RECEIPT_BYTES
    [text, _] = defs["RejectDecision"]["properties"]["message"]["anyOf"]
    assert text == {"maxLength": MAX_EVIDENCE_CHARS, "type": "string"}
    assert defs["AbandonVerdict"]["properties"]["reason"]["maxLength"] == MAX_EVIDENCE_CHARS
    assert "65,536 bytes" in defs["LandedVerdict"]["properties"]["receipt"]["description"]
    json.dumps(schema)  # plain JSON, as a client receives it


# -- the answers that wedged a thread, then a valid one -------------------------------

def valid_answer(valid: str, pending: Any, op_id: str) -> Any:
    """The three valid answers that all failed on a wedged thread."""
    if valid == "respond":
        return Command(resume={"decisions": [{"type": "respond", "message": '{"effect_id": "eff_1"}'}]})
    if valid == "resume_command":
        return resume_command([pending], {op_id: {"type": "landed", "receipt": {"effect_id": "eff_1"}}})
    return Command(resume={"decisions": [{"type": "reject", "message": "customer cancelled"}]})


@pytest.mark.parametrize("valid", ["respond", "resume_command", "reject"])
@pytest.mark.parametrize("kind", KINDS)
async def test_wedging_answers_then_a_valid_one_is_applied(tmp_path: Path, kind: str, valid: str) -> None:
    async with at_review(tmp_path, kind) as (agent, pending, saver, provider):
        op_id = pending.value["operations"][0]["operation_id"]
        before = await saver.ledger.get(op_id)

        # A reviewer pastes the provider's whole response, or a long reject note: the
        # schema refuses them before LangGraph stores anything; the question stays open.
        await refused_at_the_door(agent, {"decisions": [{"type": "respond", "message": "x" * 70_000}]})
        await refused_at_the_door(agent, {"decisions": [{"type": "reject", "message": "y" * 5_000}]})
        await refused_at_the_door(agent, {op_id: {"type": "abandon", "reason": "z" * 5_000}})
        [still] = (await agent.aget_state(CONFIG)).interrupts
        assert still.id == pending.id

        # Under the schema's character count but over the byte limit as a receipt
        # (two bytes a character): stored by LangGraph, refused by the node, asked again.
        wide = {"decisions": [{"type": "respond", "message": "é" * 40_000}]}
        pending = await asked_again(agent, wide, pending)
        assert f"over the {MAX_RECEIPT_BYTES:,}-byte limit" in pending.value["refused_answer"]
        # Two decisions for one operation, and an id that is not in this review.
        pending = await asked_again(agent, {"decisions": [{"type": "approve"}] * 2}, pending)
        assert "2 decision(s) for 1 operation(s)" in pending.value["refused_answer"]
        pending = await asked_again(agent, {"op_nope": {"type": "landed"}}, pending)
        assert "'op_nope' is not in this question" in pending.value["refused_answer"]
        op = await saver.ledger.get(op_id)
        assert op == before  # nothing recorded for any of them

        await agent.ainvoke(valid_answer(valid, pending, op_id), CONFIG)
        state = await agent.aget_state(CONFIG)
        op = await saver.ledger.get(op_id)
        # Every later resume replays the stored refused answers: still no wedge.
        await agent.ainvoke(None, CONFIG)
    assert not state.interrupts
    [message] = tool_messages(state)
    assert op is not None
    if valid == "reject":
        assert op.state is State.ABANDONED and "customer cancelled" in message.content
    else:
        assert op.state is State.CONFIRMED and message.artifact["receipt"] == {"effect_id": "eff_1"}
    assert [d for d, _ in op.decisions] == [f"review:3:{op_id}"]  # the fourth answer, round 3
    assert provider.count_requests("apply") == 1  # never re-sent


@pytest.mark.parametrize("kind", KINDS)
async def test_nul_is_applied_and_lone_surrogates_are_refused(tmp_path: Path, kind: str) -> None:
    async with at_review(tmp_path, kind) as (agent, pending, saver, provider):
        op_id = pending.value["operations"][0]["operation_id"]
        # Not valid text: a checkpoint cannot store it, so the schema refuses it.
        await refused_at_the_door(agent, {"decisions": [{"type": "reject", "message": "a\ud800b"}]})
        await refused_at_the_door(agent, {"op_\udc00": {"type": "landed"}})
        await refused_at_the_door(agent, {op_id: {"type": "landed", "receipt": {"k\ud800": 1}}})
        # A NUL is text: applied as it is.
        nul = {"decisions": [{"type": "reject", "message": "no\x00pe"}]}
        await agent.ainvoke(Command(resume=nul), CONFIG)
        state = await agent.aget_state(CONFIG)
        op = await saver.ledger.get(op_id)
    assert not state.interrupts
    assert op is not None and op.state is State.ABANDONED
    assert op.evidence is not None and op.evidence["reason"] == "no\x00pe"
    [message] = tool_messages(state)
    assert "no\x00pe" in message.content
    assert provider.count_requests("apply") == 1


async def test_a_part_of_an_answer_that_names_other_operations_is_shown_next(tmp_path: Path) -> None:
    async with at_review(tmp_path, "graph", calls=2) as (agent, pending, saver, provider):
        first, second = (e["operation_id"] for e in pending.value["operations"])
        answer = {first: {"type": "landed"}, "op_elsewhere": {"type": "landed"}}
        await agent.ainvoke(Command(resume={pending.id: answer}), CONFIG)
        [again] = (await agent.aget_state(CONFIG)).interrupts
        assert [e["operation_id"] for e in again.value["operations"]] == [second]
        description = again.value["action_requests"][0]["description"]
        assert description.startswith("Part of your previous answer was not applied")
        assert "'op_elsewhere' is not in this question" in description
        await agent.ainvoke(Command(resume={again.id: {second: {"type": "landed"}}}), CONFIG)
        ops = [await saver.ledger.get(i) for i in (first, second)]
        state = await agent.aget_state(CONFIG)
    assert not state.interrupts
    assert [op.state for op in ops if op] == [State.CONFIRMED, State.CONFIRMED]
    assert provider.count_requests("apply") == 2


# -- approvals: the note cap, and edits checked before anything is recorded ------------


def approval_agent(provider: Provider, saver: Any, *, kind: str, contract: str) -> Any:
    """A payment tool behind an approval: ``amount: int``. ``dedup`` sends the provider
    key (the provider replays a repeat); ``blind`` sends none."""

    @tool
    def pay(invoice: str, amount: int) -> str:
        """Pay an invoice."""
        key = current_operation().provider_key if contract == "dedup" else None
        return provider.apply({"operation": invoice, "amount": amount}, key=key).effect_id

    effect = Effect(approval="always", dedup_window=3600 if contract == "dedup" else None)

    def script(messages: Any) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage("done", id="final")
        args = {"invoice": "inv-1", "amount": 100}
        return AIMessage("", tool_calls=[{"name": "pay", "args": args, "id": "call-1"}], id="ai-1")

    if kind == "create_agent":
        from langchain.agents import create_agent

        model = ScriptedChatModel(script=script)
        middleware = [EffectMiddleware({"pay": effect})]
        return create_agent(model, tools=[pay], middleware=middleware, checkpointer=saver)

    def model_node(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [script(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model_node)
    builder.add_node("tools", EffectToolNode([pay], effects={"pay": effect}))
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def edit(args: dict[str, Any]) -> dict[str, Any]:
    return {"decisions": [{"type": "edit", "edited_action": {"name": "pay", "args": args}}]}


@pytest.mark.parametrize("kind", KINDS)
async def test_an_approval_note_over_the_cap_is_refused(tmp_path: Path, kind: str) -> None:
    provider = Provider(tmp_path / "p.sqlite", "blind")
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "a.sqlite") as saver:
        await saver.setup()
        agent = approval_agent(provider, saver, kind=kind, contract="blind")
        await agent.ainvoke({"messages": [HumanMessage("pay it")]}, CONFIG)
        [pending] = (await agent.aget_state(CONFIG)).interrupts
        op_id = pending.value["operations"][0]["operation_id"]
        huge = {"decisions": [{"type": "reject", "message": "n" * 100_000}]}
        await refused_at_the_door(agent, huge)
        op = await saver.ledger.get(op_id)
        assert op is not None and op.state is State.PENDING and not op.decisions
        note = "n" * MAX_EVIDENCE_CHARS  # exactly at the cap: taken whole
        await agent.ainvoke(Command(resume={"decisions": [{"type": "reject", "message": note}]}), CONFIG)
        op = await saver.ledger.get(op_id)
    assert op is not None and op.state is State.ABANDONED
    assert op.evidence is not None and op.evidence["message"] == note
    assert provider.count_requests() == 0


@pytest.mark.parametrize("contract", ["dedup", "blind"])
@pytest.mark.parametrize("kind", KINDS)
async def test_an_edit_the_tool_schema_refuses_is_asked_again(
    tmp_path: Path, kind: str, contract: str
) -> None:
    provider = Provider(tmp_path / "p.sqlite", contract)  # type: ignore[arg-type]
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "a.sqlite") as saver:
        await saver.setup()
        agent = approval_agent(provider, saver, kind=kind, contract=contract)
        await agent.ainvoke({"messages": [HumanMessage("pay it")]}, CONFIG)
        [pending] = (await agent.aget_state(CONFIG)).interrupts
        op_id = pending.value["operations"][0]["operation_id"]

        pending = await asked_again(agent, edit({"invoice": "inv-1", "amount": "one hundred"}), pending)
        assert pending.value["type"] == "effect_approval"
        assert "do not fit pay's schema (amount:" in pending.value["refused_answer"]
        pending = await asked_again(agent, edit({"invoice": "inv-1"}), pending)
        assert "amount: Field required" in pending.value["refused_answer"]
        # An edit may not switch tools either; a review's answer does not fit an approval.
        switch = {"decisions": [{"type": "edit", "edited_action": {"name": "refund", "args": {}}}]}
        pending = await asked_again(agent, switch, pending)
        pending = await asked_again(agent, {"decisions": [{"type": "respond", "message": "ok"}]}, pending)
        assert "respond belongs to a review" in pending.value["refused_answer"]

        # Nothing was sent, nothing counted, no operation but the one asked about.
        assert provider.count_requests() == 0
        ops = await saver.ledger.list_operations(OperationQuery(thread_id="t1"))
        assert [(o.op_id, o.state, o.attempts, o.decisions) for o in ops] == [(op_id, State.PENDING, 0, ())]
        assert [a.event for a in await saver.ledger.audit(op_id)] == ["intent"]

        await agent.ainvoke(Command(resume=edit({"invoice": "inv-1", "amount": 90})), CONFIG)
        state = await agent.aget_state(CONFIG)
        ops = await saver.ledger.list_operations(OperationQuery(thread_id="t1"))
    assert not state.interrupts
    [record] = provider.effects()
    assert record.payload == {"operation": "inv-1", "amount": 90}
    assert provider.count_requests("apply") == 1
    by_state = {o.state: o for o in ops}
    assert set(by_state) == {State.ABANDONED, State.CONFIRMED}  # the original, superseded; the edit
    assert by_state[State.CONFIRMED].attempts == 1
    assert not [o for o in ops if o.state is State.REVIEW]  # nobody asked "may it have landed?"


# -- a new process resumes the thread after a stored bad answer ------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_new_processes_resume_after_a_stored_bad_answer(tmp_path: Path, kind: str) -> None:
    spec = blind_spec(tmp_path, kind)
    first = run_worker(spec)  # process 1: the call times out after the effect; a review
    [asked] = first["interrupts"]
    op_id = asked["value"]["operations"][0]["operation_id"]

    # Process 2: an answer that passes the schema but fits no review (an edit): LangGraph
    # stores it; the node refuses it and asks again, with the reason.
    bad = [{"type": "edit", "edited_action": {"name": "send", "args": {"operation": "x"}}}]
    second = run_worker(replace(spec, hitl=bad))
    [again] = second["interrupts"]
    assert again["id"] != asked["id"]
    assert again["value"]["refused_answer"].startswith(REFUSED)
    assert "a review cannot take 'edit'" in again["value"]["action_requests"][0]["description"]

    # Process 3 replays the stored bad answer (refused again), then applies this one.
    landed = [{"type": "respond", "message": '{"effect_id": "eff_1"}'}]
    third = run_worker(replace(spec, hitl=landed))
    assert third["interrupts"] == []
    [message] = [m for m in third["messages"] if m["type"] == "tool"]
    assert message["status"] == "success" and message["artifact"]["receipt"] == {"effect_id": "eff_1"}

    async def read() -> Any:
        async with SqliteLedger.from_conn_string(spec.db) as ledger:
            return await ledger.get(op_id)

    op = asyncio.run(read())
    assert op is not None and op.state is State.CONFIRMED
    assert [d for d, _ in op.decisions] == [f"review:1:{op_id}"]
    assert Provider(spec.provider, "blind").count_requests("apply") == 1
