"""Plans that are group-committed together, as one plan (see `group`).

Each plan runs as if alone, one after the other, with one exception: first steps
that many plans ask together are asked as one step, when nothing one reads or
writes can touch another's. The `FindOrInsert` that opens each plan's
calls: eight parallel tool tasks of one AIMessage (``create_agent`` runs one task
per call) open their calls with one statement, not eight. And the compare-and-sets
of outcomes that arrive together (`CasEach`): on Postgres, one
statement instead of a round trip each inside the group's transaction.

That merge answers every plan exactly what its own step would have: its ids,
(tool, args hash) pairs and provider keys are disjoint from those of every plan
before it, so running it first changes nothing any of them reads, and the merged
find is the union of the merged plans' finds. Its rows are handed back by the same
test the find applies. Only when the merged find finds a row (and so inserted
nothing) do the plans whose own share is empty ask their own step, as before.
``tests/ledger/test_grouped_steps.py`` checks this against plans run one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.operation import Operation
from .base import (
    CasEach,
    CasWithAudit,
    Find,
    FindOrInsert,
    InsertWithAudit,
    LedgerStep,
    Plan,
    PlanResult,
    Regroup,
    _Run,
)
from .codec import encoded_extra, origin_text


def group_plan(makers: Sequence[Callable[[], Plan[Any]]]) -> Plan[list[PlanResult[Any]]]:
    """Several plans as one plan (one transaction): the outcome of each. Raises
    `Regroup` if one raised after writing, so the backend rolls back and runs
    them one by one."""
    runs = [_Run(make()) for make in makers]
    outcomes: list[PlanResult[Any] | None] = [None] * len(runs)
    steps: list[LedgerStep | None] = []
    for i, run in enumerate(runs):
        steps.append(_advance(run, None, outcomes, i))
    for together in _mergeable(steps):
        if isinstance(steps[together[0]], CasWithAudit):
            yield from _ask_cas_together(together, runs, steps, outcomes)
        else:
            yield from _ask_opens_together(together, runs, steps, outcomes)
    for i, run in enumerate(runs):
        step = steps[i]
        while step is not None and outcomes[i] is None:
            step = _advance(run, (yield step), outcomes, i)
        if outcomes[i] is None:
            outcomes[i] = PlanResult(value=run.result)
    return outcomes  # type: ignore[return-value]


def _ask_opens_together(
    together: list[int],
    runs: list[_Run],
    steps: list[LedgerStep | None],
    outcomes: list[PlanResult[Any] | None],
) -> Plan[None]:
    """The opens ``together`` as one `FindOrInsert`; each plan gets its share."""
    opens = {i: step for i in together if isinstance(step := steps[i], FindOrInsert)}
    found, inserted = yield _merged(list(opens.values()))
    alone = []
    for i, asked in opens.items():
        own = [op for op in found if _found_by(asked.find, op)]
        if found and not own:
            alone.append(i)  # the merged insert did not run: ask its own step
            continue
        mine = {op.op_id for op in asked.insert.ops}
        steps[i] = _advance(runs[i], (own, [x for x in inserted if x in mine]), outcomes, i)
    for i in alone:
        steps[i] = _advance(runs[i], (yield opens[i]), outcomes, i)


def _ask_cas_together(
    together: list[int],
    runs: list[_Run],
    steps: list[LedgerStep | None],
    outcomes: list[PlanResult[Any] | None],
) -> Plan[None]:
    """The compare-and-sets ``together`` (distinct rows) as one `CasEach`, in
    op_id order (two workers' batches lock rows in the same order); each gets its own."""
    cas = {i: step for i in together if isinstance(step := steps[i], CasWithAudit)}
    ordered = sorted(cas.items(), key=lambda item: item[1].after.op_id)
    written = yield CasEach(tuple(step for _, step in ordered))
    for (i, _), was in zip(ordered, written, strict=True):
        steps[i] = _advance(runs[i], was, outcomes, i)


def _advance(run: _Run, reply: Any, outcomes: list[PlanResult[Any] | None], i: int) -> LedgerStep | None:
    """``run``'s next step; a plan that raised gets its error as its outcome, unless it
    had written (then the whole group is rolled back and run plan by plan)."""
    try:
        return run.send(reply)
    except Exception as error:
        if run.wrote:
            raise Regroup() from error
        outcomes[i] = PlanResult(error=error)
        return None


def _mergeable(steps: Sequence[LedgerStep | None]) -> list[list[int]]:
    """Groups (two or more, by plan index) of first steps that may be asked as one:
    opens of the same thread and origin, or compare-and-sets; each with nothing in
    common with any plan before it that one could find, take or change for another
    (ids, payload pairs, provider keys). The merged step runs first, ahead of those
    earlier plans; a plan that starts with another step touches rows not known up
    front, so nothing after it is merged."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    earlier: set[Any] = set()
    for i, step in enumerate(steps):
        if step is None:
            continue  # ended before asking anything
        if isinstance(step, FindOrInsert):
            kind: tuple[Any, ...] = ("open", step.find.thread_id, step.find.origin)
        elif isinstance(step, CasWithAudit):
            kind = ("cas",)
        else:
            break
        mine = _touched(step)
        if earlier.isdisjoint(mine):
            groups.setdefault(kind, []).append(i)
        earlier |= mine
    return [members for members in groups.values() if len(members) > 1]


def _touched(step: FindOrInsert | CasWithAudit) -> set[Any]:
    """What ``step`` reads or writes that another plan could share."""
    if isinstance(step, CasWithAudit):
        return {("id", step.after.op_id)}
    touched: set[Any] = {("id", x) for x in step.find.op_ids}
    touched.update(("pair", pair) for pair in step.find.pairs)
    for op in step.insert.ops:
        touched.add(("id", op.op_id))
        touched.add(("pair", (op.tool, op.args_hash)))
        if op.provider_key is not None:
            touched.add(("key", op.tenant, op.provider_key))
    return touched


def _merged(opens: Sequence[FindOrInsert]) -> FindOrInsert:
    """One `FindOrInsert` standing for ``opens`` (same thread and origin)."""
    first = opens[0].find
    find = Find(
        tuple(sorted({x for o in opens for x in o.find.op_ids})),
        first.thread_id,
        tuple(sorted({pair for o in opens for pair in o.find.pairs})),
        first.origin,
    )
    # In op_id order, as every insert is (see insert_step).
    rows = sorted(
        ((op, audit) for o in opens for op, audit in zip(o.insert.ops, o.insert.audit, strict=True)),
        key=lambda pair: pair[0].op_id,
    )
    return FindOrInsert(find, InsertWithAudit(tuple(op for op, _ in rows), tuple(a for _, a in rows)))


def _found_by(find: Find, op: Operation) -> bool:
    """Whether ``find`` asked alone would have found the stored row ``op`` (the test
    the backends apply in SQL, origin included)."""
    if op.op_id in find.op_ids:
        return True
    if op.thread_id != find.thread_id or (op.tool, op.args_hash) not in find.pairs:
        return False
    origin = origin_text(find.origin)
    return origin is None or origin in encoded_extra(op)
