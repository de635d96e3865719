"""The built-in ledger backends: SQLite, Postgres and memory (`BUILTIN_BACKENDS`).

Each is a `Backend` (`backend`) the registry (`registry`) registers before any
other: how a URL of its scheme is opened (never creating or migrating anything:
a database without a ledger is refused with
[`LedgerNotFoundError`][langgraph_effects.errors.LedgerNotFoundError]), set up,
described and redacted.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from ..errors import (
    EffectsError,
    LedgerCorruptError,
    LedgerNotFoundError,
    LedgerUnavailableError,
)
from .backend import Backend, LedgerOptions, check_schema, redact_url
from .base import Ledger
from .memory import InMemoryLedger
from .sqlite import SqliteLedger

__all__ = ["BUILTIN_BACKENDS"]


# libpq's connection keywords: ``host=db port=5432 dbname=app`` is a Postgres DSN.
_LIBPQ_KEYWORD = re.compile(
    r"^\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|sslrootcert|"
    r"connect_timeout|options|application_name|target_session_attrs|channel_binding|"
    r"gssencmode|sslcert|sslkey|krbsrvname|require_auth)\s*=",
    re.IGNORECASE,
)
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def _redact_postgres(db: str) -> str:
    if _LIBPQ_KEYWORD.match(db) and "://" not in db:
        return _KV_PASSWORD.sub(lambda m: m.group(1) + "***", db)
    return redact_url(db)


def _describe_sqlite(db: str, schema: str | None) -> str:
    path = _sqlite_path(db)
    return f"SQLite file {Path(path).absolute() if path != ':memory:' else path}"


def _describe_postgres(db: str, schema: str | None) -> str:
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(db)
    except Exception:  # no psycopg, or a DSN libpq cannot parse: it fails on connect
        return f"Postgres {_redact_postgres(db)}"
    host = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    name = str(params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or "")
    user = params.get("user") or os.environ.get("PGUSER")
    text = f"Postgres {host}:{port}/{name}"
    if user:
        text += f" as {user}"
    if schema:
        text += f", schema {schema}"
    return text


def _sqlite_path(db: str) -> str:
    """A SQLite path from ``db``: a plain path, ``sqlite:///abs/path`` (``sqlite://rel``
    for a relative one), or ``sqlite:<path>`` as ledgers print it."""
    for prefix in ("sqlite://", "sqlite:"):
        if db.lower().startswith(prefix):
            return db[len(prefix) :]
    return db


# -- SQLite ---------------------------------------------------------------------------


@asynccontextmanager
async def _open_sqlite(db: str, options: LedgerOptions) -> AsyncIterator[Ledger]:
    path = _sqlite_path(db)
    if path == ":memory:":
        async with SqliteLedger.from_conn_string(path) as memory:
            await memory.setup()
            yield memory
        return
    busy_ms = int(1000 * (options.connect_timeout if options.connect_timeout is not None else 30.0))
    where = Path(path)
    if where.is_dir():
        raise LedgerCorruptError(
            f"{path} is not a file (a directory?). Point --db at the SQLite "
            "database file that holds the ledger; nothing was written."
        )
    if not options.create:
        if not where.exists():
            raise LedgerNotFoundError(path)
        # Checked on a read-only connection first: opening for writes switches the
        # file to WAL, which would write to a database that turns out not to be ours.
        async with SqliteLedger.from_conn_string(path, read_only=True) as probe:
            await check_schema(probe, path)
    async with SqliteLedger.from_conn_string(
        path, read_only=options.read_only, busy_timeout_ms=busy_ms
    ) as ledger:
        yield ledger


async def _setup_sqlite(db: str, options: LedgerOptions) -> str:
    from ..checkpoint.sqlite import AsyncEffectSqliteSaver

    path = _sqlite_path(db)
    if Path(path).is_dir():
        raise LedgerCorruptError(
            f"{path} is a directory. Give the path of the SQLite database file to create or migrate."
        )
    async with AsyncEffectSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
        return saver.ledger.where


def _sqlite_checkpointer(db: str, options: LedgerOptions) -> AbstractAsyncContextManager[Any]:
    from ..checkpoint.sqlite import AsyncEffectSqliteSaver

    return AsyncEffectSqliteSaver.from_conn_string(_sqlite_path(db))


# -- Postgres -------------------------------------------------------------------------


def _postgres_missing(db: str, error: ImportError) -> LedgerUnavailableError:
    return LedgerUnavailableError(
        f"cannot open {_redact_postgres(db)}: the Postgres backend is not available ({error}). "
        "Install it with `pip install 'langgraph-effects[postgres]'`."
    )


@asynccontextmanager
async def _open_postgres(db: str, options: LedgerOptions) -> AsyncIterator[Ledger]:
    try:
        from .postgres import PostgresLedger
    except ImportError as error:
        raise _postgres_missing(db, error) from error
    limit = options.connect_timeout if options.connect_timeout is not None else 30.0
    await _probe_postgres(db, limit)
    async with AsyncExitStack() as stack:
        try:
            ledger = await stack.enter_async_context(
                PostgresLedger.from_conn_string(
                    db,
                    schema=options.schema,
                    min_size=1,
                    max_size=2,
                    timeout=limit,
                    read_only=options.read_only,
                    connect_timeout=limit,
                )
            )
        except EffectsError:
            raise
        except Exception as error:
            if type(error).__module__.split(".", 1)[0] != "psycopg":
                raise
            raise LedgerUnavailableError(
                f"cannot use the ledger at {_redact_postgres(db)}: {type(error).__name__}: {error}. Check "
                "that the server is up and the DSN (host, port, database, user, password) is right; "
                "nothing was written."
            ) from error
        yield ledger


async def _probe_postgres(db: str, timeout: float) -> None:
    """One plain connection attempt first: a refused port or a wrong password fails at once
    with the server's own reason, instead of a pool retrying until its timeout."""
    import psycopg

    try:
        conn = await asyncio.wait_for(
            psycopg.AsyncConnection.connect(db, connect_timeout=max(2, round(timeout))),
            timeout=timeout + 1,
        )
    except (psycopg.Error, asyncio.TimeoutError, OSError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        if isinstance(error, asyncio.TimeoutError):
            reason = f"no answer within {timeout:g}s"
        raise LedgerUnavailableError(
            f"could not connect to the ledger at {_describe_postgres(db, None)} ({reason}). Check that the "
            "server is running and reachable and that the DSN (host, port, database, user, "
            "password) is right, or raise --connect-timeout; nothing was written, retrying "
            "later is safe."
        ) from error
    await conn.close()


async def _setup_postgres(db: str, options: LedgerOptions) -> str:
    try:
        from ..checkpoint.postgres import AsyncEffectPostgresSaver
    except ImportError as error:
        raise _postgres_missing(db, error) from error
    await _probe_postgres(db, options.connect_timeout if options.connect_timeout is not None else 30.0)
    async with AsyncEffectPostgresSaver.from_conn_string(
        db, ledger_schema=options.schema, ledger_max_size=2, connect_timeout=options.connect_timeout
    ) as saver:
        await saver.setup()
        return saver.ledger.where


def _postgres_checkpointer(db: str, options: LedgerOptions) -> AbstractAsyncContextManager[Any]:
    try:
        from ..checkpoint.postgres import AsyncEffectPostgresSaver
    except ImportError as error:
        raise _postgres_missing(db, error) from error
    return AsyncEffectPostgresSaver.from_conn_string(
        db, ledger_schema=options.schema, connect_timeout=options.connect_timeout
    )


# -- memory ---------------------------------------------------------------------------


async def _open_memory(db: str, options: LedgerOptions) -> AsyncIterator[Ledger]:
    """A fresh, set-up [`InMemoryLedger`][langgraph_effects.InMemoryLedger] each time (it survives
    nothing)."""
    ledger = InMemoryLedger()
    await ledger.setup()
    yield ledger


#: SQLite (``sqlite:///path`` or a plain path), Postgres (``postgresql://``, ``postgres://``
#: or libpq's ``host=... dbname=...``) and memory (``memory://``).
BUILTIN_BACKENDS: tuple[Backend, ...] = (
    Backend(
        "sqlite",
        _open_sqlite,
        describe=_describe_sqlite,
        setup=_setup_sqlite,
        checkpointer=_sqlite_checkpointer,
    ),
    Backend(
        "postgresql",
        _open_postgres,
        schemas=True,
        remote=True,
        describe=_describe_postgres,
        redact=_redact_postgres,
        matches=lambda db: bool(_LIBPQ_KEYWORD.match(db)),
        setup=_setup_postgres,
        checkpointer=_postgres_checkpointer,
        aliases=("postgres",),
    ),
    Backend(
        "memory",
        asynccontextmanager(_open_memory),
        describe=lambda db, schema: "a fresh in-memory ledger (it survives nothing)",
    ),
)
