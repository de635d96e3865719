"""The ledger contract: every backend (memory, SQLite, Postgres) must pass all of it.

The ``ledger`` fixture (``conftest.py``) gives a fresh, set-up ledger of each
backend; nothing here knows which one it is talking to, except where a known
gap of one backend is marked ``xfail(strict=True)``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from typing import Any

import pytest

from langgraph_effects.core.operation import (
    TERMINAL,
    UNRESOLVED,
    Change,
    Event,
    Operation,
    Owner,
    State,
    decision_digest,
)
from langgraph_effects.errors import (
    DecisionConflictError,
    IllegalTransitionError,
    OperationNotFoundError,
    StaleVersionError,
)
from langgraph_effects.ledger import InMemoryLedger
from langgraph_effects.ledger.base import DEFAULT_ACTOR, Find, Ledger, OperationQuery

from .conftest import OpFactory


def owner(token: str = "tok-1") -> Owner:
    return Owner(host="host-a", pid=4242, started=1_700_000_000.25, token=token)


def dispatch(token: str = "tok-1", lease: float | None = None) -> Change:
    return Change(
        Event.DISPATCH,
        owner=owner(token),
        lease_expires_at=lease if lease is not None else time.time() + 60,
    )


def succeed(result: bytes = b'{"ok": true}', **evidence: Any) -> Change:
    return Change(
        Event.SUCCEED,
        result=result,
        result_type="json",
        evidence={"kind": "result", **evidence},
    )


LOSE = Change(Event.LOSE, evidence={"kind": "timeout", "after_s": 30})
ESCALATE = Change(Event.ESCALATE, evidence={"kind": "lookup", "found": False})


def ids(ops: list[Operation]) -> list[str]:
    return [op.op_id for op in ops]


async def trail_len(ledger: Ledger, op_id: str) -> int:
    return len(await ledger.audit(op_id))


# -- record_intents -------------------------------------------------------------------


async def test_record_intent_stores_a_pending_row_with_every_field(
    ledger: Ledger, make_op: OpFactory
) -> None:
    op = make_op(
        args={"to": "a@example.com", "body": {"lines": ["hi", "ünïcode"], "n": 2}},
        checkpoint_ns="agent:1",
        tenant="acme",
        policy_version="policy-3",
        message_id="msg-1",
        task_id="task-1",
        checkpoint_id="cp-1",
        extra={"approval_id": "ap-7"},
    )
    start = time.time()
    [stored] = await ledger.record_intents([op])

    assert stored.state is State.PENDING
    assert (stored.version, stored.attempts) == (1, 0)
    assert stored.owner is None and stored.lease_expires_at is None
    assert stored.dispatched_at is None
    assert start <= stored.created_at == stored.updated_at <= time.time()
    # Everything the caller gave is stored as given.
    assert dataclasses.replace(stored, created_at=0.0, updated_at=0.0) == op
    assert await ledger.get(op.op_id) == stored

    [entry] = await ledger.audit(op.op_id)
    assert (entry.seq, entry.actor, entry.from_state, entry.to_state, entry.event) == (
        1,
        DEFAULT_ACTOR,
        None,
        State.PENDING,
        "intent",
    )
    assert entry.version == 1
    assert entry.at == stored.updated_at


async def test_record_intent_with_dispatch_is_dispatched_in_the_same_commit(
    ledger: Ledger, make_op: OpFactory
) -> None:
    op = make_op()
    lease = time.time() + 45
    [stored] = await ledger.record_intents([op], change=dispatch("tok-A", lease), actor="worker-1")

    assert stored.state is State.DISPATCHED
    assert (stored.version, stored.attempts) == (1, 1)
    assert stored.owner == owner("tok-A")
    assert stored.lease_expires_at == lease
    assert stored.dispatched_at == stored.created_at
    assert await ledger.get(op.op_id) == stored

    [entry] = await ledger.audit(op.op_id)
    assert (entry.actor, entry.from_state, entry.to_state, entry.event, entry.version) == (
        "worker-1",
        None,
        State.DISPATCHED,
        "intent",
        1,
    )


async def test_record_intent_returns_an_existing_row_unchanged(ledger: Ledger, make_op: OpFactory) -> None:
    op = make_op()
    await ledger.record_intents([op], change=dispatch("tok-A"))
    moved = await ledger.transition(op.op_id, LOSE, expected_version=1)

    # A second worker (or a resumed run) records the same operation again, with
    # other arguments and its own dispatch: it must get the stored row back.
    retry = dataclasses.replace(op, args={"to": "someone-else@example.com"}, args_hash="h-2")
    [again] = await ledger.record_intents([retry], change=dispatch("tok-B"))

    assert again == moved
    assert again.state is State.UNKNOWN
    assert again.args == op.args
    assert await ledger.get(op.op_id) == moved
    assert await trail_len(ledger, op.op_id) == 2


async def test_find_reads_ids_of_any_thread_and_pairs_of_its_own(
    ledger: Ledger, make_op: OpFactory
) -> None:
    # The Find step every open starts with: rows by id whatever their thread, rows by
    # (tool, args hash) only in the thread asked about (the memory ledger indexes
    # rows by thread; an id of another thread must still be found).
    home = make_op(thread_id="t-home", args_hash="h-home")
    away = make_op(thread_id="t-away", args_hash="h-away")
    twin = make_op(thread_id="t-away", args_hash="h-home")  # home's payload, other thread
    await ledger.record_intents([home, away, twin], change=dispatch())

    async def found(op_ids: tuple[str, ...], pairs: tuple[tuple[str, str], ...]) -> list[str]:
        def plan() -> Any:
            rows = yield Find(op_ids=op_ids, thread_id="t-home", pairs=pairs)
            return rows

        return sorted(ids(await ledger.transact(plan)))

    assert await found((away.op_id,), ()) == [away.op_id]
    assert await found((), (("send_email", "h-home"),)) == [home.op_id]
    assert await found((away.op_id, "op-missing"), (("send_email", "h-home"),)) == sorted(
        [home.op_id, away.op_id]
    )
    assert await found((), (("send_email", "h-away"),)) == []  # a pair of another thread


async def test_record_intents_several_operations_in_one_call(ledger: Ledger, make_op: OpFactory) -> None:
    existing = make_op(tool="open_ticket")
    [old] = await ledger.record_intents([existing])
    a, b = make_op(), make_op(tool="charge_card")

    out = await ledger.record_intents([a, existing, b], change=dispatch("tok-X"))

    assert ids(out) == [a.op_id, existing.op_id, b.op_id]  # input order
    assert out[1] == old  # not dispatched by this call
    for new in (out[0], out[2]):
        assert new.state is State.DISPATCHED
        assert new.owner == owner("tok-X")
        assert new.created_at == out[0].created_at  # one commit, one timestamp
    assert await ledger.get_many([a.op_id, existing.op_id, b.op_id]) == {op.op_id: op for op in out}
    assert [await trail_len(ledger, i) for i in ids(out)] == [1, 1, 1]


async def test_awkward_payloads_round_trip(ledger: Ledger, make_op: OpFactory) -> None:
    # A model can put anything in its arguments; recording the intent must not fail.
    args = {"text": "nul\x00byte", "emoji": "\U0001f4e7", "quote": "'\";--", "n": 2**53 + 1}
    op = make_op(args=args, extra={"nested": [{"a": None}, [], {}]})
    await ledger.record_intents([op], change=dispatch())
    evidence = {"kind": "lookup", "score": float("nan"), "big": 1e308, "nul": "\x00"}
    await ledger.transition(op.op_id, Change(Event.LOSE, evidence=evidence), expected_version=1)

    stored = await ledger.get(op.op_id)
    assert stored is not None
    assert stored.args == args
    assert stored.extra == {"nested": [{"a": None}, [], {}]}
    assert stored.evidence is not None
    assert math.isnan(stored.evidence["score"])
    assert {k: v for k, v in stored.evidence.items() if k != "score"} == {
        "kind": "lookup",
        "big": 1e308,
        "nul": "\x00",
    }
    [_, entry] = await ledger.audit(op.op_id)
    assert entry.evidence is not None and math.isnan(entry.evidence["score"])


async def test_record_intents_of_nothing(ledger: Ledger) -> None:
    assert await ledger.record_intents([]) == []


async def test_get_many_leaves_out_missing_ids(ledger: Ledger, make_op: OpFactory) -> None:
    op = make_op()
    [stored] = await ledger.record_intents([op])
    assert await ledger.get_many([op.op_id, "op-missing"]) == {op.op_id: stored}
    assert await ledger.get_many([]) == {}
    assert await ledger.get("op-missing") is None


async def test_provider_key_is_unique_per_tenant(
    ledger: Ledger, make_op: OpFactory
) -> None:
    first = make_op(tenant="acme", provider_key="invoice:acme:2026-08-11:send")
    clash = make_op(tenant="acme", provider_key="invoice:acme:2026-08-11:send")
    elsewhere = make_op(tenant="globex", provider_key="invoice:acme:2026-08-11:send")
    [kept] = await ledger.record_intents([first])

    out = await ledger.record_intents([clash, elsewhere])

    # Another operation already owns the key in this tenant: the clash is not
    # stored (and so not returned); the same key in another tenant is fine.
    assert ids(out) == [elsewhere.op_id]
    assert await ledger.get(clash.op_id) is None
    assert await ledger.audit(clash.op_id) == []
    assert await ledger.get(first.op_id) == kept


# -- transition ------------------------------------------------------------------------


async def test_transition_moves_and_stores_the_outcome(ledger: Ledger, make_op: OpFactory) -> None:
    op = make_op()
    await ledger.record_intents([op], change=dispatch())
    result = b"\x00\xff binary \x80 payload"

    done = await ledger.transition(
        op.op_id, succeed(result, status=200), expected_version=1, actor="worker-1"
    )

    assert done.state is State.CONFIRMED
    assert (done.version, done.attempts) == (2, 1)
    assert done.owner is None and done.lease_expires_at is None
    assert (done.result, done.result_type) == (result, "json")
    assert done.evidence == {"kind": "result", "status": 200}
    assert await ledger.get(op.op_id) == done


async def test_transition_with_a_stale_version_writes_nothing(ledger: Ledger, make_op: OpFactory) -> None:
    op = make_op()
    await ledger.record_intents([op], change=dispatch())
    moved = await ledger.transition(op.op_id, LOSE, expected_version=1)

    with pytest.raises(StaleVersionError) as caught:
        await ledger.transition(op.op_id, ESCALATE, expected_version=1)

    assert (caught.value.expected, caught.value.actual) == (1, 2)
    assert await ledger.get(op.op_id) == moved
    assert await trail_len(ledger, op.op_id) == 2


async def test_illegal_transition_writes_nothing(ledger: Ledger, make_op: OpFactory) -> None:
    op = make_op()
    [stored] = await ledger.record_intents([op])

    with pytest.raises(IllegalTransitionError):  # pending cannot succeed: nothing was sent
        await ledger.transition(op.op_id, succeed(), expected_version=1)
    assert await ledger.get(op.op_id) == stored
    assert await trail_len(ledger, op.op_id) == 1

    await ledger.transition(op.op_id, dispatch(), expected_version=1)
    done = await ledger.transition(op.op_id, succeed(), expected_version=2)
    with pytest.raises(IllegalTransitionError):  # terminal stays terminal
        await ledger.transition(op.op_id, dispatch("tok-2"), expected_version=3)
    assert await ledger.get(op.op_id) == done
    assert await trail_len(ledger, op.op_id) == 3


async def test_a_raised_definite_failure_is_retried_under_its_key(ledger: Ledger, make_op: OpFactory) -> None:
    """``failed --retry--> dispatched``: the one way out of a terminal state, kept by
    every backend like any other row of the table (lease, attempts, evidence)."""
    op = make_op()
    await ledger.record_intents([op], change=dispatch())
    failed = await ledger.transition(
        op.op_id,
        Change(Event.FAIL, evidence={"kind": "error", "error": "RateLimited: 429", "raised": True}),
        expected_version=1,
    )
    assert failed.state is State.FAILED and failed.owner is None and failed.evidence["raised"] is True  # type: ignore[index]
    retry = Change(
        Event.RETRY,
        owner=owner("tok-2"),
        lease_expires_at=time.time() + 60,
        evidence={"kind": "retry", "after": "RateLimited: 429"},
    )
    again = await ledger.transition(op.op_id, retry, expected_version=2)
    assert (again.state, again.attempts, again.provider_key) == (State.DISPATCHED, 2, op.provider_key)
    assert again.owner == owner("tok-2") and again.evidence == {"kind": "retry", "after": "RateLimited: 429"}
    assert await ledger.get(op.op_id) == again
    done = await ledger.transition(op.op_id, succeed(), expected_version=3)
    assert done.state is State.CONFIRMED
    assert [e.event for e in await ledger.audit(op.op_id)] == ["intent", "fail", "retry", "succeed"]


async def test_transition_of_a_missing_operation(ledger: Ledger) -> None:
    with pytest.raises(OperationNotFoundError):
        await ledger.transition("op-missing", LOSE, expected_version=None)


async def test_transition_without_expected_version_skips_the_check(
    ledger: Ledger, make_op: OpFactory
) -> None:
    op = make_op()
    await ledger.record_intents([op], change=dispatch())
    moved = await ledger.transition(op.op_id, LOSE, expected_version=None)
    assert (moved.state, moved.version) == (State.UNKNOWN, 2)
    with pytest.raises(IllegalTransitionError):  # the state machine still applies
        await ledger.transition(op.op_id, LOSE, expected_version=None)


async def test_verdict_is_idempotent_by_decision_id(ledger: Ledger, make_op: OpFactory) -> None:
    op = make_op()
    await ledger.record_intents([op], change=dispatch())
    await ledger.transition(op.op_id, LOSE, expected_version=1)
    content = {"verdict": "landed", "note": "seen in the CRM"}
    verdict = Change(
        Event.LANDED,
        evidence={"kind": "verdict", "by": "alice"},
        decision_id="dec-1",
        decision=content,
    )

    landed = await ledger.transition(op.op_id, verdict, expected_version=2, actor="alice")
    assert (landed.state, landed.version) == (State.CONFIRMED, 3)
    assert landed.decisions == (("dec-1", decision_digest(content)),)

    # The same decision delivered again (a resumed node re-reads its answer) is a
    # no-op, even against the version the operator saw before it landed.
    again = await ledger.transition(op.op_id, verdict, expected_version=2, actor="alice")
    assert again == landed
    assert await trail_len(ledger, op.op_id) == 3
    # apply() tells the replay from the first application.
    replayed = await ledger.apply(op.op_id, verdict, expected_version=2, actor="alice")
    assert (replayed.op, replayed.applied) == (landed, False)
    assert await trail_len(ledger, op.op_id) == 3

    reused = dataclasses.replace(verdict, decision={"verdict": "landed", "note": "other"})
    with pytest.raises(DecisionConflictError):
        await ledger.transition(op.op_id, reused, expected_version=3)
    assert await ledger.get(op.op_id) == landed
    assert await trail_len(ledger, op.op_id) == 3


async def test_a_new_verdict_on_a_stale_version_is_refused(ledger: Ledger, make_op: OpFactory) -> None:
    op = make_op()
    await ledger.record_intents([op], change=dispatch())
    await ledger.transition(op.op_id, LOSE, expected_version=1)
    review = await ledger.transition(op.op_id, ESCALATE, expected_version=2)

    abandon = Change(Event.ABANDON, decision_id="dec-2", decision={"verdict": "abandon"})
    with pytest.raises(StaleVersionError):  # the operator saw version 2, it is now 3
        await ledger.transition(op.op_id, abandon, expected_version=2)
    assert await ledger.get(op.op_id) == review


async def test_audit_trail_reads_back_in_order(ledger: Ledger, make_op: OpFactory) -> None:
    op, bystander = make_op(), make_op()
    await ledger.record_intents([op, bystander], change=dispatch(), actor="worker-1")
    await ledger.transition(op.op_id, LOSE, expected_version=1, actor="recovery")
    await ledger.transition(op.op_id, ESCALATE, expected_version=2, actor="reconciler")
    verdict = Change(
        Event.ABANDON,
        evidence={"kind": "verdict", "by": "bob", "reason": "duplicate order"},
        decision_id="dec-9",
        decision={"verdict": "abandon"},
    )
    final = await ledger.transition(op.op_id, verdict, expected_version=3, actor="bob")

    trail = await ledger.audit(op.op_id)
    assert [(e.seq, e.actor, e.from_state, e.to_state, e.event, e.version) for e in trail] == [
        (1, "worker-1", None, State.DISPATCHED, "intent", 1),
        (2, "recovery", State.DISPATCHED, State.UNKNOWN, "lose", 2),
        (3, "reconciler", State.UNKNOWN, State.REVIEW, "escalate", 3),
        (4, "bob", State.REVIEW, State.ABANDONED, "abandon", 4),
    ]
    assert [e.evidence for e in trail] == [
        None,
        {"kind": "timeout", "after_s": 30},
        {"kind": "lookup", "found": False},
        {"kind": "verdict", "by": "bob", "reason": "duplicate order"},
    ]
    assert all(e.op_id == op.op_id for e in trail)
    assert [e.at for e in trail] == sorted(e.at for e in trail)
    assert trail[-1].at == final.updated_at
    assert len(await ledger.audit(bystander.op_id)) == 1
    assert await ledger.audit("op-missing") == []


# -- leases ----------------------------------------------------------------------------


async def test_renew_lease_only_for_the_owner_token(ledger: Ledger, make_op: OpFactory) -> None:
    op, idle = make_op(), make_op()
    lease = time.time() + 30
    [stored] = await ledger.record_intents([op], change=dispatch("tok-A", lease))
    await ledger.record_intents([idle])

    assert await ledger.renew_lease(op.op_id, "tok-B", lease + 100) is False
    assert (await ledger.get(op.op_id)) == stored

    assert await ledger.renew_lease(op.op_id, "tok-A", lease + 100) is True
    renewed = await ledger.get(op.op_id)
    assert renewed is not None
    assert renewed.lease_expires_at == lease + 100
    assert renewed.version == stored.version  # a heartbeat is not a transition
    assert await trail_len(ledger, op.op_id) == 1

    assert await ledger.renew_lease(idle.op_id, "tok-A", lease) is False  # pending: no lease
    assert await ledger.renew_lease("op-missing", "tok-A", lease) is False
    await ledger.transition(op.op_id, succeed(), expected_version=1)
    assert await ledger.renew_lease(op.op_id, "tok-A", lease + 200) is False  # settled


async def test_lease_renewer_works_from_another_thread(ledger: Ledger, make_op: OpFactory) -> None:
    """Heartbeats renew from a thread of their own (the event loop may be blocked)."""
    renew = ledger.lease_renewer()
    if renew is None:  # in-process ledgers renew on the event loop
        assert isinstance(ledger, InMemoryLedger)
        return
    op = make_op()
    lease = time.time() + 30
    [stored] = await ledger.record_intents([op], change=dispatch("tok-A", lease))
    assert await asyncio.to_thread(renew, op.op_id, "tok-B", lease + 100) is False
    assert await asyncio.to_thread(renew, op.op_id, "tok-A", lease + 100) is True
    renewed = await ledger.get(op.op_id)
    assert renewed is not None and renewed.lease_expires_at == lease + 100
    assert renewed.version == stored.version


async def test_takeover_loses_to_a_renewed_lease(ledger: Ledger, make_op: OpFactory) -> None:
    """A takeover compares the lease it saw: a heartbeat in between wins."""
    op = make_op()
    lease = time.time() - 1  # already expired by the clock
    [stored] = await ledger.record_intents([op], change=dispatch("tok-A", lease))
    lose = Change(Event.LOSE, evidence={"kind": "lease"}, lease_seen=stored.lease_expires_at)
    assert await ledger.renew_lease(op.op_id, "tok-A", time.time() + 30) is True
    with pytest.raises(StaleVersionError):
        await ledger.transition(op.op_id, lose, expected_version=stored.version)
    assert (await ledger.get(op.op_id)).state is State.DISPATCHED  # type: ignore[union-attr]
    fresh = await ledger.get(op.op_id)
    assert fresh is not None
    lose = dataclasses.replace(lose, lease_seen=fresh.lease_expires_at)
    lost = await ledger.transition(op.op_id, lose, expected_version=fresh.version)
    assert lost.state is State.UNKNOWN and lost.owner is None


# -- queries ---------------------------------------------------------------------------


async def _populate(ledger: Ledger, make_op: OpFactory) -> tuple[dict[str, Operation], float]:
    """Seven operations, one per state, in a known update order; and a time cut after c."""
    spec = {
        "a": ("t-1", "acme", "send_email"),
        "b": ("t-1", "acme", "open_ticket"),
        "c": ("t-2", "acme", "send_email"),
        "d": ("t-2", "globex", "send_email"),
        "e": ("t-1", "globex", "charge_card"),
        "f": ("t-3", "acme", "charge_card"),
        "g": ("t-3", "acme", "send_email"),
    }
    ops = {k: make_op(thread_id=t, tenant=n, tool=tool) for k, (t, n, tool) in spec.items()}
    cut = 0.0

    async def settle() -> None:
        await asyncio.sleep(0.005)  # distinct updated_at, whatever the clock resolution

    await ledger.record_intents([ops["a"]])
    await settle()
    await ledger.record_intents([ops["b"]], change=dispatch())
    await settle()
    await ledger.record_intents([ops["c"]], change=dispatch())
    await ledger.transition(ops["c"].op_id, succeed(), expected_version=1)
    await settle()
    cut = time.time()
    await settle()
    await ledger.record_intents([ops["d"]], change=dispatch())
    await ledger.transition(ops["d"].op_id, LOSE, expected_version=1)
    await settle()
    await ledger.record_intents([ops["e"]], change=dispatch())
    await ledger.transition(ops["e"].op_id, LOSE, expected_version=1)
    await ledger.transition(ops["e"].op_id, ESCALATE, expected_version=2)
    await settle()
    await ledger.record_intents([ops["f"]], change=dispatch())
    await ledger.transition(
        ops["f"].op_id, Change(Event.FAIL, evidence={"kind": "error"}), expected_version=1
    )
    await settle()
    await ledger.record_intents([ops["g"]])
    abandon = Change(Event.ABANDON, decision_id="dec-g", decision={"verdict": "abandon"})
    await ledger.transition(ops["g"].op_id, abandon, expected_version=1)

    stored = await ledger.get_many([op.op_id for op in ops.values()])
    states = {k: stored[op.op_id].state for k, op in ops.items()}
    assert states == {
        "a": State.PENDING,
        "b": State.DISPATCHED,
        "c": State.CONFIRMED,
        "d": State.UNKNOWN,
        "e": State.REVIEW,
        "f": State.FAILED,
        "g": State.ABANDONED,
    }
    return {k: stored[op.op_id] for k, op in ops.items()}, cut


async def test_list_operations_filters(ledger: Ledger, make_op: OpFactory) -> None:
    ops, cut = await _populate(ledger, make_op)

    async def listed(**query: Any) -> str:
        found = await ledger.list_operations(OperationQuery(**query))
        by_id = {op.op_id: k for k, op in ops.items()}
        return "".join(by_id[op.op_id] for op in found)

    assert await listed() == "abcdefg"  # oldest update first
    assert await listed(states=frozenset({State.PENDING})) == "a"
    assert await listed(states=frozenset({State.CONFIRMED, State.UNKNOWN})) == "cd"
    assert await listed(states=UNRESOLVED) == "abde"
    assert await listed(states=TERMINAL) == "cfg"
    assert await listed(thread_id="t-1") == "abe"
    assert await listed(tenant="globex") == "de"
    assert await listed(tool="charge_card") == "ef"
    assert await listed(tool="send_email", tenant="acme") == "acg"
    assert await listed(states=frozenset({State.CONFIRMED}), thread_id="t-1") == ""
    assert await listed(updated_before=cut) == "abc"
    assert await listed(updated_before=ops["a"].updated_at) == ""  # strictly before
    assert await listed(updated_after=ops["f"].updated_at) == "g"  # strictly after
    assert await listed(updated_after=ops["c"].updated_at, updated_before=ops["g"].updated_at) == "def"
    assert await listed(limit=3) == "abc"
    assert await listed(tenant="acme", limit=2) == "ab"
    assert await listed(thread_id="t-none") == ""
    # The rows come back whole.
    assert await ledger.list_operations(OperationQuery(thread_id="t-2")) == [ops["c"], ops["d"]]


async def test_unresolved(ledger: Ledger, make_op: OpFactory) -> None:
    ops, _ = await _populate(ledger, make_op)
    by_id = {op.op_id: k for k, op in ops.items()}

    async def unresolved(**kwargs: Any) -> str:
        return "".join(by_id[op.op_id] for op in await ledger.unresolved(**kwargs))

    assert await unresolved() == "abde"
    assert await unresolved(thread_id="t-1") == "abe"
    assert await unresolved(thread_id="t-3") == ""
    assert await unresolved(tenant="globex") == "de"
    assert await unresolved(limit=2) == "ab"


async def test_find_by_payload(ledger: Ledger, make_op: OpFactory) -> None:
    x = make_op(thread_id="t-1", tool="send_email", args_hash="h1")
    y = make_op(thread_id="t-1", tool="send_email", args_hash="h2")
    z = make_op(thread_id="t-1", tool="open_ticket", args_hash="h1")
    w = make_op(thread_id="t-2", tool="send_email", args_hash="h1")
    await ledger.record_intents([x, y, z, w], change=dispatch())
    confirmed = await ledger.transition(x.op_id, succeed(), expected_version=1)

    async def found(thread_id: str, pairs: list[tuple[str, str]]) -> list[str]:
        return sorted(ids(await ledger.find_by_payload(thread_id, pairs)))

    assert await found("t-1", [("send_email", "h1")]) == [x.op_id]  # terminal rows too
    assert await found("t-1", [("send_email", "h1"), ("open_ticket", "h1"), ("x", "h9")]) == (
        sorted([x.op_id, z.op_id])
    )
    assert await found("t-1", [("send_email", "h1"), ("send_email", "h1")]) == [x.op_id]
    assert await found("t-2", [("send_email", "h1")]) == [w.op_id]
    assert await found("t-3", [("send_email", "h1")]) == []
    assert await found("t-1", []) == []
    assert await ledger.find_by_payload("t-1", [("send_email", "h1")]) == [confirmed]


async def test_find_by_payload_order_is_the_listing_order(ledger: Ledger, make_op: OpFactory) -> None:
    # Ids sorted against their update order, and pairs given in yet another order:
    # every backend answers least recently updated first, then by id.
    ops = [make_op(op_id=f"op-order-{c}", thread_id="t-o", args_hash=f"h{c}") for c in "dcba"]
    await ledger.record_intents(ops, change=dispatch())
    moved = await ledger.apply(ops[2].op_id, succeed(), expected_version=1)
    assert moved.applied
    pairs = [("send_email", f"h{c}") for c in "badc"]
    found = await ledger.find_by_payload("t-o", pairs)
    listed = await ledger.list_operations(OperationQuery(thread_id="t-o"))
    expected = sorted(listed, key=lambda o: (o.updated_at, o.op_id))
    assert ids(found) == ids(expected)
    assert ids(found)[-1] == ops[2].op_id  # the one changed last comes last
    assert ids(found)[:3] == sorted(ids(found)[:3])  # same stamp: by id


# -- concurrency -----------------------------------------------------------------------


async def test_racing_transitions_exactly_one_wins(ledger: Ledger, make_op: OpFactory) -> None:
    op = make_op()
    await ledger.record_intents([op], change=dispatch())

    async def attempt(i: int) -> Operation | StaleVersionError:
        try:
            return await ledger.transition(
                op.op_id, succeed(worker=i), expected_version=1, actor=f"worker-{i}"
            )
        except StaleVersionError as error:
            return error

    results = await asyncio.gather(*(attempt(i) for i in range(20)))

    winners = [r for r in results if isinstance(r, Operation)]
    losers = [r for r in results if isinstance(r, StaleVersionError)]
    assert len(winners) == 1 and len(losers) == 19
    assert all((e.expected, e.actual) == (1, 2) for e in losers)
    [winner] = winners
    assert await ledger.get(op.op_id) == winner
    trail = await ledger.audit(op.op_id)
    assert len(trail) == 2
    assert winner.evidence is not None
    assert trail[-1].actor == f"worker-{winner.evidence['worker']}"


async def test_overlapping_batches_in_opposite_orders(ledger: Ledger, make_op: OpFactory) -> None:
    # Two workers record the same sibling calls in opposite orders: no deadlock,
    # no error, and both see the same rows.
    for _ in range(5):
        x, y, z = make_op(), make_op(), make_op()
        results = await asyncio.gather(
            *(
                ledger.record_intents(batch, change=dispatch(f"tok-{i}"))
                for i, batch in enumerate([[x, y, z], [z, y, x]] * 3)
            )
        )
        stored = await ledger.get_many([x.op_id, y.op_id, z.op_id])
        for batch_result in results:
            assert {op.op_id: op for op in batch_result} == stored
        for op in (x, y, z):
            assert await trail_len(ledger, op.op_id) == 1


async def test_racing_intents_store_one_owner(ledger: Ledger, make_op: OpFactory) -> None:
    op = make_op()
    results = await asyncio.gather(
        *(ledger.record_intents([op], change=dispatch(f"tok-{i}")) for i in range(20))
    )
    rows = [row for [row] in results]
    assert all(row == rows[0] for row in rows)  # every caller sees the same winner
    assert rows[0].owner is not None and rows[0].owner.token.startswith("tok-")
    assert await trail_len(ledger, op.op_id) == 1
