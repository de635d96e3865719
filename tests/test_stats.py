"""``stats``: the ledger's health from the operator API and from the console.

A real SQLite ledger and a Postgres one (its own schema) hold operations in several
states, made with the ledger API: two in ``review`` and a call waiting for its
approval, each unchanged for a known time (the ledger's clock is set back while they
are recorded), an ``unknown`` one older than all of them, a ``dispatched`` one whose
send was charged to a budget (now used up), a definite failure that opened a circuit
breaker, and a ``confirmed`` one. The console runs as a subprocess; its ``--json``
validates against the published schema and its exit code is 9 exactly when a
threshold is crossed.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.core.controls import Budget, Call, CircuitBreaker, Controls
from langgraph_effects.core.operation import Change, Event, State
from langgraph_effects.ledger import base
from langgraph_effects.ledger.base import DEFAULT_ACTOR, Ledger
from langgraph_effects.ledger.controls import controlled_plan
from langgraph_effects.ledger.postgres import PostgresLedger
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.operator import json_schema, stats
from tests.helpers import run_console

from .ledger.conftest import created_schema, pg_dsn
from .test_operator import make_op, new_ledger_file, owner_elsewhere, seed

jsonschema = pytest.importorskip("jsonschema")

HOUR = 3600.0
EMAILS = Budget("emails", max_sends=1, per="tenant")
MAILER = CircuitBreaker("mailer", failures=1, within=600, cooldown=HOUR)


@contextmanager
def unchanged_for(seconds: float) -> Iterator[None]:
    """Operations recorded meanwhile look unchanged for ``seconds`` (plus the test's own
    time): the ledger's clock is set back."""
    real = base.now
    base.now = lambda: time.time() - seconds
    try:
        yield
    finally:
        base.now = real


@dataclass(frozen=True)
class Seeded:
    old_review: str  # acme, 2h
    new_review: str  # globex, 10m
    approval: str  # acme, pending an approval, 30m
    lost: str  # acme, unknown, 3h
    charged: str  # acme, dispatched under the emails budget
    failed: str  # acme, failed: opened the mailer circuit
    done: str  # acme, confirmed


def _send(ledger: Ledger, op_id: str, change: Change, version: int, controls: Controls) -> Any:
    call = Call(op_id, "thread-s", "acme", {})
    return ledger.transact(
        lambda: controlled_plan(op_id, change, version, DEFAULT_ACTOR, ledger.where, None, controls, call)
    )


async def populate(ledger: Ledger) -> Seeded:
    with unchanged_for(3 * HOUR):
        lost = await seed(ledger, make_op(tenant="acme", thread_id="thread-l", tool="charge_card"), "unknown")
    with unchanged_for(2 * HOUR):
        old_review = await seed(ledger, make_op(tenant="acme", thread_id="thread-r"), "review")
    with unchanged_for(HOUR / 2):
        gated = make_op(
            tenant="acme", thread_id="thread-g", tool="wire_money", extra={"approval": "required"}
        )
        approval = await seed(ledger, gated, "pending")
    with unchanged_for(600):
        new_review = await seed(ledger, make_op(tenant="globex", thread_id="thread-x"), "review")
    done = await seed(ledger, make_op(tenant="acme", thread_id="thread-d"), "confirmed")
    charged = make_op(tenant="acme", thread_id="thread-s")
    failed = make_op(tenant="acme", thread_id="thread-s")
    await ledger.record_intents([charged, failed])
    send = Change(Event.DISPATCH, owner=owner_elsewhere(), lease_expires_at=time.time() + 300)
    await _send(ledger, charged.op_id, send, 1, Controls((EMAILS,), MAILER))
    await _send(ledger, failed.op_id, send, 1, Controls((), MAILER))
    fail = Change(Event.FAIL, evidence={"kind": "error", "error": "550 mailbox full"})
    await _send(ledger, failed.op_id, fail, 2, Controls((), MAILER))
    return Seeded(
        old_review.op_id, new_review.op_id, approval.op_id, lost.op_id,
        charged.op_id, failed.op_id, done.op_id,
    )


def check(value: Any) -> Any:
    """``value`` as it crosses the wire, validated against the published ``stats`` schema."""
    wire = json.loads(json.dumps(value))
    jsonschema.Draft202012Validator(json_schema("stats")).validate(wire)
    return wire


# -- the operator API, on SQLite and Postgres -------------------------------------------


@asynccontextmanager
async def sqlite_ledger(tmp_path: Path) -> AsyncIterator[Ledger]:
    path = await new_ledger_file(tmp_path / "agent.sqlite")
    async with SqliteLedger.from_conn_string(path) as ledger:
        yield ledger


@asynccontextmanager
async def postgres_ledger(tmp_path: Path) -> AsyncIterator[Ledger]:
    with created_schema("lge_stats") as (name, _):
        async with PostgresLedger.from_conn_string(pg_dsn(), schema=name) as ledger:
            await ledger.setup()
            yield ledger


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Ledger]:
    opener = sqlite_ledger if request.param == "sqlite" else postgres_ledger
    async with opener(tmp_path) as opened:
        yield opened


async def test_stats_counts_unresolved_work_and_who_waits_for_a_human(ledger: Ledger) -> None:
    ids = await populate(ledger)
    health = await stats(ledger)

    assert health.unresolved == 5 and not health.settled
    assert {s.value: n for s, n in health.by_state.items()} == {
        "pending": 1, "dispatched": 1, "unknown": 1, "review": 2,
    }
    assert [(c.state.value, c.tool, c.count) for c in health.counts] == [
        ("dispatched", "send_email", 1),
        ("pending", "wire_money", 1),
        ("review", "send_email", 2),
        ("unknown", "charge_card", 1),
    ]
    assert health.oldest_unresolved is not None and health.oldest_unresolved.op_id == ids.lost
    # Longest waiting first: the 2h review, the approval (30m), the 10m review.
    assert [op.op_id for op in health.waiting] == [ids.old_review, ids.approval, ids.new_review]
    assert health.waiting_count == 3 and health.waiting_complete
    assert 2 * HOUR <= health.oldest_waiting_age < 2 * HOUR + 60  # type: ignore[operator]
    assert health.alerts == ()  # no threshold given

    [budget] = health.budgets
    assert (budget["name"], budget["scope"], budget["sends"], budget["sends_left"]) == (
        "emails", ["acme"], 1, 0,
    )
    [circuit] = health.circuits
    assert (circuit["name"], circuit["status"], circuit["failures"]) == ("mailer", "open", 1)

    wire = check(health.to_json())
    assert wire["by_state"] == {"pending": 1, "dispatched": 1, "unknown": 1, "review": 2}
    assert [w["waits_for"] for w in wire["waiting"]["operations"]] == ["review", "approval", "review"]
    assert wire["oldest_unresolved"]["operation_id"] == ids.lost


async def test_thresholds_alert_on_the_longest_wait_and_the_oldest_unresolved(ledger: Ledger) -> None:
    ids = await populate(ledger)

    calm = await stats(ledger, max_review_age=3 * HOUR, max_unresolved_age=4 * HOUR)
    assert calm.alerts == ()
    late = await stats(ledger, max_review_age=HOUR, max_unresolved_age=2.5 * HOUR)
    assert [(a["kind"], a["operation_id"], a["limit"]) for a in late.alerts] == [
        ("review_age", ids.old_review, HOUR),
        ("unresolved_age", ids.lost, 2.5 * HOUR),
    ]
    assert "has waited for a verdict" in late.alerts[0]["message"]
    assert check(late.to_json())["alerts"][1]["operation_id"] == ids.lost
    # globex: one review, waiting 10m.
    globex = await stats(ledger, tenant="globex", max_review_age=HOUR)
    assert [op.op_id for op in globex.waiting] == [ids.new_review] and globex.alerts == ()
    assert globex.budgets == ()  # the emails budget is acme's; circuits are shared
    assert [c["name"] for c in globex.circuits] == ["mailer"]


async def test_settled_operations_are_counted_only_when_asked(ledger: Ledger) -> None:
    await populate(ledger)
    unresolved = await stats(ledger)
    assert State.CONFIRMED not in unresolved.by_state and State.FAILED not in unresolved.by_state
    everything = await stats(ledger, settled=True)
    assert everything.settled and everything.unresolved == 5
    assert {s.value: n for s, n in everything.by_state.items() if s not in set(unresolved.by_state)} == {
        "confirmed": 1, "failed": 1, "abandoned": 0,
    }
    check(everything.to_json())


async def test_bad_arguments_are_refused_before_reading(ledger: Ledger) -> None:
    for kwargs in ({"limit": 0}, {"max_review_age": -1.0}, {"max_unresolved_age": math.nan}):
        with pytest.raises(ValueError, match=r"limit|seconds"):
            await stats(ledger, **kwargs)  # type: ignore[arg-type]


async def test_waiting_list_is_limited_but_the_review_count_is_exact(ledger: Ledger) -> None:
    ids = await populate(ledger)
    health = await stats(ledger, limit=1)
    assert [op.op_id for op in health.waiting] == [ids.old_review]
    assert health.waiting_count == 3


# -- the console ------------------------------------------------------------------------


def seeded_file(tmp_path: Path) -> tuple[Path, Seeded]:
    async def go() -> Seeded:
        async with sqlite_ledger(tmp_path) as ledger:
            return await populate(ledger)

    ids = asyncio.run(go())
    return tmp_path / "agent.sqlite", ids


@pytest.mark.slow
def test_console_stats_prints_the_health_and_exits_9_over_a_threshold(tmp_path: Path) -> None:
    path, ids = seeded_file(tmp_path)
    before = path.read_bytes()

    healthy = run_console("--db", str(path), "stats")
    assert healthy.returncode == 0, healthy.stderr
    out = healthy.stdout
    assert "Operations by state (5 unresolved)" in out
    assert "Settled operations are not counted: add --all" in out
    assert f"Oldest unresolved: {ids.lost} unknown, charge_card, thread thread-l, changed 3h ago" in out
    assert "Waiting for a human (3, the longest for 2h)" in out
    assert out.index(ids.old_review) < out.index(ids.approval) < out.index(ids.new_review)
    assert "mailer" in out and "open" in out and "emails" in out
    assert "ALERT" not in out

    late = run_console("--db", str(path), "stats", "--max-review-age", "1h")
    assert late.returncode == 9, late.stderr
    assert f"ALERT review_age: {ids.old_review} (send_email, thread thread-r) has waited" in late.stdout
    assert run_console("--db", str(path), "stats", "--max-review-age", "3h").returncode == 0
    old = run_console("--db", str(path), "stats", "--max-unresolved-age", "150m", "--all")
    assert old.returncode == 9 and f"ALERT unresolved_age: {ids.lost}" in old.stdout
    assert "confirmed (settled)" in old.stdout
    assert path.read_bytes() == before  # read-only


@pytest.mark.slow
def test_console_stats_json_matches_the_schema_and_carries_the_alert(tmp_path: Path) -> None:
    path, ids = seeded_file(tmp_path)
    done = run_console("--db", str(path), "stats", "--json", "--max-review-age", "1h", "--tenant", "acme")
    assert done.returncode == 9, done.stderr
    wire = check(json.loads(done.stdout))
    assert wire["tenant"] == "acme" and wire["unresolved"] == 4
    assert [w["operation_id"] for w in wire["waiting"]["operations"]] == [ids.old_review, ids.approval]
    assert [a["kind"] for a in wire["alerts"]] == ["review_age"] and wire["max_review_age"] == HOUR

    calm = run_console("--db", str(path), "stats", "--json", "--tenant", "globex", "--max-review-age", "1h")
    assert calm.returncode == 0 and check(json.loads(calm.stdout))["alerts"] == []


@pytest.mark.slow
def test_console_stats_refuses_a_bad_duration_and_a_missing_ledger(tmp_path: Path) -> None:
    path, _ = seeded_file(tmp_path)
    bad = run_console("--db", str(path), "stats", "--json", "--max-review-age", "soon")
    assert bad.returncode == 2
    assert "'soon' is not a duration" in json.loads(bad.stdout)["error"]["message"]
    missing = run_console("--db", str(tmp_path / "typo.sqlite"), "stats")
    assert missing.returncode == 4 and not (tmp_path / "typo.sqlite").exists()


@pytest.mark.slow
@pytest.mark.postgres
def test_console_stats_on_postgres(tmp_path: Path) -> None:
    with created_schema("lge_stats_cli") as (name, _):

        async def go() -> Seeded:
            async with PostgresLedger.from_conn_string(pg_dsn(), schema=name) as ledger:
                await ledger.setup()
                return await populate(ledger)

        ids = asyncio.run(go())
        done = run_console("--db", pg_dsn(), "--schema", name, "stats", "--json", "--max-review-age", "1h")
        assert done.returncode == 9, done.stderr
        wire = check(json.loads(done.stdout))
        assert wire["unresolved"] == 5 and wire["alerts"][0]["operation_id"] == ids.old_review
        assert [c["status"] for c in wire["circuits"]] == ["open"]
