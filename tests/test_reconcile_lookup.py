"""Reconciliation's I/O (``langgraph_effects._runtime.reconcile``): how it polls a
tool's lookup (timeouts, errors, backoff, an eventually consistent listing) and what
it then records. The rules it applies are tabled in ``tests/core/test_reconcile.py``;
here a provider keeps its own records and counts the lookups it answers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from langgraph_effects._runtime.messages import MAX_RECEIPT_BYTES
from langgraph_effects._runtime.reconcile import reconcile
from langgraph_effects.core.contract import Effect, Inconclusive, Landed, LookupRequest, NotLanded
from langgraph_effects.core.operation import Operation, Scope, State
from langgraph_effects.core.reconcile import Reconciliation
from tests.helpers.operations import build_op

SENT = 1000.0
SCOPE = Scope(tenant="acme")


def unknown_op(**overrides: Any) -> Operation:
    return build_op(
        {"state": State.UNKNOWN, "attempts": 1, "tenant": "acme", "created_at": SENT, "dispatched_at": SENT},
        **overrides,
    )


@dataclass
class Provider:
    """Keeps what landed by key; its listing shows an item ``lag`` seconds after it landed."""

    clock: list[float]
    landed: dict[str, tuple[float, Any]] = field(default_factory=dict)
    answers: list[str] = field(default_factory=list)
    failures: list[BaseException | None] = field(default_factory=list)
    """What the next lookups do instead of answering: raise it, or hang (``None``)."""
    lag: float = 0.0

    async def lookup(self, request: LookupRequest) -> Landed | NotLanded | Inconclusive:
        if self.failures:
            failure = self.failures.pop(0)
            self.answers.append("failed")
            if failure is None:
                await asyncio.sleep(3600)
            raise failure  # type: ignore[misc]
        item = self.landed.get(request.provider_key)
        if item is not None and self.clock[0] >= item[0] + self.lag:
            self.answers.append("landed")
            return Landed(receipt=item[1])
        self.answers.append("not landed")
        return NotLanded()


class Clock:
    """A wall clock that moves only when reconciliation sleeps."""

    def __init__(self, now: float) -> None:
        self.now = [now]
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now[0]

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now[0] += seconds


async def _run(provider: Provider, clock: Clock, effect: Effect, **op: Any) -> Reconciliation:
    return await reconcile(unknown_op(**op), effect, args={}, scope=SCOPE, sleep=clock.sleep, clock=clock)


async def test_a_lookup_that_hangs_is_inconclusive_after_its_attempts() -> None:
    clock = Clock(SENT + 1)
    provider = Provider(clock.now, failures=[None, None, None])
    effect = Effect(lookup=provider.lookup, lookup_timeout=0.01, lookup_attempts=3)
    decided = await _run(provider, clock, effect)
    assert provider.answers == ["failed"] * 3
    assert clock.slept == [0.05, 0.1]  # backoff between polls, none after the last
    assert decided == Reconciliation(
        "escalate", {"kind": "lookup", "found": None, "reason": "lookup timed out after 0.01s"}
    )


async def test_a_lookup_that_raises_then_finds_it_confirms() -> None:
    clock = Clock(SENT + 1)
    provider = Provider(clock.now, failures=[RuntimeError("503 from the provider")])
    provider.landed["key-1"] = (SENT, {"id": "ch_1"})
    decided = await _run(provider, clock, Effect(lookup=provider.lookup))
    assert provider.answers == ["failed", "landed"]
    assert decided == Reconciliation(
        "confirm", {"kind": "lookup", "found": True, "polls": 2, "receipt": {"id": "ch_1"}}
    )


async def test_failing_lookups_inside_a_dedup_window_resend_and_say_why() -> None:
    clock = Clock(SENT + 1)
    provider = Provider(clock.now, failures=[RuntimeError("503"), RuntimeError("503")])
    effect = Effect(lookup=provider.lookup, lookup_attempts=2, dedup_window=60)
    decided = await _run(provider, clock, effect)
    assert provider.answers == ["failed", "failed"]
    # Two identical reasons are recorded once.
    assert decided == Reconciliation(
        "resend", {"kind": "dedup", "found": None, "reason": "lookup raised RuntimeError: 503"}
    )


async def test_an_eventual_lookup_polls_until_the_settle_time_then_believes_absence() -> None:
    clock = Clock(SENT + 1)
    provider = Provider(clock.now)
    effect = Effect(lookup=provider.lookup, lookup_consistency="eventual", settle_after=3)
    decided = await _run(provider, clock, effect)
    # Backoff doubles, the last wait stops at the settle time (2 s after the first poll).
    assert clock.slept == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 0.45])
    assert clock.now[0] == pytest.approx(SENT + 3)
    assert provider.answers == ["not landed"] * 7
    assert decided == Reconciliation("resend", {"kind": "lookup", "found": False, "polls": 7})


async def test_an_eventual_lookup_finds_what_its_listing_showed_late() -> None:
    clock = Clock(SENT + 1)
    provider = Provider(clock.now, lag=1.2)
    provider.landed["key-1"] = (SENT, "receipt")
    effect = Effect(lookup=provider.lookup, lookup_consistency="eventual", settle_after=30)
    decided = await _run(provider, clock, effect)
    assert provider.answers == ["not landed"] * 3 + ["landed"]  # at +1, +1.05, +1.15; +1.35
    assert decided.action == "confirm" and decided.evidence["polls"] == 4


async def test_a_receipt_too_big_to_record_goes_to_an_operator() -> None:
    clock = Clock(SENT + 1)
    provider = Provider(clock.now)
    provider.landed["key-1"] = (SENT, "x" * (MAX_RECEIPT_BYTES + 1))
    decided = await _run(provider, clock, Effect(lookup=provider.lookup))
    assert provider.answers == ["landed"]
    assert decided.action == "escalate"
    assert decided.evidence["found"] is None
    assert str(decided.evidence["reason"]).startswith("the lookup found it, but")
