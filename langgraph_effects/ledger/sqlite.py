"""The embedded default: the ledger in a SQLite file, beside LangGraph's checkpoints.

* WAL with ``synchronous=FULL``: a commit that returned survives power loss.
* Each transaction is one short ``BEGIN IMMEDIATE ... COMMIT`` run as a single
  function on aiosqlite's worker thread: one thread hop per transaction, not per
  statement, and no other writer can interleave between our read and our write.
* ``busy_timeout`` lets concurrent processes queue for the write lock.
* Schema migrations are an ordered list; ``effect_migrations`` records which ran
  (the runner is `migrate_plan`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import aiosqlite

from .._private import run_in_connection_thread
from ..core.controls import ControlRow
from ..core.operation import Operation
from ..errors import LedgerCorruptError, LedgerUnavailableError
from . import base
from .base import (
    AuditEntry,
    Ledger,
    OperationQuery,
    audit_from_row,
    drive_plan,
    from_row,
    migrate_plan,
    now,
    renewal_sql,
    to_row,
)
from .codec import ERASE_COLUMNS, erased_audit_text, mutable_row, origin_text, read_text, stored_text
from .controls import row_from, row_values
from .group_commit import PlanResult, Regroup
from .grouped import group_plan
from .query import (
    UNRESOLVED_SQL,
    VERDICTS_SQL,
    OperationCount,
    count_sql,
    counts_from_rows,
    listing_sql,
)
from .steps import ListDeletions, RecordDeletion, StepDefaults, answerer

T = TypeVar("T")

#: Ordered schema migrations. Append only: never edit a released entry.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE effect_operations (
        op_id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL DEFAULT '',
        tenant TEXT NOT NULL DEFAULT '',
        tool TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        message_id TEXT,
        task_id TEXT,
        checkpoint_id TEXT,
        args TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        provider_key TEXT NOT NULL,
        contract TEXT NOT NULL,
        policy_version TEXT,
        state TEXT NOT NULL,
        version INTEGER NOT NULL,
        attempts INTEGER NOT NULL,
        owner TEXT,
        lease_expires_at REAL,
        dispatched_at REAL,
        result_type TEXT,
        result BLOB,
        evidence TEXT,
        decisions TEXT NOT NULL DEFAULT '[]',
        extra TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE effect_audit (
        op_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at REAL NOT NULL,
        actor TEXT NOT NULL,
        from_state TEXT,
        to_state TEXT NOT NULL,
        event TEXT NOT NULL,
        version INTEGER NOT NULL,
        evidence TEXT,
        PRIMARY KEY (op_id, seq)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX effect_operations_provider_key
        ON effect_operations (tenant, provider_key);
    CREATE INDEX effect_operations_payload
        ON effect_operations (thread_id, tool, args_hash);
    """,
    # Partial indexes: finding unresolved work costs O(result), not O(history).
    f"""
    CREATE INDEX effect_operations_unresolved
        ON effect_operations (updated_at) WHERE state IN ({UNRESOLVED_SQL});
    CREATE INDEX effect_operations_unresolved_thread
        ON effect_operations (thread_id, updated_at) WHERE state IN ({UNRESOLVED_SQL});
    """,
    # Budgets and circuit breakers (see ledger/controls.py): one row per control and scope.
    """
    CREATE TABLE effect_controls (
        control TEXT NOT NULL,
        scope TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT '{}',
        updated_at REAL NOT NULL,
        PRIMARY KEY (control, scope)
    ) WITHOUT ROWID;
    """,
    # Listing order from an index: every row (keyset pages of ``list --all``), the
    # unresolved rows (now with the id, so the unresolved index alone gives the order,
    # and a planner without statistics prefers it to the index of every row), and the
    # rows that carry a verdict (recovery's lookup costs what the verdicts are).
    f"""
    DROP INDEX effect_operations_unresolved;
    CREATE INDEX effect_operations_unresolved
        ON effect_operations (updated_at, op_id) WHERE state IN ({UNRESOLVED_SQL});
    CREATE INDEX effect_operations_changed ON effect_operations (updated_at, op_id);
    CREATE INDEX effect_operations_verdicts
        ON effect_operations (updated_at, op_id) WHERE {VERDICTS_SQL};
    """,
    # Forced thread deletions (see docs/lifecycle.md): kept after the operations are gone.
    """
    CREATE TABLE effect_deletions (
        thread_id TEXT NOT NULL,
        at REAL NOT NULL,
        actor TEXT NOT NULL,
        operations TEXT NOT NULL
    );
    CREATE INDEX effect_deletions_thread ON effect_deletions (thread_id, at);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

_INSERT = (
    f"INSERT OR IGNORE INTO effect_operations ({', '.join(base.COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in base.COLUMNS)})"
)
_UPDATE = (
    f"UPDATE effect_operations SET {', '.join(f'{c} = :{c}' for c in base.MUTABLE_COLUMNS)} "
    "WHERE op_id = :op_id AND version = :expected_version"
)
_RENEW = renewal_sql("effect_operations", "json_extract(owner, '$.token')", "?")
_INSERT_DELETION = (
    "INSERT INTO effect_deletions (thread_id, at, actor, operations) "
    "VALUES (:thread_id, :at, :actor, :operations)"
)
_MIGRATIONS_DDL = "CREATE TABLE effect_migrations (v INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
_INSERT_AUDIT = (
    "INSERT INTO effect_audit (op_id, seq, at, actor, from_state, to_state, event, version, "
    "evidence) VALUES (:op_id, :seq, :at, :actor, :from_state, :to_state, :event, :version, "
    ":evidence)"
)


def _classify(error: sqlite3.Error, where: str) -> Exception:
    """Map sqlite3 errors to ours, with a message that says what to do."""
    text = str(error).lower()
    if isinstance(error, sqlite3.DatabaseError) and (
        "not a database" in text or "malformed" in text or "encrypted" in text
    ):
        return LedgerCorruptError(
            f"{where} is not a usable SQLite database ({error}). Point the ledger at the "
            "right file, or restore it from a backup; nothing was written."
        )
    if "locked" in text or "busy" in text:
        return LedgerUnavailableError(
            f"{where} stayed locked by another process past the busy timeout ({error}); "
            "the transaction was rolled back, retrying is safe."
        )
    if "readonly" in text or "read-only" in text:
        return LedgerUnavailableError(
            f"{where} is read-only ({error}); the transaction was rolled back. Make the file "
            "and its directory writable, then resume."
        )
    if "full" in text or "disk i/o" in text:
        return LedgerUnavailableError(
            f"{where} could not be written ({error}); the transaction was rolled back. Free "
            "disk space, then resume."
        )
    return LedgerUnavailableError(f"{where}: {error}; the transaction was rolled back.")


class SqliteLedger(Ledger):
    """The ledger in a SQLite database file, on its own connection.

    `schema_version` reads the version recorded without writing anything
    (``None``: no langgraph-effects ledger in the file); compare with `SCHEMA_VERSION`.

    Use [`from_conn_string`][langgraph_effects.SqliteLedger.from_conn_string] (an async context manager), or
    pass an open ``aiosqlite.Connection`` you manage. Call `setup` once before use.
    Never share the checkpointer's connection: its commits would swallow ours.

    ``read_only=True`` (what the console's ``list``/``show`` use) opens the file with
    ``mode=ro`` and ``query_only``: nothing can be written, the file is never created,
    and no write lock is ever waited for (WAL readers do not block on a writer).
    """

    SCHEMA_VERSION = len(MIGRATIONS)

    def __init__(
        self,
        conn: aiosqlite.Connection,
        *,
        where: str = "sqlite",
        busy_timeout_ms: int = 30_000,
        read_only: bool = False,
    ) -> None:
        self.conn = conn
        self.where = where
        self.read_only = read_only
        self._busy_timeout_ms = busy_timeout_ms
        self._configured = False
        self._file: str | None = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, path: str | Path, *, busy_timeout_ms: int = 30_000, read_only: bool = False
    ) -> AsyncIterator[SqliteLedger]:
        """Open the ledger at ``path`` (``":memory:"`` for a throw-away one).

        With ``read_only`` a missing file is an error, never created.
        """
        conn = await connect(path, read_only=read_only)
        try:
            yield cls(
                conn, where=f"sqlite:{path}", busy_timeout_ms=busy_timeout_ms, read_only=read_only
            )
        finally:
            await conn.close()

    # -- plumbing ------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection's worker thread: one hop, one transaction."""
        if not self._configured:
            await self._configure()
        return await run_in_connection_thread(self.conn, self._guard(fn))

    def _guard(self, fn: Callable[[sqlite3.Connection], T]) -> Callable[[sqlite3.Connection], T]:
        where = self.where

        def guarded(db: sqlite3.Connection) -> T:
            try:
                return fn(db)
            except sqlite3.Error as error:
                if db.in_transaction:
                    db.rollback()
                raise _classify(error, where) from error

        return guarded

    async def _configure(self) -> None:
        read_only = self.read_only

        def configure(db: sqlite3.Connection) -> None:
            db.isolation_level = None  # we issue BEGIN IMMEDIATE / COMMIT ourselves
            db.row_factory = sqlite3.Row
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            if read_only:
                db.execute("PRAGMA query_only = ON")  # setting the journal mode would write
                return
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "memory":
                db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")
            main = [r for r in db.execute("PRAGMA database_list") if r[1] == "main"]
            self._file = str(main[0][2]) if main and main[0][2] else None

        self._configured = True
        try:
            await run_in_connection_thread(self.conn, self._guard(configure))
        except Exception:
            self._configured = False
            raise

    async def _transact(self, plan: base.Plan[T]) -> T:
        return await self._run(lambda db: _transaction(db, plan))

    async def _transact_group(self, makers: Sequence[Callable[[], base.Plan[Any]]]) -> list[PlanResult[Any]]:
        # The whole group in one hop to the connection's thread, one BEGIN..COMMIT.
        where = self.where

        def alone(db: sqlite3.Connection, make: Callable[[], base.Plan[Any]]) -> PlanResult[Any]:
            try:
                return PlanResult(value=_transaction(db, make()))
            except sqlite3.Error as error:
                return PlanResult(error=_classify(error, where))
            except Exception as error:
                return PlanResult(error=error)

        def run(db: sqlite3.Connection) -> list[PlanResult[Any]]:
            if len(makers) > 1:
                db.execute("BEGIN IMMEDIATE")  # busy past the timeout: everyone hears it
                try:
                    return _transaction(db, group_plan(makers), begun=True)
                except (Regroup, sqlite3.Error):
                    pass  # rolled back: run each on its own so one cannot fail the others
            return [alone(db, make) for make in makers]

        return await self._run(run)

    async def _read(self, plan: base.Plan[T]) -> T:
        # Autocommit reads: no write lock, so read-only connections can run them too.
        return await self._run(lambda db: drive_plan(plan, answerer(_Steps(db)))[0])

    # -- the protocol ----------------------------------------------------------------

    async def setup(self) -> None:
        if self.read_only:
            raise LedgerUnavailableError(
                f"{self.where} was opened read-only: setup() cannot migrate it. Open it without "
                "read_only (or run `langgraph-effects --db PATH setup`)."
            )
        await self._transact(migrate_plan(len(MIGRATIONS), self.where, "another database file"))

    async def aclose(self) -> None:
        await self.conn.close()

    async def renew_lease(self, op_id: str, token: str, lease_expires_at: float) -> bool:
        def renew(db: sqlite3.Connection) -> bool:
            cur = db.execute(_RENEW, (lease_expires_at, stored_text(op_id), token))
            return cur.rowcount == 1

        return await self._run(renew)

    def lease_renewer(self) -> Callable[[str, str, float], bool] | None:
        path, timeout = self._file, self._busy_timeout_ms / 1000
        if path is None:  # not configured yet, or an in-memory database
            return None

        def renew(op_id: str, token: str, lease_expires_at: float) -> bool:
            # Its own short connection: aiosqlite's is driven from the event loop.
            db = sqlite3.connect(path, timeout=timeout, isolation_level=None)
            try:
                cur = db.execute(_RENEW, (lease_expires_at, stored_text(op_id), token))
                return cur.rowcount == 1
            except sqlite3.Error as error:
                raise _classify(error, self.where) from error
            finally:
                db.close()

        return renew

    async def list_operations(self, query: OperationQuery) -> list[Operation]:
        sql, params = listing_sql("effect_operations", query, "?")
        return await self._run(lambda db: [from_row(r) for r in db.execute(sql, params)])

    async def count_operations(self, query: OperationQuery) -> list[OperationCount]:
        sql, params = count_sql(query, "effect_operations", "?")
        return await self._run(lambda db: counts_from_rows(db.execute(sql, params)))

    async def audit(self, op_id: str) -> list[AuditEntry]:
        return await self._run(
            lambda db: [
                audit_from_row(r)
                for r in db.execute(
                    "SELECT * FROM effect_audit WHERE op_id = ? ORDER BY seq", (stored_text(op_id),)
                )
            ]
        )

def _transaction(db: sqlite3.Connection, plan: base.Plan[T], *, begun: bool = False) -> T:
    """Run ``plan`` in one ``BEGIN IMMEDIATE`` transaction: committed if it wrote."""
    if not begun:
        db.execute("BEGIN IMMEDIATE")
    try:
        result, wrote = drive_plan(plan, answerer(_Steps(db)))
        db.execute("COMMIT" if wrote else "ROLLBACK")
    except BaseException:
        if db.in_transaction:
            db.rollback()
        raise
    return result


#: A join, not ``(tool, args_hash) IN (VALUES ...)``: SQLite then searches the payload
#: index on all three columns for each pair instead of scanning the thread's rows.
_FIND = (
    "SELECT e.* FROM (VALUES {pairs}) AS p JOIN effect_operations AS e ON e.thread_id = ? "
    "AND e.tool = p.column1 AND e.args_hash = p.column2 "
    "WHERE ? IS NULL OR instr(e.extra, ?) > 0"  # (see origin_text)
)


def _find(db: sqlite3.Connection, step: base.Find) -> list[Operation]:
    found = _select(db, list(step.op_ids)) if step.op_ids else {}
    if step.pairs:  # one query for all pairs, on the (thread_id, tool, args_hash) index
        origin = origin_text(step.origin)
        pairs = ", ".join(["(?, ?)"] * len(step.pairs))
        pair_values = (stored_text(v) for pair in step.pairs for v in pair)
        params = [*pair_values, stored_text(step.thread_id), origin, origin]
        for r in db.execute(_FIND.format(pairs=pairs), params):
            op = from_row(r)
            found.setdefault(op.op_id, op)
    return list(found.values())


class _Steps(StepDefaults):
    """The storage steps in SQLite, on ``db`` (inside the caller's transaction)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def lock(self, step: base.Lock) -> Operation | None:  # BEGIN IMMEDIATE already holds the write lock
        return _select(self.db, [step.op_id]).get(step.op_id)

    def load(self, step: base.Load) -> dict[str, Operation]:
        return _select(self.db, list(step.op_ids))

    def find(self, step: base.Find) -> list[Operation]:
        return _find(self.db, step)

    def insert_with_audit(self, step: base.InsertWithAudit) -> list[str]:
        db = self.db
        rows = [i for i, op in enumerate(step.ops) if db.execute(_INSERT, to_row(op)).rowcount == 1]
        db.executemany(_INSERT_AUDIT, [step.audit[i] for i in rows])
        return [step.ops[i].op_id for i in rows]

    def cas_with_audit(self, step: base.CasWithAudit) -> bool:
        params = mutable_row(step.after)
        params["expected_version"] = step.expected_version
        matched = self.db.execute(_UPDATE, params).rowcount == 1
        if matched:
            self.db.execute(_INSERT_AUDIT, step.audit)
        return matched

    def forget(self, step: base.Forget) -> list[str]:
        return _forget(self.db, step)

    def erase(self, step: base.Erase) -> bool:
        return _erase(self.db, step)

    def lock_controls(self, step: base.LockControls) -> dict[tuple[str, str], ControlRow]:
        return _lock_controls(self.db, step)

    def write_controls(self, step: base.WriteControls) -> None:
        self.db.executemany(_WRITE_CONTROL, [row_values(row) for row in step.rows])

    def list_controls(self, step: base.ListControls) -> list[ControlRow]:
        sql = "SELECT * FROM effect_controls WHERE control != 'hold' ORDER BY control, scope"
        return [row_from(r) for r in self.db.execute(sql)]

    def record_deletion(self, step: RecordDeletion) -> None:
        self.db.execute(_INSERT_DELETION, step.row)

    def list_deletions(self, step: ListDeletions) -> list[dict[str, Any]]:
        where = "" if step.thread_id is None else " WHERE thread_id = ?"
        params = () if step.thread_id is None else (step.thread_id,)
        sql = f"SELECT thread_id, at, actor, operations FROM effect_deletions{where} ORDER BY at, rowid"
        return [
            {"thread_id": r[0], "at": r[1], "actor": r[2], "operations": r[3]}
            for r in self.db.execute(sql, params)
        ]

    def our_tables(self, step: base.OurTables) -> set[str]:
        marks = ", ".join("?" * len(base.LEDGER_TABLES))
        sql = f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks})"
        return {r[0] for r in self.db.execute(sql, base.LEDGER_TABLES)}

    def count_migrations(self, step: base.CountMigrations) -> int:
        row = self.db.execute("SELECT MAX(v) FROM effect_migrations").fetchone()
        return int(row[0]) + 1 if row is not None and row[0] is not None else 0

    def create_ledger(self, step: base.CreateLedger) -> None:
        self.db.execute(_MIGRATIONS_DDL)

    def apply_migration(self, step: base.ApplyMigration) -> None:
        for statement in base.sql_statements(MIGRATIONS[step.index]):
            self.db.execute(statement)
        self.db.execute("INSERT INTO effect_migrations (v, applied_at) VALUES (?, ?)", (step.index, now()))


_WRITE_CONTROL = (
    "INSERT INTO effect_controls (control, scope, state, updated_at) "
    "VALUES (:control, :scope, :state, :updated_at) ON CONFLICT (control, scope) "
    "DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at"
)


def _lock_controls(db: sqlite3.Connection, step: base.LockControls) -> dict[tuple[str, str], ControlRow]:
    # BEGIN IMMEDIATE already holds the write lock: no other writer reads these until commit.
    if not step.keys:
        return {}
    pairs = ", ".join(["(?, ?)"] * len(step.keys))
    sql = (
        f"SELECT c.* FROM (VALUES {pairs}) AS k JOIN effect_controls AS c "
        "ON c.control = k.column1 AND c.scope = k.column2"
    )
    params = [stored_text(v) for key in step.keys for v in key]
    return {(row := row_from(r)).key: row for r in db.execute(sql, params)}


def _forget(db: sqlite3.Connection, step: base.Forget) -> list[str]:
    # BEGIN IMMEDIATE holds the write lock: the rows chosen are the rows deleted.
    ids = [stored_text(i) for i in step.op_ids]
    marks, states = ", ".join("?" * len(ids)), ", ".join("?" * len(step.states))
    before = "" if step.updated_before is None else " AND updated_at < ?"
    params: list[Any] = [*ids, *step.states, *([] if step.updated_before is None else [step.updated_before])]
    sql = f"SELECT op_id FROM effect_operations WHERE op_id IN ({marks}) AND state IN ({states}){before}"
    chosen = [str(r[0]) for r in db.execute(sql, params).fetchall()]
    if chosen:
        gone = ", ".join("?" * len(chosen))
        db.execute(f"DELETE FROM effect_operations WHERE op_id IN ({gone})", chosen)
        db.execute(f"DELETE FROM effect_audit WHERE op_id IN ({gone})", chosen)
        db.execute(f"DELETE FROM effect_controls WHERE control = 'hold' AND scope IN ({gone})", chosen)
    return [read_text(i) for i in chosen]


_ERASE = (
    f"UPDATE effect_operations SET {', '.join(f'{c} = :{c}' for c in ERASE_COLUMNS)} "
    "WHERE op_id = :op_id AND version = :expected_version"
)


def _erase(db: sqlite3.Connection, step: base.Erase) -> bool:
    params = {c: v for c, v in to_row(step.after).items() if c in ERASE_COLUMNS or c == "op_id"}
    params["expected_version"] = step.expected_version
    if db.execute(_ERASE, params).rowcount != 1:
        return False
    mark, op_id = step.after.extra["erased"], stored_text(step.after.op_id)
    rows = db.execute("SELECT seq, evidence FROM effect_audit WHERE op_id = ?", (op_id,)).fetchall()
    db.executemany(
        "UPDATE effect_audit SET evidence = ? WHERE op_id = ? AND seq = ?",
        [(erased_audit_text(r[1], mark), op_id, r[0]) for r in rows],
    )
    db.execute(_INSERT_AUDIT, step.audit)
    return True


def _select(db: sqlite3.Connection, op_ids: list[str]) -> dict[str, Operation]:
    out: dict[str, Operation] = {}
    for start in range(0, len(op_ids), 500):
        chunk = [stored_text(i) for i in op_ids[start : start + 500]]
        marks = ", ".join("?" * len(chunk))
        for row in db.execute(f"SELECT * FROM effect_operations WHERE op_id IN ({marks})", chunk):
            op = from_row(row)
            out[op.op_id] = op
    return out


async def connect(path: str | Path, *, read_only: bool = False) -> aiosqlite.Connection:
    """Open an aiosqlite connection suitable for a ledger (autocommit; we BEGIN ourselves).

    ``read_only`` opens the file with ``mode=ro``: it must exist and is never written.
    """
    if read_only and str(path) != ":memory:":
        uri = "file:" + quote(str(Path(path).absolute())) + "?mode=ro"
        conn = aiosqlite.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    else:
        conn = aiosqlite.connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        return await conn
    except sqlite3.Error as error:
        raise _classify(error, f"sqlite:{path}") from error
