"""One runner per thread: two runners resuming one thread never both proceed.

Every runner is a real process (``tests/helpers/fencing_agent.py``), released at the
same instant (each waits for a file the test creates once all are ready). The
model's follow-up differs on every call (pid, counter), as an LLM's does, so a
forked thread would send it twice under two operations the ledger cannot relate.
Effects are counted at a provider that keeps its own records; forks are looked for
with ``alist`` (a checkpoint with two children).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from langgraph_effects.checkpoint.sqlite import EffectSqliteSaver
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.base import OperationQuery
from tests.helpers.fencing_agent import FenceSpec, open_saver, spec_json
from tests.ledger import conftest as ledger_fixtures

ROOT = Path(__file__).resolve().parents[1]
pg_schema = ledger_fixtures.pg_schema
DEADLINE = 240.0  # seconds per worker on a loaded 2-core machine


# -- plumbing ------------------------------------------------------------------------------


def start(spec: FenceSpec) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.fencing_agent", spec_json(spec)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def crash(spec: FenceSpec) -> None:
    """Start each thread in its own process, SIGKILLed once the first effect landed."""
    for thread in spec.threads:
        proc = start(FenceSpec(**{**spec.__dict__, "mode": "crash", "threads": [thread], "go": None}))
        _, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == -9, f"the worker was not killed at the fault point:\n{err[-3000:]}"


def race(specs: list[FenceSpec], go: Path) -> list[dict[str, Any]]:
    """Start the workers, wait until all are ready, release them at once."""
    procs = [start(s) for s in specs]
    deadline = time.monotonic() + DEADLINE
    while sum(1 for p in go.parent.iterdir() if p.name.startswith(go.name + ".ready.")) < len(procs):
        assert time.monotonic() < deadline, "workers never got ready"
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"a worker died before the start:\n{p.communicate()[1][-4000:]}")
        time.sleep(0.02)
    go.touch()
    return [finish(p) for p in procs]


async def forks(db: str, threads: list[str]) -> list[str]:
    """Checkpoints with two or more children (per thread and namespace)."""
    found = []
    async with open_saver(db) as saver:
        for thread in threads:
            children: Counter[tuple[str, str]] = Counter()
            async for t in saver.alist({"configurable": {"thread_id": thread}}):
                parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
                if parent is not None:
                    children[(t.config["configurable"]["checkpoint_ns"], parent)] += 1
            found += [f"{thread}:{ns}:{cid} has {n} children" for (ns, cid), n in children.items() if n > 1]
    return found


async def unresolved(db: str) -> list[str]:
    async with open_saver(db) as saver:
        ops = await saver.ledger.list_operations(OperationQuery(limit=10_000))
    return [f"{o.op_id} {o.state.value}" for o in ops if not o.terminal]


def assert_exactly_intended(provider: str, threads: list[str], calls: int) -> None:
    counts = Provider(provider, "dedup").count_effects()
    intended = {f"{t}:{i}": 1 for t in threads for i in range(calls)}
    intended.update({f"{t}:follow": 1 for t in threads})
    assert counts == intended, f"the provider's records differ from the intended effects: {counts}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "agent.sqlite")
    schema: str = request.getfixturevalue("pg_schema")
    dsn = ledger_fixtures.require_postgres()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    scoped = make_conninfo(dsn, options=f"-c search_path={schema}")

    async def setup() -> None:
        async with open_saver(scoped) as saver:
            await saver.setup()

    asyncio.run(setup())
    return scoped
