"""Reconciliation's I/O: poll the tool's lookup and apply the rules to what it answers.

The rules (what a dedup window, a lookup's answer or a timeout means for an
``unknown`` operation) are pure functions in `langgraph_effects.core.reconcile`;
this module calls the contract's lookup under its timeout, with bounded backoff,
bounds what it records (receipt size, reasons), and reads the clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..core.contract import Effect, Inconclusive, Landed, LookupRequest, NotLanded
from ..core.operation import Operation, Scope
from ..core.reconcile import (
    PollAgain,
    Reconciliation,
    after_inconclusive,
    after_landed,
    after_not_landed,
    without_lookup,
)
from ..errors import OversizedError
from .messages import MAX_EVIDENCE_CHARS, bounded, check_receipt

__all__ = ["reconcile"]

Sleep = Callable[[float], Awaitable[None]]


async def _lookup_once(effect: Effect, request: LookupRequest) -> Landed | NotLanded | Inconclusive:
    assert effect.lookup is not None
    try:
        return await asyncio.wait_for(effect.lookup(request), effect.lookup_timeout_seconds or None)
    except asyncio.TimeoutError:
        return Inconclusive(f"lookup timed out after {effect.lookup_timeout_seconds:g}s")
    except Exception as error:  # a lookup that raises proves nothing either way
        return Inconclusive(f"lookup raised {type(error).__name__}: {error}")


async def reconcile(
    op: Operation,
    effect: Effect,
    *,
    args: Mapping[str, Any],
    scope: Scope,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.time,
    lost_sends: int = 0,
) -> Reconciliation:
    """Decide what the evidence allows for an ``unknown`` operation.

    Every escalation says what changed in the authority since intent, if anything,
    so the operator sees it beside the evidence. ``lost_sends``: its sends that ended
    with no outcome from the tool, which ``max_attempts`` does not count
    (`langgraph_effects.core.reconcile.tried`).
    """
    if effect.lookup is None:
        return without_lookup(op, effect, scope, now=clock(), lost_sends=lost_sends)
    return await _by_lookup(
        op, effect, args=args, scope=scope, sleep=sleep, clock=clock, lost_sends=lost_sends
    )


async def _by_lookup(
    op: Operation,
    effect: Effect,
    *,
    args: Mapping[str, Any],
    scope: Scope,
    sleep: Sleep,
    clock: Callable[[], float],
    lost_sends: int,
) -> Reconciliation:
    """Poll the lookup with bounded backoff until its answer settles it, or every one
    of ``lookup_attempts`` polls was inconclusive."""
    delay = 0.05
    reasons: list[str] = []
    inconclusive = 0
    polls = 0
    while inconclusive < effect.lookup_attempts:
        polls += 1
        request = LookupRequest(
            operation_id=op.op_id,
            provider_key=op.provider_key,
            tool=op.tool,
            args=args,
            attempt=polls,
        )
        found = await _lookup_once(effect, request)
        if isinstance(found, Landed):
            try:
                receipt = check_receipt(found.receipt, what="lookup's receipt")
            except OversizedError as error:
                # Proof it landed, but too big to record: no lookup evidence to act on.
                return after_inconclusive(
                    op, effect, scope, now=clock(), reason=f"the lookup found it, but {error}",
                    lost_sends=lost_sends,
                )
            return after_landed(receipt=receipt, withdrawn=found.withdrawn, polls=polls)
        if isinstance(found, NotLanded):
            decided = after_not_landed(
                op, effect, scope, now=clock(), polls=polls, backoff=delay, lost_sends=lost_sends
            )
            if not isinstance(decided, PollAgain):
                return decided
            await sleep(decided.wait)
        else:
            inconclusive += 1
            reasons.append(bounded(str(found.reason), MAX_EVIDENCE_CHARS // 4))
            if inconclusive < effect.lookup_attempts:
                await sleep(delay)
        delay = min(delay * 2, 2.0)
    reason = "; ".join(dict.fromkeys(reasons)) or "lookup inconclusive"
    return after_inconclusive(op, effect, scope, now=clock(), reason=reason, lost_sends=lost_sends)
