"""Crash recovery (``recover()`` and ``langgraph-effects recover``) under real crashes.

Workers are real processes (``python -m tests.helpers.recovery_agent``) SIGKILLed at a
fault point; ledgers and checkpoints are real SQLite files; effects are counted at a
provider that keeps its own records in its own SQLite file. A worker started with
``LANGGRAPH_EFFECTS_HOST=other-host`` and blocked inside its tool plays a worker on
another machine that is sending right now: its lease is live and heartbeated, and
can only expire by time.
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
from typing import Any

import pytest

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects._runtime.operator import resolve
from langgraph_effects.core.operation import Operation, State
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.base import OperationQuery
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.recovery import RecoveryReport, recover
from tests.helpers.agent import describe
from tests.helpers.recovery_agent import SPEC_ENV, RecoverySpec, build, config_for, spec_json

pytestmark = [pytest.mark.crash, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
FACTORY = "tests.helpers.recovery_agent:make_graph"


# -- helpers ------------------------------------------------------------------------------


def spec(tmp_path: Path, **kw: Any) -> RecoverySpec:
    return RecoverySpec(db=str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"), **kw)


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"LANGGRAPH_EFFECTS_DB", "LANGGRAPH_EFFECTS_HOST", "COLUMNS", SPEC_ENV}
    }
    env.update(extra)
    return env


def worker_cmd(s: RecoverySpec) -> list[str]:
    return [sys.executable, "-m", "tests.helpers.recovery_agent", spec_json(s)]


def crash(s: RecoverySpec, point: str = "before_outcome") -> None:
    """Run a worker until it SIGKILLs itself at ``point``."""
    proc = subprocess.run(
        worker_cmd(replace(s, crash=point)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-3000:])


def cli(*args: str, s: RecoverySpec | None = None) -> subprocess.CompletedProcess[str]:
    """The console in a fresh interpreter, as an operator runs it."""
    env = clean_env(**({SPEC_ENV: spec_json(s)} if s is not None else {}))
    return subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def effects(s: RecoverySpec) -> dict[str, int]:
    return Provider(s.provider, s.provider_mode).count_effects()  # type: ignore[arg-type]


def requests(s: RecoverySpec, key: str | None = None) -> int:
    """``apply`` requests the provider received (under ``key``, if given)."""
    if key is None:
        return Provider(s.provider, s.provider_mode).count_requests("apply")  # type: ignore[arg-type]
    with sqlite3.connect(s.provider) as db:
        [(count,)] = db.execute("SELECT count(*) FROM requests WHERE kind = 'apply' AND key = ?", (key,))
    return int(count)


def operations(s: RecoverySpec) -> dict[str, tuple[Operation, int]]:
    """Every stored operation with the length of its audit trail."""

    async def go() -> dict[str, tuple[Operation, int]]:
        async with SqliteLedger.from_conn_string(s.db) as ledger:
            await ledger.setup()
            found = await ledger.list_operations(OperationQuery(limit=10_000))
            return {op.op_id: (op, len(await ledger.audit(op.op_id))) for op in found}

    return asyncio.run(go())


async def recover_in_process(s: RecoverySpec, **kw: Any) -> RecoveryReport:
    async with AsyncEffectSqliteSaver.from_conn_string(s.db) as saver:
        await saver.setup()
        return await recover(build(s, saver), **kw)


def thread_view(s: RecoverySpec, thread: str | None = None) -> dict[str, Any]:
    """The thread's messages and pending interrupts, as the model and the app see them."""

    async def go() -> dict[str, Any]:
        async with AsyncEffectSqliteSaver.from_conn_string(s.db) as saver:
            await saver.setup()
            graph = build(s, saver)
            state = await graph.aget_state(config_for(replace(s, thread=thread or s.thread)))
            return describe(None, state)

    return asyncio.run(go())


def tool_messages(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in view["messages"] if m["type"] == "tool"]


def wait_for(path: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


# -- the operator's path: console resolve, then recover ----------------------------------


def test_blind_crash_resolved_with_the_console_then_recovered(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="blind", provider_mode="blind")
    crash(s)
    assert effects(s) == {"t1:0": 1}  # it landed; the worker died before recording it
    db = ("--db", s.db)

    listed = cli("list", *db, "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)["operations"]
    op_id = row["operation_id"]
    assert row["state"] == "dispatched" and row["lease"] == "owner_dead"

    shown = cli("show", op_id, *db, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    version = view["operation"]["version"]
    assert view["allowed_verdicts"] == ["landed", "not_landed", "abandon"]

    stale = cli("resolve", op_id, "--landed", "--expected-version", str(version + 1), *db)
    assert stale.returncode == 3, stale.stderr
    assert operations(s)[op_id][0].version == version  # refused: nothing changed

    resolved = cli(
        "resolve",
        op_id,
        "--landed",
        "--receipt",
        '{"id": "r1"}',
        "--expected-version",
        str(version),
        *db,
        "--json",
    )
    assert resolved.returncode == 0, resolved.stderr
    decided = json.loads(resolved.stdout)
    assert decided["lease_lost"] is True  # dispatched with a dead owner: LOSE first, then the verdict
    assert decided["operation"]["state"] == "confirmed"

    # The verdict is in the ledger; the thread still sits mid-run. recover finds it.
    done = cli("recover", *db, "--graph", FACTORY, "--min-idle", "0", "--json", s=s)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [thread] = report["threads"]
    assert thread["thread_id"] == "t1" and thread["action"] == "resumed"
    assert thread["outcome"] == "completed"
    [op] = thread["operations"]
    assert op["operation_id"] == op_id and op["how"] == "replayed"
    assert op["before"]["state"] == op["after"]["state"] == "confirmed" and op["transitions"] == []

    [message] = tool_messages(thread_view(s))
    assert message["status"] == "success"
    assert "landed" in message["content"] and "operator" in message["content"]
    assert message["artifact"]["state"] == "confirmed"
    assert message["artifact"]["evidence"] == "verdict"
    assert message["artifact"]["receipt"] == {"id": "r1"}
    assert effects(s) == {"t1:0": 1} and requests(s) == 1

    again = cli("recover", *db, "--graph", FACTORY, "--min-idle", "0", s=s)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stdout


# -- recover after a crash, twice -----------------------------------------------------------


@pytest.mark.parametrize(
    ("contract", "how"),
    [("dedup", "settled_by_dedup"), ("lookup", "confirmed_by_lookup")],
)
def test_recover_settles_a_crash_and_a_second_run_does_nothing(
    tmp_path: Path, contract: str, how: str
) -> None:
    s = spec(tmp_path, contract=contract, provider_mode=contract, calls=2)
    crash(s)
    before = operations(s)
    assert {op.state for op, _ in before.values()} == {State.DISPATCHED}

    dry = asyncio.run(recover_in_process(s, dry_run=True))
    assert [t.action for t in dry.threads] == ["would_resume"]
    assert operations(s) == before  # a dry run writes nothing

    report = asyncio.run(recover_in_process(s))  # the owner is provably dead: no min_idle wait
    [thread] = report.threads
    assert thread.action == "resumed" and thread.outcome == "completed" and thread.error is None
    assert {op.op_id for op in thread.operations} == set(before)
    for op in thread.operations:
        assert op.before is not None and op.before.state is State.DISPATCHED
        assert op.after.state is State.CONFIRMED
        assert op.how == how, op.detail
        assert op.transitions[0].event == "lose" and op.transitions[0].evidence["kind"] == "lease"  # type: ignore[index]
        assert op.transitions[-1].to_state is State.CONFIRMED
        if contract == "lookup":
            assert "receipt" in op.detail and [s.event for s in op.transitions] == ["lose", "confirm"]
        else:
            assert [s.event for s in op.transitions] == ["lose", "resend", "succeed"]
    data = report.to_json()
    assert data["counts"]["resumed"] == 1 and data["nothing_to_do"] is False
    assert json.loads(json.dumps(data)) == data  # JSON-ready as it is

    assert effects(s) == {"t1:0": 1, "t1:1": 1}
    assert len(tool_messages(thread_view(s))) == 2
    settled = operations(s)

    second = asyncio.run(recover_in_process(s))
    assert second.nothing_to_do and second.threads == ()
    assert "nothing to do" in second.summary()
    assert operations(s) == settled
    assert effects(s) == {"t1:0": 1, "t1:1": 1}


def test_blind_crash_goes_to_review_then_an_out_of_band_verdict_is_honoured(tmp_path: Path) -> None:
    # Declared blind, but the provider happens to dedup on our key (so not_landed re-sends once).
    s = spec(tmp_path, contract="blind", provider_mode="dedup")
    crash(s)

    first = asyncio.run(recover_in_process(s))
    [thread] = first.threads
    assert thread.action == "resumed" and thread.outcome == "interrupted"
    [op] = thread.operations
    assert op.how == "sent_to_review" and op.after.state is State.REVIEW
    assert first.awaiting_review == (op.op_id,)
    [interrupt_id] = thread.interrupts

    # Run again: only a human can move it now; the thread is not resumed, the interrupt stays.
    second = asyncio.run(recover_in_process(s))
    [waiting] = second.threads
    assert waiting.action == "awaiting_review" and second.nothing_to_do
    assert second.awaiting_review == (op.op_id,)
    assert thread_view(s)["interrupts"][0]["id"] == interrupt_id

    async def not_landed() -> None:
        async with SqliteLedger.from_conn_string(s.db) as ledger:
            await ledger.setup()
            stored = await ledger.get(op.op_id)
            assert stored is not None
            await resolve(
                ledger, op.op_id, {"type": "not_landed"}, expected_version=stored.version, actor="ops"
            )

    asyncio.run(not_landed())

    third = asyncio.run(recover_in_process(s))  # paused at the review: resumed without an answer
    [resumed] = third.threads
    assert resumed.action == "resumed" and resumed.outcome == "completed" and resumed.interrupts == ()
    [settled] = resumed.operations
    assert settled.how == "resent_under_key" and settled.after.state is State.CONFIRMED
    assert [t.event for t in settled.transitions] == ["dispatch", "succeed"]
    assert settled.after.attempts == 2
    assert effects(s) == {"t1:0": 1} and requests(s) == 2
    [message] = tool_messages(thread_view(s))
    assert message["artifact"]["state"] == "confirmed"
    assert asyncio.run(recover_in_process(s)).threads == ()


def run_worker(s: RecoverySpec) -> dict[str, Any]:
    proc = subprocess.run(
        worker_cmd(s), cwd=ROOT, capture_output=True, text=True, timeout=120, env=clean_env()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_paused_review_is_resumed_only_when_a_verdict_can_move_it(tmp_path: Path) -> None:
    # Both calls time out after their effect landed: blind, so both go to one review.
    s = spec(tmp_path, contract="blind", provider_mode="blind", calls=2, timeout_after_effect=[0, 1])
    out = run_worker(s)
    [pending] = out["interrupts"]
    first_op, second_op = (entry["operation_id"] for entry in pending["value"]["operations"])

    waiting = asyncio.run(recover_in_process(s))
    assert [t.action for t in waiting.threads] == ["awaiting_review"] and waiting.nothing_to_do
    assert set(waiting.awaiting_review) == {first_op, second_op}

    async def decide(op_id: str, decision: dict[str, Any]) -> None:
        async with SqliteLedger.from_conn_string(s.db) as ledger:
            await ledger.setup()
            stored = await ledger.get(op_id)
            assert stored is not None
            await resolve(ledger, op_id, decision, expected_version=stored.version, actor="ops")

    asyncio.run(decide(first_op, {"type": "landed", "receipt": {"ticket": "T-1"}}))
    report = asyncio.run(recover_in_process(s))
    [thread] = report.threads
    assert thread.action == "resumed" and thread.outcome == "interrupted"
    hows = {op.op_id: op.how for op in thread.operations}
    assert hows == {first_op: "replayed", second_op: "awaiting_review"}
    [again] = thread_view(s)["interrupts"]
    assert [e["operation_id"] for e in again["value"]["operations"]] == [second_op]

    # The interrupt now lists only what still waits: a second run does nothing.
    second = asyncio.run(recover_in_process(s))
    assert [t.action for t in second.threads] == ["awaiting_review"] and second.nothing_to_do
    assert second.awaiting_review == (second_op,)

    asyncio.run(decide(second_op, {"type": "abandon", "reason": "duplicate request"}))
    last = asyncio.run(recover_in_process(s))
    [done] = last.threads
    assert done.action == "resumed" and done.outcome == "completed"
    assert {op.op_id: op.how for op in done.operations} == {second_op: "replayed"}
    messages = tool_messages(thread_view(s))
    assert [m["artifact"]["state"] for m in messages] == ["confirmed", "abandoned"]
    assert messages[0]["artifact"]["receipt"] == {"ticket": "T-1"}
    assert effects(s) == {"t1:0": 1, "t1:1": 1} and requests(s) == 2
    assert asyncio.run(recover_in_process(s)).threads == ()


def test_a_pending_intent_waits_for_min_idle(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="blind", provider_mode="blind")
    crash(s, "after_intent")  # a blind intent is committed pending: nothing was sent
    before = operations(s)

    report = asyncio.run(recover_in_process(s))  # default min_idle: it may be running elsewhere
    [thread] = report.threads
    assert thread.action == "recently_active" and "min_idle" in thread.reason
    assert operations(s) == before and effects(s) == {}

    report = asyncio.run(recover_in_process(s, min_idle=0))
    [thread] = report.threads
    assert thread.action == "resumed"
    [op] = thread.operations
    assert op.how == "sent" and op.after.state is State.CONFIRMED
    assert effects(s) == {"t1:0": 1}


def test_recover_resumes_under_the_recorded_tenant(tmp_path: Path) -> None:
    # The tenant is part of the operation id: a resume without it would mint a new operation
    # and send again. recover() resumes under the tenant recorded with the operations.
    s = spec(tmp_path, contract="lookup", provider_mode="lookup", tenant="acme")
    crash(s)
    [op_id] = operations(s)

    assert asyncio.run(recover_in_process(replace(s, tenant=None), tenant="globex")).threads == ()
    report = asyncio.run(recover_in_process(replace(s, tenant=None), tenant="acme"))
    [thread] = report.threads
    assert thread.tenant == "acme" and thread.action == "resumed"
    [op] = thread.operations
    assert op.op_id == op_id and op.how == "confirmed_by_lookup"
    assert list(operations(s)) == [op_id]  # no new operation
    assert effects(s) == {"t1:0": 1} and requests(s) == 1


# -- a live lease elsewhere is never touched -------------------------------------------------


def test_recover_leaves_a_live_lease_alone(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    live = spec(
        tmp_path, contract="dedup", provider_mode="dedup", thread="live", gate=str(gate), lease_seconds=4.0
    )
    crashed = replace(live, thread="crashed", gate=None, lease_seconds=30.0)

    worker = subprocess.Popen(
        worker_cmd(live),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(LANGGRAPH_EFFECTS_HOST="other-host"),
    )
    try:
        wait_for(Path(str(gate) + ".inside"))  # its effect landed; it is still inside the tool
        crash(crashed)  # meanwhile another thread of the same database crashed here
        time.sleep(5.0)  # longer than its lease: only its heartbeats keep it live
        before = operations(live)
        [(live_op, live_audit)] = [v for v in before.values() if v[0].thread_id == "live"]
        assert live_op.state is State.DISPATCHED and live_op.owner is not None
        assert live_op.owner.host == "other-host"
        assert live_op.lease_expires_at is not None and live_op.lease_expires_at > time.time()
        assert requests(live, live_op.provider_key) == 1

        report = asyncio.run(recover_in_process(crashed))
        by_thread = {t.thread_id: t for t in report.threads}
        assert set(by_thread) == {"live", "crashed"}
        elsewhere = by_thread["live"]
        assert elsewhere.action == "in_flight_elsewhere" and "other-host" in elsewhere.reason
        [untouched] = elsewhere.operations
        assert untouched.how == "in_flight_elsewhere" and untouched.transitions == ()
        assert by_thread["crashed"].action == "resumed"
        assert [op.how for op in by_thread["crashed"].operations] == ["settled_by_dedup"]
        assert report.in_flight == (elsewhere,)

        after = operations(live)[live_op.op_id]
        assert after[0].state is State.DISPATCHED
        assert after[0].version == live_op.version and after[1] == live_audit
        assert effects(live) == {"live:0": 1, "crashed:0": 1}
        assert requests(live, live_op.provider_key) == 1  # nothing was sent for it
        assert worker.poll() is None  # still sending

        gate.touch()
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    finished = operations(live)[live_op.op_id][0]
    assert finished.state is State.CONFIRMED and finished.attempts == 1
    assert effects(live) == {"live:0": 1, "crashed:0": 1}
    [message] = tool_messages(thread_view(live))
    assert message["content"].startswith("sent eff_")
    assert asyncio.run(recover_in_process(crashed)).threads == ()


# -- the console ---------------------------------------------------------------------------


def test_cli_recover_json_then_nothing_to_do(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="dedup", provider_mode="dedup")
    crash(s)
    db = ("--db", s.db)

    dry = cli("recover", *db, "--graph", FACTORY, "--dry-run", "--json", s=s)
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned["dry_run"] is True and planned["counts"] == {
        "would_resume": 1,
        "threads": 1,
        "operations_awaiting_review": 0,
    }
    assert planned["threads"][0]["operations"][0]["how"] == "would_resume"

    done = cli("recover", *db, "--graph", FACTORY, "--json", s=s)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["nothing_to_do"] is False and report["ledger"] == f"sqlite:{s.db}"
    [thread] = report["threads"]
    assert (thread["thread_id"], thread["action"], thread["outcome"]) == ("t1", "resumed", "completed")
    [op] = thread["operations"]
    assert op["how"] == "settled_by_dedup"
    assert (op["before"]["state"], op["after"]["state"]) == ("dispatched", "confirmed")
    assert [t["event"] for t in op["transitions"]] == ["lose", "resend", "succeed"]
    assert op["transitions"][0]["evidence"]["kind"] == "lease"
    assert effects(s) == {"t1:0": 1}

    again = cli("recover", *db, "--graph", FACTORY, "--json", s=s)
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["nothing_to_do"] is True and second["threads"] == []

    human = cli("recover", *db, "--graph", FACTORY, s=s)
    assert human.returncode == 0, human.stderr
    assert "nothing to do" in human.stdout


def test_cli_recover_exits_6_while_a_review_waits(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="blind", provider_mode="blind")
    crash(s)
    done = cli("recover", "--db", s.db, "--graph", FACTORY, s=s)
    assert done.returncode == 6, done.stderr
    assert "sent to review" in done.stdout
    assert f"langgraph-effects --db {s.db} show op_" in done.stdout  # runnable as printed
    again = cli("recover", "--db", s.db, "--graph", FACTORY, "--json", s=s)
    assert again.returncode == 6, again.stderr
    report = json.loads(again.stdout)
    assert report["threads"][0]["action"] == "awaiting_review" and len(report["awaiting_review"]) == 1
    assert effects(s) == {"t1:0": 1}


def test_cli_recover_refuses_bad_input(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="dedup", provider_mode="dedup")
    missing = cli("recover", "--db", str(tmp_path / "nope.sqlite"), "--graph", FACTORY, "--json")
    assert missing.returncode == 4
    assert json.loads(missing.stdout)["error"]["kind"] == "ledger_not_found"
    assert not (tmp_path / "nope.sqlite").exists()

    crash(s)
    no_colon = cli("recover", "--db", s.db, "--graph", "tests.helpers.recovery_agent")
    assert no_colon.returncode == 2 and "MODULE:ATTR" in no_colon.stderr
    no_attr = cli("recover", "--db", s.db, "--graph", "tests.helpers.recovery_agent:nope")
    assert no_attr.returncode == 2 and "no attribute" in no_attr.stderr
    bad_set = cli("recover", "--db", s.db, "--graph", FACTORY, "-c", "thread_id=x", s=s)
    assert bad_set.returncode == 2 and "--thread" in bad_set.stderr
    assert {op.state for op, _ in operations(s).values()} == {State.DISPATCHED}  # nothing touched


@pytest.mark.postgres
def test_cli_recover_on_postgres(tmp_path: Path) -> None:
    import psycopg

    from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver
    from tests.ledger.conftest import require_postgres

    base = require_postgres()
    if not base.startswith(("postgres://", "postgresql://")):
        pytest.skip("the console recognises a Postgres DSN by its URL scheme")
    schema = f"lge_recover_{os.getpid()}_{int(time.time() * 1000) % 10**8}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    # Checkpoints and ledger both land in the fresh schema, through search_path.
    dsn = base + ("&" if "?" in base else "?") + f"options=-csearch_path%3D{schema}"
    try:

        async def setup() -> None:
            async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
                await saver.setup()

        asyncio.run(setup())
        with psycopg.connect(base) as conn:
            tables = {
                row[0]
                for row in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
                )
            }
        assert {"checkpoints", "effect_operations"} <= tables
        s = replace(spec(tmp_path, contract="dedup", provider_mode="dedup"), db=dsn)
        crash(s)
        done = cli("recover", "--db", dsn, "--graph", FACTORY, "--json", s=s)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["ledger"].startswith("postgres:")
        [thread] = report["threads"]
        assert thread["action"] == "resumed" and thread["outcome"] == "completed"
        assert [op["how"] for op in thread["operations"]] == ["settled_by_dedup"]
        assert effects(s) == {"t1:0": 1}
        again = cli("recover", "--db", dsn, "--graph", FACTORY, "--json", s=s)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["threads"] == []
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_failing_resume_is_reported_and_the_next_run_settles_it(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="dedup", provider_mode="dedup")
    crash(s)

    class Unavailable:
        """The graph, but every resume fails (say the model's API is down)."""

        def __init__(self, graph: Any) -> None:
            self.graph = graph
            self.checkpointer = graph.checkpointer

        async def aget_state(self, config: Any) -> Any:
            return await self.graph.aget_state(config)

        async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the model's API is down")

    async def failing() -> RecoveryReport:
        async with AsyncEffectSqliteSaver.from_conn_string(s.db) as saver:
            await saver.setup()
            return await recover(Unavailable(build(s, saver)))

    report = asyncio.run(failing())
    [thread] = report.threads
    assert thread.action == "failed" and thread.outcome == "error"
    assert thread.error == "RuntimeError: the model's API is down"
    assert report.failed == (thread,)
    [op] = thread.operations
    assert op.how == "unsettled" and op.after.state is State.DISPATCHED
    assert effects(s) == {"t1:0": 1}

    settled = asyncio.run(recover_in_process(s))
    assert [t.action for t in settled.threads] == ["resumed"]
    assert [op.how for op in settled.threads[0].operations] == ["settled_by_dedup"]
    assert effects(s) == {"t1:0": 1}


def test_recover_refuses_what_it_cannot_make_safe(tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_effects.errors import ConfigurationError, NoLedgerError

    s = spec(tmp_path)
    with pytest.raises(ConfigurationError, match="checkpointer"):
        asyncio.run(recover(build(s, None)))
    with pytest.raises(NoLedgerError):
        asyncio.run(recover(build(s, InMemorySaver())))
    with pytest.raises(ValueError, match="exit"):
        asyncio.run(recover(build(s, InMemorySaver()), durability="exit"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seconds"):
        asyncio.run(recover(build(s, InMemorySaver()), min_idle=-1))
