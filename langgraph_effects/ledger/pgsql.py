"""The Postgres ledger's SQL: its schema migrations, its statements, and the
parameters of those that carry rows.

New rows and compare-and-sets travel as one typed array per column (``unnest``), so a
statement's text is the same for any number of rows: psycopg and the server parse
and plan it once. One new row (the common case: one call) travels as one scalar
per column instead: psycopg dumps a scalar about fifteen times faster than a
one-element array (it inspects every list to choose the array's type).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from . import base, pgcontrols
from .base import COLUMNS, MUTABLE_COLUMNS
from .codec import mutable_row, origin_text, stored_text, to_row
from .query import UNRESOLVED_SQL, VERDICTS_SQL

#: Ordered schema migrations. Append only: never edit a released entry.
#: ``{s}`` is the quoted schema plus a dot, or empty (then ``search_path`` decides).
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {s}effect_operations (
        op_id text PRIMARY KEY,
        thread_id text NOT NULL,
        checkpoint_ns text NOT NULL DEFAULT '',
        tenant text NOT NULL DEFAULT '',
        tool text NOT NULL,
        tool_call_id text NOT NULL,
        message_id text,
        task_id text,
        checkpoint_id text,
        args text NOT NULL,
        args_hash text NOT NULL,
        provider_key text NOT NULL,
        contract text NOT NULL,
        policy_version text,
        state text NOT NULL,
        version integer NOT NULL,
        attempts integer NOT NULL,
        owner text,
        lease_expires_at double precision,
        dispatched_at double precision,
        result_type text,
        result bytea,
        evidence text,
        decisions text NOT NULL DEFAULT '[]',
        extra text NOT NULL DEFAULT '{{}}',
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        CONSTRAINT effect_operations_provider_key UNIQUE (tenant, provider_key)
    );
    CREATE TABLE {s}effect_audit (
        op_id text NOT NULL,
        seq integer NOT NULL,
        at double precision NOT NULL,
        actor text NOT NULL,
        from_state text,
        to_state text NOT NULL,
        event text NOT NULL,
        version integer NOT NULL,
        evidence text,
        PRIMARY KEY (op_id, seq)
    );
    CREATE INDEX effect_operations_payload
        ON {s}effect_operations (thread_id, tool, args_hash);
    """,
    # Partial indexes: finding unresolved work costs O(result), not O(history).
    f"""
    CREATE INDEX effect_operations_unresolved
        ON {{s}}effect_operations (updated_at) WHERE state IN ({UNRESOLVED_SQL});
    CREATE INDEX effect_operations_unresolved_thread
        ON {{s}}effect_operations (thread_id, updated_at) WHERE state IN ({UNRESOLVED_SQL});
    """,
    # Budgets and circuit breakers (see ledger/controls.py): one row per control and scope.
    """
    CREATE TABLE {s}effect_controls (
        control text NOT NULL,
        scope text NOT NULL,
        state text NOT NULL DEFAULT '{{}}',
        updated_at double precision NOT NULL,
        PRIMARY KEY (control, scope)
    );
    """,
    # Listing order from an index: every row (keyset pages of ``list --all``), the
    # unresolved rows (now with the id, so the unresolved index alone gives the order,
    # and a planner without statistics prefers it to the index of every row), and the
    # rows that carry a verdict (recovery's lookup costs what the verdicts are).
    f"""
    DROP INDEX {{s}}effect_operations_unresolved;
    CREATE INDEX effect_operations_unresolved
        ON {{s}}effect_operations (updated_at, op_id) WHERE state IN ({UNRESOLVED_SQL});
    CREATE INDEX effect_operations_changed ON {{s}}effect_operations (updated_at, op_id);
    CREATE INDEX effect_operations_verdicts
        ON {{s}}effect_operations (updated_at, op_id) WHERE {VERDICTS_SQL};
    """,
    # Forced thread deletions (see docs/lifecycle.md): kept after the operations are gone.
    """
    CREATE TABLE {s}effect_deletions (
        thread_id text NOT NULL,
        at double precision NOT NULL,
        actor text NOT NULL,
        operations text NOT NULL
    );
    CREATE INDEX effect_deletions_thread ON {s}effect_deletions (thread_id, at);
    """,
)

#: effect_audit's columns, in the order its rows are written.
AUDIT_COLUMNS: tuple[str, ...] = (
    "op_id",
    "seq",
    "at",
    "actor",
    "from_state",
    "to_state",
    "event",
    "version",
    "evidence",
)

#: The types of effect_operations' columns that are not text (as MIGRATIONS create
#: them): the casts of the typed arrays new rows are sent in (``unnest``).
OP_TYPES: dict[str, str] = {
    "version": "integer",
    "attempts": "integer",
    "lease_expires_at": "double precision",
    "dispatched_at": "double precision",
    "result": "bytea",
    "created_at": "double precision",
    "updated_at": "double precision",
}

#: The cast of each of effect_operations' columns, in COLUMNS order.
OP_COLUMN_TYPES: tuple[str, ...] = tuple(OP_TYPES.get(c, "text") for c in COLUMNS)

#: The types of effect_audit's columns: casts for its values outside an INSERT's own
#: VALUES list (the compare-and-set's audit row, the typed arrays of new rows).
AUDIT_TYPES: tuple[str, ...] = (
    "text", "integer", "double precision", "text", "text", "text", "text", "integer", "text"
)


def unnest(columns: Sequence[str], types: Sequence[str], alias: str) -> str:
    """Rows from one typed array per column: the statement is the same text whatever
    the number of rows (psycopg caches its parse, the server its plan)."""
    # %b: sent in binary, so no element is quoted or escaped (the text format runs a
    # regular expression over each one).
    arrays = ", ".join(f"%b::{t}[]" for t in types)
    return f"SELECT * FROM unnest({arrays}) AS {alias} ({', '.join(columns)})"


def one_row(columns: Sequence[str], types: Sequence[str], alias: str) -> str:
    """One row from one typed scalar per column (the parameters `scalar_reader` reads)."""
    values = ", ".join(f"%b::{t}" for t in types)
    return f"SELECT * FROM (VALUES ({values})) AS {alias} ({', '.join(columns)})"


#: Where a statement's new rows come from: `unnest` or `one_row`.
RowSource = Callable[[Sequence[str], Sequence[str], str], str]


def insert_sql(ops: str, audit: str, find_sql: str, rows_from: RowSource = unnest) -> tuple[str, str]:
    """The insert of new rows and their audit rows (an existing op_id or a
    ``(tenant, provider_key)`` taken by another operation is kept, as SQLite's INSERT
    OR IGNORE does), as one statement; and the same guarded by a find (FindOrInsert,
    one snapshot): the insert runs only when the read found nothing. FindOrInsert's
    one result holds both: the rows found (``inserted`` NULL), then a row per id
    inserted (found's columns all NULL: a join that never matches). ``rows_from``:
    `unnest` (any number of rows) or `one_row`."""
    rows = rows_from(COLUMNS, OP_COLUMN_TYPES, "v")
    audit_rows = rows_from(AUDIT_COLUMNS, AUDIT_TYPES, "a")
    into = f"INSERT INTO {ops} ({', '.join(COLUMNS)}) {rows}"
    audited = (
        f"aud AS (INSERT INTO {audit} ({', '.join(AUDIT_COLUMNS)}) {audit_rows} "
        "WHERE a.op_id IN (SELECT op_id FROM ins)) "
    )
    insert = f"WITH ins AS ({into} ON CONFLICT DO NOTHING RETURNING op_id), {audited}SELECT op_id FROM ins"
    find_or_insert = (
        f"WITH found AS ({find_sql}), ins AS ({into} WHERE NOT EXISTS (SELECT 1 FROM found) "
        f"ON CONFLICT DO NOTHING RETURNING op_id), {audited}"
        "SELECT found.*, NULL AS inserted FROM found "
        "UNION ALL SELECT found.*, ins.op_id FROM ins LEFT JOIN found ON false"
    )
    return insert, find_or_insert


#: The compare-and-set's values as arrays: the row's id, the version it must still
#: be at, and its new mutable columns.
CAS_COLUMNS: tuple[str, ...] = ("op_id", "expected_version", *MUTABLE_COLUMNS)
CAS_TYPES: tuple[str, ...] = ("text", "integer", *(OP_TYPES.get(c, "text") for c in MUTABLE_COLUMNS))


def cas_each_sql(ops: str, audit: str) -> str:
    """Several compare-and-sets (distinct rows) as one statement: each row still at its
    expected version is written and gets its audit row; returns the ids written."""
    rows = unnest(CAS_COLUMNS, CAS_TYPES, "v")
    assignments = ", ".join(f"{c} = v.{c}" for c in MUTABLE_COLUMNS)
    return (
        f"WITH changed AS (UPDATE {ops} AS o SET {assignments} FROM ({rows}) AS v "
        "WHERE o.op_id = v.op_id AND o.version = v.expected_version RETURNING o.op_id), "
        f"aud AS (INSERT INTO {audit} ({', '.join(AUDIT_COLUMNS)}) "
        f"{unnest(AUDIT_COLUMNS, AUDIT_TYPES, 'a')} WHERE a.op_id IN (SELECT op_id FROM changed)) "
        "SELECT op_id FROM changed"
    )


_CAS_VALUES = itemgetter(*MUTABLE_COLUMNS, "op_id")
_AUDIT_VALUES = itemgetter(*AUDIT_COLUMNS)


def cas_params(step: base.CasWithAudit) -> list[Any]:
    """The parameters of the ledger's compare-and-set statement: the new mutable
    columns, the id, the version the row must still be at, then the audit row."""
    return [*_CAS_VALUES(mutable_row(step.after)), step.expected_version, *_AUDIT_VALUES(step.audit)]


def cas_each_params(step: base.CasEach) -> list[list[Any]]:
    """The parameters of `cas_each_sql`, in order."""
    rows = [{**mutable_row(i.after), "expected_version": i.expected_version} for i in step.items]
    audit = as_arrays([i.audit for i in step.items], AUDIT_COLUMNS, AUDIT_TYPES)
    return [*as_arrays(rows, CAS_COLUMNS, CAS_TYPES), *audit]


def insert_params(step: base.InsertWithAudit) -> list[Any]:
    """The parameters of `insert_sql`'s rows: scalars for one row (its
    `one_row` statements), else arrays."""
    rows = list(map(to_row, step.ops))
    if len(rows) == 1:
        return [*_OP_SCALARS(rows[0]), *_AUDIT_SCALARS(step.audit[0])]
    return [*as_arrays(rows, COLUMNS, OP_COLUMN_TYPES), *as_arrays(step.audit, AUDIT_COLUMNS, AUDIT_TYPES)]


def scalar_reader(columns: Sequence[str], types: Sequence[str]) -> Callable[[Mapping[str, Any]], list[Any]]:
    """What reads the values of one row (for `one_row`), floats as for `as_arrays`:
    the values taken in one call (``itemgetter``), then the numbers of the float
    columns made floats."""
    take = itemgetter(*columns)
    floats = [i for i, kind in enumerate(types) if kind == "double precision"]
    one = len(columns) == 1  # then itemgetter gives the value, not a tuple

    def read(row: Mapping[str, Any]) -> list[Any]:
        values = [take(row)] if one else list(take(row))
        for i in floats:
            value = values[i]
            if value is not None and type(value) is not float:
                values[i] = float(value)
        return values

    return read


_OP_SCALARS = scalar_reader(COLUMNS, OP_COLUMN_TYPES)
_AUDIT_SCALARS = scalar_reader(AUDIT_COLUMNS, AUDIT_TYPES)


def _typed(value: Any, kind: str) -> Any:
    return float(value) if kind == "double precision" and value is not None else value


def as_arrays(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], types: Sequence[str]
) -> list[list[Any]]:
    """The values of ``rows``, one list per column (for `unnest`). psycopg
    refuses a list mixing int and float: a float column's numbers are all floats."""
    return [[_typed(row[column], kind) for row in rows] for column, kind in zip(columns, types, strict=True)]


def find_params(find: base.Find) -> list[Any]:
    """The parameters of the ledger's find statement, in order."""
    tools = [stored_text(t) for t, _ in find.pairs]
    hashes = [stored_text(h) for _, h in find.pairs]
    origin = origin_text(find.origin)
    ids = [stored_text(i) for i in find.op_ids]
    return [ids, stored_text(find.thread_id), tools, hashes, origin, origin]


@dataclass(frozen=True)
class StepStatements:
    """The statements the Postgres ledger's steps run, as the bytes psycopg sends
    (ASCII: schema names are plain): psycopg encodes a str query on every call, then
    hashes the result."""

    select: bytes
    find: bytes
    lock: bytes
    cas: bytes
    cas_each: bytes
    insert: bytes
    insert_one: bytes
    find_or_insert: bytes
    find_or_insert_one: bytes


@dataclass(frozen=True)
class LedgerStatements:
    """The Postgres ledger's table names and statements, for one schema prefix."""

    prefix: str
    """The quoted schema and a dot, or empty (the ``search_path`` decides)."""
    ops: str
    audit: str
    migrations: str
    renew: str
    controls: pgcontrols.ControlStatements
    steps: StepStatements

    @classmethod
    def on(cls, prefix: str) -> LedgerStatements:
        """The statements on the tables named with ``prefix`` (the quoted schema and a
        dot, or empty for the ``search_path``)."""
        ops, audit = f"{prefix}effect_operations", f"{prefix}effect_audit"
        find = (
            f"SELECT * FROM {ops} WHERE op_id = ANY(%s) OR (thread_id = %s AND (tool, args_hash) IN "
            "(SELECT * FROM unnest(%s::text[], %s::text[])) "
            "AND (%s::text IS NULL OR strpos(extra, %s) > 0))"  # (see codec.origin_text)
        )
        update = (
            f"UPDATE {ops} SET "
            + ", ".join(f"{c} = %s" for c in MUTABLE_COLUMNS)
            + " WHERE op_id = %s AND version = %s RETURNING op_id"
        )
        typed_audit = ", ".join(f"%s::{t}" for t in AUDIT_TYPES)
        # One statement each: in autocommit, each is one transaction of its own.
        cas = (
            f"WITH changed AS ({update}) INSERT INTO {audit} ({', '.join(AUDIT_COLUMNS)}) "
            f"SELECT {typed_audit} FROM changed RETURNING op_id"
        )
        insert, find_or_insert = insert_sql(ops, audit, find)
        # The same for one new row, sent as scalars (see the module's docstring).
        insert_one, find_or_insert_one = insert_sql(ops, audit, find, one_row)
        steps = {
            "select": f"SELECT * FROM {ops} WHERE op_id = ANY(%s)",
            "find": find,
            "lock": f"SELECT * FROM {ops} WHERE op_id = %s FOR UPDATE",
            "cas": cas,
            "cas_each": cas_each_sql(ops, audit),
            "insert": insert,
            "insert_one": insert_one,
            "find_or_insert": find_or_insert,
            "find_or_insert_one": find_or_insert_one,
        }
        return cls(
            prefix=prefix,
            ops=ops,
            audit=audit,
            migrations=f"{prefix}effect_migrations",
            renew=base.renewal_sql(ops, "owner::jsonb ->> 'token'", "%s"),
            controls=pgcontrols.ControlStatements.on(prefix),
            steps=StepStatements(**{name: text.encode("ascii") for name, text in steps.items()}),
        )
