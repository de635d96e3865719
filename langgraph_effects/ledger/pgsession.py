"""The Postgres ledger's session plumbing: error messages, its own connection pool
(which keeps the connection used last aside for the next checkout), the checkout
check, and the lazily opened, pipelined transaction its plans run in."""

from __future__ import annotations

import select
import time
import weakref
from contextlib import AsyncExitStack
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import PipelineStatus, TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from ..errors import LedgerError, LedgerUnavailableError


def describe(conninfo: str, schema: str | None = None, **kwargs: Any) -> str:
    """``postgres:<host>/<db>`` for messages: never the password."""
    try:
        params = conninfo_to_dict(conninfo, **kwargs)
    except psycopg.Error:
        params = {}
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    db = str(params.get("dbname") or params.get("user") or "postgres")
    where = f"postgres:{host}/{db}"
    return f"{where} (schema {schema})" if schema else where


#: What each kind of psycopg error means for the ledger, and what to do about it.
_ADVICE: tuple[tuple[type[Exception] | tuple[type[Exception], ...], str], ...] = (
    (
        PoolClosed,
        "the connection pool of the ledger at {where} is closed ({error}). Open the pool "
        "(or the ledger) before use and do not use it after aclose().",
    ),
    (
        (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName),
        "the ledger tables do not exist at {where} ({error}). Call setup() once (or "
        "AsyncEffectPostgresSaver.setup()) before use; if setup() itself says so, the "
        "search_path names no existing schema: pass schema=. Nothing was written.",
    ),
    (
        pg_errors.ReadOnlySqlTransaction,
        "{where} is read-only ({error}), e.g. a standby or a read-only user. Point the "
        "ledger at the primary; the transaction was rolled back, retrying there is safe.",
    ),
    (
        pg_errors.DiskFull,
        "{where} is out of disk space ({error}); the transaction was rolled back. Free "
        "space on the database server, then resume.",
    ),
    (
        (psycopg.OperationalError, psycopg.InterfaceError),
        "the ledger at {where} is unavailable ({error}). Check that the server is up and "
        "reachable. Each change is one transaction, so nothing is half-written; if the "
        "connection dropped while committing, read the operation again before deciding "
        "(a repeated compare-and-set is refused if the first one landed).",
    ),
)


def ledger_error(error: psycopg.Error, where: str, cause: str | None = None) -> LedgerError:
    """Map psycopg errors to ours, with a message that says what to do."""
    if isinstance(error, PoolTimeout) and cause is not None:
        # Never connected at all: the pool's size has nothing to do with it.
        return LedgerUnavailableError(
            f"could not connect to the ledger at {where} ({cause}). Check that the server is "
            "running and reachable and that the DSN (host, port, database, user) is right; "
            "nothing was written, retrying later is safe."
        )
    if isinstance(error, PoolTimeout):
        return LedgerUnavailableError(
            f"could not get a connection to the ledger at {where} in time ({cause or error}). "
            "Check that the server is running and reachable and that the DSN (host, port, "
            "database, user) is right, or raise max_size if the pool is exhausted; nothing "
            "was written, retrying later is safe."
        )
    for kinds, advice in _ADVICE:
        if isinstance(error, kinds):
            return LedgerUnavailableError(advice.format(where=where, error=error))
    sqlstate = getattr(error, "sqlstate", None)
    return LedgerError(f"the ledger at {where} failed ({error}; SQLSTATE {sqlstate}).")


#: ``TransactionStatus.IDLE`` and ``PipelineStatus.OFF`` (a module name costs less than
#: an enum member's lookup on its class).
_IDLE = TransactionStatus.IDLE
_NO_PIPELINE = PipelineStatus.OFF


class CommitLost(LedgerUnavailableError):
    """The connection failed while a group's ``COMMIT`` was in flight: it may have
    landed, so nobody may run their plan again without reading first."""


def has_news(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection's socket is readable: an idle session is sent
    nothing unless the server is closing it (or a notice/notification arrived)."""
    try:
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    except (OSError, ValueError, psycopg.Error):
        return True


class LedgerPool(AsyncConnectionPool[Any]):
    """The pool of a ledger opened from a DSN.

    Its check on checkout costs no round trip for a connection given back within
    ``trusted`` seconds whose socket is quiet: a terminated backend (a server
    restart, a failover, ``pg_terminate_backend``) says so on the socket.

    The connection the ledger used last can be kept aside (*parked*) for its next
    checkout (`take`) instead of being returned, so a ledger writing one change
    after another takes the same connection back without the pool's lock, check and
    return each time. A connection is parked only idle (no transaction, no pipeline),
    while nobody is waiting for one of the pool's connections and the pool is open,
    and for at most ``trusted`` seconds after the pool handed it out: then it goes
    back through the pool, so the pool's own upkeep (``max_lifetime``, `drain`)
    still reaches it. Anyone asking the pool itself (`getconn`,
    ``connection()``), and `check`, `drain`, `wait` and
    `close`, put the parked connection back first: the pool then hands it out,
    checked, like any idle one.
    """

    def __init__(self, conninfo: str, *, trusted: float, **kwargs: Any) -> None:
        super().__init__(conninfo, check=self._check_trusted, **kwargs)
        self.trusted = trusted
        #: When each connection was last given back or checked (``time.monotonic()``).
        self.used: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
            weakref.WeakKeyDictionary()
        )
        #: The parked connection and when it was given back.
        self.parked: tuple[psycopg.AsyncConnection[Any], float] | None = None
        self._out: dict[psycopg.AsyncConnection[Any], float] = {}  # handed out: since when
        self._asking = 0  # callers inside getconn(): maybe waiting for a connection

    async def _check_trusted(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """The check on checkout (see the class)."""
        last = self.used.get(conn)
        if last is None or time.monotonic() - last > self.trusted or has_news(conn):
            await AsyncConnectionPool.check_connection(conn)
            self.used[conn] = time.monotonic()  # as fresh as a use: alive just now

    def park(self, conn: psycopg.AsyncConnection[Any], used: float) -> bool:
        """Keep ``conn`` (handed out by this pool, given back at ``used``) for
        `take`, if it may be (see the class); ``False``: return it instead."""
        pgconn = conn.pgconn
        if (
            self._asking
            or self.parked is not None
            or self.closed
            or pgconn.transaction_status != _IDLE
            or pgconn.pipeline_status != _NO_PIPELINE
            or used - self._out.get(conn, -self.trusted) > self.trusted
        ):
            return False
        self.parked = (conn, used)
        return True

    def take(self) -> psycopg.AsyncConnection[Any] | None:
        """The parked connection, now the caller's, if it would pass the check without
        a round trip (given back within ``trusted`` seconds, its socket quiet); else
        ``None``, and a parked one stays for `unpark_to_pool`."""
        parked = self.parked
        if parked is None or time.monotonic() - parked[1] > self.trusted or has_news(parked[0]):
            return None
        self.parked = None
        return parked[0]

    def given_back(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Note that ``conn``, about to be returned with `putconn`, was used now."""
        self.used[conn] = time.monotonic()

    async def unpark_to_pool(self) -> None:
        """Return the parked connection, if any, to the pool."""
        parked, self.parked = self.parked, None
        if parked is not None:
            self.used[parked[0]] = parked[1]
            await self.putconn(parked[0])

    async def getconn(self, timeout: float | None = None) -> psycopg.AsyncConnection[Any]:
        await self.unpark_to_pool()
        self._asking += 1
        try:
            conn: psycopg.AsyncConnection[Any] = await super().getconn(timeout)
        finally:
            self._asking -= 1
        self._out[conn] = time.monotonic()
        return conn

    async def putconn(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._out.pop(conn, None)
        await super().putconn(conn)

    async def check(self) -> None:
        await self.unpark_to_pool()
        await super().check()

    async def drain(self) -> None:
        await self.unpark_to_pool()
        await super().drain()

    async def wait(self, timeout: float = 30.0) -> None:
        await self.unpark_to_pool()
        await super().wait(timeout)

    async def close(self, timeout: float = 5.0) -> None:
        await self.unpark_to_pool()
        await super().close(timeout)


class Transaction:
    """A transaction opened only when a plan needs one, pipelined (see ``_run_plan``)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], cur: psycopg.AsyncCursor[Any], where: str) -> None:
        self.conn, self.cur, self.where = conn, cur, where
        self.pipeline: AsyncExitStack | None = None
        self.open = False

    async def begin(self) -> None:
        self.pipeline = AsyncExitStack()
        await self.pipeline.enter_async_context(self.conn.pipeline())
        self.open = True
        await self.cur.execute("BEGIN")  # sent with the next statement, not waited for

    async def end(self, *, commit: bool) -> None:
        if not self.open:
            return
        assert self.pipeline is not None
        await self.cur.execute("COMMIT" if commit else "ROLLBACK")
        try:
            await self.pipeline.aclose()  # the sync: waits for COMMIT
        except (psycopg.OperationalError, psycopg.InterfaceError) as error:
            if commit and self.conn.broken:
                raise CommitLost(str(ledger_error(error, self.where))) from error
            raise
        finally:
            self.open, self.pipeline = False, None

    async def abort(self) -> None:
        """After an error: leave the connection idle (the pool discards a broken one)."""
        pipeline, self.pipeline, self.open = self.pipeline, None, False
        try:
            if pipeline is not None:
                await pipeline.aclose()
        except psycopg.Error:
            pass
        try:
            if not self.conn.broken and self.conn.info.transaction_status != TransactionStatus.IDLE:
                await self.conn.execute("ROLLBACK")
        except psycopg.Error:
            pass
