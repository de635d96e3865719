"""Many worker processes against one Postgres: AsyncEffectPostgresSaver + EffectToolNode.

Every worker is a real process (``tests/helpers/pg_agent.py``) running the agent
graph of ``tests/helpers/agent.py`` on ``AsyncEffectPostgresSaver``. Effects are counted
at a provider that keeps its own records in its own SQLite file, never from the
workers' logs. Each test gets a fresh schema (``tests/ledger/conftest.py``'s
``pg_schema``) and puts both the checkpoint tables and the ledger there through
``search_path`` in the DSN, so tests never see each other's checkpoints.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver
from langgraph_effects.core.operation import Operation, State
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.base import AuditEntry, OperationQuery
from langgraph_effects.ledger.postgres import PostgresLedger
from tests import test_fencing as fencing
from tests.helpers import pg_agent
from tests.helpers.pg_agent import PgSpec, spec_json
from tests.ledger import conftest as ledger_fixtures

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]

# A fresh schema per test, dropped afterwards; skips (or fails under CI=true) without a server.
pg_schema = ledger_fixtures.pg_schema

WORKERS = 8
THREADS = 50
CALLS = 2  # parallel tool calls per AIMessage
SEND_DELAY = 0.05  # a slow provider keeps each call in flight, so workers collide more often
RACE_DEADLINE = 150.0  # seconds for all racing workers together: past it, call it a deadlock


# -- plumbing ------------------------------------------------------------------------------


def schema_dsn(schema: str) -> str:
    """The test DSN with ``search_path`` set to ``schema`` (created here)."""
    dsn = ledger_fixtures.require_postgres()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return make_conninfo(dsn, options=f"-c search_path={schema}")


async def _setup(dsn: str) -> None:
    # Once, here: LangGraph's own setup() is not safe to run from 8 processes at once.
    async with AsyncEffectPostgresSaver.from_conn_string(dsn, ledger_max_size=2) as saver:
        await saver.setup()


def worker_env(host: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LANGGRAPH_EFFECTS_HOST", None)
    if host is not None:
        env["LANGGRAPH_EFFECTS_HOST"] = host
    return env


def start(command: str, spec: PgSpec, stderr: IO[str], host: str | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.pg_agent", command, spec_json(spec)],
        cwd=ROOT,
        env=worker_env(host),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,  # a file: a chatty worker must not block on a full pipe
        text=True,
    )


def wait_ready(proc: subprocess.Popen[str], log: Path) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"worker exited before it was ready:\n{log.read_text()[-3000:]}"
    return json.loads(line)  # type: ignore[no-any-return]


def go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def last_json(stdout: str) -> dict[str, Any]:
    return json.loads(stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run_once(
    args: list[str], *, host: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.helpers.pg_agent", *args],
        cwd=ROOT,
        env=worker_env(host),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def _ledger_view(dsn: str) -> tuple[list[Operation], list[Operation], dict[str, list[AuditEntry]]]:
    async with PostgresLedger.from_conn_string(dsn, max_size=2) as ledger:
        ops = await ledger.list_operations(OperationQuery(limit=10_000))
        unresolved = await ledger.unresolved(limit=10_000)
        audits = {op.op_id: await ledger.audit(op.op_id) for op in ops}
    return ops, unresolved, audits


def ledger_view(dsn: str) -> tuple[list[Operation], list[Operation], dict[str, list[AuditEntry]]]:
    return asyncio.run(_ledger_view(dsn))


def events(trail: list[AuditEntry]) -> list[tuple[str | None, str, str]]:
    return [
        (e.from_state.value if e.from_state else None, e.event, e.to_state.value) for e in trail
    ]


async def _final_states(dsn: str, spec: PgSpec, threads: list[str]) -> dict[str, Any]:
    provider = Provider(spec.provider, spec.provider_mode)  # type: ignore[arg-type]
    out: dict[str, Any] = {}
    async with AsyncEffectPostgresSaver.from_conn_string(dsn, ledger_max_size=2) as saver:
        for thread in threads:
            graph = pg_agent.build(spec, saver, thread, provider)
            out[thread] = await graph.aget_state(pg_agent.config_for(thread))
    return out


def apply_times(provider_path: Path) -> list[float]:
    """When the provider received each ``apply`` request, from its own log."""
    with sqlite3.connect(provider_path) as db:
        return [row[0] for row in db.execute("SELECT at FROM requests WHERE kind = 'apply' ORDER BY id")]


# -- 8 workers racing over 50 threads ---------------------------------------------------------


@pytest.mark.crash
@pytest.mark.xdist_group("postgres_eight_workers")  # long: its own group starts it first
def test_eight_workers_racing_over_fifty_threads_dispatch_each_operation_once(
    pg_schema: str, tmp_path: Path
) -> None:
    dsn = schema_dsn(pg_schema)
    asyncio.run(_setup(dsn))
    provider_path = tmp_path / "provider.sqlite"
    # A blind provider appends every request it gets: any double send is a duplicate
    # effect. The tool is declared dedup, so recovery is allowed to re-send on its own
    # (no operator in the loop): only the ledger's coordination keeps sends single.
    Provider(provider_path, "blind").setup().close()
    threads = [f"t{k:02d}" for k in range(THREADS)]
    base = PgSpec(dsn=dsn, provider=str(provider_path), provider_mode="blind", contract="dedup", calls=CALLS)
    # Half the threads stop before the tool node (nothing in the ledger yet: the workers
    # race to record the intents); the other half were SIGKILLed right after their
    # intents were committed as dispatched (the workers race to recover a dead owner's
    # operations: lease lost -> unknown -> re-send under the same key).
    paused, crashed = threads[0::2], threads[1::2]
    t0 = time.monotonic()
    seeded = run_once(["seed", spec_json(replace(base, paused=paused, crashed=crashed))])
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    assert sorted(last_json(seeded.stdout)["killed"]) == crashed
    seed_seconds = time.monotonic() - t0

    provider = Provider(provider_path, "blind")
    assert provider.count_requests("apply") == 0  # nothing was sent while seeding
    ops, _, _ = ledger_view(dsn)
    assert len(ops) == len(crashed) * CALLS
    assert {op.state for op in ops} == {State.DISPATCHED}

    logs = [tmp_path / f"worker-{w}.log" for w in range(WORKERS)]
    files = [log.open("w") for log in logs]
    procs = [
        start("race", replace(base, threads=threads, order_seed=w, send_delay=SEND_DELAY), files[w])
        for w in range(WORKERS)
    ]
    try:
        for proc, log in zip(procs, logs, strict=True):
            wait_ready(proc, log)  # every worker imported, connected and built its graphs
        released = time.monotonic()
        for proc in procs:  # the barrier: all eight start resuming at once
            go(proc)
        outs: list[dict[str, Any]] = []
        for w, proc in enumerate(procs):
            left = RACE_DEADLINE - (time.monotonic() - released)
            try:
                stdout, _ = proc.communicate(timeout=max(left, 1.0))
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker {w} still running after {RACE_DEADLINE}s: deadlock or livelock")
            assert proc.returncode == 0, (w, logs[w].read_text()[-3000:])
            outs.append(last_json(stdout))
        race_seconds = time.monotonic() - released
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for f in files:
            f.close()

    # The provider's own records: every operation exactly once, none missing.
    intended = [f"{t}:{i}" for t in threads for i in range(CALLS)]
    tally = provider.tally(intended)
    assert tally.effects == THREADS * CALLS, tally
    assert tally.duplicates == 0 and tally.missing == 0, tally
    assert provider.count_effects() == dict.fromkeys(intended, 1)
    assert provider.count_requests("apply") == THREADS * CALLS
    assert sum(out["sent"] for out in outs) == THREADS * CALLS

    # The ledger: nothing left non-terminal; each operation took the path it should.
    ops, unresolved, audits = ledger_view(dsn)
    assert unresolved == []
    assert len(ops) == THREADS * CALLS
    assert {op.state for op in ops} == {State.CONFIRMED}
    for op in ops:
        trail = events(audits[op.op_id])
        if op.thread_id in crashed:
            assert trail == [
                (None, "intent", "dispatched"),
                ("dispatched", "lose", "unknown"),
                ("unknown", "resend", "dispatched"),
                ("dispatched", "succeed", "confirmed"),
            ], (op.op_id, trail)
            lost = audits[op.op_id][1].evidence or {}
            assert lost["kind"] == "lease"  # the dead seeder's lease, ended by its pid
            assert op.attempts == 2  # the first "attempt" never left (after_intent)
        else:
            assert trail == [
                (None, "intent", "dispatched"),
                ("dispatched", "succeed", "confirmed"),
            ], (op.op_id, trail)
            assert op.attempts == 1

    # Every thread's graph finished, with both calls answered from a confirmed operation.
    states = asyncio.run(_final_states(dsn, base, threads))
    for thread, state in states.items():
        assert state.next == (), thread
        messages = state.values["messages"]
        assert messages[-1].content == "done", thread
        tool_messages = [m for m in messages if m.type == "tool"]
        assert sorted(m.tool_call_id for m in tool_messages) == [f"call-{i}" for i in range(CALLS)]
        assert all(m.status == "success" and m.artifact["state"] == "confirmed" for m in tool_messages)

    # One runner per thread: workers that resumed a checkpoint another saved past first
    # were stopped (ThreadConflictError), so no thread forked.
    assert asyncio.run(fencing.forks(dsn, threads)) == []

    # How much racing there was (printed with -s; the assertions above do not depend on it).
    runs = sum(len(out["ran"]) for out in outs)
    refused = sum(len(out["refused"]) for out in outs)
    waits = sum(out["waits"] for out in outs)
    senders = sum(1 for out in outs if out["sent"])
    print(
        f"\nseed {seed_seconds:.1f}s; race {race_seconds:.1f}s for {WORKERS} workers x {THREADS} "
        f"threads; {runs} resumes found work (of {WORKERS * THREADS} tries, {THREADS} threads), "
        f"{waits} waits on another worker's live lease, {refused} runs refused by the one-runner "
        f"rule, {senders} workers sent something; "
        f"per worker sends {[out['sent'] for out in outs]}"
    )
    assert runs >= THREADS


# -- a worker on another host dies mid-call; its lease expires while another resumes ---------------


LEASE = 2.0


def _kill_on_host_a(spec: PgSpec) -> None:
    """Worker A ("host-a") dispatches, the effect lands, and it is SIGKILLed before the outcome."""
    proc = run_once(["run", spec_json(replace(spec, crash="before_outcome"))], host="host-a")
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-3000:])


@pytest.mark.crash
@pytest.mark.parametrize(("contract", "mode"), [("dedup", "dedup"), ("lookup", "lookup")])
def test_lease_of_a_dead_worker_on_another_host_expires_then_reconciled(
    pg_schema: str, tmp_path: Path, contract: str, mode: str
) -> None:
    dsn = schema_dsn(pg_schema)
    asyncio.run(_setup(dsn))
    provider_path = tmp_path / "provider.sqlite"
    spec = PgSpec(
        dsn=dsn,
        provider=str(provider_path),
        provider_mode=mode,
        contract=contract,
        calls=1,
        threads=["t-lease"],
        lease_seconds=LEASE,
    )
    # Worker B ("host-b") starts first and waits, connected, for the go: it is released
    # the moment A is dead, well inside A's lease.
    log = tmp_path / "worker-b.log"
    with log.open("w") as err:
        b = start("run", replace(spec, resume=True, wait_for_go=True), err, host="host-b")
        try:
            wait_ready(b, log)
            _kill_on_host_a(spec)
            provider = Provider(provider_path, mode)  # type: ignore[arg-type]
            assert provider.count_requests("apply") == 1
            assert sum(provider.count_effects().values()) == 1  # it landed; A never recorded it

            [op], _, _ = ledger_view(dsn)
            assert op.state is State.DISPATCHED and op.owner is not None
            assert op.owner.host == "host-a"
            expires = op.lease_expires_at
            assert expires is not None
            released = time.time()
            assert released < expires - 0.5, "A took too long: B would not start inside the lease"
            go(b)
            stdout, _ = b.communicate(timeout=60)
        finally:
            if b.poll() is None:
                b.kill()
                b.wait()
    assert b.returncode == 0, log.read_text()[-3000:]
    out = last_json(stdout)

    # B could not see that A's process died (another host): it waited out the lease.
    assert out["started"] < expires
    assert out["waits"] >= 1
    assert out["finished"] - out["started"] >= expires - out["started"]  # >= the lease left
    assert out["finished"] - expires < 10  # and it noticed the expiry promptly (polls <= 1 s)

    [op], unresolved, audits = ledger_view(dsn)
    assert unresolved == []
    assert op.state is State.CONFIRMED
    trail = audits[op.op_id]
    lose = trail[1]
    assert (lose.from_state, lose.event, lose.to_state) == (State.DISPATCHED, "lose", State.UNKNOWN)
    assert lose.evidence is not None and lose.evidence["kind"] == "lease"
    assert lose.evidence["owner"]["host"] == "host-a"
    assert lose.at >= expires  # marked unknown only once the lease had run out

    [message] = [m for m in out["messages"] if m["type"] == "tool"]
    assert message["status"] == "success"
    assert message["artifact"]["state"] == "confirmed"
    assert sum(provider.count_effects().values()) == 1  # never sent twice
    if contract == "dedup":
        # Re-sent under the same key after the lease ran out; the provider replayed it.
        assert events(trail) == [
            (None, "intent", "dispatched"),
            ("dispatched", "lose", "unknown"),
            ("unknown", "resend", "dispatched"),
            ("dispatched", "succeed", "confirmed"),
        ]
        assert provider.count_requests("apply") == 2 and out["sent"] == 1
        assert apply_times(provider_path)[1] >= expires  # the re-send left only after expiry
        assert message["artifact"]["evidence"] == "result"
        assert op.attempts == 2
    else:
        # Confirmed by the strongly consistent lookup: not re-sent at all.
        assert events(trail) == [
            (None, "intent", "dispatched"),
            ("dispatched", "lose", "unknown"),
            ("unknown", "confirm", "confirmed"),
        ]
        assert provider.count_requests("apply") == 1 and out["sent"] == 0
        assert message["artifact"]["evidence"] == "lookup"
        assert op.attempts == 1


@pytest.mark.crash
def test_resumer_on_the_same_host_does_not_wait_out_a_dead_workers_lease(
    pg_schema: str, tmp_path: Path
) -> None:
    # The contrast: same host name, so B sees that A's pid is gone and recovers at once,
    # long before a 600 s lease would have run out (the lease is long so that a loaded
    # machine's slow process start cannot be mistaken for waiting it out).
    dsn = schema_dsn(pg_schema)
    asyncio.run(_setup(dsn))
    provider_path = tmp_path / "provider.sqlite"
    spec = PgSpec(
        dsn=dsn,
        provider=str(provider_path),
        provider_mode="dedup",
        contract="dedup",
        calls=1,
        threads=["t-local"],
        lease_seconds=600.0,
    )
    _kill_on_host_a(spec)
    [op], _, _ = ledger_view(dsn)
    assert op.lease_expires_at is not None
    resumed = run_once(["run", spec_json(replace(spec, resume=True))], host="host-a")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = last_json(resumed.stdout)
    assert out["finished"] < op.lease_expires_at - 300
    assert out["waits"] == 0
    [op], unresolved, audits = ledger_view(dsn)
    assert unresolved == [] and op.state is State.CONFIRMED
    lose = audits[op.op_id][1]
    assert lose.event == "lose" and lose.evidence is not None and lose.evidence["kind"] == "lease"
    assert sum(Provider(provider_path, "dedup").count_effects().values()) == 1
