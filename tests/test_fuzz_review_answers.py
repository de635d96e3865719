"""Property tests (hypothesis) over malformed review answers (the tool calls:
tests/test_fuzz_tool_calls.py).

A thread paused on an ``effect_review`` interrupt gets generated
resume payloads: unknown operation ids, ids that look like interrupt ids, wrong
decision types, decisions for an operation that is not under review, ``abandon``
without a reason, extra fields, non-dict values, approval-shaped answers, mixtures
with one valid decision, wrapped by interrupt id or bare. Properties: an invalid
answer keeps the interrupt pending (a pydantic ValidationError, or the interrupt is
still there) and changes nothing; a valid decision is applied exactly once; nothing
is sent twice; re-sending the same answer changes nothing; and a valid answer after
any amount of garbage still settles the thread.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import uuid
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from langgraph_effects import (
    InMemoryLedger,
    State,
    attach_ledger,
    resume_command,
)
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects.lab.providers import Provider
from tests.helpers.agent import State as AgentState
from tests.helpers.fuzz import (
    EFFECTS,
    FUZZ,
    INTS,
    JUNK,
    NOT_A_DICT,
    all_ops,
    make_tools,
)

pytestmark = pytest.mark.slow  # long property runs: many examples of whole graphs

# -- review-answer properties ------------------------------------------------------------

VALID_DECISIONS = [
    {"type": "landed"},
    {"type": "landed", "receipt": {"id": "R-1"}},
    {"type": "not_landed"},
    {"type": "abandon", "reason": "operator closed it"},
]
INVALID_DECISIONS = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["approve", "edit", "reject", "maybe", "LANDED", ""])}),
    st.fixed_dictionaries({"type": st.text(max_size=8)}).filter(
        lambda d: d["type"] not in ("landed", "not_landed", "abandon")
    ),
    st.just({"type": "abandon"}),  # a reason is required
    st.just({"type": "abandon", "reason": ""}),
    st.just({"type": "abandon", "reason": 7}),
    st.just({"type": "not_landed", "receipt": "x"}),  # extra field
    st.just({"type": "landed", "note": "extra"}),
    st.just({"receipt": "no type"}),
    NOT_A_DICT,
)
KEYS = ["review0", "review1", "confirmed", "unknown_op", "hex"]
HEX = re.compile(r"^[0-9a-f]{32}$")


@st.composite
def answers(draw: st.DrawFn) -> tuple[str, Any]:
    """(wrapping, answer) with symbolic operation keys resolved later."""
    shape = draw(st.sampled_from(["valid"] * 4 + ["mixed"] * 3 + ["junk", "approval"]))
    if shape == "junk":
        # (a bare ``None`` is left out: LangGraph itself fails on Command(resume=None))
        answer: Any = draw(
            st.booleans() | INTS | st.floats() | st.text(max_size=12) | st.lists(JUNK, max_size=3)
        )
    elif shape == "approval":
        answer = {
            "decisions": draw(
                st.lists(st.sampled_from([{"type": "approve"}, {"type": "reject"}, {"type": "bogus"}]),
                         max_size=2)
            )
        }
    else:
        decisions = st.sampled_from(VALID_DECISIONS)
        if shape == "mixed":
            decisions = decisions | INVALID_DECISIONS
        answer = draw(st.dictionaries(st.sampled_from(KEYS), decisions, min_size=1, max_size=4))
    wrapping = draw(st.sampled_from(["by_interrupt", "by_interrupt", "bare", "stale_interrupt"]))
    return wrapping, answer


def valid_decision(value: Any) -> bool:
    """The answer schema, written out independently of the package's models."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    allowed = {"landed": {"type", "receipt"}, "not_landed": {"type"}, "abandon": {"type", "reason"}}
    if kind not in allowed or not set(value) <= allowed[kind]:
        return False
    if kind == "abandon":
        return isinstance(value.get("reason"), str) and len(value["reason"]) >= 1
    return True


def valid_approval(value: Any) -> bool:
    if not (isinstance(value, dict) and set(value) == {"decisions"} and isinstance(value["decisions"], list)):
        return False
    return all(isinstance(d, dict) and d.get("type") in ("approve", "reject") for d in value["decisions"])


@dataclass
class ReviewHarness:
    """One graph, checkpointer and ledger for every example; a fresh thread each time."""

    dedup: Provider
    blind: Provider
    saver: InMemorySaver
    graph: Any
    ledger: InMemoryLedger = field(default_factory=InMemoryLedger)

    def fresh_ledger(self) -> None:
        """A new ledger per example: an asyncio.Lock must not outlive its event loop."""
        self.ledger = InMemoryLedger()
        attach_ledger(self.saver, self.ledger)


_REVIEW: dict[str, ReviewHarness] = {}
_TMP = tempfile.TemporaryDirectory()


def review_harness() -> ReviewHarness:
    if "h" not in _REVIEW:
        dedup = Provider(Path(_TMP.name) / "dedup.sqlite", "dedup").setup()
        blind = Provider(Path(_TMP.name) / "blind.sqlite", "blind").setup()
        tools = make_tools(dedup, blind)

        def model(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
            if any(isinstance(m, ToolMessage) for m in state["messages"]):
                return {}
            thread = config["configurable"]["thread_id"]
            calls = [
                # Fails before the request leaves: the truth is "not landed".
                {"name": "notify", "args": {"label": f"{thread}:0", "fail": "error_before"}, "id": "c0"},
                {"name": "notify", "args": {"label": f"{thread}:1", "fail": "error_before"}, "id": "c1"},
                {"name": "notify", "args": {"label": f"{thread}:2"}, "id": "c2"},  # confirmed
            ]
            return {"messages": [AIMessage("", tool_calls=calls, id=f"ai-{thread}")]}

        saver = InMemorySaver()
        builder = StateGraph(AgentState)
        builder.add_node("model", model)
        builder.add_node("tools", EffectToolNode(tools, effects=EFFECTS))
        builder.add_edge(START, "model")
        builder.add_edge("model", "tools")
        builder.add_edge("tools", END)
        _REVIEW["h"] = ReviewHarness(dedup, blind, saver, builder.compile(checkpointer=saver))
    return _REVIEW["h"]


async def snapshot(h: ReviewHarness, thread: str) -> tuple[dict[str, tuple[str, int, int]], int]:
    """(label -> (state, version, audit length)) for the thread, and the blind provider's
    request count for it."""
    out = {}
    for op in await all_ops(h.ledger):
        if op.thread_id == thread:
            out[str(op.args["label"])] = (op.state.value, op.version, len(await h.ledger.audit(op.op_id)))
    sent = sum(1 for e in h.blind.effects() if e.operation.startswith(f"{thread}:"))
    return out, sent


def verdicts(trail: list[Any]) -> int:
    return sum(1 for entry in trail if (entry.evidence or {}).get("kind") == "verdict")


@settings(FUZZ, max_examples=120)
@example(  # a positional answer that did not fit, then one operation settled by id: on the
    # re-sent answer the first one must not be re-read against the shorter review
    sequence=[("by_interrupt", {"decisions": [{"type": "approve"}]}),
              ("by_interrupt", {"review0": {"type": "landed"}})],
    hexes=["0" * 32, "1" * 32],
)
@given(sequence=st.lists(answers(), min_size=1, max_size=3), hexes=st.lists(
    st.text(alphabet="0123456789abcdef", min_size=32, max_size=32), min_size=2, max_size=2))
def test_generated_review_answers(sequence: list[tuple[str, Any]], hexes: list[str]) -> None:
    h = review_harness()
    h.fresh_ledger()
    thread = f"r-{uuid.uuid4().hex[:12]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread}}

    async def go() -> None:
        await h.graph.ainvoke({"messages": [HumanMessage("go")]}, config)
        state = await h.graph.aget_state(config)
        [pending] = state.interrupts
        under_review = [e["operation_id"] for e in pending.value["operations"]]
        assert len(under_review) == 2
        confirmed = next(
            op.op_id
            for op in await all_ops(h.ledger)
            if op.thread_id == thread and op.state is State.CONFIRMED
        )
        ids = {
            "review0": under_review[0],
            "review1": under_review[1],
            "confirmed": confirmed,
            "unknown_op": "op_" + "0" * 31 + "1",
            "hex": hexes[0],
        }
        decided: dict[str, str] = {}  # op id -> decision type, as applied

        for wrapping, symbolic in sequence:
            state = await h.graph.aget_state(config)
            before, sent_before = await snapshot(h, thread)
            answer = (
                {ids[k]: v for k, v in symbolic.items()}
                if isinstance(symbolic, dict) and "decisions" not in symbolic
                else symbolic
            )
            if not state.interrupts:
                break
            [pending] = state.interrupts
            if wrapping == "by_interrupt":
                payload: Any = {pending.id: answer}
            elif wrapping == "stale_interrupt":
                payload = {hexes[1]: answer}
            else:
                payload = answer

            # What the graph should make of it (an independent reading of the schema).
            reaches_node = wrapping == "by_interrupt" or (
                wrapping == "bare"
                and not (isinstance(answer, dict) and answer and all(
                    isinstance(k, str) and HEX.match(k) for k in answer))
            )
            schema_ok = valid_approval(answer) or (
                isinstance(answer, dict) and all(valid_decision(v) for v in answer.values())
                and "decisions" not in answer
            )
            if reaches_node and not schema_ok and isinstance(answer, dict) and not answer:
                schema_ok = True  # {} is an empty review answer
            ordered = [e["operation_id"] for e in pending.value["operations"]]
            listed = set(ordered)
            applies = (
                {k: v for k, v in answer.items() if k in listed}
                if reaches_node and schema_ok and isinstance(answer, dict) and not valid_approval(answer)
                else {}
            )
            if reaches_node and valid_approval(answer) and len(answer["decisions"]) == len(ordered):
                # LangChain's HITL shape answers a review by position: approve = not landed
                # (send again), reject = abandon; another count of decisions is ignored.
                hitl = {"approve": "not_landed", "reject": "abandon"}
                applies = {
                    op_id: {"type": hitl[d["type"]]}
                    for op_id, d in zip(ordered, answer["decisions"], strict=True)
                }

            raised: BaseException | None = None
            try:
                await h.graph.ainvoke(Command(resume=payload), config)
            except pydantic.ValidationError as error:
                raised = error
            after, sent_after = await snapshot(h, thread)
            state_after = await h.graph.aget_state(config)

            event("answer " + ("applied" if applies else "rejected" if raised else "ignored"))
            if raised is not None:
                assert reaches_node and not schema_ok, (payload, raised)
            if not applies:
                # Invalid, misaddressed, or naming nothing under review: nothing changes
                # and the same operations are still waiting.
                assert after == before, (payload, before, after)
                assert sent_after == sent_before
                [still] = state_after.interrupts
                assert {e["operation_id"] for e in still.value["operations"]} == listed
                if raised is not None and wrapping == "bare":
                    # LangGraph keeps an invalid bare answer as a pending resume value and
                    # hands it to the node's next interrupt() (see test_malformed_calls::
                    # test_invalid_bare_answer_does_not_poison_the_next_round); only an
                    # answer that settles every listed operation at once gets past it.
                    break
                continue
            for op_id, decision in applies.items():
                decided[op_id] = decision["type"]
            for op_id in listed:
                op = await h.ledger.get(op_id)
                assert op is not None
                trail = await h.ledger.audit(op_id)
                if op_id in decided:
                    assert verdicts(trail) == 1, trail  # applied exactly once
                    expected = {"landed": State.CONFIRMED, "not_landed": State.CONFIRMED,
                                "abandon": State.ABANDONED}[decided[op_id]]
                    assert op.state is expected
                else:
                    assert op.state is State.REVIEW and verdicts(trail) == 0
            remaining = listed - set(decided)
            if remaining:
                [still] = state_after.interrupts
                assert {e["operation_id"] for e in still.value["operations"]} == remaining
            else:
                assert state_after.interrupts == ()

            # Re-sending the very same payload changes nothing.
            again_before = await snapshot(h, thread)
            with suppress(pydantic.ValidationError):
                await h.graph.ainvoke(Command(resume=payload), config)
            assert await snapshot(h, thread) == again_before

        # Nothing was sent twice: only a "not landed" verdict sends, and only once.
        _, sent = await snapshot(h, thread)
        effects = Counter(e.operation for e in h.blind.effects() if e.operation.startswith(f"{thread}:"))
        assert all(n == 1 for n in effects.values()), effects
        assert sent == 1 + sum(1 for kind in decided.values() if kind == "not_landed")

        # After any amount of garbage, a valid answer still settles the thread.
        state = await h.graph.aget_state(config)
        if state.interrupts:
            entries = state.interrupts[0].value["operations"]
            rest = {e["operation_id"]: {"type": "not_landed"} for e in entries}
            await h.graph.ainvoke(resume_command(state.interrupts, rest), config)
            state = await h.graph.aget_state(config)
        assert state.interrupts == ()
        messages = [m for m in state.values["messages"] if isinstance(m, ToolMessage)]
        assert sorted(m.tool_call_id for m in messages) == ["c0", "c1", "c2"]
        assert all(
            op.terminal for op in await all_ops(h.ledger) if op.thread_id == thread
        )
        effects = Counter(e.operation for e in h.blind.effects() if e.operation.startswith(f"{thread}:"))
        assert all(n == 1 for n in effects.values()), effects

    asyncio.run(go())
