"""The ledger in PostgreSQL, for workers on several machines.

* psycopg 3 async on its **own** ``AsyncConnectionPool``: sharing the
  checkpointer's connection is unsafe (our transaction would capture its writes).
* Each change is one short transaction. ``transition`` locks the row with
  ``SELECT ... FOR UPDATE``, applies the pure state machine, writes under a
  compare-and-set on ``version`` and appends the audit row before committing, so
  concurrent workers queue on the row instead of overwriting each other. Given the
  row the caller holds (``before=``) it skips the lock: the compare-and-set and
  its audit row are one statement, its own transaction.
* A new intent is one statement (rows and audit rows), a read is one; a plan that
  needs a transaction opens it lazily in pipeline mode (``BEGIN`` travels with its
  first statement, ``COMMIT`` with the final sync). Writes arriving while one is
  in flight are group-committed (`group_commit`). The pool of its own checks a
  connection on checkout when the server has closed it or spoken on it while it sat
  idle (`_check_if_spoken`), so one a server restart or a terminated backend
  closed is replaced before use.
* ``synchronous_commit`` is left at the server's setting (never turned off): a
  commit that returned is durable.
* Schema migrations are an ordered list recorded in ``effect_migrations``;
  ``setup`` takes a transaction-level advisory lock so processes starting
  together migrate one after the other. No advisory lock is used anywhere else.
* JSON columns are ``text`` holding exactly what the SQLite backend stores, not
  ``jsonb``: jsonb refuses ``\\u0000`` inside strings and ``NaN``, so a model's
  arguments could make an intent impossible to record. Query them with ``::jsonb``.
* ``schema=`` qualifies every table name, so the ledger can live in its own
  schema on any pool (including one you pass in) without touching ``search_path``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import re
import select
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool

from ..core.controls import ControlRow
from ..core.operation import Operation
from ..errors import LedgerError, LedgerUnavailableError
from . import base, pgcontrols
from .base import (
    AuditEntry,
    Ledger,
    OperationQuery,
    T,
    _Run,
    adrive_plan,
    audit_from_row,
    from_row,
)
from .codec import ERASE_COLUMNS, erased_audit_text, read_text, stored_text, to_row
from .group_commit import PlanResult, Regroup
from .grouped import group_plan
from .pgsession import CommitLost, Transaction, describe, ledger_error
from .pgsql import (
    AUDIT_COLUMNS,
    MIGRATIONS,
    LedgerStatements,
    cas_each_params,
    cas_params,
    find_params,
    insert_params,
)
from .query import OperationCount, count_sql, counts_from_rows, listing_sql
from .steps import AsyncStepDefaults, ListDeletions, RecordDeletion, answer

#: How often a plan the server rolled back (deadlock, serialization failure) is rerun.
_ROLLBACK_RETRIES = 5

SCHEMA_VERSION = len(MIGRATIONS)

#: A connection in one of these states is inside a transaction (to roll back on return).
_OPEN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


async def _read_only_session(conn: psycopg.AsyncConnection[Any]) -> None:
    """Every transaction on this connection is read-only: the server refuses any write."""
    await conn.execute("SET default_transaction_read_only = on")


async def _check_if_spoken(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check on checkout. An idle connection hears nothing from the server
    unless the server is closing it: a restart, a terminated backend or an idle
    timeout sends the reason and closes the socket, which then reads as ready. Such a
    connection (or a closed one) gets psycopg_pool's own check, an empty query, which
    fails and has the pool replace it; a quiet one is handed out as it is."""
    if conn.closed:
        await AsyncConnectionPool.check_connection(conn)
        return
    ready = select.poll()
    ready.register(conn.fileno(), select.POLLIN)
    if ready.poll(0):
        await AsyncConnectionPool.check_connection(conn)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lock_key(schema: str | None) -> int:
    """A stable signed 64-bit advisory-lock key for migrating ``schema``."""
    digest = hashlib.sha256(f"langgraph-effects:migrate:{schema or ''}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresLedger(Ledger):
    """The ledger in a PostgreSQL database, on its own connection pool.

    Pass a DSN (the ledger then owns its pool and `aclose` closes it) or an
    ``AsyncConnectionPool`` you manage (never the checkpointer's connection). Use
    [`from_conn_string`][langgraph_effects.PostgresLedger.from_conn_string] as an async context manager, and
    call `setup` once before use:

        async with PostgresLedger.from_conn_string("postgresql://...") as ledger:
            await ledger.setup()

    ``schema`` puts the tables in that schema (created by `setup`);
    ``None`` uses the connection's ``search_path``.

    ``read_only=True`` (what the console's ``list``/``show`` use) makes every
    transaction of its own pool read-only (``default_transaction_read_only``), and
    `setup` refuses: reading a database never creates tables in it.
    ``connect_timeout`` (seconds) bounds each connection attempt (libpq's own
    ``connect_timeout``); ``timeout`` bounds waiting for a pooled connection.
    `schema_version` reads the version recorded without writing anything
    (``None``: no ``effect_migrations`` table in ``schema``, or on the ``search_path``).
    """

    SCHEMA_VERSION = len(MIGRATIONS)

    def __init__(
        self,
        conn: str | AsyncConnectionPool[Any],
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        read_only: bool = False,
        connect_timeout: float | None = None,
    ) -> None:
        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise ValueError(f"not a plain schema name: {schema!r}")
        self.schema = schema
        self.read_only = read_only
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._open_lock = asyncio.Lock()
        self._closed = False
        extra: dict[str, Any] = {}
        if isinstance(conn, str):
            self._dsn: str | None = conn
            self._sizes = (min_size, max_size)
            self.pool: AsyncConnectionPool[Any] = self._new_pool()
            self._owned = True
            self._opened = False
            conninfo = conn
        else:
            self._dsn = None
            self.pool = conn
            self._owned = False
            self._opened = True  # the caller manages its pool
            conninfo = conn.conninfo if isinstance(conn.conninfo, str) else ""
            if isinstance(conn.kwargs, dict):
                extra = conn.kwargs
        self.where = describe(conninfo, schema, **extra)
        self._sql = sql = LedgerStatements.on(f"{_quote_ident(schema)}." if schema else "")
        self._ops, self._audit, self._migrations_table = sql.ops, sql.audit, sql.migrations
        self._renew_sql, self._controls_sql = sql.renew, sql.controls
        self._steps_sql = sql.steps

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        schema: str | None = None,
        timeout: float = 30.0,
        read_only: bool = False,
        connect_timeout: float | None = None,
    ) -> AsyncIterator[PostgresLedger]:
        """Open a ledger on its own pool to ``dsn``; the pool is closed on exit."""
        sizes = {"min_size": min_size, "max_size": max_size}
        ledger = cls(
            dsn, schema=schema, timeout=timeout, read_only=read_only, connect_timeout=connect_timeout, **sizes
        )
        try:
            await ledger._open()
            yield ledger
        finally:
            await ledger.aclose()

    # -- plumbing ------------------------------------------------------------------

    def _new_pool(self) -> AsyncConnectionPool[Any]:
        # Created closed and opened on first use: no event loop is needed here.
        assert self._dsn is not None
        kwargs: dict[str, Any] = {"autocommit": True}
        if self._connect_timeout is not None:
            # libpq takes whole seconds and treats anything below 2 as 2.
            kwargs["connect_timeout"] = max(2, round(self._connect_timeout))
        return AsyncConnectionPool(
            self._dsn,
            check=_check_if_spoken,
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            open=False,
            timeout=self._timeout,
            kwargs=kwargs,
            configure=_read_only_session if self.read_only else None,
            name="langgraph-effects-ledger",
        )

    async def _open(self) -> None:
        if self._opened:
            return
        async with self._open_lock:
            if self._opened:
                return
            if self._closed:
                raise LedgerUnavailableError(
                    f"the ledger at {self.where} was closed (aclose()); open a new one."
                )
            try:
                await self.pool.open(wait=True, timeout=self._timeout)
            except psycopg.Error as error:
                # A pool that failed to open cannot be reopened: the next call
                # starts a fresh one, so a server that comes back is picked up.
                await self.pool.close()
                self.pool = self._new_pool()
                raise ledger_error(error, self.where, await self._why_unreachable()) from error
            self._opened = True

    async def _why_unreachable(self) -> str | None:
        """The server's own reason a connection fails (the pool only logs it)."""
        if self._dsn is None:
            return None
        limit = self._connect_timeout if self._connect_timeout is not None else self._timeout
        try:
            conn = await psycopg.AsyncConnection.connect(
                self._dsn, connect_timeout=max(2, min(10, round(limit)))
            )
        except psycopg.Error as error:
            return " ".join(str(error).split())
        await conn.close()
        return None

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection in autocommit (we BEGIN when a plan needs it); psycopg
        errors become ours (after the connection went back to the pool)."""
        conn, restore = await self._checkout()
        try:
            yield conn
        except psycopg.Error as error:
            raise ledger_error(error, self.where) from error
        finally:
            await self._checkin(conn, restore)

    async def _checkout(self) -> tuple[psycopg.AsyncConnection[Any], bool]:
        """A connection from the pool in autocommit, and whether `_checkin` must give
        it back out of autocommit (a pool passed in: as it came)."""
        if not self._opened:
            await self._open()
        pool = self.pool
        try:
            # getconn/putconn, not pool.connection(): the same checkout and return (the
            # pool rolls back a connection returned inside a transaction and replaces a
            # broken one), with the autocommit switch in between.
            conn = await pool.getconn()
            restore = not conn.autocommit  # a pool passed in: give it back as it came
            if restore:
                try:
                    await conn.set_autocommit(True)
                except BaseException:
                    await pool.putconn(conn)
                    raise
        except psycopg.Error as error:
            raise ledger_error(error, self.where) from error
        return conn, restore

    async def _checkin(self, conn: psycopg.AsyncConnection[Any], restore: bool) -> None:
        """Return a connection from `_checkout` to the pool (which replaces a broken
        one), out of autocommit again if ``restore``, rolled back if a transaction is
        open."""
        try:
            try:
                if restore and not conn.broken and not conn.closed:
                    await conn.set_autocommit(False)
            finally:
                if conn.info.transaction_status in _OPEN_TRANSACTION and not conn.broken:
                    # As pool.connection() did (its connection's context): rolled back
                    # here, quietly, not by the pool with a warning.
                    with contextlib.suppress(psycopg.Error):
                        await conn.rollback()
                await self.pool.putconn(conn)
        except psycopg.Error as error:
            raise ledger_error(error, self.where) from error

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        async with self._connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def _transact(self, plan: base.Plan[T]) -> T:
        async with self._connection() as conn:
            return await self._run_plan(conn, plan)

    async def _transact_group(self, makers: Sequence[Callable[[], base.Plan[Any]]]) -> list[PlanResult[Any]]:
        conn, restore = await self._checkout()
        try:
            if len(makers) > 1:
                try:
                    return await self._run_plan(conn, group_plan(makers), grouped=True)
                except CommitLost:
                    raise  # it may have landed: everyone must read again, none may rerun
                except (Regroup, psycopg.Error):
                    pass  # rolled back: run each on its own so one cannot fail the others
            results: list[PlanResult[Any]] = []
            for make in makers:
                try:
                    results.append(PlanResult(value=await self._run_alone(conn, make)))
                except psycopg.Error as error:
                    results.append(PlanResult(error=ledger_error(error, self.where)))
                except Exception as error:
                    results.append(PlanResult(error=error))
            return results
        except psycopg.Error as error:
            raise ledger_error(error, self.where) from error
        finally:
            await self._checkin(conn, restore)

    async def _run_alone(self, conn: psycopg.AsyncConnection[Any], make: Callable[[], base.Plan[T]]) -> T:
        """One plan in its own transaction, run again when the server rolled it back to
        break a deadlock (or a serialization failure): nothing of it landed, and two
        workers' transactions that lock the same rows in another order are normal."""
        for attempt in range(_ROLLBACK_RETRIES):
            try:
                return await self._run_plan(conn, make())
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                if attempt == _ROLLBACK_RETRIES - 1:
                    raise
                await asyncio.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
        raise AssertionError("unreachable")

    async def _run_plan(
        self, conn: psycopg.AsyncConnection[Any], plan: base.Plan[T], *, grouped: bool = False
    ) -> T:
        """Run ``plan`` on ``conn`` (in autocommit).

        Reads, and one `ALONE` write of a plan running alone, run as
        statements of their own (the write commits by itself).
        Anything else opens a transaction lazily, in pipeline mode, so ``BEGIN``
        travels with the first statement and ``COMMIT`` with the final sync.
        """
        steps = _Steps(self, conn)
        tx: Transaction | None = None  # made when the plan needs a transaction
        autocommitted = False
        run = _Run(plan)  # (adrive_plan, with the transaction opened on the way)
        try:
            step = run.send(None)
            while step is not None:
                if tx is None and (step.writes or isinstance(step, base.Lock)):
                    if autocommitted:  # no plan of ours does this: it could not be atomic
                        raise LedgerError(f"a plan wrote twice outside a transaction at {self.where}")
                    if isinstance(step, base.ALONE) and not grouped:
                        reply = await answer(steps, step)  # one statement, in autocommit
                        autocommitted = base.step_wrote(step, reply)
                        step = run.send(reply)
                        continue
                    tx = Transaction(conn, steps.cur, self.where)
                    await tx.begin()
                step = run.send(await answer(steps, step))
            if tx is not None:
                await tx.end(commit=run.wrote)
        except BaseException:
            if tx is not None:
                await tx.abort()
            raise
        return run.result  # type: ignore[return-value]

    async def _read(self, plan: base.Plan[T]) -> T:
        async with self._connection() as conn:
            steps = _Steps(self, conn)
            result, _ = await adrive_plan(plan, lambda step: answer(steps, step))
        return result

    # -- the protocol ----------------------------------------------------------------

    @asynccontextmanager
    async def migration_lock(self, what: str) -> AsyncIterator[None]:
        """Hold a session advisory lock named after ``what`` (and the schema) meanwhile.

        For migrations that take no lock of their own (LangGraph's checkpoint tables):
        processes that set up together then migrate one after the other. The lock is
        held on one of the ledger's own connections and released on exit (or when the
        session ends, should the process die).
        """
        key = _lock_key(f"{what}:{self.schema or ''}")
        async with self._connection() as conn:
            # Polled, never waited for inside a statement: LangGraph's migrations run
            # CREATE INDEX CONCURRENTLY, which waits for every open transaction, and a
            # session blocked in pg_advisory_lock() is one (a deadlock nobody detects).
            delay = 0.01
            while True:
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", [key])
                row = await cur.fetchone()
                if row is not None and row[0]:
                    break
                await asyncio.sleep(delay)
                delay = min(0.25, delay * 2)
            try:
                yield
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", [key])

    async def setup(self) -> None:
        schema = self.schema
        if self.read_only:
            raise LedgerUnavailableError(
                f"the ledger at {self.where} was opened read-only: setup() cannot migrate it. "
                "Open it without read_only (or run `langgraph-effects --db DSN setup`)."
            )
        plan = base.migrate_plan(len(MIGRATIONS), self.where, "another database or schema")
        async with self._connection() as conn, conn.transaction():
            steps = _Steps(self, conn)
            cur = steps.cur
            # Held until commit: concurrent setups migrate one after the other.
            await cur.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_key(schema)])
            if schema is not None:
                await cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema])
                if await cur.fetchone() is None:
                    await cur.execute(f"CREATE SCHEMA {_quote_ident(schema)}")
            await adrive_plan(plan, lambda step: answer(steps, step))

    async def aclose(self) -> None:
        if self._owned:
            self._closed = True
            await self.pool.close()

    async def renew_lease(self, op_id: str, token: str, lease_expires_at: float) -> bool:
        async with self._connection() as conn:  # one statement: its own transaction
            cur = conn.cursor()
            await cur.execute(self._renew_sql, [lease_expires_at, stored_text(op_id), token])
            return cur.rowcount == 1

    def lease_renewer(self) -> Callable[[str, str, float], bool] | None:
        conninfo = self._dsn or (self.pool.conninfo if isinstance(self.pool.conninfo, str) else "")
        if not conninfo:
            return None
        extra = dict(self.pool.kwargs) if isinstance(self.pool.kwargs, dict) else {}
        extra["autocommit"] = True
        sql, where, timeout = self._renew_sql, self.where, self._timeout

        def renew(op_id: str, token: str, lease_expires_at: float) -> bool:
            # Its own short connection: the pool belongs to the ledger's event loop.
            try:
                with psycopg.connect(conninfo, connect_timeout=max(1, int(timeout)), **extra) as conn:
                    cur = conn.execute(sql, [lease_expires_at, stored_text(op_id), token])
                    return cur.rowcount == 1
            except psycopg.Error as error:
                raise ledger_error(error, where) from error

        return renew

    async def list_operations(self, query: OperationQuery) -> list[Operation]:
        rows = await self._fetch(*listing_sql(self._ops, query, "%s"))
        return [from_row(row) for row in rows]

    async def count_operations(self, query: OperationQuery) -> list[OperationCount]:
        sql, params = count_sql(query, self._ops, "%s")
        return counts_from_rows(await self._fetch(sql, params))

    async def audit(self, op_id: str) -> list[AuditEntry]:
        rows = await self._fetch(
            f"SELECT * FROM {self._audit} WHERE op_id = %s ORDER BY seq", [stored_text(op_id)]
        )
        return [audit_from_row(row) for row in rows]


class _Steps(AsyncStepDefaults):
    """The storage steps in SQL on ``conn`` (inside the caller's transaction), with the
    statements [`PostgresLedger`][langgraph_effects.PostgresLedger] prepared: rows read as dicts (``cur``),
    and rows of ids as tuples (``plain``)."""

    def __init__(self, ledger: PostgresLedger, conn: psycopg.AsyncConnection[Any]) -> None:
        self.ledger = ledger
        self.sql = ledger._steps_sql
        self.cur: psycopg.AsyncCursor[dict[str, Any]] = conn.cursor(row_factory=dict_row)
        self.plain: psycopg.AsyncCursor[tuple[Any, ...]] = conn.cursor(row_factory=tuple_row)

    async def lock(self, step: base.Lock) -> Operation | None:
        await self.cur.execute(self.sql.lock, [stored_text(step.op_id)])
        row = await self.cur.fetchone()
        return from_row(row) if row is not None else None

    async def load(self, step: base.Load) -> dict[str, Operation]:
        await self.cur.execute(self.sql.select, [[stored_text(i) for i in step.op_ids]])
        return {op.op_id: op for op in map(from_row, await self.cur.fetchall())}

    async def find(self, step: base.Find) -> list[Operation]:
        await self.cur.execute(self.sql.find, find_params(step))
        return [from_row(row) for row in await self.cur.fetchall()]

    async def find_or_insert(self, step: base.FindOrInsert) -> tuple[list[Operation], list[str]]:
        params = [*find_params(step.find), *insert_params(step.insert)]
        one = len(step.insert.ops) == 1
        sql = self.sql
        await self.cur.execute(sql.find_or_insert_one if one else sql.find_or_insert, params)
        found, inserted = [], []
        for row in await self.cur.fetchall():
            if row["inserted"] is None:
                found.append(from_row(row))
            else:
                inserted.append(read_text(row["inserted"]))
        return found, inserted

    async def insert_with_audit(self, step: base.InsertWithAudit) -> list[str]:
        one = len(step.ops) == 1
        sql, plain = self.sql, self.plain
        await plain.execute(sql.insert_one if one else sql.insert, insert_params(step))
        return [read_text(row[0]) for row in await plain.fetchall()]

    async def cas_each(self, step: base.CasEach) -> list[bool]:
        await self.plain.execute(self.sql.cas_each, cas_each_params(step))
        written = {row[0] for row in await self.plain.fetchall()}
        return [stored_text(item.after.op_id) in written for item in step.items]

    async def cas_with_audit(self, step: base.CasWithAudit) -> bool:
        await self.plain.execute(self.sql.cas, cas_params(step))
        return await self.plain.fetchone() is not None

    async def forget(self, step: base.Forget) -> list[str]:
        names = self.ledger._sql
        before = "" if step.updated_before is None else " AND updated_at < %s"
        params: list[Any] = [[stored_text(i) for i in step.op_ids], list(step.states)]
        if step.updated_before is not None:
            params.append(step.updated_before)
        await self.plain.execute(
            f"DELETE FROM {names.ops} WHERE op_id = ANY(%s) AND state = ANY(%s){before} RETURNING op_id",
            params,
        )
        deleted = [row[0] for row in await self.plain.fetchall()]
        if deleted:
            await self.plain.execute(f"DELETE FROM {names.audit} WHERE op_id = ANY(%s)", [deleted])
            await self.plain.execute(
                f"DELETE FROM {names.prefix}effect_controls WHERE control = 'hold' AND scope = ANY(%s)",
                [deleted],
            )
        return [read_text(i) for i in deleted]

    async def erase(self, step: base.Erase) -> bool:
        names = self.ledger._sql
        row = to_row(step.after)
        await self.plain.execute(
            f"UPDATE {names.ops} SET {', '.join(f'{c} = %s' for c in ERASE_COLUMNS)} "
            "WHERE op_id = %s AND version = %s RETURNING op_id",
            [*(row[c] for c in ERASE_COLUMNS), row["op_id"], step.expected_version],
        )
        if await self.plain.fetchone() is None:
            return False
        mark = step.after.extra["erased"]
        await self.plain.execute(f"SELECT seq, evidence FROM {names.audit} WHERE op_id = %s", [row["op_id"]])
        rewritten = [(erased_audit_text(r[1], mark), row["op_id"], r[0]) for r in await self.plain.fetchall()]
        if rewritten:
            await self.plain.executemany(
                f"UPDATE {names.audit} SET evidence = %s WHERE op_id = %s AND seq = %s", rewritten
            )
        audit = step.audit
        await self.plain.execute(
            f"INSERT INTO {names.audit} ({', '.join(AUDIT_COLUMNS)}) "
            f"VALUES ({', '.join(['%s'] * len(AUDIT_COLUMNS))})",
            [audit[c] for c in AUDIT_COLUMNS],
        )
        return True

    async def lock_controls(self, step: base.LockControls) -> dict[tuple[str, str], ControlRow]:
        return await pgcontrols.lock_controls(self.cur, self.ledger._controls_sql, step)

    async def write_controls(self, step: base.WriteControls) -> None:
        await pgcontrols.write_controls(self.cur, self.ledger._controls_sql, step)

    async def list_controls(self, step: base.ListControls) -> list[ControlRow]:
        return await pgcontrols.list_controls(self.cur, self.ledger._controls_sql, step)

    async def record_deletion(self, step: RecordDeletion) -> None:
        row = step.row
        await self.plain.execute(
            f"INSERT INTO {self.ledger._sql.prefix}effect_deletions (thread_id, at, actor, operations) "
            "VALUES (%s, %s, %s, %s)",
            [row["thread_id"], row["at"], row["actor"], row["operations"]],
        )

    async def list_deletions(self, step: ListDeletions) -> list[dict[str, Any]]:
        where = "" if step.thread_id is None else " WHERE thread_id = %s"
        params = [] if step.thread_id is None else [step.thread_id]
        await self.cur.execute(
            f"SELECT thread_id, at, actor, operations FROM {self.ledger._sql.prefix}effect_deletions"
            f"{where} ORDER BY at",
            params,
        )
        return await self.cur.fetchall()

    async def our_tables(self, step: base.OurTables) -> set[str]:
        await self.cur.execute(
            "SELECT tablename FROM pg_tables "
            "WHERE schemaname = COALESCE(%s, current_schema()) AND tablename = ANY(%s)",
            [self.ledger.schema, list(base.LEDGER_TABLES)],
        )
        return {row["tablename"] for row in await self.cur.fetchall()}

    async def count_migrations(self, step: base.CountMigrations) -> int:
        await self.cur.execute(f"SELECT MAX(v) FROM {self.ledger._migrations_table}")
        row = await self.cur.fetchone()
        latest = next(iter(row.values())) if row is not None else None
        return int(latest) + 1 if latest is not None else 0

    async def create_ledger(self, step: base.CreateLedger) -> None:
        await self.cur.execute(
            f"CREATE TABLE {self.ledger._migrations_table} "
            "(v integer PRIMARY KEY, applied_at double precision NOT NULL)"
        )

    async def apply_migration(self, step: base.ApplyMigration) -> None:
        for statement in base.sql_statements(MIGRATIONS[step.index].format(s=self.ledger._sql.prefix)):
            await self.cur.execute(statement)
        await self.cur.execute(
            f"INSERT INTO {self.ledger._migrations_table} (v, applied_at) VALUES (%s, %s)",
            (step.index, base.now()),
        )


__all__ = ["SCHEMA_VERSION", "PostgresLedger"]
