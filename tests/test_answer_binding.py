"""A stored answer is bound to the question it was given for (issue 42, item 2).

One AIMessage, two blind calls in one ``EffectToolNode`` task: ``ship_x`` applies its
effect and times out, ``ship_y`` times out having applied nothing; one review lists
both. A reviewer answers in LangChain's HITL shape (as Agent Inbox does) with one
decision for the two operations: refused, nothing written. Then ``ship_x`` is settled
some other way (the console, ``resolve()``, a late result, a lookup) and the thread
is resumed. LangGraph hands the stored answer back to the node's first question,
which now lists only ``ship_y``: one decision would fit. It was applied: ``ship_y``
recorded ``confirmed`` and the model told it landed, with no ``ship_y`` request ever
sent. Now the answer stays refused (its question changed) and ``ship_y`` is asked
about again. Effects and requests are counted at the provider; states in the ledger;
the messages are the ones the model reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command

from langgraph_effects import (
    AsyncEffectPostgresSaver,
    AsyncEffectSqliteSaver,
    Budget,
    Effect,
    Inconclusive,
    Landed,
    LookupRequest,
    NotLanded,
    State,
    current_operation,
    recover,
)
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime import messages
from langgraph_effects._runtime.operator import resolve
from langgraph_effects.core import protocol
from langgraph_effects.core.operation import Operation
from langgraph_effects.lab.providers import EffectRecord
from langgraph_effects.testing import Provider
from tests.helpers import run_console
from tests.helpers.agent import tool_loop

CONFIG: Any = {"configurable": {"thread_id": "t1"}}
REFUSED = "Your previous answer was not applied"
#: One decision for a review of two operations: Agent Inbox's "it landed" for one row.
ONE_DECISION = {"decisions": [{"type": "respond", "message": '{"id": "x-1"}'}]}


@dataclass
class Shop:
    """The two shipping tools over one provider, and a switch for ``ship_x``'s lookup."""

    provider: Provider
    lookup_up: bool = False

    def tools(self) -> list[Any]:
        provider = self.provider

        @tool
        def ship_x(order: str) -> str:
            """Ship order x."""
            op = current_operation()
            receipt = provider.apply({"operation": "ship_x"}, key=op.provider_key)
            raise TimeoutError(f"the provider did not answer in time ({receipt.effect_id} applied)")

        @tool
        def ship_y(order: str) -> str:
            """Ship order y."""
            op = current_operation()
            if op.attempt == 1:
                raise TimeoutError("the provider did not answer in time")
            return f"shipped {provider.apply({'operation': 'ship_y'}, key=op.provider_key).effect_id}"

        return [ship_x, ship_y]

    def effects(self, *, x_lookup: bool) -> dict[str, Effect]:
        """``ship_x`` blind, or with a lookup that is down until ``lookup_up``."""
        if not x_lookup:
            return {}

        async def lookup(request: LookupRequest) -> Any:
            if not self.lookup_up:
                return Inconclusive("lookup answered 503")
            found = self.provider.get(request.provider_key)
            return Landed(receipt={"id": found.effect_id}) if isinstance(found, EffectRecord) else NotLanded()

        return {"ship_x": Effect(lookup=lookup, lookup_attempts=1)}

    def effects_by_tool(self) -> dict[str, int]:
        return self.provider.count_effects()


def model(state: Any) -> dict[str, Any]:
    if any(isinstance(m, ToolMessage) for m in state["messages"]):
        return {"messages": [AIMessage("done", id="final")]}
    calls = [
        {"name": "ship_x", "args": {"order": "x"}, "id": "call-x", "type": "tool_call"},
        {"name": "ship_y", "args": {"order": "y"}, "id": "call-y", "type": "tool_call"},
    ]
    return {"messages": [AIMessage("", tool_calls=calls, id="ai-1")]}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Where the checkpoints and the ledger live: (backend, a SQLite file or a DSN whose
    search path is a fresh schema)."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "agent.sqlite")
        return
    from tests.ledger.conftest import created_schema

    with created_schema("lge_binding") as (_, scoped):
        yield "postgres", scoped


def sqlite_at(tmp_path: Path) -> tuple[str, str]:
    return "sqlite", str(tmp_path / "agent.sqlite")


@asynccontextmanager
async def opened(database: tuple[str, str]) -> AsyncIterator[Any]:
    backend, target = database
    maker = AsyncEffectPostgresSaver if backend == "postgres" else AsyncEffectSqliteSaver
    async with maker.from_conn_string(target) as saver:
        await saver.setup()
        yield saver


@dataclass
class Paused:
    graph: Any
    saver: Any
    shop: Shop
    x: str
    y: str

    async def op(self, op_id: str) -> Operation:
        found = await self.saver.ledger.get(op_id)
        assert found is not None
        return found

    async def pending(self) -> Any:
        [pending] = (await self.graph.aget_state(CONFIG)).interrupts
        return pending

    async def tool_messages(self) -> dict[str, ToolMessage]:
        state = await self.graph.aget_state(CONFIG)
        return {str(m.name): m for m in state.values["messages"] if isinstance(m, ToolMessage)}


@asynccontextmanager
async def refused_review(
    database: tuple[str, str], tmp_path: Path, *, x_lookup: bool = False
) -> AsyncIterator[Paused]:
    """The review of ``ship_x`` and ``ship_y``, answered with one decision: refused."""
    shop = Shop(Provider(tmp_path / "provider.sqlite", "lookup"))
    async with opened(database) as saver:
        node = EffectToolNode(shop.tools(), effects=shop.effects(x_lookup=x_lookup))
        graph = tool_loop(model, node, saver)
        await graph.ainvoke({"messages": [HumanMessage("ship both")]}, CONFIG)
        [asked] = (await graph.aget_state(CONFIG)).interrupts
        x, y = (e["operation_id"] for e in asked.value["operations"])
        paused = Paused(graph, saver, shop, x, y)
        assert [(await paused.op(i)).state for i in (x, y)] == [State.REVIEW, State.REVIEW]
        await graph.ainvoke(Command(resume={asked.id: ONE_DECISION}), CONFIG)
        again = await paused.pending()
        assert again.value["refused_answer"].startswith(REFUSED)
        assert [e["operation_id"] for e in again.value["operations"]] == [x, y]
        assert not (await paused.op(y)).decisions
        yield paused


async def still_asked_about_y(paused: Paused, *, x_effects: int = 1) -> Any:
    """After ``ship_x`` was settled and the thread resumed: the stored answer stayed
    refused, ``ship_y`` is asked about (alone) and nothing was written or sent for it."""
    y = await paused.op(paused.y)
    assert y.state is State.REVIEW and not y.decisions and y.attempts == 1
    pending = await paused.pending()
    assert [e["operation_id"] for e in pending.value["operations"]] == [paused.y]
    assert pending.value["refused_answer"].startswith(REFUSED)
    assert await paused.tool_messages() == {}  # the node has not answered the model yet
    assert paused.shop.effects_by_tool() == {"ship_x": x_effects}  # no ship_y request
    return pending


async def answer_y_and_finish(paused: Paused, pending: Any, *, x_effects: int = 1) -> dict[str, ToolMessage]:
    """``ship_y`` did not land (the operator checked): it is sent again, once."""
    await paused.graph.ainvoke(Command(resume={pending.id: {"decisions": [{"type": "approve"}]}}), CONFIG)
    assert not (await paused.graph.aget_state(CONFIG)).interrupts
    y = await paused.op(paused.y)
    assert y.state is State.CONFIRMED and y.attempts == 2
    assert paused.shop.effects_by_tool() == {"ship_x": x_effects, "ship_y": 1}
    found = await paused.tool_messages()
    assert found["ship_y"].status == "success" and found["ship_y"].content.startswith("shipped ")
    assert "ship_y effect landed" not in found["ship_y"].content
    return found


# -- the reported scenario, with each way ship_x can be settled since -------------------


@pytest.mark.slow  # runs the console in a subprocess
async def test_console_resolve_then_recover(tmp_path: Path) -> None:
    database = sqlite_at(tmp_path)
    async with refused_review(database, tmp_path) as paused:
        version = (await paused.op(paused.x)).version
        done = run_console(
            "resolve", paused.x, "--landed", "--receipt", '{"id": "x-1"}',
            "--expected-version", str(version), "--actor", "alice", "--db", database[1],
        )
        assert done.returncode == 0, done.stderr
        report = await recover(paused.graph, thread_ids=["t1"], min_idle=0)
        assert [t.action for t in report.threads] == ["resumed"]
        pending = await still_asked_about_y(paused)
        assert (await paused.op(paused.x)).state is State.CONFIRMED
        found = await answer_y_and_finish(paused, pending)
    assert found["ship_x"].content.startswith("The ship_x effect landed: an operator checked")


async def test_python_resolve_then_resume(database: tuple[str, str], tmp_path: Path) -> None:
    async with refused_review(database, tmp_path) as paused:
        version = (await paused.op(paused.x)).version
        await resolve(paused.saver.ledger, paused.x, {"type": "landed"}, expected_version=version, actor="al")
        for _ in range(3):  # every resume reads the stored answer again: refused each time
            await paused.graph.ainvoke(None, CONFIG)
            pending = await still_asked_about_y(paused)
        await answer_y_and_finish(paused, pending)


async def test_a_late_result_then_resume(tmp_path: Path) -> None:
    async with refused_review(sqlite_at(tmp_path), tmp_path) as paused:
        # What a worker whose dispatch was taken over records when its tool's result
        # arrives after all (Dispatcher._record_late): the operation landed.
        x = await paused.op(paused.x)
        kind, blob = messages.dump(ToolMessage("shipped late", name="ship_x", tool_call_id="call-x"))
        late = protocol.late(x, protocol.Succeeded(kind, blob), token="worker-1")
        assert late is not None
        await paused.saver.ledger.transition(paused.x, late, expected_version=x.version)
        await paused.graph.ainvoke(None, CONFIG)
        pending = await still_asked_about_y(paused)
        found = await answer_y_and_finish(paused, pending)
    assert found["ship_x"].content == "shipped late"


async def test_a_lookup_settles_x_then_resume(tmp_path: Path) -> None:
    # ship_x's lookup is down, so it went to review too. The operator sends it back
    # ("not landed"); on the resume it is sent again, times out again, and its lookup
    # (up now) finds the effect: ship_x is settled by the lookup, and the node's first
    # question lists ship_y alone.
    async with refused_review(sqlite_at(tmp_path), tmp_path, x_lookup=True) as paused:
        version = (await paused.op(paused.x)).version
        not_landed = {"type": "not_landed"}
        await resolve(paused.saver.ledger, paused.x, not_landed, expected_version=version, actor="al")
        paused.shop.lookup_up = True
        await paused.graph.ainvoke(None, CONFIG)
        x = await paused.op(paused.x)
        assert x.state is State.CONFIRMED and x.evidence is not None and x.evidence["kind"] == "lookup"
        pending = await still_asked_about_y(paused, x_effects=2)
        await answer_y_and_finish(paused, pending, x_effects=2)


# -- answers that fit their question: applied once; refused ones stay refused ----------


async def test_a_fitting_answer_is_applied_once_across_resumes(
    database: tuple[str, str], tmp_path: Path
) -> None:
    async with refused_review(database, tmp_path) as paused:
        pending = await paused.pending()
        answer = {"decisions": [{"type": "respond", "message": '{"id": "x-1"}'}, {"type": "approve"}]}
        await paused.graph.ainvoke(Command(resume={pending.id: answer}), CONFIG)
        for _ in range(3):
            await paused.graph.ainvoke(None, CONFIG)
        x, y = await paused.op(paused.x), await paused.op(paused.y)
        found = await paused.tool_messages()
    assert (x.state, y.state) == (State.CONFIRMED, State.CONFIRMED)
    assert [d for d, _ in x.decisions] == [f"review:1:{paused.x}"]
    assert [d for d, _ in y.decisions] == [f"review:1:{paused.y}"]
    assert y.attempts == 2
    assert paused.shop.effects_by_tool() == {"ship_x": 1, "ship_y": 1}
    assert found["ship_x"].content.startswith("The ship_x effect landed: an operator checked")
    assert found["ship_y"].content.startswith("shipped ")


async def test_a_refused_answer_stays_refused_across_resumes(tmp_path: Path) -> None:
    async with refused_review(sqlite_at(tmp_path), tmp_path) as paused:
        first = await paused.pending()
        for _ in range(3):
            await paused.graph.ainvoke(None, CONFIG)
            again = await paused.pending()
            assert again.id == first.id  # the same question, still open
            assert again.value["operations"] == first.value["operations"]
            assert again.value["refused_answer"] == first.value["refused_answer"]
        ops = [await paused.op(i) for i in (paused.x, paused.y)]
        assert [(o.state, o.decisions) for o in ops] == [(State.REVIEW, ()), (State.REVIEW, ())]
        assert paused.shop.effects_by_tool() == {"ship_x": 1}


STALE_ANSWERS = {
    # Agent Inbox: "it landed" for the first row of the two it shows.
    "agent_inbox": lambda x, y: ONE_DECISION,
    # Our own decisions in LangChain's shape, one per row of the question as it was.
    "own_decisions": lambda x, y: {"decisions": [{"type": "landed"}, {"type": "not_landed"}]},
    # Keyed by operation id: ship_y did not land (send it again).
    "keyed": lambda x, y: {y: {"type": "not_landed"}},
}


@pytest.mark.parametrize("shape", list(STALE_ANSWERS))
async def test_an_answer_given_after_its_question_changed_is_refused(tmp_path: Path, shape: str) -> None:
    # The question lists ship_x and ship_y; ship_x is settled with resolve(); the
    # reviewer, still looking at both, answers. The question that answer was given for
    # is gone: refused whole, nothing written or sent, asked again about ship_y alone.
    async with refused_review(sqlite_at(tmp_path), tmp_path) as paused:
        pending = await paused.pending()
        version = (await paused.op(paused.x)).version
        await resolve(paused.saver.ledger, paused.x, {"type": "landed"}, expected_version=version, actor="al")
        stale = STALE_ANSWERS[shape](paused.x, paused.y)
        await paused.graph.ainvoke(Command(resume={pending.id: stale}), CONFIG)
        pending = await still_asked_about_y(paused)
        refused = pending.value["refused_answer"]
        assert "the question changed since it was given" in refused
        assert f"ship_x (operation {paused.x}) was settled since, it is confirmed now" in refused
        # Given for the question as it is now, the same answer applies.
        await paused.graph.ainvoke(Command(resume={pending.id: {paused.y: {"type": "landed"}}}), CONFIG)
        y = await paused.op(paused.y)
        assert y.state is State.CONFIRMED and [d for d, _ in y.decisions] == [f"review:2:{paused.y}"]
        assert paused.shop.effects_by_tool() == {"ship_x": 1}


# -- approvals: the same binding --------------------------------------------------------


@pytest.mark.slow  # waits for a budget window to renew
async def test_a_refused_approval_is_not_applied_to_a_shorter_question(tmp_path: Path) -> None:
    # A budget of one send per window, held for an approver when over: pay_b and pay_c
    # wait for approval. The approver answers one decision for two calls: refused. The
    # window then renews, so on the resume pay_b is sent within budget and the node's
    # first question lists pay_c alone: the stored "approve" must not approve it.
    provider = Provider(tmp_path / "provider.sqlite", "lookup")

    @tool
    def pay(to: str) -> str:
        """Pay someone."""
        op = current_operation()
        return f"paid {provider.apply({'operation': to}, key=op.provider_key).effect_id}"

    budget = Budget("payments", max_sends=1, per="thread", window=2.0, on_exceed="approve")
    node = EffectToolNode([pay], effects={"pay": Effect(dedup_window=3600, budgets=[budget])})

    def payer(state: Any) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage("done", id="final")]}
        calls = [
            {"name": "pay", "args": {"to": who}, "id": f"call-{who}", "type": "tool_call"}
            for who in ("a", "b", "c")
        ]
        return {"messages": [AIMessage("", tool_calls=calls, id="ai-1")]}

    async with opened(sqlite_at(tmp_path)) as saver:
        graph = tool_loop(payer, node, saver)
        await _wait_for_the_next_window(2.0)  # the first answer comes within the same window
        await graph.ainvoke({"messages": [HumanMessage("pay")]}, CONFIG)
        [asked] = (await graph.aget_state(CONFIG)).interrupts
        assert asked.value["type"] == "effect_approval"
        b, c = (e["operation_id"] for e in asked.value["operations"])
        await graph.ainvoke(Command(resume={asked.id: {"decisions": [{"type": "approve"}]}}), CONFIG)
        [again] = (await graph.aget_state(CONFIG)).interrupts
        assert again.value["refused_answer"].startswith(REFUSED)
        assert provider.count_effects() == {"a": 1}
        await _wait_for_the_next_window(2.0)
        await graph.ainvoke(None, CONFIG)
        interrupts = (await graph.aget_state(CONFIG)).interrupts
        c_op = await saver.ledger.get(c)
        b_op = await saver.ledger.get(b)
    assert [e["operation_id"] for i in interrupts for e in i.value["operations"]] == [c]
    assert c_op is not None and c_op.state is State.PENDING and not c_op.decisions
    assert b_op is not None and b_op.state is State.CONFIRMED
    assert provider.count_effects() == {"a": 1, "b": 1}  # c never sent over budget


async def _wait_for_the_next_window(window: float) -> None:
    await asyncio.sleep(window - time.time() % window + 0.05)
