"""What the conformance cases share: operations and changes to record (see `conformance`)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from ..core.operation import Change, Event, Operation, Owner, State
from ..ledger.base import Ledger


def make_op(**fields: Any) -> Operation:
    """An [`Operation`][langgraph_effects.Operation] with sensible defaults; every id and key is unique per
    call."""
    suffix = uuid.uuid4().hex[:10]
    values: dict[str, Any] = {
        "op_id": f"op-{suffix}",
        "thread_id": "thread-1",
        "tool": "send_email",
        "tool_call_id": f"call-{suffix}",
        "args": {"to": "a@example.com", "n": 1},
        "args_hash": "hash-1",
        "provider_key": f"key-{suffix}",
        "contract": "blind",
    }
    values.update(fields)
    return Operation(**values)


def owner(token: str = "tok-1") -> Owner:
    """A worker's identity (lease holder) with ``token``."""
    return Owner(host="host-a", pid=4242, started=1_700_000_000.25, token=token)


def dispatch(token: str = "tok-1", lease: float | None = None) -> Change:
    """A dispatch by `owner` ``token``, leased for a minute unless ``lease`` is given."""
    return Change(
        Event.DISPATCH,
        owner=owner(token),
        lease_expires_at=lease if lease is not None else time.time() + 60,
    )


def succeed(result: bytes = b'{"ok": true}', **evidence: Any) -> Change:
    """A result that confirms, with ``evidence``."""
    return Change(
        Event.SUCCEED,
        result=result,
        result_type="json",
        evidence={"kind": "result", **evidence},
    )


LOSE = Change(Event.LOSE, evidence={"kind": "timeout", "after_s": 30})
ESCALATE = Change(Event.ESCALATE, evidence={"kind": "lookup", "found": False})


def ids(ops: list[Operation]) -> list[str]:
    """The ids of ``ops``, in order."""
    return [op.op_id for op in ops]


async def trail_len(ledger: Ledger, op_id: str) -> int:
    """How many audit rows ``op_id`` has."""
    return len(await ledger.audit(op_id))


async def populate(ledger: Ledger) -> tuple[dict[str, Operation], float]:
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
