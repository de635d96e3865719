"""Budgets seen from the graph: what the model is told when a send is refused, the
approval an operator may give to send over budget once, and a refusal replayed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command

from langgraph_effects import AsyncEffectSqliteSaver, Budget, CircuitBreaker, OperationQuery, SqliteLedger
from langgraph_effects._runtime.operator import resolve
from langgraph_effects.core.controls import Call, Controls, hold_key
from langgraph_effects.core.operation import Change, Event, State
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.controls import controlled_plan
from langgraph_effects.ledger.steps import LockControls
from langgraph_effects.testing.conformance import dispatch, make_op
from tests.helpers import run_console
from tests.helpers.controls_worker import Spec, build


async def _pay(graph: Any, thread: str, payload: Any = None) -> tuple[Any, Any]:
    config = {"configurable": {"thread_id": thread}}
    await graph.ainvoke(payload or {"messages": [HumanMessage("pay")]}, config, durability="sync")
    return config, await graph.aget_state(config)


def _answer(state: Any) -> ToolMessage:
    return next(m for m in state.values["messages"] if isinstance(m, ToolMessage))


async def test_a_send_over_budget_is_refused_with_a_message_and_never_sent(tmp_path: Path) -> None:
    spec = Spec(db=str(tmp_path / "g.sqlite"), provider=str(tmp_path / "p.sqlite"), name="w", budget=1)
    provider = Provider(spec.provider, "dedup")
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        _, first = await _pay(build(spec, saver, "a", provider), "a")
        assert _answer(first).status == "success"
        _, second = await _pay(build(spec, saver, "b", provider), "b")
        refusal = _answer(second)
        assert refusal.status == "error"
        assert refusal.artifact == {"error": "BudgetExceededError", "sent": False, "control": "payments"}
        text = str(refusal.content)
        assert "was not sent" in text and "'payments' allows 1 send(s)" in text
        ops = await saver.ledger.list_operations(OperationQuery())
        refused = [op for op in ops if op.thread_id == "b"]
        assert [op.state for op in refused] == [State.ABANDONED]
        assert (refused[0].evidence or {})["control"] == "budget:payments"
    assert provider.count_effects() == {"a": 1}


async def test_an_approver_may_send_over_budget_once_and_it_is_counted(tmp_path: Path) -> None:
    spec = Spec(
        db=str(tmp_path / "g.sqlite"), provider=str(tmp_path / "p.sqlite"), name="w", budget=1,
        on_exceed="approve",
    )
    provider = Provider(spec.provider, "dedup")
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        await _pay(build(spec, saver, "a", provider), "a")
        graph = build(spec, saver, "b", provider)
        _, held = await _pay(graph, "b")
        [pending] = held.interrupts
        assert "over a budget" in pending.value["action_requests"][0]["description"]
        assert provider.count_effects() == {"a": 1}  # held: nothing sent yet
        approve = Command(resume={pending.id: {"decisions": [{"type": "approve"}]}})
        _, done = await _pay(graph, "b", approve)
        assert _answer(done).status == "success"
        graph = build(spec, saver, "c", provider)
        _, held_c = await _pay(graph, "c")
        [pending_c] = held_c.interrupts
        reject = Command(resume={pending_c.id: {"decisions": [{"type": "reject", "message": "no"}]}})
        _, rejected = await _pay(graph, "c", reject)
        assert _answer(rejected).status == "error"
        [budget] = [r for r in await saver.ledger.control_rows() if r.control == "budget:payments"]
        assert budget.state["sends"] == 2
    assert provider.count_effects() == {"a": 1, "b": 1}


@pytest.mark.slow  # runs the console in two processes
async def test_the_console_shows_budgets_used_and_left_and_open_circuits(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    budget = Budget("payments", max_sends=2, max_total=50, total_of="amount", per="thread")
    controls = Controls((budget,), CircuitBreaker("bank", failures=1, cooldown=600))
    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
        await ledger.record_intents([make_op(op_id="op-a", provider_key="k-a", thread_id="t1")])
        call = Call("op-a", "t1", "", {"amount": 20})

        def plan(change: Change, version: int) -> Any:
            return controlled_plan("op-a", change, version, "test", ledger.where, None, controls, call)

        sent = await ledger.transact(lambda: plan(dispatch("tok"), 1))
        timeout = Change(Event.LOSE, evidence={"kind": "timeout"})
        await ledger.transact(lambda: plan(timeout, sent.op.version))
    out = run_console("--db", str(path), "--json", "controls")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    [used] = shown["budgets"]
    assert (used["name"], used["scope"], used["sends"], used["sends_left"]) == ("payments", ["", "t1"], 1, 1)
    assert (used["total"], used["total_left"]) == (20.0, 30.0)  # an unknown outcome keeps its share
    [circuit] = shown["circuits"]
    assert (circuit["name"], circuit["status"]) == ("bank", "open")
    text = run_console("--db", str(path), "controls")
    assert text.returncode == 0 and "open" in text.stdout and "payments" in text.stdout


TIMEOUT = Change(Event.LOSE, evidence={"kind": "timeout"})


async def _lost(ledger: Any, op_id: str, controls: Controls, lease: float | None = None) -> int:
    """``op_id`` sent under ``controls`` (its budget charged), then its outcome lost
    unless ``lease`` (then left dispatched under that lease). Its version after."""
    call = Call(op_id, "t1", "", {"amount": 10})

    def plan(change: Change, version: int) -> Any:
        return controlled_plan(op_id, change, version, "test", ledger.where, None, controls, call)

    sent = await ledger.transact(lambda: plan(dispatch(f"tok-{op_id}", lease), 1))
    if lease is not None:
        return int(sent.op.version)
    lost = await ledger.transact(lambda: plan(TIMEOUT, sent.op.version))
    return int(lost.op.version)


async def test_an_operators_verdict_settles_the_budget_as_the_same_answer_in_the_graph(
    tmp_path: Path,
) -> None:
    """``landed`` and ``abandon`` keep the share (it may have been sent); ``not_landed``
    proves it was not and gives it back, in the verdict's commit, on the API's path and
    on the console's (where a dispatch whose lease ran out is first recorded as lost)."""
    path = tmp_path / "ledger.sqlite"
    controls = Controls((Budget("payments", max_sends=4, per="tenant"),))

    async def used(ledger: SqliteLedger) -> int:
        [row] = [r for r in await ledger.control_rows() if r.control == "budget:payments"]
        return int(row.state["sends"])

    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
        await ledger.record_intents([make_op(op_id=f"op-{x}", provider_key=f"k-{x}") for x in "abcd"])
        versions = {x: await _lost(ledger, f"op-{x}", controls) for x in "abc"}
        versions["d"] = await _lost(ledger, "op-d", controls, lease=time.time() - 1)  # its worker died
        assert await used(ledger) == 4  # every send holds its share, the dead worker's too
        for x, verdict in (("a", {"type": "landed"}), ("b", {"type": "abandon", "reason": "x"})):
            await resolve(ledger, f"op-{x}", verdict, expected_version=versions[x], actor="ops")
        assert await used(ledger) == 4
        for _ in range(2):  # retried with the same decision id: given back once
            await resolve(
                ledger, "op-c", {"type": "not_landed"}, expected_version=versions["c"], actor="ops",
                decision_id="d-c",
            )
        assert await used(ledger) == 3
    version = str(versions["d"])
    out = run_console("--db", str(path), "resolve", "op-d", "--not-landed", "--expected-version", version)
    assert out.returncode == 0, out.stderr
    async with SqliteLedger.from_conn_string(path) as ledger:
        assert await used(ledger) == 2
        states = {op.op_id: op.state for op in await ledger.list_operations(OperationQuery())}
        assert states == {"op-a": State.CONFIRMED, "op-b": State.ABANDONED, "op-c": State.PENDING,
                          "op-d": State.PENDING}

        def hold() -> Any:
            return (yield LockControls((hold_key("op-d"),)))

        held = await ledger.transact(hold)
        assert held[hold_key("op-d")].state["charges"] == []  # a second send is charged anew


async def test_a_verdict_on_a_backend_that_keeps_no_control_rows(tmp_path: Path) -> None:
    """A kit backend without the control steps (nothing can hold a share there) still
    takes an operator's ``not_landed``."""
    from langgraph_effects.ledger.kit import LedgerBackend
    from tests.ledger.example_backend import JsonFileLedger

    class NoControls(JsonFileLedger):
        lock_controls = LedgerBackend.lock_controls  # type: ignore[assignment]
        write_controls = LedgerBackend.write_controls  # type: ignore[assignment]
        list_controls = LedgerBackend.list_controls  # type: ignore[assignment]

    ledger = NoControls(tmp_path / "ledger.json")
    assert not ledger.stores_controls and JsonFileLedger(tmp_path / "other.json").stores_controls
    async with ledger:
        await ledger.record_intents([make_op(op_id="op-a", provider_key="k-a")])
        sent = await ledger.transition("op-a", dispatch("tok"), expected_version=1)
        lost = await ledger.transition("op-a", TIMEOUT, expected_version=sent.version)
        verdict = {"type": "not_landed"}
        after = await resolve(ledger, "op-a", verdict, expected_version=lost.version, actor="ops")
        assert after.state is State.PENDING
