"""Conformance cases: a compensation request is one transaction (the effect's mark and
its undo's intent, or neither), read back with the link in both rows."""

from __future__ import annotations

import pytest

from ..core.compensation import undo_operation_id
from ..core.contract import Effect, Undo
from ..core.operation import State
from ..errors import CompensationError
from ..ledger.base import Ledger
from ._cases import dispatch, make_op, succeed


def _undo(provider_key: str) -> str:
    return provider_key


def _effects(key: str | None = None) -> dict[str, Effect]:
    own = Effect(key=(lambda args, config: key)) if key is not None else Effect()
    return {"send_email": Effect(compensate=Undo(_undo, effect=own))}


class CompensationCases:
    """Compensation requests (part of `LedgerConformance`)."""

    async def test_a_compensation_marks_the_effect_and_records_its_undo_together(
        self, ledger: Ledger
    ) -> None:
        from .._runtime.undo import request_compensation

        op = make_op(tenant="acme")
        await ledger.record_intents([op], change=dispatch())
        confirmed = await ledger.transition(op.op_id, succeed(), expected_version=1)
        assert confirmed.state is State.CONFIRMED

        report = await request_compensation(ledger, op.op_id, effects=_effects(), actor="alice")
        undo = await ledger.get(undo_operation_id(op.op_id))
        marked = await ledger.get(op.op_id)
        assert undo is not None and marked is not None
        assert report.undo == undo and undo.state is State.PENDING
        assert undo.compensates == op.op_id and undo.tenant == "acme"
        assert marked.state is State.CONFIRMED and marked.version == confirmed.version + 1
        assert marked.compensated_by == undo.op_id
        trail = await ledger.audit(op.op_id)
        assert (trail[-1].event, trail[-1].from_state, trail[-1].to_state) == (
            "compensate", State.CONFIRMED, State.CONFIRMED,
        )
        assert [e.event for e in await ledger.audit(undo.op_id)] == ["intent"]

        again = await request_compensation(ledger, op.op_id, effects=_effects(), actor="bob")
        assert again.verdict == "requested" and again.undo == undo
        assert len(await ledger.audit(op.op_id)) == len(trail)  # nothing written

    async def test_a_compensation_that_cannot_record_its_undo_writes_nothing(
        self, ledger: Ledger
    ) -> None:
        from .._runtime.undo import request_compensation

        op = make_op(tenant="acme")
        taken = make_op(tenant="acme", provider_key="undo-key")
        await ledger.record_intents([op, taken], change=dispatch())
        confirmed = await ledger.transition(op.op_id, succeed(), expected_version=1)

        with pytest.raises(CompensationError) as raised:
            await request_compensation(ledger, op.op_id, effects=_effects("undo-key"))
        assert raised.value.verdict == "key_taken"
        assert await ledger.get(op.op_id) == confirmed  # the mark was rolled back too
        assert await ledger.get(undo_operation_id(op.op_id)) is None
