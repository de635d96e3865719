"""Conformance cases: the control rows of budgets and circuit breakers, and the plans
that admit a send and record its outcome on them in the transition's transaction."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

from ..core.controls import Budget, Call, CircuitBreaker, ControlRow, Controls, Refusal, hold_key
from ..core.operation import Change, Event, State
from ..ledger.base import DEFAULT_ACTOR, Ledger, Transition
from ..ledger.controls import controlled_plan, verdict_plan
from ..ledger.steps import LockControls, WriteControls
from ._cases import LOSE, dispatch, make_op, succeed

BUDGET = Budget("conformance", max_sends=1)


def _send(
    ledger: Ledger, op_id: str, change: Change, version: int, controls: Controls
) -> Awaitable[Transition | Refusal]:
    call = Call(op_id, "t1", "", {})
    return ledger.transact(
        lambda: controlled_plan(op_id, change, version, DEFAULT_ACTOR, ledger.where, None, controls, call)
    )


class ControlCases:
    """Budgets and circuit breakers (part of `LedgerConformance`)."""

    async def test_control_rows_are_written_read_back_and_listed_without_holds(self, ledger: Ledger) -> None:
        rows = (
            ControlRow("budget:b", '["acme"]', {"sends": 2, "total": 1.5}, 10.0),
            ControlRow("circuit:c", "", {"failures": [1.0], "opened_at": None}, 11.0),
            ControlRow("hold", "op-1", {"charges": [["budget:b", '["acme"]', 1.5]]}, 12.0),
        )

        def write() -> Any:
            yield WriteControls(rows)

        await ledger.transact(write)

        def lock() -> Any:
            return (yield LockControls((*sorted(r.key for r in rows), ("budget:none", ""))))

        found = await ledger.transact(lock)
        assert {k: (r.state, r.updated_at) for k, r in found.items() if r.state} == {
            r.key: (r.state, r.updated_at) for r in rows
        }
        listed = await ledger.control_rows()  # an empty row a lock added may be listed
        assert [(r.control, r.scope, r.state) for r in listed if r.state] == [
            (r.control, r.scope, r.state) for r in rows[:2]
        ]

    async def test_a_send_over_budget_is_refused_and_writes_nothing(self, ledger: Ledger) -> None:
        controls = Controls((BUDGET,))
        first, second = make_op(op_id="op-a", provider_key="k-a"), make_op(op_id="op-b", provider_key="k-b")
        await ledger.record_intents([first, second])
        moved = await _send(ledger, "op-a", dispatch("tok-a"), 1, controls)
        assert isinstance(moved, Transition) and moved.op.state is State.DISPATCHED
        refused = await _send(ledger, "op-b", dispatch("tok-b"), 1, controls)
        assert isinstance(refused, Refusal) and refused.name == BUDGET.name
        stored = await ledger.get("op-b")
        assert stored is not None and stored.state is State.PENDING and stored.version == 1
        used = [r for r in await ledger.control_rows() if r.control == BUDGET.control]
        assert [r.state["sends"] for r in used] == [1]

    async def test_a_definite_failure_gives_its_share_back(self, ledger: Ledger) -> None:
        controls = Controls((BUDGET,))
        await ledger.record_intents([make_op(op_id="op-a", provider_key="k-a")])
        moved = await _send(ledger, "op-a", dispatch("tok-a"), 1, controls)
        assert isinstance(moved, Transition)
        fail = Change(Event.FAIL, evidence={"kind": "error", "error": "422"})
        await _send(ledger, "op-a", fail, moved.op.version, controls)
        used = [r for r in await ledger.control_rows() if r.control == BUDGET.control]
        assert [r.state["sends"] for r in used] == [0]

    async def test_a_not_landed_verdict_gives_the_share_back_once(self, ledger: Ledger) -> None:
        controls = Controls((BUDGET,))
        await ledger.record_intents([make_op(op_id=f"op-{x}", provider_key=f"k-{x}") for x in "ab"])
        sent = await _send(ledger, "op-a", dispatch("tok-a"), 1, controls)
        assert isinstance(sent, Transition)
        lost = await _send(ledger, "op-a", LOSE, sent.op.version, controls)
        assert isinstance(lost, Transition)
        in_doubt = await _send(ledger, "op-b", dispatch("tok-b"), 1, controls)
        assert isinstance(in_doubt, Refusal)  # an unknown outcome keeps its share
        verdict = Change(
            Event.NOT_LANDED,
            evidence={"kind": "verdict", "decision": "not_landed", "actor": "op"},
            decision_id="d-1",
            decision={"type": "not_landed"},
        )
        where = ledger.where
        for _ in range(2):  # the same verdict again is a replay: given back once
            done = await ledger.transact(lambda: verdict_plan("op-a", verdict, lost.op.version, "op", where))
        assert done.op.state is State.PENDING and not done.applied
        used = [r for r in await ledger.control_rows() if r.control == BUDGET.control]
        assert [r.state["sends"] for r in used] == [0]
        admitted = await _send(ledger, "op-b", dispatch("tok-b"), 1, controls)
        assert isinstance(admitted, Transition) and admitted.op.state is State.DISPATCHED

    async def test_a_stale_send_charges_nothing(self, ledger: Ledger) -> None:
        controls = Controls((BUDGET,))
        await ledger.record_intents([make_op(op_id="op-a", provider_key="k-a")])
        with contextlib.suppress(Exception):  # stale: the transition raises, rolled back
            await _send(ledger, "op-a", dispatch("tok-a"), 7, controls)
        assert all(r.state.get("sends", 0) == 0 for r in await ledger.control_rows())

    async def test_racing_sends_never_take_more_than_the_budget(self, ledger: Ledger) -> None:
        controls = Controls((Budget("race", max_sends=3),))
        ops = [make_op(op_id=f"op-{i}", provider_key=f"k-{i}") for i in range(8)]
        await ledger.record_intents(ops)
        results = await asyncio.gather(
            *(_send(ledger, op.op_id, dispatch(f"tok-{i}"), 1, controls) for i, op in enumerate(ops))
        )
        assert sum(isinstance(r, Transition) for r in results) == 3

    async def test_an_open_circuit_refuses_and_a_success_closes_it(self, ledger: Ledger) -> None:
        breaker = CircuitBreaker("conformance", failures=1, cooldown=3600)
        controls = Controls(circuit=breaker)
        await ledger.record_intents([make_op(op_id=f"op-{i}", provider_key=f"k-{i}") for i in range(3)])
        sent = await _send(ledger, "op-0", dispatch("tok-0"), 1, controls)
        assert isinstance(sent, Transition)
        late = await _send(ledger, "op-1", dispatch("tok-1"), 1, controls)  # admitted while closed
        assert isinstance(late, Transition)
        timeout = Change(Event.LOSE, evidence={"kind": "timeout"})
        await _send(ledger, "op-0", timeout, sent.op.version, controls)
        refused = await _send(ledger, "op-2", dispatch("tok-2"), 1, controls)
        assert isinstance(refused, Refusal) and refused.kind == "circuit"
        await _send(ledger, "op-1", succeed(), late.op.version, controls)
        admitted = await _send(ledger, "op-2", dispatch("tok-2"), 1, controls)
        assert isinstance(admitted, Transition)
        assert hold_key("op-2") not in {r.key for r in await ledger.control_rows()}
