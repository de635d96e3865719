"""Plans that are group-committed together, as one plan (see `group_commit`): each
runs as if alone, one after the other, inside the group's one transaction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .base import Plan, _Run
from .group_commit import PlanResult, Regroup


def group_plan(makers: Sequence[Callable[[], Plan[Any]]]) -> Plan[list[PlanResult[Any]]]:
    """Several plans as one plan (one transaction): the result of each. A plan that
    raised before writing gets its error as its result; one that raised after
    writing raises `Regroup`, so the backend rolls back and runs them one by one."""
    results: list[PlanResult[Any]] = []
    for make in makers:
        run = _Run(make())
        reply: Any = None
        try:
            while (step := run.send(reply)) is not None:
                reply = yield step
        except Exception as error:
            if run.wrote:
                raise Regroup() from error
            results.append(PlanResult(error=error))
            continue
        results.append(PlanResult(value=run.result))
    return results
