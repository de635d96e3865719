"""Shared pieces of the benchmarks: commit and round-trip counters, realistic rows, Postgres.

Imported by ``benchmarks/run.py``'s scenario modules (``benchmarks/scenarios/``; the
statistics are in ``stats.py``); nothing here changes the package, it only observes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage

from langgraph_effects._runtime import messages
from langgraph_effects.core.operation import Change, Event, Operation, Owner, advance, create

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
OWNER = Owner(host="bench-host", pid=os.getpid(), started=0.0, token="bench-token")


# -- counting round trips --------------------------------------------------------------------


@dataclass
class HopCounter:
    """Requests queued to one aiosqlite connection's worker thread (see :func:`counting_hops`)."""

    hops: int = 0


class _CountingQueue:
    """Stands in for an aiosqlite connection's request queue, counting what is put.

    The worker thread keeps the real queue (it got it when it started), so it reads
    every request as before; only the event loop's side goes through this.
    """

    def __init__(self, inner: Any, counter: HopCounter) -> None:
        self._inner = inner
        self._counter = counter

    def put_nowait(self, item: Any) -> None:
        self._counter.hops += 1
        self._inner.put_nowait(item)

    def put(self, item: Any, *args: Any, **kwargs: Any) -> None:
        self._counter.hops += 1
        self._inner.put(item, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def can_count_hops(conn: Any) -> bool:
    return hasattr(conn, "_tx") and hasattr(conn._tx, "put_nowait")


@contextmanager
def counting_hops(conn: Any) -> Iterator[HopCounter]:
    """Count the round trips to an aiosqlite connection's worker thread while inside.

    Every request aiosqlite sends its thread (``execute``, ``commit``, a fetch, and
    ``run_in_connection_thread``) is one item on the connection's queue, awaited
    until the thread answers: one round trip. Counted at the queue, so it holds however
    the ledger groups its statements. Only this connection is counted.
    """
    counter = HopCounter()
    inner = conn._tx
    conn._tx = _CountingQueue(inner, counter)
    try:
        yield counter
    finally:
        conn._tx = inner


# -- counting commits --------------------------------------------------------------------


@dataclass
class SqlCounter:
    """Counts commits in a stream of SQL statements (a SQLite trace callback).

    Every ``COMMIT``/``END`` is counted; it is a *durable* commit when its transaction
    wrote (an INSERT/UPDATE/DELETE/REPLACE ran since ``BEGIN``): a commit with nothing
    to write appends no WAL frame and needs no fsync. A write outside ``BEGIN``
    (autocommit) is a durable commit of its own.
    """

    commits: int = 0
    write_commits: int = 0
    autocommit_writes: int = 0
    statements: int = 0
    _open: bool = False
    _wrote: bool = False

    def __call__(self, sql: str) -> None:
        self.statements += 1
        text = sql.lstrip()
        head = text.split(None, 1)[0].upper() if text else ""
        if head == "BEGIN":
            self._open, self._wrote = True, False
        elif head in ("COMMIT", "END"):
            self.commits += 1
            if self._wrote:
                self.write_commits += 1
            self._open = self._wrote = False
        elif head == "ROLLBACK":
            self._open = self._wrote = False
        elif head in ("INSERT", "UPDATE", "DELETE", "REPLACE"):
            if self._open:
                self._wrote = True
            else:
                self.autocommit_writes += 1

    @property
    def durable(self) -> int:
        return self.write_commits + self.autocommit_writes

    @property
    def empty_commits(self) -> int:
        return self.commits - self.write_commits


@dataclass
class LibpqTraceCounter:
    """Counts committed write transactions in libpq trace files (``PQtrace`` output).

    Reads the server's ``CommandComplete`` tags and ``ReadyForQuery`` status: a
    ``COMMIT`` after at least one INSERT/UPDATE/DELETE is a durable commit; a write
    completed while no transaction was open (autocommit) is one too, once per
    ``ReadyForQuery``: the statements a pipeline sends between two Syncs are one
    implicit transaction, committed once at the Sync. Read-only
    transactions (a ``SELECT`` in autocommit mode, the pool's connection check) are
    counted separately: Postgres does not flush WAL for them.

    A statement whose tag is ``SELECT`` but whose text holds a data-modifying CTE
    (``WITH ins AS (INSERT ...) SELECT ...``) counts as a write too, whether or not
    it changed a row (an upper bound): its text is taken from the ``Parse`` (or
    ``Query``) message of the statement each ``Bind`` runs, in order.

    Round trips: each ``Sync`` (extended protocol, also the end of a pipeline batch)
    or ``Query`` (simple protocol) the client sends is a point where it waits for the
    server's ``ReadyForQuery``: one round trip. libpq buffers the trace: count after
    :func:`untrace_pg_connection` (which flushes it).
    """

    files: list[str] = field(default_factory=list)
    #: file -> {prepared statement name: whether it writes}, for those prepared
    #: before the file's trace began (see :func:`trace_pg_connection`).
    prepared: dict[str, dict[str, bool]] = field(default_factory=dict)

    def new_file(self) -> Any:
        handle = tempfile.NamedTemporaryFile(prefix="lge-pqtrace-", suffix=".log", delete=False)  # noqa: SIM115
        self.files.append(handle.name)
        return handle

    def count(self) -> dict[str, int]:
        write_commits = read_commits = autocommit_writes = round_trips = 0
        for name in self.files:
            in_tx = False
            wrote = implicit_wrote = False
            with open(name, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            writes_by_name = dict(self.prepared.get(name, {}))  # statement -> whether it writes
            pending: list[bool] = []  # for each statement sent and not answered yet
            for line in text.splitlines():
                parts = line.split("\t")
                if len(parts) >= 3 and parts[0] == "F" and parts[2].strip() in ("Sync", "Query"):
                    round_trips += 1
                if len(parts) >= 4 and parts[0] == "F":
                    _track_statements(parts[2].strip(), parts[3].strip(), writes_by_name, pending)
                if len(parts) < 4 or parts[0] != "B":
                    continue
                kind, payload = parts[2], parts[3].strip()
                if kind == "ReadyForQuery":
                    autocommit_writes += implicit_wrote
                    implicit_wrote = False
                    pending.clear()  # whatever an error skipped is never answered
                    if payload == "I":
                        in_tx = wrote = False
                elif kind == "ErrorResponse":
                    implicit_wrote = False  # an implicit transaction that failed rolled back
                if kind != "CommandComplete":
                    continue
                tag = payload.strip('"').split(" ", 1)[0].upper()
                if pending and pending.pop(0) and tag == "SELECT":
                    tag = "INSERT"  # a SELECT over a data-modifying CTE
                if tag == "BEGIN":
                    # (writes the same Sync group ran before it join this transaction)
                    in_tx, wrote, implicit_wrote = True, implicit_wrote, False
                elif tag == "COMMIT":
                    if wrote:
                        write_commits += 1
                    else:
                        read_commits += 1
                    in_tx = wrote = False
                elif tag == "ROLLBACK":
                    in_tx = wrote = False
                elif tag in ("INSERT", "UPDATE", "DELETE", "MERGE"):
                    if in_tx:
                        wrote = True
                    else:
                        implicit_wrote = True
        return {
            "write_commits": write_commits,
            "autocommit_writes": autocommit_writes,
            "durable": write_commits + autocommit_writes,
            "read_only_commits": read_commits,
            "round_trips": round_trips,
        }

    def cleanup(self) -> None:
        for name in self.files:
            with contextlib.suppress(OSError):
                os.unlink(name)
        self.files.clear()
        self.prepared.clear()


_QUOTED = re.compile(r'"([^"]*)"')
_WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)


def _track_statements(kind: str, payload: str, writes_by_name: dict[str, bool], pending: list[bool]) -> None:
    """Follow which statement each ``Bind`` (or simple ``Query``) runs, and whether its
    text writes (see :class:`LibpqTraceCounter`)."""
    if kind == "Parse":  # "name" "text" ...
        name = _QUOTED.match(payload)
        if name is not None:
            writes_by_name[name.group(1)] = bool(_WRITES.search(payload[name.end() :]))
    elif kind == "Bind":  # "portal" "statement" ...
        names = _QUOTED.findall(payload)
        if len(names) >= 2:
            pending.append(writes_by_name.get(names[1], False))
    elif kind == "Query" and payload.strip() not in ('""', ""):
        pending.append(bool(_WRITES.search(payload)))


def trace_pg_connection(conn: Any, counter: LibpqTraceCounter) -> None:
    """Send libpq's protocol trace of ``conn`` to a new file of ``counter``."""
    from psycopg import pq

    handle = counter.new_file()
    # Statements psycopg prepared before the trace are run by name only: what they
    # are is known from psycopg's own map (private; without it they count as reads).
    names = getattr(getattr(conn, "_prepared", None), "_names", {})
    counter.prepared[handle.name] = {
        bytes(name).decode(): bool(_WRITES.search(bytes(key[0]).decode(errors="replace")))
        for key, name in dict(names).items()
    }
    conn.pgconn.trace(handle.fileno())
    conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
    # Keep the file object alive as long as the connection: libpq writes to its fd.
    conn._lge_trace_handle = handle


class PoolTracer:
    """Traces every connection a psycopg pool hands out (libpq protocol trace).

    Wraps the pool's public ``getconn`` on the instance (``pool.connection()`` goes
    through it), so whatever the ledger does with its pool is seen, however its
    statements are grouped. :meth:`start` opens a counting window: every connection
    seen so far is traced into the given counter from then on, and any new one when
    first checked out (its pool health check on that checkout is missed: ``first_seen``
    counts those; :meth:`prime` checks out all the pool's connections beforehand so
    there are none). :meth:`stop` ends the window and flushes the trace. Undone on exit.
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.counter: LibpqTraceCounter | None = None
        self.first_seen = 0
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()

    async def __aenter__(self) -> PoolTracer:
        original = self.pool.getconn

        async def getconn(*args: Any, **kwargs: Any) -> Any:
            conn = await original(*args, **kwargs)
            if conn not in self._seen:
                self._seen.add(conn)
                if self.counter is not None:
                    self.first_seen += 1
                    trace_pg_connection(conn, self.counter)
            return conn

        self.pool.getconn = getconn
        return self

    async def prime(self, n: int) -> None:
        """Check out ``n`` connections at once (at least every one the pool holds)."""
        n = max(n, int(self.pool.get_stats().get("pool_size", 0)))
        conns = [await self.pool.getconn() for _ in range(min(n, int(self.pool.max_size)))]
        for conn in conns:
            await self.pool.putconn(conn)

    def start(self, counter: LibpqTraceCounter) -> None:
        self.stop()
        self.counter = counter
        self.first_seen = 0
        for conn in list(self._seen):
            trace_pg_connection(conn, counter)

    def stop(self) -> None:
        self.counter = None
        for conn in list(self._seen):
            untrace_pg_connection(conn)

    async def __aexit__(self, *exc: object) -> None:
        self.stop()
        self.pool.__dict__.pop("getconn", None)


def untrace_pg_connection(conn: Any) -> None:
    """Stop tracing ``conn`` (libpq flushes what it buffered) and close the file."""
    if getattr(conn, "_lge_trace_handle", None) is None:
        return
    with contextlib.suppress(Exception):
        conn.pgconn.untrace()
    handle = getattr(conn, "_lge_trace_handle", None)
    if handle is not None:
        with contextlib.suppress(OSError):
            handle.close()
        conn._lge_trace_handle = None


# -- realistic ledger rows -------------------------------------------------------------------


def make_op(op_id: str, *, thread_id: str = "thread-bench", n: int = 0) -> Operation:
    """An operation shaped like one ``EffectToolNode`` records for a small tool call."""
    return Operation(
        op_id=op_id,
        thread_id=thread_id,
        tool="send_email",
        tool_call_id=f"call_{n:08d}",
        args={"to": f"customer-{n}@example.com", "subject": "Your invoice", "amount": 1200 + n % 97},
        args_hash="h1:" + uuid.uuid5(uuid.NAMESPACE_OID, op_id).hex * 2,
        provider_key=f"lge:{op_id}",
        contract="dedup",
        checkpoint_ns="",
        tenant="tenant-7",
        policy_version="v1",
        message_id=f"msg-{thread_id}",
        task_id=uuid.uuid5(uuid.NAMESPACE_URL, op_id).hex,
        checkpoint_id="1f0c2d4e-aaaa-6bbb-8000-" + f"{n:012d}"[-12:],
    )


def dispatch_change() -> Change:
    return Change(Event.DISPATCH, owner=OWNER, lease_expires_at=2e9, evidence={"kind": "intent"})


def succeed_change(tool_call_id: str) -> Change:
    """The outcome ``Dispatcher.finish`` records for a successful call (a dumped ToolMessage)."""
    kind, blob = messages.dump(
        ToolMessage(content="sent msg_0123456789", name="send_email", tool_call_id=tool_call_id)
    )
    return Change(Event.SUCCEED, evidence={"kind": "result"}, result_type=kind, result=blob)


def confirmed(op: Operation, *, at: float) -> Operation:
    """``op`` after intent+dispatch and a successful outcome, via the real state machine."""
    dispatched = create(op, now=at, change=dispatch_change())
    done = advance(dispatched, succeed_change(op.tool_call_id), expected_version=dispatched.version, now=at)
    assert done is not None
    return done


def dispatched(op: Operation, *, at: float) -> Operation:
    return create(op, now=at, change=dispatch_change())


# -- Postgres --------------------------------------------------------------------------------


@asynccontextmanager
async def fence_triggers_off(dsn: str) -> AsyncIterator[None]:
    """The one-runner fence's triggers disabled on ``dsn``'s tables while inside (a
    what-if for timing what they cost; never a way to run). Enabled again on the way
    out, whatever happened inside."""
    import psycopg

    from langgraph_effects.checkpoint.postgres import _FENCED_TABLES, _TRIGGER

    async def toggle(state: str) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for table in _FENCED_TABLES:
                await conn.execute(f'ALTER TABLE {table} {state} TRIGGER "{_TRIGGER}"')

    await toggle("DISABLE")
    try:
        yield
    finally:
        await toggle("ENABLE")


def pg_problem(dsn: str) -> str | None:
    """``None`` if a server answers at ``dsn``, else why not (one line)."""
    try:
        import psycopg
    except ImportError as error:  # pragma: no cover - the postgres extra is not installed
        return f"psycopg is not installed ({error}); pip install 'langgraph-effects[postgres]'"
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as error:
        return " ".join(f"{type(error).__name__}: {error}".split())
    return None


@asynccontextmanager
async def fresh_pg_database(dsn: str) -> AsyncIterator[str]:
    """A DSN for a new, empty database on the server of ``dsn`` (dropped afterwards).

    Falls back to a fresh schema in the given database (through ``search_path``) if
    the user may not create databases.
    """
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"lge_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
            kind = "database"
        except psycopg.errors.InsufficientPrivilege:
            await admin.execute(f'CREATE SCHEMA "{name}"')
            kind = "schema"
    target = (
        make_conninfo(dsn, dbname=name)
        if kind == "database"
        else make_conninfo(dsn, options=f"-c search_path={name}")
    )
    try:
        yield target
    finally:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
            if kind == "database":
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            else:
                await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
