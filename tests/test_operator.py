"""The operator API (``langgraph_effects._runtime.operator``) against real SQLite ledger files.

Covers listing with filters, ``show`` with the audit trail, every verdict from
``review`` and ``unknown``, a ``dispatched`` operation whose owner died or whose
lease ran out (lost first, then decided), a live lease refused, stale versions
and decision-id conflicts refused with nothing written, idempotent retries, and
tenant scoping. The seeding helpers here are shared with ``tests/test_cli.py``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects._runtime.decisions import LandedVerdict
from langgraph_effects._runtime.lease import new_owner, release
from langgraph_effects._runtime.operator import (
    allowed_verdicts,
    lease_status,
    list_operations,
    operation_to_json,
    resolve,
    resolve_report,
    show,
)
from langgraph_effects.cli.failures import console_message
from langgraph_effects.core.identity import args_hash, default_provider_key
from langgraph_effects.core.operation import Change, Event, Operation, Owner, State
from langgraph_effects.errors import (
    DecisionConflictError,
    IllegalTransitionError,
    LeaseLiveError,
    LedgerCorruptError,
    LedgerNotFoundError,
    LedgerUnavailableError,
    NotResolvableError,
    OperationNotFoundError,
    ReviewError,
    StaleVersionError,
    TransitionError,
    VerdictNotRecordedError,
)
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.registry import open_ledger, redact
from langgraph_effects.ledger.sqlite import SqliteLedger

SECRET_RESULT = b"TOP-SECRET-TOOL-OUTPUT"

# -- seeding helpers (also used by tests/test_cli.py) ---------------------------------


def make_op(op_id: str | None = None, **fields: Any) -> Operation:
    """An operation as the graph would record it (arguments already redacted)."""
    op_id = op_id or f"op_{uuid.uuid4().hex}"
    args = fields.pop("args", {"to": "bob@example.com", "subject": "Invoice 7", "api_key": "[redacted]"})
    values: dict[str, Any] = {
        "op_id": op_id,
        "thread_id": "thread-1",
        "tool": "send_email",
        "tool_call_id": f"call_{op_id[-8:]}",
        "args": args,
        "args_hash": args_hash(args),
        "provider_key": default_provider_key(op_id),
        "contract": "blind",
    }
    values.update(fields)
    return Operation(**values)


def owner_elsewhere() -> Owner:
    """An owner on another host: only the lease's expiry tells whether it is alive."""
    return Owner(host="worker-elsewhere.invalid", pid=4242, started=1.0, token=uuid.uuid4().hex)


def dead_owner() -> Owner:
    """An owner on this host whose process has finished (so it is provably dead)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Owner(host=socket.gethostname(), pid=int(done.stdout), started=1.0, token=uuid.uuid4().hex)


async def seed(
    ledger: Ledger,
    op: Operation,
    state: str,
    *,
    owner: Owner | None = None,
    lease_seconds: float = 300.0,
) -> Operation:
    """Store ``op`` and drive it to ``state`` through real ledger transitions.

    ``dispatched`` uses ``owner`` (default: another host) with a lease ending in
    ``lease_seconds`` (negative: already expired).
    """
    if state == "pending":
        return (await ledger.record_intents([op]))[0]
    dispatch = Change(
        event=Event.DISPATCH,
        owner=owner or owner_elsewhere(),
        lease_expires_at=time.time() + lease_seconds,
    )
    stored = (await ledger.record_intents([op], change=dispatch))[0]
    steps: dict[str, Sequence[Change]] = {
        "dispatched": (),
        "unknown": (Change(Event.LOSE, evidence={"kind": "timeout", "error": "ReadTimeout"}),),
        "review": (
            Change(Event.LOSE, evidence={"kind": "timeout", "error": "ReadTimeout"}),
            Change(Event.ESCALATE, evidence={"kind": "blind", "why": "no lookup, no dedup"}),
        ),
        "confirmed": (
            Change(
                Event.SUCCEED,
                evidence={"kind": "result"},
                result_type="tool_message",
                result=SECRET_RESULT,
            ),
        ),
        "failed": (Change(Event.FAIL, evidence={"kind": "error", "error": "422"}),),
    }
    for change in steps[state]:
        stored = await ledger.transition(op.op_id, change, expected_version=stored.version, actor="worker")
    assert stored.state.value == state
    return stored


async def new_ledger_file(path: Path) -> Path:
    """Create an empty, set-up ledger file at ``path``."""
    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
    return path


Seed = tuple[Operation, str] | tuple[Operation, str, dict[str, Any]]  # op, state[, seed() options]


def seeded_ledger_file(path: Path, *seeds: Seed) -> list[Operation]:
    """Create a ledger file at ``path`` and :func:`seed` each ``(op, state[, options])``
    in order, from synchronous code (the console tests); the stored operations, in order."""

    async def go() -> list[Operation]:
        await new_ledger_file(path)
        async with SqliteLedger.from_conn_string(path) as ledger:
            return [await seed(ledger, op, state, **(rest[0] if rest else {})) for op, state, *rest in seeds]

    return asyncio.run(go())


# -- fixtures -------------------------------------------------------------------------


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    return await new_ledger_file(tmp_path / "ledger.sqlite")


@pytest.fixture
async def ledger(db: Path) -> AsyncIterator[Ledger]:
    async with open_ledger(str(db)) as opened:
        yield opened


async def snapshot(ledger: Ledger, op_id: str) -> tuple[Operation | None, int]:
    """The stored operation and the length of its audit trail."""
    return await ledger.get(op_id), len(await ledger.audit(op_id))


# -- open_ledger ----------------------------------------------------------------------


async def test_open_ledger_refuses_a_missing_file_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo.sqlite"
    with pytest.raises(LedgerNotFoundError, match=r"typo\.sqlite") as caught:
        async with open_ledger(str(missing)):
            pass
    assert not missing.exists()
    assert caught.value.path == str(missing)
    assert "does not exist" in str(caught.value)


async def test_open_ledger_accepts_sqlite_prefix_and_rejects_non_ledgers(tmp_path: Path, db: Path) -> None:
    async with open_ledger(f"sqlite:{db}") as opened:
        assert await list_operations(opened) == []
    with pytest.raises(LedgerCorruptError, match="not a file"):
        async with open_ledger(str(tmp_path)):
            pass
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database at all, not even close" * 100)
    with pytest.raises(LedgerCorruptError):
        async with open_ledger(str(garbage)):
            pass


async def test_open_ledger_refuses_a_database_without_a_ledger(tmp_path: Path) -> None:
    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    for path in (other, empty):
        with pytest.raises(LedgerNotFoundError, match="holds no langgraph-effects ledger") as caught:
            async with open_ledger(str(path)):
                pass
        assert caught.value.empty
    with sqlite3.connect(other) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert tables == {"customers"}  # nothing was added to the operator's other database
    assert empty.stat().st_size == 0


async def test_open_ledger_is_backend_agnostic_in_memory() -> None:
    async with open_ledger(":memory:") as opened:
        op = await seed(opened, make_op(), "review")
        after = await resolve(opened, op.op_id, {"type": "not_landed"}, expected_version=3, actor="a")
        assert after.state is State.PENDING


def test_redact_hides_the_password() -> None:
    assert redact("postgresql://alice:s3cret@db.example:5432/app") == (
        "postgresql://alice:***@db.example:5432/app"
    )
    assert redact("postgres://db.example/app") == "postgres://db.example/app"
    assert redact("/var/lib/agent.db") == "/var/lib/agent.db"


# -- list -----------------------------------------------------------------------------


async def test_list_defaults_to_unresolved_and_filters(ledger: Ledger) -> None:
    review = await seed(ledger, make_op(thread_id="t-a", tool="send_email"), "review")
    unknown = await seed(ledger, make_op(thread_id="t-b", tool="open_ticket"), "unknown")
    pending = await seed(ledger, make_op(thread_id="t-a", tenant="acme"), "pending")
    await seed(ledger, make_op(thread_id="t-a"), "confirmed")
    await seed(ledger, make_op(thread_id="t-a"), "failed")

    ids = {op.op_id for op in await list_operations(ledger)}
    assert ids == {review.op_id, unknown.op_id, pending.op_id}

    by_state = await list_operations(ledger, states=["review", State.UNKNOWN])
    assert {op.op_id for op in by_state} == {review.op_id, unknown.op_id}
    assert len(await list_operations(ledger, states=set(State))) == 5
    assert [op.op_id for op in await list_operations(ledger, thread_id="t-b")] == [unknown.op_id]
    assert [op.op_id for op in await list_operations(ledger, tenant="acme")] == [pending.op_id]
    assert [op.op_id for op in await list_operations(ledger, tool="open_ticket")] == [unknown.op_id]
    assert len(await list_operations(ledger, limit=2)) == 2

    assert await list_operations(ledger, older_than=3600) == []
    later = time.time() + 7200
    assert len(await list_operations(ledger, older_than=3600, now=later)) == 3
    with pytest.raises(ValueError):
        await list_operations(ledger, limit=0)
    with pytest.raises(ValueError):
        await list_operations(ledger, older_than=-1)


@pytest.mark.slow
async def test_list_marks_dispatched_leases(ledger: Ledger) -> None:
    live = await seed(ledger, make_op(), "dispatched", lease_seconds=300)
    expired = await seed(ledger, make_op(), "dispatched", lease_seconds=-5)
    dead = await seed(ledger, make_op(), "dispatched", owner=dead_owner(), lease_seconds=300)
    review = await seed(ledger, make_op(), "review")

    status = {op.op_id: lease_status(op) for op in await list_operations(ledger)}
    assert status == {
        live.op_id: "live",
        expired.op_id: "expired",
        dead.op_id: "owner_dead",
        review.op_id: None,
    }
    assert allowed_verdicts(live) == ()
    assert allowed_verdicts(expired) == ("landed", "not_landed", "abandon")
    assert operation_to_json(dead)["lease"] == "owner_dead"


# -- show -----------------------------------------------------------------------------


async def test_show_has_the_audit_trail_and_what_may_be_decided(ledger: Ledger) -> None:
    op = await seed(ledger, make_op(), "review")
    view = await show(ledger, op.op_id)
    assert view.operation == op
    assert [entry.event for entry in view.audit] == ["intent", "lose", "escalate"]
    assert [entry.to_state for entry in view.audit] == [
        State.DISPATCHED,
        State.UNKNOWN,
        State.REVIEW,
    ]
    assert view.audit[-1].actor == "worker"
    assert view.lease is None
    assert view.allowed_verdicts == ("landed", "not_landed", "abandon")
    data = json.loads(json.dumps(view.to_json()))
    assert data["operation"]["args"]["api_key"] == "[redacted]"
    assert data["operation"]["version"] == 3
    assert len(data["audit"]) == 3


async def test_show_never_exposes_the_stored_result(ledger: Ledger) -> None:
    op = await seed(ledger, make_op(), "confirmed")
    view = await show(ledger, op.op_id)
    assert view.allowed_verdicts == ()
    text = json.dumps(view.to_json())
    assert SECRET_RESULT.decode() not in text
    assert view.to_json()["operation"]["result"]["bytes"] == len(SECRET_RESULT)


async def test_show_is_tenant_scoped(ledger: Ledger) -> None:
    op = await seed(ledger, make_op(tenant="acme"), "review")
    assert (await show(ledger, op.op_id, tenant="acme")).operation.op_id == op.op_id
    with pytest.raises(OperationNotFoundError) as other:
        await show(ledger, op.op_id, tenant="globex")
    with pytest.raises(OperationNotFoundError) as missing:
        await show(ledger, "op_does_not_exist", tenant="globex")
    # Another tenant's operation looks exactly like a missing one.
    assert str(other.value).replace(op.op_id, "X") == str(missing.value).replace("op_does_not_exist", "X")


# -- resolve --------------------------------------------------------------------------

DECISIONS: dict[str, tuple[dict[str, Any], State]] = {
    "landed": ({"type": "landed", "receipt": {"id": "r1"}}, State.CONFIRMED),
    "not_landed": ({"type": "not_landed"}, State.PENDING),
    "abandon": ({"type": "abandon", "reason": "customer cancelled"}, State.ABANDONED),
}


@pytest.mark.parametrize("start", ["review", "unknown"])
@pytest.mark.parametrize("kind", list(DECISIONS))
async def test_resolve_records_the_verdict(ledger: Ledger, start: str, kind: str) -> None:
    op = await seed(ledger, make_op(), start)
    decision, target = DECISIONS[kind]
    after = await resolve(
        ledger,
        op.op_id,
        decision,
        expected_version=op.version,
        decision_id="dec-1",
        actor="alice",
    )
    assert after.state is target
    assert after.version == op.version + 1
    assert after.decisions[-1][0] == "dec-1"
    assert after.evidence is not None
    assert after.evidence["kind"] == "verdict"
    assert after.evidence["decision"] == kind
    assert after.evidence["actor"] == "alice"
    assert after.evidence["channel"] == "api"
    if kind == "landed":
        assert after.evidence["receipt"] == {"id": "r1"}
    if kind == "abandon":
        assert after.evidence["reason"] == "customer cancelled"
    trail = await ledger.audit(op.op_id)
    assert (trail[-1].event, trail[-1].actor, trail[-1].version) == (kind, "alice", after.version)
    assert await ledger.get(op.op_id) == after


async def test_resolve_takes_a_model_and_mints_a_decision_id(ledger: Ledger) -> None:
    op = await seed(ledger, make_op(), "review")
    after = await resolve(
        ledger,
        op.op_id,
        LandedVerdict(receipt="msg-42"),
        expected_version=op.version,
        actor="alice",
        channel="console",
    )
    assert after.state is State.CONFIRMED
    assert after.decisions[-1][0].startswith("dec_")
    assert after.evidence is not None and after.evidence["channel"] == "console"


async def test_invalid_decision_is_bad_input(ledger: Ledger) -> None:
    op = await seed(ledger, make_op(), "review")
    before = await snapshot(ledger, op.op_id)
    with pytest.raises(ReviewError):
        await resolve(ledger, op.op_id, {"type": "maybe"}, expected_version=3, actor="alice")
    with pytest.raises(ReviewError):
        await resolve(ledger, op.op_id, {"type": "abandon", "reason": ""}, expected_version=3, actor="a")
    assert await snapshot(ledger, op.op_id) == before


async def test_stale_version_is_refused_and_nothing_changes(ledger: Ledger) -> None:
    op = await seed(ledger, make_op(), "review")
    before = await snapshot(ledger, op.op_id)
    with pytest.raises(StaleVersionError) as caught:
        await resolve(ledger, op.op_id, {"type": "not_landed"}, expected_version=2, actor="alice")
    assert (caught.value.expected, caught.value.actual) == (2, 3)
    assert await snapshot(ledger, op.op_id) == before


async def test_decision_ids_are_idempotent_and_conflicts_refused(ledger: Ledger) -> None:
    op = await seed(ledger, make_op(), "review")
    decision = {"type": "landed", "receipt": {"id": "r1"}}
    first = await resolve(ledger, op.op_id, decision, expected_version=3, decision_id="dec-7", actor="alice")
    trail = len(await ledger.audit(op.op_id))

    # The same decision again (a retried command): a no-op, even at the old version.
    again = await resolve_report(
        ledger, op.op_id, decision, expected_version=3, decision_id="dec-7", actor="bob"
    )
    assert again.replayed and again.operation == first
    assert len(await ledger.audit(op.op_id)) == trail

    # The same id with other content: refused, nothing changed.
    with pytest.raises(DecisionConflictError):
        await resolve(
            ledger,
            op.op_id,
            {"type": "abandon", "reason": "oops"},
            expected_version=first.version,
            decision_id="dec-7",
            actor="alice",
        )
    assert await snapshot(ledger, op.op_id) == (first, trail)


@pytest.mark.parametrize("state", ["confirmed", "failed", "pending"])
async def test_no_verdict_outside_unknown_and_review(ledger: Ledger, state: str) -> None:
    op = await seed(ledger, make_op(), state)
    before = await snapshot(ledger, op.op_id)
    with pytest.raises(NotResolvableError) as caught:
        await resolve(
            ledger,
            op.op_id,
            {"type": "abandon", "reason": "tidy up"},
            expected_version=op.version,
            actor="alice",
        )
    assert isinstance(caught.value, IllegalTransitionError)
    assert repr(state) in str(caught.value)
    assert "Nothing was changed" in str(caught.value)
    assert await snapshot(ledger, op.op_id) == before


async def test_tenant_scoped_resolve_refuses_other_tenants(ledger: Ledger) -> None:
    op = await seed(ledger, make_op(tenant="acme"), "review")
    before = await snapshot(ledger, op.op_id)
    with pytest.raises(OperationNotFoundError):
        await resolve(
            ledger,
            op.op_id,
            {"type": "not_landed"},
            expected_version=3,
            actor="alice",
            tenant="globex",
        )
    assert await snapshot(ledger, op.op_id) == before
    after = await resolve(
        ledger, op.op_id, {"type": "not_landed"}, expected_version=3, actor="a", tenant="acme"
    )
    assert after.state is State.PENDING


async def test_resolve_unknown_operation(ledger: Ledger) -> None:
    with pytest.raises(OperationNotFoundError):
        await resolve(ledger, "op_nope", {"type": "not_landed"}, expected_version=1, actor="a")


# -- dispatched operations: the lease decides ------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("how", ["owner_dead", "expired"])
async def test_expired_dispatch_is_lost_first_then_decided(ledger: Ledger, how: str) -> None:
    if how == "owner_dead":
        op = await seed(ledger, make_op(), "dispatched", owner=dead_owner(), lease_seconds=300)
    else:
        op = await seed(ledger, make_op(), "dispatched", lease_seconds=-5)
    assert lease_status(op) == how

    report = await resolve_report(
        ledger,
        op.op_id,
        {"type": "landed", "receipt": {"id": "r9"}},
        expected_version=op.version,
        decision_id="dec-9",
        actor="alice",
    )
    assert report.lease_lost and not report.replayed
    assert report.from_state is State.DISPATCHED
    after = report.operation
    assert after.state is State.CONFIRMED
    assert after.version == op.version + 2
    trail = await ledger.audit(op.op_id)
    assert [(e.event, e.from_state, e.to_state) for e in trail[-2:]] == [
        ("lose", State.DISPATCHED, State.UNKNOWN),
        ("landed", State.UNKNOWN, State.CONFIRMED),
    ]
    lost = trail[-2].evidence
    assert lost is not None
    assert lost["kind"] == "lease"
    assert lost["reason"] == how
    assert op.owner is not None and lost["owner"]["token"] == op.owner.token
    assert trail[-2].actor == "alice"


@pytest.mark.parametrize("where", ["this_process", "elsewhere"])
async def test_live_lease_is_refused(ledger: Ledger, where: str) -> None:
    owner = new_owner() if where == "this_process" else owner_elsewhere()
    try:
        op = await seed(ledger, make_op(), "dispatched", owner=owner, lease_seconds=300)
        before = await snapshot(ledger, op.op_id)
        with pytest.raises(LeaseLiveError) as caught:
            await resolve(
                ledger,
                op.op_id,
                {"type": "landed"},
                expected_version=op.version,
                actor="alice",
            )
        assert isinstance(caught.value, TransitionError)
        assert "being sent right now" in str(caught.value)
        assert await snapshot(ledger, op.op_id) == before
        assert (await show(ledger, op.op_id)).allowed_verdicts == ()
    finally:
        release(owner)


async def test_stale_version_on_an_expired_dispatch_writes_nothing(ledger: Ledger) -> None:
    op = await seed(ledger, make_op(), "dispatched", lease_seconds=-5)
    before = await snapshot(ledger, op.op_id)
    with pytest.raises(StaleVersionError):
        await resolve(ledger, op.op_id, {"type": "not_landed"}, expected_version=7, actor="alice")
    assert await snapshot(ledger, op.op_id) == before


class _VerdictsRefused(SqliteLedger):
    """A ledger that accepts the lease loss (a plain transition) but refuses the verdict
    after it (a plan of its own, which also settles budgets: see ``verdict_plan``)."""

    async def transact(self, make: Any) -> Any:
        raise LedgerUnavailableError("sqlite: the disk is full (simulated)")


async def test_a_verdict_that_fails_after_the_lease_loss_says_so(db: Path) -> None:
    async with open_ledger(str(db)) as plain:
        op = await seed(plain, make_op(), "dispatched", lease_seconds=-5)
    async with SqliteLedger.from_conn_string(db) as base:
        failing = _VerdictsRefused(base.conn, where=base.where)
        with pytest.raises(VerdictNotRecordedError) as caught:
            await resolve(failing, op.op_id, {"type": "not_landed"}, expected_version=1, actor="alice")
    error = caught.value
    assert isinstance(error.cause, LedgerUnavailableError)
    assert error.operation.state is State.UNKNOWN
    assert error.operation.version == 2
    assert "NOT recorded" in str(error) and "expected_version=2" in str(error)
    # The library says it in API terms; the console words the same advice as its flag.
    assert "--expected-version" not in str(error)
    assert "--expected-version 2" in console_message(error)
    async with open_ledger(str(db)) as again:
        stored = await again.get(op.op_id)
        assert stored is not None
        assert (stored.state, stored.version, stored.decisions) == (State.UNKNOWN, 2, ())
        # The operator can now decide on what it is.
        after = await resolve(again, op.op_id, {"type": "not_landed"}, expected_version=2, actor="alice")
        assert after.state is State.PENDING
