"""Fixtures for the ledger contract: one suite, run against every backend.

The Postgres backend runs in a fresh schema per test in the database named by
``LANGGRAPH_EFFECTS_TEST_PG_DSN`` and drops it afterwards. If the server cannot
be reached the Postgres cases are skipped, except under ``CI=true`` where that
is a failure (CI must not go green by skipping the production backend).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from langgraph_effects.core.operation import Operation
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.postgres import PostgresLedger
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.testing.conformance import make_op as conformance_make_op

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"

OpFactory = Callable[..., Operation]


def pg_dsn() -> str:
    return os.environ.get("LANGGRAPH_EFFECTS_TEST_PG_DSN", DEFAULT_PG_DSN)


_REACHABLE: dict[str, str | None] = {}


def require_postgres() -> str:
    """The test DSN; skips (or fails under ``CI=true``) if the server is unreachable."""
    dsn = pg_dsn()
    if dsn not in _REACHABLE:
        try:
            with psycopg.connect(dsn, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            _REACHABLE[dsn] = None
        except psycopg.Error as error:
            _REACHABLE[dsn] = f"{type(error).__name__}: {error}".strip()
    problem = _REACHABLE[dsn]
    if problem is not None:
        reason = (
            f"PostgreSQL is not reachable at {dsn} ({problem}); start it or set LANGGRAPH_EFFECTS_TEST_PG_DSN"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason + " (CI=true: Postgres tests must run)")
        pytest.skip(reason)
    return dsn


@contextmanager
def created_schema(prefix: str) -> Iterator[tuple[str, str]]:
    """A fresh schema, created now and dropped (with everything in it) afterwards, and
    the test DSN with it first on the ``search_path``: (name, dsn)."""
    dsn = require_postgres()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield name, make_conninfo(dsn, options=f"-c search_path={name}")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh, not yet existing schema name, dropped (with everything in it) afterwards."""
    dsn = require_postgres()
    name = f"lge_test_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Ledger]:
    """A set-up, empty ledger of each backend."""
    backend: Ledger
    if request.param == "memory":
        backend = InMemoryLedger()
        await backend.setup()
        yield backend
        await backend.aclose()
    elif request.param == "sqlite":
        async with SqliteLedger.from_conn_string(tmp_path / "ledger.sqlite") as backend:
            await backend.setup()
            yield backend
    else:
        schema = request.getfixturevalue("pg_schema")
        async with PostgresLedger.from_conn_string(
            pg_dsn(), schema=schema, max_size=5, timeout=10
        ) as backend:
            await backend.setup()
            yield backend


@pytest.fixture
def make_op() -> OpFactory:
    """Build an :class:`Operation` with sensible defaults; every id is unique per call
    (the conformance suite's own builder)."""
    return conformance_make_op


async def terminate(pid: int) -> None:
    """End a backend as a server restart would, and wait until it is gone."""
    async with await psycopg.AsyncConnection.connect(pg_dsn(), autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        for _ in range(500):
            cur = await admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid])
            if await cur.fetchone() is None:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"backend {pid} did not exit")
