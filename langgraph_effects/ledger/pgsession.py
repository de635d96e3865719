"""The Postgres ledger's session plumbing: error messages, and the lazily opened,
pipelined transaction its plans run in."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import PoolClosed, PoolTimeout

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


class CommitLost(LedgerUnavailableError):
    """The connection failed while a group's ``COMMIT`` was in flight: it may have
    landed, so nobody may run their plan again without reading first."""


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
