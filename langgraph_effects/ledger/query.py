"""What a caller may ask a ledger to list or count: `OperationQuery` (and
`OperationCount`, a count's answer), and the SQL both SQL backends build from it
(the unresolved states spelled as the literal their partial indexes are created on)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.operation import UNRESOLVED, State
from .codec import stored_text


@dataclass(frozen=True)
class OperationQuery:
    """A filter for `Ledger.list_operations`. Empty fields do not filter."""

    states: frozenset[State] | None = None
    thread_id: str | None = None
    tenant: str | None = None
    tool: str | None = None
    updated_before: float | None = None
    """Only operations not touched since this time (for "older than")."""
    updated_after: float | None = None
    """Only operations changed after this time (for "what changed since we last looked")."""
    limit: int = 100

    @classmethod
    def unresolved(
        cls, *, thread_id: str | None = None, tenant: str | None = None, limit: int = 1000
    ) -> OperationQuery:
        return cls(states=UNRESOLVED, thread_id=thread_id, tenant=tenant, limit=limit)


@dataclass(frozen=True)
class OperationCount:
    """How many operations matching a query are in one state for one tool
    (`Ledger.count_operations`)."""

    state: State
    tool: str
    count: int
    least_recent_update: float
    """The ``updated_at`` of the least recently changed of them."""


def unresolved_values() -> list[str]:
    """The unresolved states' names, in a fixed order (for SQL ``IN`` lists)."""
    return sorted(s.value for s in UNRESOLVED)


#: The unresolved states as a SQL list literal: a query spelled with it matches the
#: partial indexes both SQL backends create on it.
UNRESOLVED_SQL = ", ".join(f"'{s}'" for s in unresolved_values())


def where_clause(query: OperationQuery, mark: str) -> tuple[str, list[Any]]:
    """``query``'s filters as a SQL ``WHERE`` (or ``""``) and its parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    if query.states is not None:
        values = sorted(s.value for s in query.states)
        if values == unresolved_values():
            clauses.append(f"state IN ({UNRESOLVED_SQL})")
        else:
            clauses.append(f"state IN ({', '.join([mark] * len(values))})")
            params.extend(values)
    for column in ("thread_id", "tenant", "tool"):
        value = getattr(query, column)
        if value is not None:
            clauses.append(f"{column} = {mark}")
            params.append(stored_text(value))
    if query.updated_before is not None:
        clauses.append(f"updated_at < {mark}")
        params.append(query.updated_before)
    if query.updated_after is not None:
        clauses.append(f"updated_at > {mark}")
        params.append(query.updated_after)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params


def count_sql(query: OperationQuery, table: str, mark: str) -> tuple[str, list[Any]]:
    """The ``SELECT`` counting ``query``'s operations by (state, tool), with the least
    recent ``updated_at`` of each (``limit`` does not apply), and its parameters."""
    where, params = where_clause(query, mark)
    return (
        f"SELECT state, tool, COUNT(*) AS n, MIN(updated_at) AS least_recent FROM {table} {where} "
        "GROUP BY state, tool ORDER BY state, tool",
        params,
    )


def counts_from_rows(rows: Any) -> list[OperationCount]:
    """`count_sql`'s rows (read by column name) as counts."""
    return [
        OperationCount(State(row["state"]), str(row["tool"]), int(row["n"]), float(row["least_recent"]))
        for row in rows
    ]
