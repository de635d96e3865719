"""The reconciliation rules (``langgraph_effects.core.reconcile``) as tables: one row
per piece of evidence (dedup window, lookup answer, inconclusive lookup) and
operation state (attempts used, tenant or policy changed since intent, time since
the send), with the decision and the exact evidence it records."""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_effects.core.contract import Effect, Inconclusive, LookupRequest
from langgraph_effects.core.operation import Event, Operation, Scope, State
from langgraph_effects.core.reconcile import (
    PollAgain,
    Reconciliation,
    after_inconclusive,
    after_landed,
    after_not_landed,
    escalate,
    lost_send,
    scope_changes,
    tried,
    within_dedup_window,
    without_lookup,
)
from tests.helpers.operations import build_op

CREATED = 1000.0
OP_FIELDS: dict[str, Any] = {
    "provider_key": "k",
    "contract": "dedup",
    "state": State.UNKNOWN,
    "attempts": 1,
    "tenant": "acme",
    "policy_version": "v1",
    "created_at": CREATED,
}


async def _never_called(request: LookupRequest) -> Inconclusive:
    raise AssertionError("the rules never call the lookup")


def op(**overrides: Any) -> Operation:
    return build_op(OP_FIELDS, **overrides)


SAME = Scope(tenant="acme", policy_version="v1")
OTHER_TENANT = Scope(tenant="globex", policy_version="v1")
OTHER_POLICY = Scope(tenant="acme", policy_version="v2")
TENANT_CHANGED = {"tenant": {"at_intent": "acme", "now": "globex"}}
POLICY_CHANGED = {"policy_version": {"at_intent": "v1", "now": "v2"}}

DEDUP = Effect(dedup_window=60)
BLIND = Effect()
STRONG = Effect(lookup=_never_called)
EVENTUAL = Effect(lookup=_never_called, lookup_consistency="eventual", settle_after=30)
STRONG_DEDUP = Effect(lookup=_never_called, dedup_window=60)


# -- no lookup: the dedup window decides, or nothing does ------------------------------

WITHOUT_LOOKUP = [
    # (case, effect, operation, scope, now, action, evidence)
    ("dedup, inside the window", DEDUP, op(), SAME, CREATED + 59, "resend", {"kind": "dedup"}),
    ("dedup, at the window's edge", DEDUP, op(), SAME, CREATED + 60, "resend", {"kind": "dedup"}),
    (
        "dedup, window expired",
        DEDUP, op(), SAME, CREATED + 61,
        "escalate", {"kind": "dedup", "expired": True, "window_seconds": 60.0},
    ),
    (
        "dedup, window expired, tenant changed",
        DEDUP, op(), OTHER_TENANT, CREATED + 61,
        "escalate", {"kind": "dedup", "expired": True, "window_seconds": 60.0, "changed": TENANT_CHANGED},
    ),
    (
        "dedup, inside the window, attempts used up",
        DEDUP, op(attempts=3), SAME, CREATED + 1,
        "escalate", {"kind": "attempts", "attempts": 3},
    ),
    (
        "dedup, inside the window, tenant changed",
        DEDUP, op(), OTHER_TENANT, CREATED + 1,
        "escalate", {"kind": "policy", "changed": TENANT_CHANGED},
    ),
    (
        "dedup, inside the window, policy changed and attempts used up",
        DEDUP, op(attempts=3), OTHER_POLICY, CREATED + 1,
        "escalate", {"kind": "policy", "changed": POLICY_CHANGED},
    ),
    ("blind", BLIND, op(), SAME, CREATED + 1, "escalate", {"kind": "blind"}),
    (
        "blind, policy changed",
        BLIND, op(), OTHER_POLICY, CREATED + 1,
        "escalate", {"kind": "blind", "changed": POLICY_CHANGED},
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("effect", "operation", "scope", "now", "action", "evidence"),
    [row[1:] for row in WITHOUT_LOOKUP],
    ids=[row[0] for row in WITHOUT_LOOKUP],
)
def test_without_a_lookup(
    effect: Effect, operation: Operation, scope: Scope, now: float, action: str, evidence: dict[str, Any]
) -> None:
    decided = without_lookup(operation, effect, scope, now=now)
    assert (decided.action, dict(decided.evidence)) == (action, evidence)


# -- a lookup found it: it landed, whatever else changed -------------------------------

LANDED = [
    (
        "found",
        {"id": "ch_1"}, False,
        {"kind": "lookup", "found": True, "polls": 2, "receipt": {"id": "ch_1"}},
    ),
    (
        "found withdrawn (HTTP 410)",
        "gone", True,
        {"kind": "lookup", "found": True, "polls": 2, "receipt": "gone", "withdrawn": True},
    ),
    ("found without a receipt", None, False, {"kind": "lookup", "found": True, "polls": 2, "receipt": None}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("receipt", "withdrawn", "evidence"), [row[1:] for row in LANDED], ids=[row[0] for row in LANDED]
)
def test_after_the_lookup_found_it(receipt: Any, withdrawn: bool, evidence: dict[str, Any]) -> None:
    decided = after_landed(receipt=receipt, withdrawn=withdrawn, polls=2)
    assert (decided.action, dict(decided.evidence)) == ("confirm", evidence)


# -- a lookup found no trace: proof of absence, or not yet -----------------------------

SENT = CREATED + 5  # dispatched_at of the last send
NOT_LANDED = [
    # (case, effect, operation, scope, now, backoff, decision)
    (
        "strong lookup",
        STRONG, op(dispatched_at=SENT), SAME, SENT + 1, 0.05,
        Reconciliation("resend", {"kind": "lookup", "found": False, "polls": 3}),
    ),
    (
        "strong lookup, attempts used up",
        STRONG, op(dispatched_at=SENT, attempts=3), SAME, SENT + 1, 0.05,
        Reconciliation("escalate", {"kind": "attempts", "found": False, "polls": 3, "attempts": 3}),
    ),
    (
        "strong lookup, tenant changed",
        STRONG, op(dispatched_at=SENT), OTHER_TENANT, SENT + 1, 0.05,
        Reconciliation("escalate", {"kind": "policy", "found": False, "polls": 3, "changed": TENANT_CHANGED}),
    ),
    ("eventual lookup, before the settle time", EVENTUAL, op(dispatched_at=SENT), SAME, SENT + 10, 0.4,
     PollAgain(0.4)),
    ("eventual lookup, backoff longer than the settle time left", EVENTUAL, op(dispatched_at=SENT), SAME,
     SENT + 28, 5.0, PollAgain(2.0)),
    (
        "eventual lookup, settle time passed",
        EVENTUAL, op(dispatched_at=SENT), SAME, SENT + 30, 0.4,
        Reconciliation("resend", {"kind": "lookup", "found": False, "polls": 3}),
    ),
    ("eventual lookup, never dispatched: counted from intent", EVENTUAL, op(), SAME, CREATED + 29, 5.0,
     PollAgain(1.0)),
    (
        "eventual lookup, settle time passed, policy changed",
        EVENTUAL, op(dispatched_at=SENT), OTHER_POLICY, SENT + 31, 0.4,
        Reconciliation("escalate", {"kind": "policy", "found": False, "polls": 3, "changed": POLICY_CHANGED}),
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("effect", "operation", "scope", "now", "backoff", "decision"),
    [row[1:] for row in NOT_LANDED],
    ids=[row[0] for row in NOT_LANDED],
)
def test_after_the_lookup_found_no_trace(
    effect: Effect,
    operation: Operation,
    scope: Scope,
    now: float,
    backoff: float,
    decision: Reconciliation | PollAgain,
) -> None:
    assert after_not_landed(operation, effect, scope, now=now, polls=3, backoff=backoff) == decision


# -- the lookup could not say (errors, timeouts, a receipt too big) --------------------

REASON = "lookup timed out after 10s"
INCONCLUSIVE = [
    # (case, effect, operation, scope, now, action, evidence)
    (
        "no dedup window",
        STRONG, op(), SAME, CREATED + 1,
        "escalate", {"kind": "lookup", "found": None, "reason": REASON},
    ),
    (
        "no dedup window, tenant changed",
        STRONG, op(), OTHER_TENANT, CREATED + 1,
        "escalate", {"kind": "lookup", "found": None, "reason": REASON, "changed": TENANT_CHANGED},
    ),
    (
        "inside the dedup window",
        STRONG_DEDUP, op(), SAME, CREATED + 30,
        "resend", {"kind": "dedup", "found": None, "reason": REASON},
    ),
    (
        "inside the dedup window, attempts used up",
        STRONG_DEDUP, op(attempts=3), SAME, CREATED + 30,
        "escalate", {"kind": "attempts", "found": None, "reason": REASON, "attempts": 3},
    ),
    (
        "inside the dedup window, policy changed",
        STRONG_DEDUP, op(), OTHER_POLICY, CREATED + 30,
        "escalate", {"kind": "policy", "found": None, "reason": REASON, "changed": POLICY_CHANGED},
    ),
    (
        "dedup window expired",
        STRONG_DEDUP, op(), SAME, CREATED + 61,
        "escalate", {"kind": "lookup", "found": None, "reason": REASON},
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("effect", "operation", "scope", "now", "action", "evidence"),
    [row[1:] for row in INCONCLUSIVE],
    ids=[row[0] for row in INCONCLUSIVE],
)
def test_after_an_inconclusive_lookup(
    effect: Effect, operation: Operation, scope: Scope, now: float, action: str, evidence: dict[str, Any]
) -> None:
    decided = after_inconclusive(operation, effect, scope, now=now, reason=REASON)
    assert (decided.action, dict(decided.evidence)) == (action, evidence)


# -- the helpers the rules share -------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "changes"),
    [
        (SAME, {}),
        (OTHER_TENANT, TENANT_CHANGED),
        (OTHER_POLICY, POLICY_CHANGED),
        (Scope(tenant="globex", policy_version="v2"), {**TENANT_CHANGED, **POLICY_CHANGED}),
        (Scope(tenant="acme", policy_version=None), {"policy_version": {"at_intent": "v1", "now": None}}),
    ],
)
def test_scope_changes(scope: Scope, changes: dict[str, Any]) -> None:
    assert scope_changes(op(), scope) == changes


@pytest.mark.parametrize(
    ("effect", "now", "inside"),
    [
        (DEDUP, CREATED, True),
        (DEDUP, CREATED + 60, True),
        (DEDUP, CREATED + 60.5, False),
        (BLIND, CREATED, False),
    ],
)
def test_the_dedup_window_runs_from_intent(effect: Effect, now: float, inside: bool) -> None:
    assert within_dedup_window(op(dispatched_at=CREATED + 50), effect, now) is inside


def test_an_escalation_keeps_the_changes_it_already_names() -> None:
    named = {"kind": "policy", "changed": {"tenant": "as the caller saw it"}}
    assert escalate(op(), OTHER_POLICY, named) == Reconciliation("escalate", named)


@pytest.mark.parametrize(
    ("action", "event"),
    [("confirm", Event.CONFIRM), ("resend", Event.RESEND), ("escalate", Event.ESCALATE)],
)
def test_each_decision_is_recorded_by_its_event(action: Any, event: Event) -> None:
    assert Reconciliation(action).event is event


# -- attempts: sends a worker death ended do not count -----------------------------------


@pytest.mark.parametrize(
    ("effect", "attempts", "lost", "action"),
    [
        (DEDUP, 6, 5, "resend"),  # five deaths, one send of its own: 1 < 3
        (DEDUP, 6, 3, "escalate"),  # three sends ended ambiguously: 3 >= 3
        (STRONG, 4, 4, "resend"),
        (STRONG, 3, 0, "escalate"),
    ],
)
def test_sends_lost_to_a_worker_death_do_not_count_against_max_attempts(
    effect: Effect, attempts: int, lost: int, action: str
) -> None:
    operation = op(attempts=attempts, dispatched_at=CREATED)
    if effect is DEDUP:
        decided = without_lookup(operation, effect, SAME, now=CREATED + 1, lost_sends=lost)
    else:
        decided = after_not_landed(
            operation, effect, SAME, now=CREATED + 1, polls=1, backoff=0.05, lost_sends=lost
        )
    assert isinstance(decided, Reconciliation) and decided.action == action
    if action == "escalate":
        assert decided.evidence["kind"] == "attempts" and decided.evidence["attempts"] == attempts
        assert decided.evidence.get("lost_sends", 0) == lost


def test_a_lost_send_is_a_lost_lease_or_a_hand_back() -> None:
    assert lost_send("lose", {"kind": "lease", "why": "owner gone"})
    assert lost_send("withdraw", {"kind": "not_run"}) and lost_send("withdraw", {"kind": "interrupt"})
    assert not lost_send("lose", {"kind": "timeout", "error": "ReadTimeout"})
    assert not lost_send("resend", {"kind": "dedup"}) and not lost_send("intent", None)
    assert tried(op(attempts=2), 5) == 0
