"""Conformance cases: recording intents, finding them, transitions, verdicts, the audit trail."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import pytest

from ..core.operation import Change, Event, State, decision_digest
from ..errors import (
    DecisionConflictError,
    IllegalTransitionError,
    OperationNotFoundError,
    StaleVersionError,
)
from ..ledger.base import DEFAULT_ACTOR, Find, Ledger
from ._cases import ESCALATE, LOSE, dispatch, ids, make_op, owner, succeed, trail_len


class WriteCases:
    """Intents, finds, transitions, verdicts and the audit trail (part of
    `LedgerConformance`)."""

    async def test_record_intent_stores_a_pending_row_with_every_field(self, ledger: Ledger) -> None:
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

    async def test_record_intent_with_dispatch_is_dispatched_in_the_same_commit(self, ledger: Ledger) -> None:
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

    async def test_record_intent_returns_an_existing_row_unchanged(self, ledger: Ledger) -> None:
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

    async def test_find_reads_ids_of_any_thread_and_pairs_of_its_own(self, ledger: Ledger) -> None:
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

    async def test_record_intents_several_operations_in_one_call(self, ledger: Ledger) -> None:
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

    async def test_awkward_payloads_round_trip(self, ledger: Ledger) -> None:
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

    async def test_record_intents_of_nothing(self, ledger: Ledger) -> None:
        assert await ledger.record_intents([]) == []

    async def test_get_many_leaves_out_missing_ids(self, ledger: Ledger) -> None:
        op = make_op()
        [stored] = await ledger.record_intents([op])
        assert await ledger.get_many([op.op_id, "op-missing"]) == {op.op_id: stored}
        assert await ledger.get_many([]) == {}
        assert await ledger.get("op-missing") is None

    async def test_provider_key_is_unique_per_tenant(self, ledger: Ledger) -> None:
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

    async def test_transition_moves_and_stores_the_outcome(self, ledger: Ledger) -> None:
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

    async def test_transition_with_a_stale_version_writes_nothing(self, ledger: Ledger) -> None:
        op = make_op()
        await ledger.record_intents([op], change=dispatch())
        moved = await ledger.transition(op.op_id, LOSE, expected_version=1)

        with pytest.raises(StaleVersionError) as caught:
            await ledger.transition(op.op_id, ESCALATE, expected_version=1)

        assert (caught.value.expected, caught.value.actual) == (1, 2)
        assert await ledger.get(op.op_id) == moved
        assert await trail_len(ledger, op.op_id) == 2

    async def test_illegal_transition_writes_nothing(self, ledger: Ledger) -> None:
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

    async def test_a_raised_definite_failure_is_retried_under_its_key(self, ledger: Ledger) -> None:
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
        assert again.owner == owner("tok-2")
        assert again.evidence == {"kind": "retry", "after": "RateLimited: 429"}
        assert await ledger.get(op.op_id) == again
        done = await ledger.transition(op.op_id, succeed(), expected_version=3)
        assert done.state is State.CONFIRMED
        assert [e.event for e in await ledger.audit(op.op_id)] == ["intent", "fail", "retry", "succeed"]

    async def test_transition_of_a_missing_operation(self, ledger: Ledger) -> None:
        with pytest.raises(OperationNotFoundError):
            await ledger.transition("op-missing", LOSE, expected_version=None)

    async def test_transition_without_expected_version_skips_the_check(self, ledger: Ledger) -> None:
        op = make_op()
        await ledger.record_intents([op], change=dispatch())
        moved = await ledger.transition(op.op_id, LOSE, expected_version=None)
        assert (moved.state, moved.version) == (State.UNKNOWN, 2)
        with pytest.raises(IllegalTransitionError):  # the state machine still applies
            await ledger.transition(op.op_id, LOSE, expected_version=None)

    async def test_verdict_is_idempotent_by_decision_id(self, ledger: Ledger) -> None:
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

    async def test_a_new_verdict_on_a_stale_version_is_refused(self, ledger: Ledger) -> None:
        op = make_op()
        await ledger.record_intents([op], change=dispatch())
        await ledger.transition(op.op_id, LOSE, expected_version=1)
        review = await ledger.transition(op.op_id, ESCALATE, expected_version=2)

        abandon = Change(Event.ABANDON, decision_id="dec-2", decision={"verdict": "abandon"})
        with pytest.raises(StaleVersionError):  # the operator saw version 2, it is now 3
            await ledger.transition(op.op_id, abandon, expected_version=2)
        assert await ledger.get(op.op_id) == review

    async def test_audit_trail_reads_back_in_order(self, ledger: Ledger) -> None:
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
