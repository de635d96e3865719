"""Budgets and circuit breakers in the ledger: the plans that check and record them in
the very transaction that commits a send or its outcome, and the rows' encoding.

The decisions are `langgraph_effects.core.controls`'s; these plans only lock the
rows they read (`LockControls`, in one sorted order), run the
operation's transition, and write what the decision says
(`WriteControls`), all in one transaction: two workers can never both
take the last share of a budget, and a refused send writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..core import controls as rules
from ..core.controls import Call, ControlRow, Controls, Key, Refusal
from ..core.operation import Change, Event, Operation
from .base import Plan, Transition, now, transition_plan
from .codec import stored_text
from .steps import LockControls, WriteControls

#: Events that charge budgets (a new attempt: never a re-send of one in doubt).
CHARGING: frozenset[Event] = frozenset({Event.DISPATCH, Event.RETRY})
#: Events whose transition the controls hear of (see `signal_of`):
#: a ``resend`` settles a send in doubt, which holds its share already, and is not gated.
HEARD: frozenset[Event] = frozenset(
    {Event.DISPATCH, Event.RETRY, Event.SUCCEED, Event.FAIL, Event.LOSE, Event.WITHDRAW, Event.NOT_LANDED}
)


def row_values(row: ControlRow) -> dict[str, Any]:
    """A control row as stored: ``state`` as JSON text."""
    return {
        "control": stored_text(row.control),
        "scope": stored_text(row.scope),
        "state": json.dumps(dict(row.state), sort_keys=True),
        "updated_at": row.updated_at,
    }


def row_from(values: Mapping[str, Any]) -> ControlRow:
    """A control row read back (`row_values`' inverse)."""
    state = values["state"]
    return ControlRow(
        control=str(values["control"]),
        scope=str(values["scope"]),
        state=json.loads(state) if isinstance(state, str | bytes) else dict(state or {}),
        updated_at=float(values["updated_at"] or 0.0),
    )


def approved(change: Change) -> bool:
    """Whether ``change`` carries an approver's consent to this very send."""
    evidence = change.evidence or {}
    return (
        change.decision_id is not None
        and evidence.get("kind") == "approval"
        and evidence.get("decision") in ("approve", "edit")
    )


def controlled_plan(
    op_id: str,
    change: Change,
    expected_version: int | None,
    actor: str,
    where: str,
    seen: Operation | None,
    controls: Controls,
    call: Call,
) -> Plan[Transition | Refusal]:
    """`transition_plan` for an operation with controls: the admission of
    a send, or the record of its outcome, in the transition's own transaction.

    A send (``dispatch``, ``retry``) is admitted first (`admit`):
    refused, nothing is written and the `Refusal` is returned. Every other
    event locks the rows it may change (the hold first, then the rows it charged
    and the circuit's), then transitions, then writes what the outcome does.
    """
    if change.event in CHARGING:
        stamp = now()
        keys = rules.admit_keys(controls, call, stamp)
        rows = yield LockControls(tuple(keys))
        # The clock read once the rows are held: what this send's decision and the
        # sends and outcomes serialized on the same rows are ordered by.
        admission = rules.admit(
            controls, call, rows, now=now(), override=approved(change), keyed_at=stamp
        )
        if admission.refusal is not None:
            return admission.refusal
        moved = yield from transition_plan(op_id, change, expected_version, actor, where, seen=seen)
        if moved.applied and admission.writes:
            yield WriteControls(admission.writes)
        return moved
    return (yield from accounted_plan(op_id, change, expected_version, actor, where, seen, controls))


def accounted_plan(
    op_id: str,
    change: Change,
    expected_version: int | None,
    actor: str,
    where: str,
    seen: Operation | None,
    controls: Controls,
    *,
    decidable_only: bool = False,
) -> Plan[Transition]:
    """`transition_plan` for a transition that is not a send, with what
    it does to the rows (`controls_after`): the hold first,
    then the rows it charged and the circuit's, locked before the transition."""
    hold: dict[Key, ControlRow] = yield LockControls((rules.hold_key(op_id),))
    more = set(rules.charged_keys(hold.get(rules.hold_key(op_id))))
    if controls.circuit is not None:
        more.add(controls.circuit.key)
    rows = {**hold, **((yield LockControls(tuple(sorted(more)))) if more else {})}
    moved = yield from transition_plan(
        op_id, change, expected_version, actor, where, decidable_only, seen
    )
    if moved.applied:
        writes = rules.controls_after(controls, op_id, change.event.value, change.evidence, rows, now=now())
        if writes:
            yield WriteControls(writes)
    return moved


def verdict_plan(
    op_id: str,
    change: Change,
    expected_version: int | None,
    actor: str,
    where: str,
    stores_controls: bool = True,
) -> Plan[Transition]:
    """An operator's verdict (decidable states only) recorded as a transition: one that
    proves nothing landed (``not_landed``) gives back the budget shares the operation
    holds, in the verdict's own transaction, as the same answer given in the graph
    does. The tool's declarations are not needed: the hold names what was charged.
    Circuits are left alone (a verdict says nothing of the provider's health).
    ``stores_controls=False``: a ledger that keeps no control rows (nothing can be held)."""
    if not stores_controls or rules.signal_of(change.event.value, change.evidence) != "refund":
        return (yield from transition_plan(op_id, change, expected_version, actor, where, True))
    return (
        yield from accounted_plan(
            op_id, change, expected_version, actor, where, None, Controls(), decidable_only=True
        )
    )
