"""Plans group-committed together run as one plan (``group_plan``), each answered
exactly as if it had run alone, one after the other: same results, same rows, same
audit; a plan that raised before writing keeps its error to itself."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langgraph_effects.core.operation import Operation, State
from langgraph_effects.errors import StaleVersionError
from langgraph_effects.ledger.base import (
    DEFAULT_ACTOR,
    CasWithAudit,
    FindOrInsert,
    Ledger,
    LedgerStep,
    Plan,
    drive_plan,
    find_step,
    insert_step,
    recorded_plan,
    split_found,
)
from langgraph_effects.ledger.codec import audit_row
from langgraph_effects.ledger.group_commit import Regroup
from langgraph_effects.ledger.grouped import group_plan
from langgraph_effects.ledger.memory import InMemoryLedger

from .conftest import OpFactory
from .test_contract import dispatch, succeed

ORIGIN = "v:00000000000000000000000000000002.0.5"


def _op(
    op_id: str, *, args_hash: str = "h", provider_key: str | None = None, origin: str = ORIGIN
) -> Operation:
    return Operation(
        op_id=op_id, thread_id="thread-1", tool="send", tool_call_id=f"call-{op_id}",
        args={"n": op_id}, args_hash=args_hash, provider_key=provider_key or f"key-{op_id}",
        contract="blind", extra={"origin": origin},
    )


def _open(ops: Sequence[Operation], *, replans: bool = True) -> Callable[[], Plan[Any]]:
    """An open as the session makes it: FindOrInsert; if anything is found, bind what is stored
    and insert the rest (what it found and inserted is its result)."""

    def plan() -> Plan[Any]:
        pairs = [(op.tool, op.args_hash) for op in ops] if replans else []
        find = find_step([op.op_id for op in ops], "thread-1", pairs, ORIGIN if replans else None)
        insert = insert_step(ops, None, DEFAULT_ACTOR)
        found, inserted = yield FindOrInsert(find, insert)
        if not found:
            stored = yield from recorded_plan(ops, insert, inserted)
            return "new", sorted(inserted), [op.op_id for op in stored]
        by_id, candidates = split_found(find, found)
        fresh = [op for op in ops if op.op_id not in by_id]
        again = insert_step(fresh, None, DEFAULT_ACTOR)
        added = (yield again) if fresh else []
        return "found", sorted(by_id), sorted(c.op_id for c in candidates), sorted(added)

    return plan


class Recorder:
    """An in-memory ledger's answers, with the steps asked."""

    def __init__(self, ledger: InMemoryLedger) -> None:
        self.ledger, self.steps = ledger, []  # type: ignore[var-annotated]

    def __call__(self, step: LedgerStep) -> Any:
        self.steps.append(step)
        return self.ledger._answer(step)


def _grouped(
    ledger: InMemoryLedger, makers: Sequence[Callable[[], Plan[Any]]]
) -> tuple[list[Any], list[LedgerStep]]:
    recorder = Recorder(ledger)
    outcomes, _ = drive_plan(group_plan(makers), recorder)
    return [o.unwrap() for o in outcomes], recorder.steps


def _alone(ledger: InMemoryLedger, makers: Sequence[Callable[[], Plan[Any]]]) -> list[Any]:
    return [drive_plan(make(), ledger._answer)[0] for make in makers]


def _state(ledger: InMemoryLedger) -> Any:
    rows = {i: (op.state, op.version, op.tool_call_id) for i, op in ledger._ops.items()}
    return rows, {i: len(entries) for i, entries in ledger._audit.items()}


def test_eight_opens_are_asked_one_after_the_other() -> None:
    ledger = InMemoryLedger()
    makers = [_open([_op(f"op-{i}", args_hash=f"h{i}")]) for i in range(8)]
    results, steps = _grouped(ledger, makers)
    assert [type(s) for s in steps] == [FindOrInsert] * 8
    assert [s.insert.ops[0].op_id for s in steps] == [f"op-{i}" for i in range(8)]  # type: ignore[attr-defined]
    assert results == [("new", [f"op-{i}"], [f"op-{i}"]) for i in range(8)]
    assert sorted(ledger._ops) == [f"op-{i}" for i in range(8)]
    assert all(len(ledger._audit[f"op-{i}"]) == 1 for i in range(8))


def test_a_plan_that_raised_before_writing_keeps_its_error_to_itself() -> None:
    ledger = InMemoryLedger()

    def refused() -> Plan[Any]:
        yield from _record([_op("a", args_hash="h1")])  # found nothing stored: wrote
        raise ValueError("after writing")

    def reads_then_raises() -> Plan[Any]:
        yield find_step(["b"], "thread-1", [])
        raise ValueError("before writing")

    makers = [_open([_op("c", args_hash="h3")]), reads_then_raises, _open([_op("d", args_hash="h4")])]
    outcomes, _ = drive_plan(group_plan(makers), Recorder(ledger))
    assert isinstance(outcomes[1].error, ValueError) and str(outcomes[1].error) == "before writing"
    assert outcomes[0].unwrap() == ("new", ["c"], ["c"]) and outcomes[2].unwrap() == ("new", ["d"], ["d"])
    with pytest.raises(Regroup):
        drive_plan(group_plan([_open([_op("e", args_hash="h5")]), refused]), Recorder(InMemoryLedger()))


ids = st.sampled_from(["a", "b", "c", "d", "e", "f"])
hashes = st.sampled_from(["h1", "h2", "h3", "h4"])
keys = st.sampled_from([None, "k1", "k2"])
origins = st.sampled_from([ORIGIN, "v:other"])
kinds = st.sampled_from(["open", "replans", "record", "cas"])
ops = st.builds(lambda i, h, k, o: _op(i, args_hash=h, provider_key=k, origin=o), ids, hashes, keys, origins)


@settings(max_examples=100, deadline=None)
@given(
    stored=st.lists(ops, max_size=3),
    plans=st.lists(
        st.tuples(st.lists(ops, min_size=1, max_size=3), kinds),
        min_size=2,
        max_size=6,
    ),
)
def test_a_group_answers_as_plans_run_one_by_one(
    stored: list[Operation], plans: list[tuple[list[Operation], str]]
) -> None:
    """Any mix of opens (with and without re-plan candidates) and plain inserts, over
    rows already stored, sharing ids, payloads, keys and origins at random."""
    ledger, reference = InMemoryLedger(), InMemoryLedger()
    for target in (ledger, reference):
        if stored:
            drive_plan(_record(stored), target._answer)
    makers = [_plan(kind, batch) for batch, kind in plans]
    results, _ = _grouped(ledger, makers)
    assert results == _alone(reference, makers)
    assert _state(ledger) == _state(reference)


def _plan(kind: str, batch: list[Operation]) -> Callable[[], Plan[Any]]:
    if kind == "record":
        return lambda: _record(batch)
    if kind == "cas":  # a compare-and-set of the first op at version 1 (stored or not)
        return lambda: _cas(batch[0], 1)
    return _open(batch, replans=kind == "replans")


def _cas(op: Operation, expected: int) -> Plan[Any]:
    after = dataclasses.replace(op, version=expected + 1, state=State.CONFIRMED)
    written = yield CasWithAudit(after, expected, audit_row(op, after, None, "w"))
    return written


def _record(ops: Sequence[Operation]) -> Plan[Any]:
    insert = insert_step(ops, None, DEFAULT_ACTOR)
    inserted = yield insert
    return inserted


async def test_each_backend_runs_a_group_of_opens(ledger: Ledger, make_op: OpFactory) -> None:
    """On the SQL backends the opens run inside their group transaction; the default
    (memory) runs each plan alone. Either way every plan gets its own rows."""
    batches = [[make_op(args_hash=f"hash-{i}", tool_call_id=f"call-{i}")] for i in range(8)]
    makers = [_open(batch) for batch in batches]
    outcomes = await ledger._transact_group(makers)
    results = [o.unwrap() for o in outcomes]
    assert results == [("new", [b[0].op_id], [b[0].op_id]) for b in batches]
    stored = await ledger.get_many([b[0].op_id for b in batches])
    assert sorted(stored) == sorted(b[0].op_id for b in batches)
    assert [len(await ledger.audit(b[0].op_id)) for b in batches] == [1] * 8
    # Run again: every open now finds its own row and inserts nothing.
    again = [o.unwrap() for o in await ledger._transact_group(makers)]
    assert again == [("found", [b[0].op_id], [], []) for b in batches]  # no origin recorded: no candidate


async def test_each_backend_writes_eight_optimistic_outcomes_at_once(
    ledger: Ledger, make_op: OpFactory
) -> None:
    """The outcomes the dispatcher records (optimistic, from the row it holds) start with
    their compare-and-set; eight arrive together. One of them is stale and fails
    alone; the others are written with their audit."""
    ops = await ledger.record_intents([make_op() for _ in range(8)], change=dispatch())
    seen = [dataclasses.replace(op, version=7) if i == 3 else op for i, op in enumerate(ops)]
    results = await asyncio.gather(
        *(
            ledger.transition(op.op_id, succeed(i=i), expected_version=op.version, actor=f"w{i}", before=op)
            for i, op in enumerate(seen)
        ),
        return_exceptions=True,
    )
    assert isinstance(results[3], StaleVersionError)
    for i, op in enumerate(ops):
        stored = await ledger.get(op.op_id)
        trail = [(e.event, e.version, e.actor) for e in await ledger.audit(op.op_id)]
        assert stored is not None
        if i == 3:
            assert stored == op and trail == [("intent", 1, trail[0][2])]
        else:
            assert results[i] == stored and stored.state is State.CONFIRMED
            assert trail[1:] == [("succeed", 2, f"w{i}")]


def test_the_memory_compare_and_set_writes_only_the_mutable_columns() -> None:
    """As the SQL backends' UPDATE: a CAS whose ``after`` carries another payload or key
    changes the state and version, never the identity stored at intent (the flaky seeds
    of the property test above were a CAS that replaced a row's provider key)."""
    ledger = InMemoryLedger()
    drive_plan(_record([_op("a", args_hash="h1", provider_key="k1")]), ledger._answer)
    assert drive_plan(_cas(_op("a", args_hash="h2", provider_key="k2"), 1), ledger._answer)[0] is True
    stored = ledger._ops["a"]
    assert (stored.state, stored.version) == (State.CONFIRMED, 2)
    assert (stored.args_hash, stored.provider_key) == ("h1", "k1")
    # The stored key still holds its place: another row cannot take "k1", "k2" is free.
    others = [_op("b", provider_key="k1"), _op("c", provider_key="k2")]
    assert drive_plan(_record(others), ledger._answer)[0] == ["c"]
