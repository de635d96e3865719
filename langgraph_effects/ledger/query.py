"""What a caller may ask a ledger to list or count: `OperationQuery` (and
`OperationCount`, a count's answer), the SQL ``WHERE`` both SQL backends build from
it (spelled with the literals their partial indexes are created on, so every filter
recovery and the console use reads an index, not the table), and the same filter in
Python for backends that keep rows in memory (`OperationQuery.select`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core.operation import UNRESOLVED, Operation, State
from .codec import stored_text

#: A position in the listing order (``updated_at``, ``op_id``): the key of a page's
#: last row, from which the next page starts (keyset paging).
Cursor = tuple[float, str]


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
    after: Cursor | None = None
    """Only operations past this point of the listing order: the :func:`cursor` of the
    previous page's last row. Pages read this way see every row that stays put
    exactly once, and cost what a page holds, however large the ledger."""
    verdicts: bool = False
    """Only operations that carry an operator's verdict (a decision recorded: those
    decided in the console, through the API or by answering an interrupt)."""

    def matches(self, op: Operation) -> bool:
        """Whether ``op`` passes every filter (the limit aside)."""
        return (
            (self.states is None or op.state in self.states)
            and (self.thread_id is None or op.thread_id == self.thread_id)
            and (self.tenant is None or op.tenant == self.tenant)
            and (self.tool is None or op.tool == self.tool)
            and (self.updated_before is None or op.updated_at < self.updated_before)
            and (self.updated_after is None or op.updated_at > self.updated_after)
            and (self.after is None or cursor(op) > self.after)
            and (not self.verdicts or bool(op.decisions))
        )

    def select(self, ops: Iterable[Operation]) -> list[Operation]:
        """The operations among ``ops`` that match, in listing order, up to the limit: the
        whole query, for a backend that holds its rows in memory."""
        return sorted((op for op in ops if self.matches(op)), key=cursor)[: self.limit]

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


def cursor(op: Operation) -> Cursor:
    """``op``'s position in the listing order (least recently updated first, then id)."""
    return (op.updated_at, op.op_id)


def unresolved_values() -> list[str]:
    """The unresolved states' names, in a fixed order (for SQL ``IN`` lists)."""
    return sorted(s.value for s in UNRESOLVED)


#: The unresolved states as a SQL list literal: a query spelled with it matches the
#: partial indexes both SQL backends create on it.
UNRESOLVED_SQL = ", ".join(f"'{s}'" for s in unresolved_values())

#: The rows that carry a verdict, as the partial index on them is created (an
#: operation with no decision stores exactly ``'[]'``, see :mod:`.codec`).
VERDICTS_SQL = "decisions <> '[]'"


def where_clause(query: OperationQuery, mark: str) -> tuple[str, list[Any]]:
    """``query``'s filters as a SQL ``WHERE`` (or ``""``) and its parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    if query.states is not None:
        values = sorted(s.value for s in query.states)
        if values == unresolved_values():
            clauses.append(f"state IN ({UNRESOLVED_SQL})")
        elif set(values) < set(unresolved_values()):  # e.g. only dispatched: still the partial index
            clauses.append(f"state IN ({UNRESOLVED_SQL})")
            clauses.append(f"state IN ({', '.join([mark] * len(values))})")
            params.extend(values)
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
    if query.after is not None:
        clauses.append(f"(updated_at, op_id) > ({mark}, {mark})")
        params.extend([float(query.after[0]), stored_text(query.after[1])])
    if query.verdicts:
        clauses.append(VERDICTS_SQL)
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


def listing_sql(table: str, query: OperationQuery, mark: str) -> tuple[str, list[Any]]:
    """The statement that answers ``query`` from ``table`` in listing order, and its
    parameters (what both SQL backends run for :meth:`Ledger.list_operations`)."""
    where, params = where_clause(query, mark)
    return f"SELECT * FROM {table} {where} ORDER BY updated_at, op_id LIMIT {mark}", [*params, query.limit]
