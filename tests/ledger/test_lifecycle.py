"""Retention on every backend: `purge` removes settled operations past the window, in
batches, and keeps unresolved ones, those still in their dedup window and effects
whose undo is not settled; `delete_thread_operations` and `erase` by the operator API."""

from __future__ import annotations

import time

import pytest

from langgraph_effects.core.operation import Change, Event, State
from langgraph_effects.errors import UnresolvedOperationsError
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.operator import delete_thread_operations, erase, purge
from langgraph_effects.testing.conformance import LOSE, dispatch, make_op, succeed

DAY = 86400.0


async def settled(ledger: Ledger, n: int, **fields: object) -> list[str]:
    ops = [make_op(**fields) for _ in range(n)]  # type: ignore[arg-type]
    await ledger.record_intents(ops, change=dispatch())
    for op in ops:
        await ledger.transition(op.op_id, succeed(), expected_version=1)
    return [op.op_id for op in ops]


async def test_purge_removes_settled_past_the_window_and_keeps_the_rest(ledger: Ledger) -> None:
    old = await settled(ledger, 7, tenant="acme")
    failed = make_op(tenant="acme")
    await ledger.record_intents([failed], change=dispatch())
    await ledger.transition(failed.op_id, Change(Event.FAIL, evidence={"kind": "error"}), expected_version=1)
    in_window = await settled(ledger, 2, tenant="acme", extra={"dedup_window": 200 * DAY})
    stuck = make_op(tenant="acme")
    await ledger.record_intents([stuck], change=dispatch())
    await ledger.transition(stuck.op_id, LOSE, expected_version=1)
    pending = make_op(tenant="acme")
    await ledger.record_intents([pending])
    later = time.time() + 100 * DAY  # everything written above is 100 days old by then

    dry = await purge(ledger, 90 * DAY, now=later, batch_size=3)
    assert sorted(dry.removed) == sorted([*old, failed.op_id]) and dry.dry_run
    assert len(await ledger.get_many([*old, failed.op_id])) == 8  # a dry run removes nothing

    report = await purge(ledger, 90 * DAY, now=later, batch_size=3, dry_run=False)
    assert sorted(report.removed) == sorted([*old, failed.op_id])
    assert sorted(report.kept_in_dedup_window) == sorted(in_window)
    assert report.batches >= 3  # three rows per transaction
    left = await ledger.get_many([*old, failed.op_id, *in_window, stuck.op_id, pending.op_id])
    assert {op.op_id: op.state for op in left.values()} == {
        **{i: State.CONFIRMED for i in in_window},
        stuck.op_id: State.UNKNOWN,
        pending.op_id: State.PENDING,
    }
    assert await ledger.audit(old[0]) == []
    # Within the retention window nothing goes.
    assert (await purge(ledger, 90 * DAY, dry_run=False)).removed == []
    # Past the dedup window too, the last settled ones go; unresolved ones never.
    final = await purge(ledger, 90 * DAY, now=time.time() + 300 * DAY, dry_run=False)
    assert sorted(final.removed) == sorted(in_window)
    assert set(await ledger.get_many([stuck.op_id, pending.op_id])) == {stuck.op_id, pending.op_id}


async def test_purge_refuses_a_window_that_is_not_positive(ledger: Ledger) -> None:
    await settled(ledger, 1)
    with pytest.raises(ValueError, match="older_than must be a positive duration"):
        await purge(ledger, 0, dry_run=False)


async def test_purge_keeps_an_effect_whose_undo_is_not_settled(ledger: Ledger) -> None:
    [effect] = await settled(ledger, 1)
    undo = make_op(extra={"compensates": effect})
    mark = Change(Event.COMPENSATE, evidence={"kind": "compensation", "compensated_by": undo.op_id})
    await ledger.record_intents([undo])
    await ledger.transition(effect, mark, expected_version=2)
    report = await purge(ledger, DAY, now=time.time() + 2 * DAY, dry_run=False)
    assert report.kept_undo_pending == [effect] and report.removed == []


async def test_a_thread_with_unresolved_operations_is_refused_unless_forced(ledger: Ledger) -> None:
    done = await settled(ledger, 2, thread_id="t-del")
    stuck = make_op(thread_id="t-del")
    await ledger.record_intents([stuck], change=dispatch())
    other = await settled(ledger, 1, thread_id="t-other")
    with pytest.raises(UnresolvedOperationsError, match=stuck.op_id) as refused:
        await delete_thread_operations(ledger, "t-del")
    assert refused.value.op_ids == [stuck.op_id]
    assert len(await ledger.get_many([*done, stuck.op_id])) == 3  # nothing deleted
    removed = await delete_thread_operations(ledger, "t-del", force=True, actor="alice")
    assert sorted(removed) == sorted([*done, stuck.op_id])
    assert await ledger.get_many([*done, stuck.op_id]) == {}
    assert set(await ledger.get_many(other)) == set(other)


async def test_erase_a_tenant_keeps_the_others_and_the_unresolved(ledger: Ledger) -> None:
    mine = await settled(ledger, 3, tenant="acme")
    theirs = await settled(ledger, 1, tenant="globex")
    stuck = make_op(tenant="acme")
    await ledger.record_intents([stuck], change=dispatch())
    dry = await erase(ledger, tenant="acme", actor="dpo", dry_run=True)
    assert sorted(dry.erased) == sorted(mine) and dry.unresolved == [stuck.op_id]
    assert all(op.args for op in (await ledger.get_many(mine)).values())
    report = await erase(ledger, tenant="acme", actor="dpo")
    assert sorted(report.erased) == sorted(mine)
    assert all(op.args == {} for op in (await ledger.get_many(mine)).values())
    assert all(op.args for op in (await ledger.get_many([*theirs, stuck.op_id])).values())
    again = await erase(ledger, tenant="acme", actor="dpo")
    assert again.erased == [] and sorted(again.already_erased) == sorted(mine)
    with pytest.raises(ValueError, match="exactly one of tenant= and thread_id="):
        await erase(ledger, actor="dpo")
