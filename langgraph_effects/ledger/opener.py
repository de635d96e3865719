"""From a database name to an open ledger: SQLite path or Postgres DSN, and whether it holds one.

What the console and :mod:`langgraph_effects._runtime.operator` open ledgers with:
:func:`open_ledger` never creates or migrates anything (a database without a ledger
is refused with :class:`~langgraph_effects.errors.LedgerNotFoundError`), and
:func:`setup_database` is the one place that creates the tables.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import (
    EffectsError,
    LedgerCorruptError,
    LedgerNotFoundError,
    LedgerUnavailableError,
    SchemaBehindError,
    SchemaTooNewError,
)
from .base import Ledger
from .sqlite import SqliteLedger

# -- opening a ledger ---------------------------------------------------------------

#: Seconds the console waits for a connection (Postgres) or a write lock (SQLite).
DEFAULT_CONNECT_TIMEOUT = 5.0

# libpq's connection keywords: ``host=db port=5432 dbname=app`` is a Postgres DSN.
_LIBPQ_KEYWORD = re.compile(
    r"^\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|sslrootcert|"
    r"connect_timeout|options|application_name|target_session_attrs|channel_binding|"
    r"gssencmode|sslcert|sslkey|krbsrvname|require_auth)\s*=",
    re.IGNORECASE,
)
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def is_postgres_dsn(db: str) -> bool:
    """Whether ``db`` names a Postgres database.

    A URL (``postgres://`` or ``postgresql://``) or a libpq key/value string
    (``host=127.0.0.1 port=5432 dbname=app``); anything else is a SQLite path.
    """
    return db.lower().startswith(("postgres://", "postgresql://")) or bool(_LIBPQ_KEYWORD.match(db))


def redact_dsn(db: str) -> str:
    """``db`` safe to print: a Postgres DSN's password is replaced by ``***``."""
    if not is_postgres_dsn(db):
        return db
    if _LIBPQ_KEYWORD.match(db) and "://" not in db:
        return _KV_PASSWORD.sub(lambda m: m.group(1) + "***", db)
    try:
        parts = urlsplit(db)
        if parts.password is None:
            return db
        userinfo = f"{parts.username or ''}:***"
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        return urlunsplit(parts._replace(netloc=f"{userinfo}@{host}"))
    except ValueError:
        return db.split("://", 1)[0] + "://***"


def has_password(db: str) -> bool:
    """Whether ``db`` carries a password (so it must not be printed as is)."""
    return redact_dsn(db) != db


def describe_target(db: str, *, schema: str | None = None) -> str:
    """Where ``db`` points, for a "connecting to ..." line: never the password."""
    if not is_postgres_dsn(db):
        path = _sqlite_path(db)
        return f"SQLite file {Path(path).absolute() if path != ':memory:' else path}"
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(db)
    except Exception:  # no psycopg, or a DSN libpq cannot parse: it fails on connect
        return f"Postgres {redact_dsn(db)}"
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
    """A SQLite path from ``db``: a plain path, or ``sqlite:<path>`` as ledgers print it."""
    return db[len("sqlite:") :] if db.startswith("sqlite:") else db


@asynccontextmanager
async def open_ledger(
    db: str,
    *,
    read_only: bool = False,
    schema: str | None = None,
    connect_timeout: float | None = None,
) -> AsyncIterator[Ledger]:
    """Open the ledger named by ``db`` (which must hold one), and close it afterwards.

    ``db`` is a SQLite file path (``sqlite:<path>`` also works) or a Postgres DSN
    (``postgresql://...`` or ``host=... dbname=...``; needs the ``postgres`` extra),
    with the ledger's tables in ``schema`` if given.

    Nothing is ever created or migrated here (that is ``setup()``'s job, or
    ``langgraph-effects setup``): a database without a ledger is refused with
    :class:`LedgerNotFoundError` rather than answered with "nothing unresolved", so
    an operator who mistypes a path or a database name is told so. A ledger at an
    older or newer schema version is refused too. ``read_only`` opens it so that
    nothing can be written (what ``list``/``show`` use): it never waits for another
    process's write lock. ``connect_timeout`` (seconds) bounds connecting to Postgres,
    and waiting for SQLite's write lock. ``":memory:"`` opens a throw-away ledger.
    Raises :class:`~langgraph_effects.errors.LedgerError` subclasses when the store
    cannot be used.
    """
    async with AsyncExitStack() as stack:
        if is_postgres_dsn(db):
            ledger: Ledger = await _enter_postgres(
                stack, db, read_only=read_only, schema=schema, connect_timeout=connect_timeout
            )
        else:
            if schema is not None:
                raise ValueError(
                    "a schema applies to a Postgres ledger only; a SQLite file has none "
                    "(drop --schema, or give a postgresql:// DSN)."
                )
            path = _sqlite_path(db)
            if path == ":memory:":
                memory = await stack.enter_async_context(SqliteLedger.from_conn_string(path))
                await memory.setup()
                yield memory
                return
            where = Path(path)
            if not where.exists():
                raise LedgerNotFoundError(path)
            if not where.is_file():
                raise LedgerCorruptError(
                    f"{path} is not a file (a directory?). Point --db at the SQLite "
                    "database file that holds the ledger; nothing was written."
                )
            busy_ms = int(1000 * (connect_timeout if connect_timeout is not None else 30.0))
            # Checked on a read-only connection first: opening for writes switches the
            # file to WAL, which would write to a database that turns out not to be ours.
            async with SqliteLedger.from_conn_string(path, read_only=True) as probe:
                await _check_schema(probe, path, probe.where)
            sqlite = await stack.enter_async_context(
                SqliteLedger.from_conn_string(path, read_only=read_only, busy_timeout_ms=busy_ms)
            )
            ledger = sqlite
        yield ledger


async def _check_schema(ledger: Any, name: str, where: str, *, postgres: bool = False) -> None:
    """Refuse a database without a ledger, or with one at another schema version (reads only)."""
    found = await ledger.schema_version()
    expected = _schema_version(postgres)
    if found is None:
        raise LedgerNotFoundError(name, empty=True, postgres=postgres, schema=getattr(ledger, "schema", None))
    if found > expected:
        raise SchemaTooNewError(found, expected, where)
    if found < expected:
        raise SchemaBehindError(found, expected, where)


def _schema_version(postgres: bool) -> int:
    if postgres:
        from .postgres import SCHEMA_VERSION as PG_VERSION

        return PG_VERSION
    from .sqlite import SCHEMA_VERSION as SQLITE_VERSION

    return SQLITE_VERSION


async def _enter_postgres(
    stack: AsyncExitStack,
    db: str,
    *,
    read_only: bool,
    schema: str | None,
    connect_timeout: float | None,
) -> Ledger:
    shown = redact_dsn(db)
    try:
        from .postgres import PostgresLedger
    except ImportError as error:
        raise LedgerUnavailableError(
            f"cannot open {shown}: the Postgres backend is not available ({error}). "
            "Install it with `pip install 'langgraph-effects[postgres]'`."
        ) from error
    limit = connect_timeout if connect_timeout is not None else 30.0
    await _probe_postgres(db, limit)
    try:
        ledger = await stack.enter_async_context(
            PostgresLedger.from_conn_string(
                db,
                schema=schema,
                min_size=1,
                max_size=2,
                timeout=limit,
                read_only=read_only,
                connect_timeout=limit,
            )
        )
        await _check_schema(ledger, shown, ledger.where, postgres=True)
    except EffectsError:
        raise
    except Exception as error:
        if type(error).__module__.split(".", 1)[0] != "psycopg":
            raise
        raise LedgerUnavailableError(
            f"cannot use the ledger at {shown}: {type(error).__name__}: {error}. Check that the "
            "server is up and the DSN (host, port, database, user, password) is right; "
            "nothing was written."
        ) from error
    return ledger


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
            f"could not connect to the ledger at {describe_target(db)} ({reason}). Check that the "
            "server is running and reachable and that the DSN (host, port, database, user, "
            "password) is right, or raise --connect-timeout; nothing was written, retrying "
            "later is safe."
        ) from error
    await conn.close()


async def setup_database(
    db: str, *, schema: str | None = None, connect_timeout: float | None = None
) -> str:
    """Create or migrate the ledger and LangGraph's checkpoint tables in ``db``.

    What ``langgraph-effects setup`` runs: ``EffectSqliteSaver.setup()`` (the SQLite
    file is created if missing) or ``EffectPostgresSaver.setup()`` (safe from many
    processes at once). Returns where the ledger is, for messages.
    """
    if is_postgres_dsn(db):
        try:
            from ..checkpoint.postgres import EffectPostgresSaver
        except ImportError as error:
            raise LedgerUnavailableError(
                f"cannot open {redact_dsn(db)}: the Postgres backend is not available ({error}). "
                "Install it with `pip install 'langgraph-effects[postgres]'`."
            ) from error
        await _probe_postgres(db, connect_timeout if connect_timeout is not None else 30.0)
        async with EffectPostgresSaver.from_conn_string(
            db, ledger_schema=schema, ledger_max_size=2, connect_timeout=connect_timeout
        ) as saver:
            await saver.setup()
            return saver.ledger.where
    if schema is not None:
        raise ValueError("a schema applies to a Postgres ledger only (drop --schema).")
    from ..checkpoint.sqlite import EffectSqliteSaver

    path = _sqlite_path(db)
    if Path(path).is_dir():
        raise LedgerCorruptError(
            f"{path} is a directory. Give the path of the SQLite database file to create or migrate."
        )
    async with EffectSqliteSaver.from_conn_string(path) as sqlite_saver:
        await sqlite_saver.setup()
        return sqlite_saver.ledger.where
