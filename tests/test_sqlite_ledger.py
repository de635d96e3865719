"""The SQLite ledger on real files, with real processes.

* two processes racing to claim and to complete the same operation;
* a worker SIGKILLed between the intent commit and the outcome commit;
* files we must refuse to touch (not a database, a foreign schema, a newer
  schema) and a read-only database;
* the audit trail of one operation, read back in order;
* "unresolved" queries answered from the partial indexes.
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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from langgraph_effects.core.operation import Change, Event, Operation, Owner, State
from langgraph_effects.errors import (
    IllegalTransitionError,
    LedgerCorruptError,
    LedgerUnavailableError,
    SchemaTooNewError,
    StaleVersionError,
)
from langgraph_effects.ledger import OperationQuery, SqliteLedger
from langgraph_effects.ledger.sqlite import SCHEMA_VERSION, run_in_connection_thread

WORKER = Path(__file__).parent / "helpers" / "ledger_worker.py"
OWNER = Owner(host="test-host", pid=1, started=0.0, token="tok-test")


def make_op(op_id: str, *, thread_id: str = "thread-1", tenant: str = "") -> Operation:
    return Operation(
        op_id=op_id,
        thread_id=thread_id,
        tenant=tenant,
        tool="send_email",
        tool_call_id=f"call-{op_id}",
        args={"to": "a@example.com", "subject": op_id},
        args_hash=f"h1:{op_id}",
        provider_key=f"key-{op_id}",
        contract="blind",
    )


def dispatch(token: str = "tok-test") -> Change:
    owner = Owner(host="test-host", pid=1, started=0.0, token=token)
    return Change(Event.DISPATCH, owner=owner, lease_expires_at=time.time() + 30)


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[SqliteLedger]:
    async with SqliteLedger.from_conn_string(tmp_path / "ledger.db") as opened:
        await opened.setup()
        yield opened


async def _setup_file(path: Path) -> None:
    async with SqliteLedger.from_conn_string(path) as fresh:
        await fresh.setup()


def _run_worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# -- two processes, one operation --------------------------------------------------

RACE_ROUNDS = 25


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_two_processes_race_for_one_operation(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    await _setup_file(db)
    workdir = tmp_path / "barriers"
    workdir.mkdir()
    names = ("alpha", "beta")
    procs = {
        name: _run_worker("race", str(db), str(workdir), name, peer, str(RACE_ROUNDS))
        for name, peer in (names, names[::-1])
    }
    reports: dict[int, dict[str, dict[str, Any]]] = {}
    for name, proc in procs.items():
        out, err = await asyncio.to_thread(proc.communicate, timeout=150)
        assert proc.returncode == 0, f"{name} failed:\n{err}"
        for line in out.splitlines():
            report = json.loads(line)
            reports.setdefault(report["round"], {})[name] = report
    assert sorted(reports) == list(range(RACE_ROUNDS))

    async with SqliteLedger.from_conn_string(db) as ledger:
        claim_winners, succeed_winners = [], []
        for r, pair in sorted(reports.items()):
            alpha, beta = pair["alpha"], pair["beta"]
            # Claim: both see the same owner, and it is exactly one of them.
            assert alpha["owner"] == beta["owner"], (r, alpha, beta)
            winners = [rep for rep in (alpha, beta) if rep["owner"] == rep["token"]]
            assert len(winners) == 1, (r, alpha, beta)
            claim_winners.append(winners[0]["name"])
            for rep in (alpha, beta):
                assert (rep["claim_state"], rep["claim_version"]) == ("dispatched", 1)
            loser = beta if winners[0] is alpha else alpha
            assert loser["takeover"] == "IllegalTransitionError"
            # Succeed at version 1: exactly one wins, the other is refused.
            outcomes = sorted([alpha["succeed"], beta["succeed"]])
            assert outcomes.count("ok") == 1, (r, outcomes)
            refused = next(o for o in outcomes if o != "ok")
            assert refused in {StaleVersionError.__name__, IllegalTransitionError.__name__}
            winner = "alpha" if alpha["succeed"] == "ok" else "beta"
            succeed_winners.append(winner)

            # The file agrees: one row owned by the claim winner, one outcome.
            op = await ledger.get(f"op-race-{r}")
            assert op is not None
            assert op.state is State.CONFIRMED and op.version == 2 and op.attempts == 1
            assert op.result == winner.encode()
            trail = await ledger.audit(f"op-race-{r}")
            assert [(e.event, e.actor, e.version) for e in trail] == [
                ("intent", claim_winners[-1], 1),
                ("succeed", winner, 2),
            ]
    print(f"claims won: {claim_winners}\nsucceeds won: {succeed_winners}")


# -- a worker killed between the intent commit and the outcome commit --------------


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.timeout(60)
async def test_sigkill_between_intent_and_outcome_keeps_the_intent(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    marker = tmp_path / "intent-committed"
    proc = _run_worker("crash", str(db), str(marker))
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the worker never recorded its intent"
            await asyncio.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    token = marker.read_text()

    async with SqliteLedger.from_conn_string(db) as ledger:
        await ledger.setup()
        op = await ledger.get("op-crash")
        assert op is not None
        assert op.state is State.DISPATCHED and op.version == 1 and op.attempts == 1
        assert op.owner is not None and op.owner.token == token and op.owner.pid == proc.pid
        assert op.result is None and op.evidence is None
        trail = await ledger.audit("op-crash")
        assert [(e.event, e.from_state, e.to_state, e.actor) for e in trail] == [
            ("intent", None, State.DISPATCHED, "doomed")
        ]
        assert [o.op_id for o in await ledger.unresolved()] == ["op-crash"]
        assert await ledger.list_operations(OperationQuery()) == [op]


# -- files we must not touch -------------------------------------------------------


async def test_not_a_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    garbage = os.urandom(8192)
    path.write_bytes(garbage)
    with pytest.raises(LedgerCorruptError) as raised:
        async with SqliteLedger.from_conn_string(path) as ledger:
            await ledger.setup()
    assert str(path) in str(raised.value)
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


async def test_foreign_effect_operations_table_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE effect_operations (id INTEGER PRIMARY KEY, note TEXT)")
        db.execute("INSERT INTO effect_operations (note) VALUES ('theirs')")
    db.close()

    def schema_and_rows() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        with sqlite3.connect(path) as db:
            schema = db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
            rows = db.execute("SELECT * FROM effect_operations").fetchall()
        db.close()
        return schema, rows

    before = schema_and_rows()
    with pytest.raises(LedgerCorruptError, match="did not create") as raised:
        async with SqliteLedger.from_conn_string(path) as ledger:
            await ledger.setup()
    assert str(path) in str(raised.value)
    assert schema_and_rows() == before
    assert before[1] == [(1, "theirs")]


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    await _setup_file(path)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO effect_migrations (v, applied_at) VALUES (?, 0)", (SCHEMA_VERSION + 2,))
    db.close()
    with pytest.raises(SchemaTooNewError) as raised:
        async with SqliteLedger.from_conn_string(path) as ledger:
            await ledger.setup()
    assert raised.value.supported == SCHEMA_VERSION
    assert raised.value.found > SCHEMA_VERSION
    assert str(path) in str(raised.value)
    with sqlite3.connect(path) as db:
        versions = [v for (v,) in db.execute("SELECT v FROM effect_migrations ORDER BY v")]
    db.close()
    assert versions == [*range(SCHEMA_VERSION), SCHEMA_VERSION + 2]


async def test_setup_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "twice.db"
    await _setup_file(path)
    await _setup_file(path)
    with sqlite3.connect(path) as db:
        versions = [v for (v,) in db.execute("SELECT v FROM effect_migrations ORDER BY v")]
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    db.close()
    assert versions == list(range(SCHEMA_VERSION))
    assert mode == "wal"


async def test_read_only_database_refuses_writes_and_keeps_its_state(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
        [first] = await ledger.record_intents([make_op("op-1")], change=dispatch())

    # Root ignores file modes, so open the file read-only the way SQLite enforces
    # whoever we are: a ``mode=ro`` URI.
    conn = await aiosqlite.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    read_only = SqliteLedger(conn, where=f"sqlite:{path}")
    try:
        await read_only.setup()  # nothing to migrate: reading is fine
        with pytest.raises(LedgerUnavailableError, match="read-only"):
            await read_only.transition("op-1", Change(Event.SUCCEED), expected_version=1)
        with pytest.raises(LedgerUnavailableError, match="read-only"):
            await read_only.record_intents([make_op("op-2")])
        # The connection is usable afterwards: the failed transaction was rolled back.
        assert conn._conn.in_transaction is False
        assert await read_only.get("op-1") == first
        assert await read_only.get("op-2") is None
    finally:
        await read_only.aclose()

    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
        assert await ledger.get("op-1") == first
        assert len(await ledger.audit("op-1")) == 1
        assert await ledger.get("op-2") is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file modes")
async def test_chmod_read_only_file_refuses_writes(tmp_path: Path) -> None:
    directory = tmp_path / "locked"
    directory.mkdir()
    path = directory / "ledger.db"
    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
        [first] = await ledger.record_intents([make_op("op-1")], change=dispatch())
    path.chmod(0o444)
    directory.chmod(0o555)
    try:
        with pytest.raises(LedgerUnavailableError):
            async with SqliteLedger.from_conn_string(path) as ledger:
                await ledger.setup()
                await ledger.transition("op-1", Change(Event.SUCCEED), expected_version=1)
    finally:
        directory.chmod(0o755)
        path.chmod(0o644)
    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
        assert await ledger.get("op-1") == first


# -- the audit trail ---------------------------------------------------------------


async def test_audit_trail_of_one_operation(ledger: SqliteLedger) -> None:
    op_id = "op-audit"
    [op] = await ledger.record_intents([make_op(op_id)], actor="worker-1")
    steps = [
        (
            Change(
                Event.DISPATCH,
                owner=OWNER,
                lease_expires_at=time.time() + 30,
                evidence={"kind": "approval", "by": "carol"},
            ),
            "worker-1",
        ),
        (Change(Event.LOSE, evidence={"kind": "timeout", "after_s": 30}), "worker-1"),
        (
            Change(Event.ESCALATE, evidence={"kind": "lookup", "outcome": "inconclusive"}),
            "reconciler",
        ),
        (
            Change(
                Event.LANDED,
                evidence={"kind": "verdict", "by": "alice"},
                decision_id="dec-1",
                decision={"verdict": "landed"},
            ),
            "operator:alice",
        ),
    ]
    for change, actor in steps:
        op = await ledger.transition(op_id, change, expected_version=op.version, actor=actor)
    assert op.state is State.CONFIRMED and op.version == 5

    trail = await ledger.audit(op_id)
    assert [(e.seq, e.version) for e in trail] == [(v, v) for v in range(1, 6)]
    assert [(e.event, e.actor, e.from_state, e.to_state) for e in trail] == [
        ("intent", "worker-1", None, State.PENDING),
        ("dispatch", "worker-1", State.PENDING, State.DISPATCHED),
        ("lose", "worker-1", State.DISPATCHED, State.UNKNOWN),
        ("escalate", "reconciler", State.UNKNOWN, State.REVIEW),
        ("landed", "operator:alice", State.REVIEW, State.CONFIRMED),
    ]
    assert [e.evidence for e in trail] == [None] + [change.evidence for change, _ in steps]
    assert all(e.op_id == op_id for e in trail)
    assert [e.at for e in trail] == sorted(e.at for e in trail)

    # The same verdict again (a resumed node re-reads the operator's answer): no new row.
    again = await ledger.transition(op_id, steps[-1][0], expected_version=4, actor="operator:alice")
    assert again == op
    assert len(await ledger.audit(op_id)) == 5


async def test_refused_transition_writes_nothing(ledger: SqliteLedger) -> None:
    [op] = await ledger.record_intents([make_op("op-1")], change=dispatch())
    with pytest.raises(StaleVersionError):
        await ledger.transition("op-1", Change(Event.SUCCEED), expected_version=7)
    with pytest.raises(IllegalTransitionError):
        await ledger.transition("op-1", Change(Event.CONFIRM), expected_version=1)
    assert await ledger.get("op-1") == op
    assert len(await ledger.audit("op-1")) == 1


# -- unresolved queries use the partial indexes ------------------------------------


async def _plans_of(ledger: SqliteLedger, query: OperationQuery) -> list[str]:
    """The query plan of the SQL that ``list_operations`` really runs."""
    statements: list[str] = []
    await run_in_connection_thread(ledger.conn, lambda db: db.set_trace_callback(statements.append))
    try:
        await ledger.list_operations(query)
    finally:
        await run_in_connection_thread(ledger.conn, lambda db: db.set_trace_callback(None))
    [sql] = [s for s in statements if s.lstrip().upper().startswith("SELECT")]

    def explain(db: sqlite3.Connection) -> list[str]:
        return [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}")]

    return await run_in_connection_thread(ledger.conn, explain)


async def test_unresolved_queries_use_the_partial_indexes(ledger: SqliteLedger) -> None:
    # A realistic history: mostly settled operations, a few unresolved ones.
    ops = [make_op(f"op-{i:04d}", thread_id=f"thread-{i % 20}") for i in range(600)]
    await ledger.record_intents(ops, change=dispatch())
    for op in ops[:-15]:
        await ledger.transition(op.op_id, Change(Event.SUCCEED), expected_version=1)
    await run_in_connection_thread(ledger.conn, lambda db: db.execute("ANALYZE"))

    plan = await _plans_of(ledger, OperationQuery.unresolved())
    assert any("USING INDEX effect_operations_unresolved" in step for step in plan), plan
    assert not any(step == "SCAN effect_operations" for step in plan), plan

    plan = await _plans_of(ledger, OperationQuery.unresolved(thread_id="thread-3"))
    assert any("USING INDEX effect_operations_unresolved_thread" in step for step in plan), plan
    assert not any(step == "SCAN effect_operations" for step in plan), plan

    # And they return what they should.
    unresolved = await ledger.unresolved()
    assert sorted(o.op_id for o in unresolved) == sorted(o.op_id for o in ops[-15:])
    in_thread = await ledger.unresolved(thread_id="thread-5")
    assert [o.op_id for o in in_thread] == [o.op_id for o in ops[-15:] if o.thread_id == "thread-5"]
