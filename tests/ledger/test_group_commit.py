"""Group commit: writes that arrive together share one transaction, and each keeps its
own result or error exactly as if it had run alone (on every backend)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from langgraph_effects.errors import IllegalTransitionError, OperationNotFoundError, StaleVersionError
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.operation import Change, Event, State

from .conftest import OpFactory
from .test_contract import LOSE, dispatch, succeed


async def _eight_dispatched(ledger: Ledger, make_op: OpFactory) -> list[str]:
    ops = [make_op(contract="dedup") for _ in range(8)]
    stored = await ledger.record_intents(ops, change=dispatch())
    assert [op.state for op in stored] == [State.DISPATCHED] * 8
    return [op.op_id for op in stored]


async def test_a_failing_write_in_a_group_fails_alone(ledger: Ledger, make_op: OpFactory) -> None:
    op_ids = await _eight_dispatched(ledger, make_op)
    writes = [ledger.transition(i, succeed(), expected_version=1) for i in op_ids[:5]]
    writes.append(ledger.transition(op_ids[5], succeed(), expected_version=7))  # stale
    writes.append(ledger.transition("no-such-op", succeed(), expected_version=1))
    writes.append(ledger.transition(op_ids[6], Change(Event.CONFIRM), expected_version=1))  # illegal
    results = await asyncio.gather(*writes, return_exceptions=True)

    assert all(not isinstance(r, BaseException) for r in results[:5])
    assert isinstance(results[5], StaleVersionError)
    assert isinstance(results[6], OperationNotFoundError)
    assert isinstance(results[7], IllegalTransitionError)
    stored = await ledger.get_many(op_ids)
    assert [stored[i].state for i in op_ids] == [State.CONFIRMED] * 5 + [State.DISPATCHED] * 3
    # Nothing of the failed writes was kept, not even an audit row.
    for i in op_ids:
        assert len(await ledger.audit(i)) == (2 if stored[i].state is State.CONFIRMED else 1)


async def test_writes_arriving_during_a_group_get_the_next_one(ledger: Ledger, make_op: OpFactory) -> None:
    op_ids = await _eight_dispatched(ledger, make_op)
    first = asyncio.ensure_future(ledger.transition(op_ids[0], LOSE, expected_version=1))
    await asyncio.sleep(0)  # the first group is formed; these queue for the next
    rest = [ledger.transition(i, LOSE, expected_version=1) for i in op_ids[1:]]
    moved = await asyncio.gather(first, *rest)
    assert [op.state for op in moved] == [State.UNKNOWN] * 8


async def test_eight_concurrent_outcomes_cost_at_most_two_commits(
    tmp_path: Path, make_op: OpFactory
) -> None:
    commits: list[str] = []
    async with SqliteLedger.from_conn_string(tmp_path / "ledger.sqlite") as ledger:
        await ledger.setup()
        op_ids = await _eight_dispatched(ledger, make_op)
        await ledger._run(lambda db: db.set_trace_callback(
            lambda sql: commits.append(sql) if sql.strip().upper() == "COMMIT" else None
        ))
        moved = await asyncio.gather(*(ledger.transition(i, succeed(), expected_version=1) for i in op_ids))
        await ledger._run(lambda db: db.set_trace_callback(None))
    assert [op.state for op in moved] == [State.CONFIRMED] * 8
    assert len(commits) == 1  # released together: one group, one fsync


async def test_a_database_error_in_one_plan_spares_the_others(tmp_path: Path, make_op: OpFactory) -> None:
    """A constraint the database enforces (here a trigger) fails one plan of a group;
    its savepoint is rolled back and its neighbours commit."""
    path = tmp_path / "ledger.sqlite"
    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
        op_ids = await _eight_dispatched(ledger, make_op)
        with sqlite3.connect(path) as db:
            db.execute(
                "CREATE TRIGGER refuse BEFORE UPDATE ON effect_operations WHEN NEW.op_id = "
                f"'{op_ids[3]}' BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
            )
        results = await asyncio.gather(
            *(ledger.transition(i, succeed(), expected_version=1) for i in op_ids), return_exceptions=True
        )
        stored = await ledger.get_many(op_ids)
    failed = [i for i, r in zip(op_ids, results, strict=True) if isinstance(r, BaseException)]
    assert failed == [op_ids[3]]
    assert "refused by a trigger" in str(results[3])
    confirmed = [State.CONFIRMED] * 3
    assert [stored[i].state for i in op_ids] == [*confirmed, State.DISPATCHED, *confirmed, State.CONFIRMED]


@pytest.mark.parametrize("n", [1, 3])
async def test_cancelled_waiter_does_not_lose_the_others(ledger: Ledger, make_op: OpFactory, n: int) -> None:
    op_ids = await _eight_dispatched(ledger, make_op)
    tasks = [asyncio.ensure_future(ledger.transition(i, LOSE, expected_version=1)) for i in op_ids]
    for t in tasks[:n]:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    stored = await ledger.get_many(op_ids)
    # A cancelled caller's write may still land (it was queued); the others always do.
    assert all(stored[i].state is State.UNKNOWN for i in op_ids[n:])
