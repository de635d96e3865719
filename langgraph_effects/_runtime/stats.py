"""The ledger at a glance: unresolved operations by state and tool, the least recently
changed one, who waits for a human and for how long, budgets and circuit breakers, and
the thresholds crossed. What ``langgraph-effects stats`` prints; an app's health
endpoint or a metrics exporter calls [`stats`][langgraph_effects.operator.stats] too.

What it reads: one count of the unresolved operations by state and tool (over every
tenant, the SQL backends answer it from their partial index on unresolved states), the
least recently changed unresolved operation, the operations in ``review`` (at most
``limit``), the ``PENDING_SCAN`` least recently changed ``pending`` ones (for the
calls waiting for an approval), and the control rows: every query asks only for
unresolved states. Settled operations (``confirmed``, ``failed``, ``abandoned``) are
counted only with ``settled=True``: that count reads the whole operations table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, cast

from ..core.controls import ControlRow, describe
from ..core.operation import UNRESOLVED, Operation, State, needs_approval
from ..ledger.base import Ledger, OperationCount, OperationQuery, listing_order
from .shapes import (
    AlertJSON,
    BudgetJSON,
    CircuitJSON,
    StatsJSON,
    StatsOperationJSON,
    WaitingJSON,
)

__all__ = ["PENDING_SCAN", "LedgerStats", "stats"]

#: How many ``pending`` operations (least recently changed first) `stats` looks at
#: for the calls waiting for an approval.
PENDING_SCAN = 1000


@dataclass(frozen=True)
class LedgerStats:
    """What [`stats`][langgraph_effects.operator.stats] found (``to_json()``: what
    ``langgraph-effects stats --json`` prints)."""

    ledger: str
    """The ledger read (``Ledger.where``)."""
    tenant: str | None
    at: float
    """When it was read (ages are counted to then)."""
    counts: tuple[OperationCount, ...]
    """Operations by state and tool: the unresolved ones, and the settled ones with
    ``settled``."""
    settled: bool
    oldest_unresolved: Operation | None
    """The least recently changed unresolved operation."""
    waiting: tuple[Operation, ...]
    """Operations waiting for a human (``review``, or a call waiting for its approval),
    least recently changed first, at most ``limit``."""
    waiting_count: int
    """Every operation in ``review``, plus the approvals found."""
    waiting_complete: bool
    """``False``: more than `PENDING_SCAN` operations are ``pending``, and only that many
    (the least recently changed) were looked at for approvals."""
    budgets: tuple[BudgetJSON, ...]
    circuits: tuple[CircuitJSON, ...]
    """Open ones first."""
    max_review_age: float | None = None
    max_unresolved_age: float | None = None

    @property
    def unresolved(self) -> int:
        """How many operations are unresolved."""
        return sum(c.count for c in self.counts if c.state in UNRESOLVED)

    @property
    def by_state(self) -> dict[State, int]:
        """How many operations are in each state counted (every unresolved state, zero
        included; the settled ones only with ``settled``)."""
        counted = [s for s in State if s in UNRESOLVED or self.settled]
        return {s: sum(c.count for c in self.counts if c.state is s) for s in counted}

    @property
    def oldest_waiting_age(self) -> float | None:
        """Seconds the longest-waiting operation has waited for a human (unchanged)."""
        return self.at - self.waiting[0].updated_at if self.waiting else None

    @property
    def alerts(self) -> tuple[AlertJSON, ...]:
        """The thresholds crossed: a review (or approval) waiting longer than
        ``max_review_age``, an unresolved operation unchanged for longer than
        ``max_unresolved_age`` (seconds). Empty: healthy."""
        found: list[AlertJSON] = []
        if self.max_review_age is not None and self.waiting:
            op = self.waiting[0]
            age = self.at - op.updated_at
            if age > self.max_review_age:
                what = "a verdict" if op.state is State.REVIEW else "an approval"
                found.append(_alert("review_age", op, age, self.max_review_age, f"has waited for {what}"))
        if self.max_unresolved_age is not None and self.oldest_unresolved is not None:
            op = self.oldest_unresolved
            age = self.at - op.updated_at
            if age > self.max_unresolved_age:
                found.append(
                    _alert("unresolved_age", op, age, self.max_unresolved_age, f"has been {op.state.value}")
                )
        return tuple(found)

    def to_json(self) -> StatsJSON:
        """What ``langgraph-effects stats --json`` prints."""
        return {
            "ledger": self.ledger,
            "tenant": self.tenant,
            "at": self.at,
            "unresolved": self.unresolved,
            "by_state": {state.value: n for state, n in self.by_state.items()},
            "counts": [
                {
                    "state": c.state.value,
                    "tool": c.tool,
                    "count": c.count,
                    "least_recent_update": c.least_recent_update,
                }
                for c in self.counts
            ],
            "settled": self.settled,
            "oldest_unresolved": (
                _operation_json(self.oldest_unresolved, self.at) if self.oldest_unresolved else None
            ),
            "waiting": {
                "count": self.waiting_count,
                "oldest_age": self.oldest_waiting_age,
                "operations": [_waiting_json(op, self.at) for op in self.waiting],
                "complete": self.waiting_complete,
            },
            "budgets": list(self.budgets),
            "circuits": list(self.circuits),
            "max_review_age": self.max_review_age,
            "max_unresolved_age": self.max_unresolved_age,
            "alerts": list(self.alerts),
        }


async def stats(
    ledger: Ledger,
    *,
    tenant: str | None = None,
    settled: bool = False,
    limit: int = 20,
    max_review_age: float | None = None,
    max_unresolved_age: float | None = None,
    now: float | None = None,
) -> LedgerStats:
    """Read the ledger's health: counts by state and tool, the least recently changed
    unresolved operation, who waits for a human, budgets and circuit breakers.

    Read-only. ``tenant`` keeps only that tenant's operations and budgets (circuit
    breakers are shared by every tenant, and always shown). ``settled=True`` also
    counts ``confirmed``, ``failed`` and ``abandoned`` operations, which reads the
    whole operations table: leave it off in a health check that runs often.
    ``limit``: at most this many waiting operations are returned (their count is
    exact for ``review``). ``max_review_age`` and ``max_unresolved_age`` (seconds)
    are the thresholds ``alerts`` reports; ``now`` the time ages are counted to
    (default: when the reads are done).

        from langgraph_effects.operator import open_ledger, stats

        async with open_ledger("agent.sqlite", read_only=True) as ledger:
            health = await stats(ledger, max_review_age=3600)
        if health.alerts:
            ...  # page someone: health.to_json()["alerts"] says what and since when
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an int of at least 1, not {limit!r}")
    for name, value in (("max_review_age", max_review_age), ("max_unresolved_age", max_unresolved_age)):
        if value is not None and not value >= 0:  # also refuses NaN
            raise ValueError(f"{name} must be a number of seconds >= 0 (or None), not {value!r}")
    counts = await ledger.count_operations(
        OperationQuery(states=None if settled else UNRESOLVED, tenant=tenant)
    )
    oldest = await ledger.list_operations(OperationQuery(UNRESOLVED, tenant=tenant, limit=1))
    reviews = await ledger.list_operations(
        OperationQuery(frozenset({State.REVIEW}), tenant=tenant, limit=limit)
    )
    pending = await ledger.list_operations(
        OperationQuery(frozenset({State.PENDING}), tenant=tenant, limit=PENDING_SCAN)
    )
    approvals = [op for op in pending if needs_approval(op)]
    rows = await ledger.control_rows() if ledger.stores_controls else []
    stamp = time.time() if now is None else now
    budgets, circuits = controls_json(rows, now=stamp, tenant=tenant)
    return LedgerStats(
        ledger=ledger.where,
        tenant=tenant,
        at=stamp,
        counts=tuple(counts),
        settled=settled,
        oldest_unresolved=oldest[0] if oldest else None,
        waiting=tuple(listing_order([*reviews, *approvals])[:limit]),
        waiting_count=sum(c.count for c in counts if c.state is State.REVIEW) + len(approvals),
        waiting_complete=len(pending) < PENDING_SCAN,
        budgets=tuple(budgets),
        circuits=tuple(circuits),
        max_review_age=max_review_age,
        max_unresolved_age=max_unresolved_age,
    )


def controls_json(
    rows: Iterable[ControlRow], *, now: float, tenant: str | None = None
) -> tuple[list[BudgetJSON], list[CircuitJSON]]:
    """The budgets (of ``tenant`` only, when given) and circuit breakers (open ones
    first) the control rows describe."""
    budgets: list[BudgetJSON] = []
    circuits: list[CircuitJSON] = []
    for row in rows:
        shown = describe(row, now=now)
        if shown is None:
            continue
        kind = shown.pop("kind")
        if kind == "circuit":
            circuits.append(cast(CircuitJSON, shown))
        elif tenant is None or _budget_tenant(row) == tenant:
            budgets.append(cast(BudgetJSON, shown))
    circuits.sort(key=lambda c: c["status"] == "closed")
    return budgets, circuits


def _budget_tenant(row: ControlRow) -> str | None:
    """The tenant a budget row counts for (its scope's first part)."""
    try:
        scope = json.loads(row.scope)
    except ValueError:
        return None
    return str(scope[0]) if isinstance(scope, list) and scope else None


def _operation_json(op: Operation, at: float) -> StatsOperationJSON:
    return {
        "operation_id": op.op_id,
        "state": op.state.value,
        "tool": op.tool,
        "thread_id": op.thread_id,
        "tenant": op.tenant,
        "version": op.version,
        "updated_at": op.updated_at,
        "age": at - op.updated_at,
    }


def _waiting_json(op: Operation, at: float) -> WaitingJSON:
    return {
        **_operation_json(op, at),
        "waits_for": "review" if op.state is State.REVIEW else "approval",
    }


def _alert(
    kind: Literal["review_age", "unresolved_age"], op: Operation, age: float, limit: float, what: str
) -> AlertJSON:
    return {
        "kind": kind,
        "operation_id": op.op_id,
        "age": age,
        "limit": limit,
        "message": (
            f"{op.op_id} ({op.tool}, thread {op.thread_id}) {what} for {_duration(age)}, "
            f"longer than {_duration(limit)}"
        ),
    }


def _duration(seconds: float) -> str:
    """``42s``, ``5m``, ``2h 5m``, ``3d 4h``."""
    s = int(seconds)
    for unit, size, smaller, small_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if s >= size:
            whole, rest = divmod(s, size)
            part = rest // small_size
            return f"{whole}{unit} {part}{smaller}" if part else f"{whole}{unit}"
    return f"{s // 60}m" if s >= 60 else f"{s}s"
