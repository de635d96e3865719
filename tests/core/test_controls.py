"""The admission rules of budgets and circuit breakers, as tables (pure: no ledger)."""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_effects.core.controls import (
    Budget,
    Call,
    CircuitBreaker,
    ControlRow,
    Controls,
    Key,
    admit,
    admit_keys,
    budget_scope,
    charged_keys,
    circuit_status,
    controls_after,
    describe,
    hold_key,
    signal_of,
)

CALL = Call(op_id="op1", thread_id="t1", tenant="acme", args={"amount": 30})


def rows_of(*rows: ControlRow) -> dict[Key, ControlRow]:
    return {r.key: r for r in rows}


def apply(rows: dict[Key, ControlRow], writes: tuple[ControlRow, ...]) -> dict[Key, ControlRow]:
    return {**rows, **{w.key: w for w in writes}}


# -- budgets ---------------------------------------------------------------------------

SENDS = Budget("sends", max_sends=2, per="thread")
TOTAL = Budget("spend", max_total=100, total_of="amount")


@pytest.mark.parametrize(
    ("budget", "used", "args", "admitted"),
    [
        (SENDS, {}, {"amount": 1}, True),
        (SENDS, {"sends": 1}, {"amount": 1}, True),
        (SENDS, {"sends": 2}, {"amount": 1}, False),
        (TOTAL, {"total": 70.0}, {"amount": 30}, True),
        (TOTAL, {"total": 70.5}, {"amount": 30}, False),
        (TOTAL, {}, {"amount": 101}, False),
        (TOTAL, {}, {}, False),  # nothing to sum: refused, never guessed
        (TOTAL, {}, {"amount": "30"}, False),
        (TOTAL, {}, {"amount": True}, False),
        (Budget("none", max_sends=0), {}, {}, False),
    ],
)
def test_a_send_fits_its_budget_or_is_refused(
    budget: Budget, used: dict[str, Any], args: dict[str, Any], admitted: bool
) -> None:
    call = Call("op1", "t1", "acme", args)
    key = (budget.control, budget_scope(budget, call, 0.0))
    decided = admit(Controls((budget,)), call, rows_of(ControlRow(*key, used)), now=0.0)
    assert (decided.refusal is None) is admitted
    if admitted:
        written = {w.key: w.state for w in decided.writes}
        assert written[key]["sends"] == used.get("sends", 0) + 1
        amount = float(args["amount"]) if budget.total_of else 0.0
        assert written[hold_key("op1")]["charges"] == [[*key, amount]]
    else:
        assert decided.writes == ()
        assert decided.refusal is not None and decided.refusal.name == budget.name


def test_an_approval_sends_over_budget_once_and_is_counted() -> None:
    budget = Budget("sends", max_sends=1, on_exceed="approve")
    key = (budget.control, budget_scope(budget, CALL, 0.0))
    full = rows_of(ControlRow(*key, {"sends": 1}))
    refused = admit(Controls((budget,)), CALL, full, now=0.0)
    assert refused.refusal is not None and refused.refusal.ask
    allowed = admit(Controls((budget,)), CALL, full, now=0.0, override=True)
    assert allowed.refusal is None
    assert {w.key: w.state for w in allowed.writes}[key]["sends"] == 2


def test_an_operation_holding_its_share_is_not_charged_again() -> None:
    controls = Controls((SENDS,))
    first = admit(controls, CALL, {}, now=0.0)
    rows = apply({}, first.writes)
    again = admit(controls, CALL, rows, now=1.0)
    assert again.refusal is None and again.writes == ()


@pytest.mark.parametrize(
    ("per", "window", "now", "scope"),
    [
        ("tenant", None, 5.0, '["acme"]'),
        ("thread", None, 5.0, '["acme", "t1"]'),
        ("run", None, 5.0, '["acme", "r1"]'),
        ("tenant", 60, 59.9, '["acme", 0.0]'),
        ("tenant", 60, 60.0, '["acme", 60.0]'),
    ],
)
def test_scopes_are_per_tenant_and_windows_are_fixed(per: Any, window: Any, now: float, scope: str) -> None:
    budget = Budget("b", max_sends=1, per=per, window=window)
    assert budget_scope(budget, Call("op1", "t1", "acme", {}, run_id="r1"), now) == scope


def test_a_budget_per_run_needs_a_run_id() -> None:
    with pytest.raises(ValueError, match="run_id"):
        budget_scope(Budget("b", max_sends=1, per="run"), CALL, 0.0)


@pytest.mark.parametrize("event", ["fail", "withdraw", "not_landed"])
def test_proof_that_nothing_landed_gives_the_share_back(event: str) -> None:
    controls = Controls((SENDS, TOTAL))
    rows = apply({}, admit(controls, CALL, {}, now=0.0).writes)
    hold = rows[hold_key("op1")]
    assert len(charged_keys(hold)) == 2
    after = apply(rows, controls_after(controls, "op1", event, None, rows, now=1.0))
    assert all(after[k].state["sends"] == 0 and after[k].state["total"] == 0 for k in charged_keys(hold))
    assert after[hold_key("op1")].state["charges"] == []


@pytest.mark.parametrize(("event", "evidence"), [("succeed", None), ("lose", {"kind": "timeout"}),
                                                  ("lose", {"kind": "lease"}), ("confirm", None)])
def test_what_may_have_landed_keeps_its_share(event: str, evidence: Any) -> None:
    controls = Controls((SENDS,))
    rows = apply({}, admit(controls, CALL, {}, now=0.0).writes)
    assert controls_after(controls, "op1", event, evidence, rows, now=1.0) == ()


def test_bad_declarations_are_refused() -> None:
    with pytest.raises(ValueError, match="limits nothing"):
        Budget("b")
    with pytest.raises(ValueError, match="total_of"):
        Budget("b", max_total=5)
    with pytest.raises(ValueError, match="on_exceed"):
        Budget("b", max_sends=1, on_exceed="ask")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="failures"):
        CircuitBreaker("c", failures=0)


# -- circuit breakers ------------------------------------------------------------------

BREAKER = CircuitBreaker("bank", failures=3, within=60, cooldown=30)


@pytest.mark.parametrize(
    ("state", "now", "status"),
    [
        ({}, 0.0, "closed"),
        ({"failures": [1.0, 2.0]}, 3.0, "closed"),
        ({"opened_at": 100.0}, 129.9, "open"),
        ({"opened_at": 100.0}, 130.0, "half-open"),
        ({"opened_at": 100.0, "probe": "op9", "probe_at": 131.0}, 140.0, "probing"),
        ({"opened_at": 100.0, "probe": "op9", "probe_at": 131.0}, 161.0, "half-open"),  # probe lost
    ],
)
def test_circuit_status_by_state_and_clock(state: dict[str, Any], now: float, status: str) -> None:
    assert circuit_status(BREAKER, state, now) == status


def run_outcomes(outcomes: list[tuple[str, str, Any, float]]) -> dict[Key, ControlRow]:
    controls, rows = Controls(circuit=BREAKER), {}
    for op_id, event, evidence, now in outcomes:
        rows = apply(rows, controls_after(controls, op_id, event, evidence, rows, now=now))
    return rows


def test_failures_within_the_window_open_the_circuit_and_a_success_closes_it() -> None:
    timeout = {"kind": "timeout"}
    rows = run_outcomes([("a", "fail", None, 1.0), ("b", "lose", timeout, 2.0), ("c", "fail", None, 3.0)])
    assert rows[BREAKER.key].state["opened_at"] == 3.0
    spread = run_outcomes([("a", "fail", None, 1.0), ("b", "fail", None, 70.0), ("c", "fail", None, 71.0)])
    assert spread[BREAKER.key].state.get("opened_at") is None  # the first fell out of the window
    healed = run_outcomes([("a", "fail", None, 1.0), ("b", "fail", None, 2.0), ("c", "succeed", None, 3.0)])
    assert healed[BREAKER.key].state["failures"] == [] and "opened_at" not in healed[BREAKER.key].state
    crash = run_outcomes([(x, "lose", {"kind": "lease"}, 1.0) for x in "abcd"])
    assert crash == {}  # our own worker dying says nothing of the provider


def test_an_open_circuit_refuses_then_lets_one_probe_through() -> None:
    controls = Controls(circuit=BREAKER)
    rows = rows_of(ControlRow(*BREAKER.key, {"failures": [1.0, 2.0, 3.0], "opened_at": 3.0}))
    refused = admit(controls, CALL, rows, now=10.0)
    assert refused.refusal is not None and refused.refusal.kind == "circuit" and not refused.refusal.ask
    probe = admit(controls, CALL, rows, now=40.0)
    assert probe.refusal is None
    rows = apply(rows, probe.writes)
    second = admit(controls, Call("op2", "t1", "acme", {}), rows, now=41.0)
    assert second.refusal is not None  # one probe at a time
    failed = apply(rows, controls_after(controls, "op1", "fail", None, rows, now=42.0))
    assert circuit_status(BREAKER, failed[BREAKER.key].state, 43.0) == "open"
    closed = apply(rows, controls_after(controls, "op1", "succeed", None, rows, now=42.0))
    assert circuit_status(BREAKER, closed[BREAKER.key].state, 43.0) == "closed"


def test_the_rows_are_locked_in_one_order() -> None:
    keys = admit_keys(Controls((SENDS, TOTAL), BREAKER), CALL, 0.0)
    assert keys == sorted(keys) and hold_key("op1") in keys and BREAKER.key in keys


@pytest.mark.parametrize(
    ("event", "evidence", "signal"),
    [("fail", None, "refund"), ("succeed", None, "success"), ("lose", {"kind": "error"}, "failure"),
     ("lose", {"kind": "lease"}, "other"), ("resend", None, "other")],
)
def test_signal_of_a_transition(event: str, evidence: Any, signal: str) -> None:
    assert signal_of(event, evidence) == signal


def test_the_console_reads_used_and_left_and_circuit_status_from_the_rows() -> None:
    budget = Budget("sends", max_sends=5, max_total=100, total_of="amount")
    rows = apply({}, admit(Controls((budget,), BREAKER), CALL, {}, now=0.0).writes)
    shown = describe(rows[(budget.control, '["acme"]')], now=1.0)
    assert shown is not None
    assert (shown["sends"], shown["sends_left"], shown["total"], shown["total_left"]) == (1, 4, 30.0, 70.0)
    assert describe(rows[hold_key("op1")], now=1.0) is None
    opened = run_outcomes([(x, "fail", None, 10.0) for x in "abc"])
    circuit = describe(opened[BREAKER.key], now=20.0)
    assert circuit is not None
    assert (circuit["status"], circuit["failures"], circuit["threshold"]) == ("open", 3, 3)
    assert describe(ControlRow("budget:new", '["acme"]'), now=0.0) is None  # a lock's empty row
