"""Conformance cases: removing settled operations (`Forget`) and erasing their data
(`Erase`), what a purge, a thread's deletion and an erasure are made of."""

from __future__ import annotations

from typing import Any

from ..core.controls import ControlRow, hold_key
from ..core.operation import TERMINAL, State
from ..ledger.base import Ledger
from ..ledger.lifecycle import is_erased
from ..ledger.steps import LockControls, WriteControls
from ._cases import make_op, populate


class LifecycleCases:
    """Retention, deletion and erasure (part of `LedgerConformance`)."""

    async def test_forget_removes_only_settled_rows_changed_before_the_cut(self, ledger: Ledger) -> None:
        ops, cut = await populate(ledger)
        everyone = [op.op_id for op in ops.values()]
        gone = await ledger.forget_operations(everyone, states=TERMINAL, updated_before=cut)
        assert gone == [ops["c"].op_id]
        left = await ledger.get_many(everyone)
        assert set(left) == set(everyone) - {ops["c"].op_id}
        assert await ledger.audit(ops["c"].op_id) == []
        assert len(await ledger.audit(ops["f"].op_id)) == 2  # settled, but after the cut
        # Without a cut every settled row goes; unresolved ones stay.
        gone = await ledger.forget_operations(everyone)
        assert sorted(gone) == sorted([ops["f"].op_id, ops["g"].op_id])
        left = await ledger.get_many(everyone)
        unresolved = {State.PENDING, State.DISPATCHED, State.UNKNOWN, State.REVIEW}
        assert {op.state for op in left.values()} == unresolved

    async def test_forget_by_every_state_frees_the_identity(self, ledger: Ledger) -> None:
        ops, _ = await populate(ledger)
        pending = ops["a"]
        assert await ledger.forget_operations([pending.op_id], states=frozenset(State)) == [pending.op_id]
        again = await ledger.record_intents([make_op(op_id=pending.op_id, provider_key=pending.provider_key,
                                                     tenant=pending.tenant)])
        assert again[0].version == 1 and len(await ledger.audit(pending.op_id)) == 1

    async def test_forget_removes_the_budget_hold_of_the_rows_it_removes(self, ledger: Ledger) -> None:
        if not ledger.stores_controls:
            return
        ops, _ = await populate(ledger)
        kept, gone = ops["b"], ops["c"]
        rows = tuple(ControlRow("hold", op.op_id, {"charges": []}, 1.0) for op in (kept, gone))

        def write() -> Any:
            yield WriteControls(rows)

        await ledger.transact(write)
        assert await ledger.forget_operations([kept.op_id, gone.op_id]) == [gone.op_id]

        def read() -> Any:
            return (yield LockControls((hold_key(kept.op_id), hold_key(gone.op_id))))

        found = await ledger.transact(read)
        assert found[hold_key(kept.op_id)].state == {"charges": []}
        # Gone (a SQL backend's lock may insert an empty row for a key it holds).
        assert not getattr(found.get(hold_key(gone.op_id)), "state", None)

    async def test_erase_keeps_ids_states_and_times_and_records_who(self, ledger: Ledger) -> None:
        ops, _ = await populate(ledger)
        confirmed, pending = ops["c"], ops["a"]
        erased = await ledger.erase_operations([confirmed.op_id, pending.op_id], actor="dpo@example")
        assert erased == [confirmed.op_id]
        after = await ledger.get(confirmed.op_id)
        assert after is not None and is_erased(after)
        assert after.args == {} and after.result is None and after.result_type is None
        assert (after.state, after.op_id, after.provider_key, after.args_hash, after.created_at) == (
            confirmed.state,
            confirmed.op_id,
            confirmed.provider_key,
            confirmed.args_hash,
            confirmed.created_at,
        )
        assert after.version == confirmed.version + 1
        assert after.evidence == {"kind": "result", "erased": after.extra["erased"]}
        trail = await ledger.audit(confirmed.op_id)
        assert [e.event for e in trail] == ["intent", "succeed", "erase"]
        assert trail[-1].actor == "dpo@example" and trail[-1].to_state is State.CONFIRMED
        assert trail[-1].seq == after.version
        for entry in trail[:-1]:
            assert entry.evidence is None or set(entry.evidence) <= {"kind", "erased"}
        untouched = await ledger.get(pending.op_id)
        assert untouched is not None and untouched.args == pending.args and not is_erased(untouched)
        # Erasing again changes nothing.
        assert await ledger.erase_operations([confirmed.op_id], actor="dpo@example") == []
        assert len(await ledger.audit(confirmed.op_id)) == 3
