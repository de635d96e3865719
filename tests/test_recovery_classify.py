"""What recovery decides for a thread, and how it tells an operation's settlement.

Pure: :func:`classify` and :func:`settled` are given what was observed (operations,
checkpoint facts, audit transitions) and return a decision; no ledger, no graph, no clock.
The end-to-end behaviour under real crashes is in ``tests/test_recovery.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from langgraph_effects.core.operation import Event, EvidenceKind, Operation, State
from langgraph_effects.recovery import Observation, Policy, TransitionReport, classify
from langgraph_effects.recovery.narrative import forecast, settled

NOW = 10_000.0


def op(op_id: str = "op-1", state: State = State.PENDING, **fields: Any) -> Operation:
    base: dict[str, Any] = {
        "op_id": op_id,
        "thread_id": "t1",
        "tool": "charge",
        "tool_call_id": f"call-{op_id}",
        "args": {},
        "args_hash": "h",
        "provider_key": f"key-{op_id}",
        "contract": "lookup",
        "tenant": "acme",
        "state": state,
        "updated_at": NOW - 3600,
    }
    base.update(fields)
    return Operation(**base)


def seen(*ops: Operation, **fields: Any) -> Observation:
    base: dict[str, Any] = {"thread_id": "t1", "ops": tuple(ops), "now": NOW, "has_next": True}
    base.update(fields)
    return Observation(**base)


VERDICT = {"kind": "verdict", "channel": "console", "actor": "ana"}
GONE = frozenset({"op-1"})

# (case, observation, policy, expected action, a phrase of the reason)
CASES: list[tuple[str, Observation, Policy, str | None, str]] = [
    ("nothing, not named", seen(has_next=False), Policy(), None, ""),
    ("nothing, named", seen(has_next=False), Policy(explicit=True), "nothing_to_do", "no operation"),
    (
        "settled, named",
        seen(op(state=State.CONFIRMED), has_next=False),
        Policy(explicit=True),
        "nothing_to_do",
        "unresolved or waiting",
    ),
    (
        "live lease elsewhere",
        seen(op(state=State.DISPATCHED, lease_expires_at=NOW + 30), senders={"op-1": "pid 7 on h2"}),
        Policy(),
        "in_flight_elsewhere",
        "pid 7 on h2 (lease live for another 30s)",
    ),
    ("sender gone", seen(op(state=State.DISPATCHED), sender_gone=GONE), Policy(), "resume", "mid-run"),
    (
        "sender gone, dry run",
        seen(op(state=State.DISPATCHED), sender_gone=GONE),
        Policy(dry_run=True),
        "would_resume",
        "a dry run",
    ),
    (
        "unknown, no pending work",
        seen(op(state=State.UNKNOWN), has_next=False),
        Policy(),
        "not_resumable",
        "no pending work",
    ),
    (
        "no checkpoint",
        seen(op(state=State.UNKNOWN), has_next=False, has_checkpoint=False),
        Policy(),
        "not_resumable",
        "no checkpoint",
    ),
    (
        "another interrupt",
        seen(op(state=State.UNKNOWN), others=1),
        Policy(),
        "paused_at_other_interrupt",
        "not an effect review",
    ),
    (
        "review, paused",
        seen(op(state=State.REVIEW), ours=1),
        Policy(),
        "awaiting_review",
        "1 operation(s) wait",
    ),
    (
        "approval, paused",
        seen(op(extra={"approval": "required"}), ours=1),
        Policy(),
        "awaiting_review",
        "verdict or approval",
    ),
    ("review, not paused", seen(op(state=State.REVIEW)), Policy(), "resume", "mid-run"),
    (
        "changed just now",
        seen(op(state=State.UNKNOWN, updated_at=NOW - 5)),
        Policy(min_idle=60),
        "recently_active",
        "changed 5s ago",
    ),
    (
        "checkpoint just now",
        seen(op(state=State.UNKNOWN), checkpoint_at=NOW - 2),
        Policy(min_idle=60),
        "recently_active",
        "last checkpoint is 2s old",
    ),
    (
        "changed just now, min_idle 0",
        seen(op(state=State.UNKNOWN, updated_at=NOW - 5)),
        Policy(min_idle=0),
        "resume",
        "mid-run",
    ),
    (
        "expired lease proves the worker gone",
        seen(op(state=State.DISPATCHED, updated_at=NOW - 1), sender_gone=GONE),
        Policy(min_idle=60),
        "resume",
        "mid-run",
    ),
    (
        "verdict given just now",
        seen(op(state=State.PENDING, attempts=1, updated_at=NOW - 1, evidence=VERDICT)),
        Policy(min_idle=60),
        "resume",
        "1 verdict(s) recorded out of band",
    ),
    (
        "several tenants",
        seen(op("op-1", State.UNKNOWN), op("op-2", State.UNKNOWN, tenant="other")),
        Policy(),
        "failed",
        "several tenants",
    ),
    (
        "config names another tenant",
        seen(op(state=State.UNKNOWN)),
        Policy(configured_tenant="beta"),
        "failed",
        "tenant_id='beta'",
    ),
    (
        "answer lost with the crash",
        seen(op(state=State.CONFIRMED), asked=frozenset({"call-op-1"})),
        Policy(),
        "resume",
        "mid-run",
    ),
    (
        "answer already in the messages",
        seen(
            op(state=State.CONFIRMED),
            asked=frozenset({"call-op-1"}),
            answered=frozenset({"call-op-1"}),
            has_next=False,
        ),
        Policy(),
        None,
        "",
    ),
    # Work left with nothing in the ledger to move (input never processed): done
    # only when nothing is pending, whatever the ledger holds.
    ("unfinished input", seen(), Policy(), "resume", "input never processed"),
    ("unfinished input, dry run", seen(), Policy(dry_run=True), "would_resume", "input never processed"),
    (
        "unfinished input, fresh checkpoint",
        seen(checkpoint_at=NOW - 5),
        Policy(min_idle=30),
        "recently_active",
        "its last checkpoint is 5s old",
    ),
    ("unfinished input, paused at another interrupt", seen(others=1), Policy(), None, ""),
    (
        "answered, but the model has not run since",
        seen(op(state=State.CONFIRMED), asked=frozenset({"call-op-1"}), answered=frozenset({"call-op-1"})),
        Policy(),
        "resume",
        "nothing of it in the ledger",
    ),
    (
        "settled, listed by our interrupt",
        seen(op(state=State.CONFIRMED), ours=1, listed=frozenset({"op-1"})),
        Policy(),
        "resume",
        "a resume can move some",
    ),
]


@pytest.mark.parametrize(
    ("observation", "policy", "action", "phrase"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_classify(observation: Observation, policy: Policy, action: str | None, phrase: str) -> None:
    decision = classify(observation, policy)
    if action is None:
        assert decision is None
        return
    assert decision is not None
    assert decision.action == action, decision.reason
    assert phrase in decision.reason
    tenants = {o.tenant for o in observation.ops}
    assert decision.tenant == (tenants.pop() if len(tenants) == 1 else "")
    if action != "resume":
        report = decision.report("t1")
        assert report.action == action
        assert {o.op_id for o in report.operations} == {o.op_id for o in decision.involved}


def test_live_lease_marks_only_the_live_operation() -> None:
    live = op("op-1", State.DISPATCHED, lease_expires_at=NOW + 30)
    waiting = op("op-2", State.UNKNOWN)
    decision = classify(seen(live, waiting), Policy())
    assert decision is not None
    assert {o.op_id: o.how for o in decision.operations} == {
        "op-1": "in_flight_elsewhere",
        "op-2": "not_resumed",
    }


def test_dry_run_forecasts_by_contract() -> None:
    ops = [op(f"op-{c}", State.UNKNOWN, contract=c) for c in ("dedup", "lookup", "blind")]
    decision = classify(seen(*ops), Policy(dry_run=True))
    assert decision is not None
    details = {o.op_id: o.detail for o in decision.operations}
    assert "deduplicates" in details["op-dedup"]
    assert "looked up" in details["op-lookup"]
    assert "review" in details["op-blind"]
    assert forecast(op(state=State.PENDING)) == "nothing was sent yet: it will be sent"
    # A definite failure raised to the caller is tried again; one answered as a message is not.
    raised = op(state=State.FAILED, attempts=1, evidence={"kind": "error", "raised": True})
    assert "new attempt under" in forecast(raised)
    answered = op(state=State.FAILED, attempts=1, evidence={"kind": "error"})
    assert "answered from the ledger" in forecast(answered)


def step(
    event: Event | str, to: State, kind: EvidenceKind | None = None, **evidence: Any
) -> TransitionReport:
    if kind is not None:
        evidence["kind"] = kind.value
    return TransitionReport(str(event), None, to, 2, evidence or None, "test", NOW)


LOST = step(Event.LOSE, State.UNKNOWN, EvidenceKind.LEASE)
UNKNOWN = op(state=State.UNKNOWN, attempts=1)
SETTLED = [
    (
        "lookup found it",
        UNKNOWN,
        State.CONFIRMED,
        [LOST, step(Event.CONFIRM, State.CONFIRMED, EvidenceKind.LOOKUP, receipt="r1")],
        "confirmed_by_lookup",
        "receipt",
    ),
    (
        "dedup resend",
        UNKNOWN,
        State.CONFIRMED,
        [
            LOST,
            step(Event.RESEND, State.DISPATCHED, EvidenceKind.DEDUP),
            step(Event.SUCCEED, State.CONFIRMED),
        ],
        "settled_by_dedup",
        "lease lost",
    ),
    (
        "lookup proved absent",
        UNKNOWN,
        State.CONFIRMED,
        [step(Event.RESEND, State.DISPATCHED, EvidenceKind.LOOKUP), step(Event.SUCCEED, State.CONFIRMED)],
        "resent_under_key",
        "proved it absent",
    ),
    (
        "first send",
        op(),
        State.CONFIRMED,
        [
            step("intent", State.PENDING),
            step(Event.DISPATCH, State.DISPATCHED),
            step(Event.SUCCEED, State.CONFIRMED),
        ],
        "sent",
        "nothing had been sent",
    ),
    (
        "operator ruled not landed",
        op(attempts=1),
        State.CONFIRMED,
        [step(Event.DISPATCH, State.DISPATCHED), step(Event.SUCCEED, State.CONFIRMED)],
        "resent_under_key",
        "did not land",
    ),
    (
        "operator ruled landed",
        UNKNOWN,
        State.CONFIRMED,
        [step(Event.LANDED, State.CONFIRMED, EvidenceKind.VERDICT)],
        "decided_by_operator",
        "landed",
    ),
    (
        "blind, escalated",
        UNKNOWN,
        State.REVIEW,
        [LOST, step(Event.ESCALATE, State.REVIEW, EvidenceKind.BLIND)],
        "sent_to_review",
        "(blind)",
    ),
    (
        "definite failure",
        UNKNOWN,
        State.FAILED,
        [step(Event.FAIL, State.FAILED, EvidenceKind.ERROR)],
        "failed",
        "rejected it definitely",
    ),
    (
        "definite failure retried",
        op(state=State.FAILED, attempts=1, evidence={"kind": "error", "raised": True}),
        State.CONFIRMED,
        [step(Event.RETRY, State.DISPATCHED, EvidenceKind.RETRY), step(Event.SUCCEED, State.CONFIRMED)],
        "resent_under_key",
        "tried again under the same provider key",
    ),
    (
        "abandoned",
        UNKNOWN,
        State.ABANDONED,
        [step(Event.ABANDON, State.ABANDONED, EvidenceKind.VERDICT)],
        "decided_by_operator",
        "closed without",
    ),
    (
        "no step, recorded verdict",
        op(state=State.CONFIRMED, evidence=VERDICT),
        State.CONFIRMED,
        [],
        "replayed",
        "confirmed by a verdict from ana",
    ),
    (
        "no step, verdict by an actor named me",  # --actor me read "confirmed by me's verdict"
        op(state=State.CONFIRMED, evidence={**VERDICT, "actor": "me"}),
        State.CONFIRMED,
        [],
        "replayed",
        "answered from the ledger, nothing sent: confirmed by a verdict from me",
    ),
    (
        "no step, verdict without an actor",
        op(state=State.CONFIRMED, evidence={**VERDICT, "actor": None}),
        State.CONFIRMED,
        [],
        "replayed",
        "confirmed by an operator's verdict",
    ),
    ("no step, still unknown", UNKNOWN, State.UNKNOWN, [], "unsettled", "did not reach it"),
]


@pytest.mark.parametrize(
    ("before", "to", "trail", "how", "phrase"), [c[1:] for c in SETTLED], ids=[c[0] for c in SETTLED]
)
def test_settled(before: Operation, to: State, trail: list[TransitionReport], how: str, phrase: str) -> None:
    after = replace(before, state=to, evidence=before.evidence or (trail[-1].evidence if trail else None))
    got, detail = settled(before, after, trail, sending=False)
    assert (got, phrase in detail) == (how, True), detail


def test_settled_new_and_in_flight() -> None:
    created = op("op-9", State.CONFIRMED)
    assert settled(None, created, [step(Event.SUCCEED, State.CONFIRMED)], sending=False)[0] == "sent"
    dispatched = op(state=State.DISPATCHED)
    assert settled(dispatched, dispatched, [], sending=True)[0] == "in_flight_elsewhere"
    assert settled(dispatched, dispatched, [], sending=False)[0] == "unsettled"


def test_unfinished_input_runs_under_the_configured_tenant() -> None:
    """A thread with nothing in the ledger has no recorded tenant: the caller's config
    decides (a thread with operations keeps theirs, see the table)."""
    decision = classify(seen(), Policy(configured_tenant="acme"))
    assert decision is not None and (decision.action, decision.tenant) == ("resume", "acme")
