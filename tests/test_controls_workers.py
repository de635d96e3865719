"""Budgets and circuit breakers under real worker processes, on SQLite and Postgres.

Eight processes race their threads against one budget: the provider's own records
hold exactly as many payments as the budget allows, and every other call was told
it was refused (nothing sent). A circuit breaker opens while eight processes send
payments the provider rejects: every request the provider received was admitted
before the circuit opened, and every call after it was refused without a request.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from langgraph_effects import AsyncEffectPostgresSaver, AsyncEffectSqliteSaver
from langgraph_effects.core.operation import State
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.base import OperationQuery
from langgraph_effects.ledger.registry import open_ledger
from tests.helpers.controls_worker import Spec, spec_json
from tests.ledger import conftest as ledger_fixtures

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
WORKERS = 8
THREADS = 4  # per worker: 32 calls in all
BUDGET = 11


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A set-up, empty ledger and checkpoint store shared by the workers."""
    if request.param == "sqlite":
        path = str(tmp_path / "graph.sqlite")
        asyncio.run(_setup(AsyncEffectSqliteSaver.from_conn_string(path)))
        yield path
        return
    schema = request.getfixturevalue("pg_schema")
    dsn = ledger_fixtures.require_postgres()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    scoped = make_conninfo(dsn, options=f"-c search_path={schema}")
    asyncio.run(_setup(AsyncEffectPostgresSaver.from_conn_string(scoped, ledger_max_size=2)))
    yield scoped


pg_schema = ledger_fixtures.pg_schema


async def _setup(opened: Any) -> None:
    async with opened as saver:  # once, here: not from eight processes at once
        await saver.setup()


def _race(db: str, tmp_path: Path, **spec: Any) -> dict[str, str]:
    """Run :data:`WORKERS` workers, released together; what each call was told."""
    procs = []
    for w in range(WORKERS):
        threads = [f"w{w}-t{t}" for t in range(THREADS)]
        one = Spec(db=db, provider=str(tmp_path / "provider.sqlite"), name=f"w{w}", threads=threads, **spec)
        log = open(tmp_path / f"w{w}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.controls_worker", spec_json(one)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
        ), log))
    for proc, log in procs:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline(), (tmp_path / f"{log.name}").read_text()[-3000:]
    for proc, _ in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    told: dict[str, str] = {}
    for proc, log in procs:
        out, _ = proc.communicate(timeout=300)
        log.close()
        assert proc.returncode == 0, Path(log.name).read_text()[-3000:]
        told.update(json.loads(out.strip().splitlines()[-1])["told"])
    return told


async def _ledger_rows(db: str) -> tuple[list[Any], list[Any]]:
    async with open_ledger(db) as ledger:

        return await ledger.list_operations(OperationQuery(limit=1000)), await ledger.control_rows()


def test_eight_workers_racing_against_one_budget_never_exceed_it(db: str, tmp_path: Path) -> None:
    told = _race(db, tmp_path, budget=BUDGET)
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    applied = provider.count_effects()
    assert sum(applied.values()) == BUDGET  # the provider's own records: never more
    assert all(n == 1 for n in applied.values())
    assert sorted(t for t, said in told.items() if said == "success") == sorted(applied)
    refused = [t for t, said in told.items() if said == "BudgetExceededError"]
    assert len(refused) == WORKERS * THREADS - BUDGET
    ops, rows = asyncio.run(_ledger_rows(db))
    assert sum(op.state is State.CONFIRMED for op in ops) == BUDGET
    assert sum(op.state is State.ABANDONED for op in ops) == len(refused)
    budget = [r for r in rows if r.control == "budget:payments"]
    assert [r.state["sends"] for r in budget] == [BUDGET]


def test_a_circuit_opens_while_workers_send_and_nothing_passes_it(db: str, tmp_path: Path) -> None:
    told = _race(db, tmp_path, circuit=3, reject=True)
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    ops, rows = asyncio.run(_ledger_rows(db))
    (circuit,) = [r for r in rows if r.control == "circuit:bank"]
    opened_at = circuit.state["opened_at"]
    sent = [op for op in ops if op.state is State.FAILED]
    refused = [op for op in ops if op.state is State.ABANDONED]
    assert len(sent) + len(refused) == WORKERS * THREADS
    # Every request the provider received is one the ledger admitted, each before the
    # circuit opened; none after (the cooldown is 10 minutes: no probe yet).
    assert provider.count_requests("apply") == len(sent)
    assert all(op.dispatched_at is not None and op.dispatched_at <= opened_at for op in sent)
    assert 3 <= len(sent) <= 3 + WORKERS - 1  # at most one send in flight per worker when it opened
    assert all((op.evidence or {}).get("control") == "circuit:bank" for op in refused)
    assert sum(said == "CircuitOpenError" for said in told.values()) == len(refused)
    assert sum(said == "error" for said in told.values()) == len(sent)
