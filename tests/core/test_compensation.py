"""The pure compensation rules, as tables: may an operation be undone now, the undo's
identity, and which earlier effects a failed saga undoes."""

from __future__ import annotations

import pytest

from langgraph_effects.core.compensation import (
    may_compensate,
    receipt_of,
    saga_plan,
    undo_operation_id,
    undo_state,
)
from langgraph_effects.core.operation import Operation, State
from langgraph_effects.errors import InvalidOptionError
from langgraph_effects.testing._cases import make_op


def _op(state: State, **fields: object) -> Operation:
    return make_op(state=state, **fields)


@pytest.mark.parametrize(
    ("state", "undoable", "verdict"),
    [
        (State.CONFIRMED, True, "compensate"),
        (State.CONFIRMED, False, "irreversible"),
        (State.UNKNOWN, True, "review_first"),
        (State.UNKNOWN, False, "review_first"),  # settle first, whatever comes after
        (State.REVIEW, True, "awaiting_review"),
        (State.DISPATCHED, True, "in_flight"),
        (State.PENDING, True, "not_landed"),
        (State.FAILED, True, "not_landed"),
        (State.ABANDONED, True, "not_landed"),
    ],
)
def test_only_a_confirmed_effect_with_an_undo_may_be_compensated(
    state: State, undoable: bool, verdict: str
) -> None:
    decision = may_compensate(_op(state), undoable=undoable)
    assert decision.verdict == verdict
    assert decision.allowed is (verdict == "compensate")
    assert decision.reason


def test_a_marked_effect_and_an_undo_are_never_compensated_again() -> None:
    marked = _op(State.CONFIRMED, evidence={"kind": "compensation", "compensated_by": "op_undo_x"})
    assert may_compensate(marked, undoable=True).verdict == "requested"
    assert may_compensate(marked, undoable=True).allowed
    undo = _op(State.CONFIRMED, extra={"compensates": "op-1"})
    assert may_compensate(undo, undoable=True).verdict == "is_undo"


def test_the_undo_id_is_derived_from_the_effect_alone() -> None:
    assert undo_operation_id("op_a") == undo_operation_id("op_a")
    assert undo_operation_id("op_a") != undo_operation_id("op_b")
    assert undo_operation_id("op_a").startswith("op_undo_")
    # Never a bare hex digest: Command(resume=...) would read it as an interrupt id.
    assert not all(c in "0123456789abcdef" for c in undo_operation_id("op_a"))


@pytest.mark.parametrize(
    ("state", "phrase"),
    [
        (None, "not requested"),
        (State.PENDING, "requested"),
        (State.DISPATCHED, "undoing"),
        (State.UNKNOWN, "in doubt"),
        (State.REVIEW, "in review"),
        (State.CONFIRMED, "undone"),
        (State.FAILED, "undo failed"),
        (State.ABANDONED, "abandoned"),
    ],
)
def test_undo_state_names_every_state(state: State | None, phrase: str) -> None:
    assert undo_state(None if state is None else _op(state)) == phrase


def test_the_receipt_survives_the_compensation_mark() -> None:
    verdict = _op(State.CONFIRMED, evidence={"kind": "verdict", "receipt": {"id": "r1"}})
    assert receipt_of(verdict, "output") == {"id": "r1"}
    marked = _op(
        State.CONFIRMED,
        evidence={"kind": "compensation", "compensated_by": "u", "cause": {"receipt": {"id": "r1"}}},
    )
    assert receipt_of(marked, "output") == {"id": "r1"}
    assert receipt_of(_op(State.CONFIRMED, evidence={"kind": "result"}), "output") == "output"


def _saga() -> dict[str, Operation]:
    return {
        "hotel": _op(State.CONFIRMED, op_id="op-1", tool="hotel", created_at=1.0),
        "car": _op(State.CONFIRMED, op_id="op-2", tool="car", created_at=2.0),
        "mail": _op(State.CONFIRMED, op_id="op-3", tool="mail", created_at=3.0),
        "seat": _op(State.UNKNOWN, op_id="op-4", tool="seat", created_at=4.0),
        "pay": _op(State.FAILED, op_id="op-5", tool="pay", created_at=5.0),
        "later": _op(State.CONFIRMED, op_id="op-6", tool="later", created_at=6.0),
    }


def test_a_saga_undoes_earlier_landed_effects_newest_first() -> None:
    ops = _saga()
    plan = saga_plan(list(ops.values()), ops["pay"], lambda op: op.tool != "mail")
    assert plan is not None
    assert [op.tool for op in plan.undo] == ["car", "hotel"]
    assert [op.tool for op in plan.unsettled] == ["seat"]  # in doubt: settled first
    assert [op.tool for op in plan.irreversible] == ["mail"]  # reported, not guessed at
    assert plan.done == ()


@pytest.mark.parametrize("state", [State.CONFIRMED, State.UNKNOWN, State.DISPATCHED, State.REVIEW])
def test_a_saga_undoes_nothing_unless_the_later_step_failed_definitively(state: State) -> None:
    ops = _saga()
    failing = _op(state, op_id="op-5", tool="pay", created_at=5.0)
    assert saga_plan(list(ops.values()), failing, lambda op: True) is None


def test_a_saga_counts_an_effect_already_marked_as_done() -> None:
    ops = _saga()
    ops["car"] = _op(
        State.CONFIRMED,
        op_id="op-2",
        tool="car",
        created_at=2.0,
        evidence={"kind": "compensation", "compensated_by": "op_undo_2"},
    )
    plan = saga_plan(list(ops.values()), ops["pay"], lambda op: True)
    assert plan is not None and [op.tool for op in plan.done] == ["car"]
    assert [op.tool for op in plan.undo] == ["mail", "hotel"]


def _cancel(provider_key: str) -> str:
    return provider_key


def test_compensate_takes_an_undo_or_the_action_alone() -> None:
    from langgraph_effects.core.contract import Effect, Undo, UndoRequest

    bare = Effect(compensate=_cancel)
    assert isinstance(bare.undo, Undo) and bare.undo.action is _cancel
    assert bare.undo.tool_name == "_cancel" and bare.undo.contract.kind == "blind"
    request = UndoRequest(operation_id="op-1", provider_key="k-1", tool="book", args={"room": "1"})
    assert bare.undo.arguments(request) == {"provider_key": "k-1"}
    shaped = Undo(_cancel, args=lambda r: {"booking": r.args["room"]}, name="cancel")
    assert shaped.arguments(request) == {"booking": "1"} and shaped.tool_name == "cancel"
    assert Effect().undo is None


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda E, U: E(compensate="cancel"), InvalidOptionError, "an Undo, or the undo tool or function"),
        (lambda E, U: E(compensate=_cancel, read_only_tool=True), ValueError, "read-only"),
        (lambda E, U: U(_cancel, effect=E(compensate=_cancel)), ValueError, "undo an undo"),
        (lambda E, U: U(_cancel, effect=E(approval="always")), ValueError, "approval"),
        (lambda E, U: U(_cancel, effect=E(saga="trip")), ValueError, "saga"),
        (lambda E, U: E(saga=""), InvalidOptionError, "saga takes a non-empty name"),
        (lambda E, U: U(_cancel, args=lambda r: ["x"]).arguments(None), TypeError, "mapping"),
    ],
)
def test_bad_compensation_declarations_are_refused_with_what_to_do(
    make: object, error: type[Exception], message: str
) -> None:
    from langgraph_effects.core.contract import Effect, Undo

    with pytest.raises(error, match=message):
        make(Effect, Undo)  # type: ignore[operator]


def test_a_saga_names_one_instance_per_call() -> None:
    from langgraph_effects.core.contract import Effect

    assert Effect(saga="trip").saga_of({"t": 1}, {}) == "trip"
    per_trip = Effect(saga=lambda args, config: f"trip:{args['t']}")
    assert per_trip.saga_of({"t": 7}, {}) == "trip:7"
    assert Effect().saga_of({"t": 7}, {}) is None
