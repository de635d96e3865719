"""The per-call protocol (``langgraph_effects.core.protocol``) as pure code, without a ledger.

Single-decision properties check :func:`what_next` against the rules it encodes; an
interleaving test then runs an owner A and a resumer B against one operation (the
"ledger" is a variable moved only by :func:`advance`, with its compare-and-set),
with pauses, deaths, heartbeats and a clock, and counts sends at a provider.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from langgraph_effects.core import protocol
from langgraph_effects.core.operation import (
    TERMINAL,
    Change,
    Event,
    Operation,
    Owner,
    State,
    advance,
)
from langgraph_effects.errors import StaleVersionError
from tests.helpers.operations import build_op

LEASE = 10.0


def make_op(**overrides: Any) -> Operation:
    return build_op({"thread_id": "thread-1", "tool_call_id": "call-1"}, **overrides)


def owner(token: str) -> Owner:
    return Owner(host="h", pid=1, started=1.0, token=token)


tokens = st.sampled_from([None, "tok-a", "tok-b"])
ops = st.builds(
    make_op,
    state=st.sampled_from(list(State)),
    owner=st.one_of(st.none(), tokens.filter(bool).map(owner)),  # type: ignore[arg-type]
    lease_expires_at=st.one_of(st.none(), st.floats(0, 100)),
    attempts=st.integers(0, 3),
    extra=st.sampled_from([{}, {"approval": "required"}]),
    evidence=st.sampled_from([None, {"kind": "error", "error": "429"}, {"kind": "error", "raised": True}]),
)


@given(
    op=ops,
    token=tokens,
    alive=st.sampled_from([True, False, None]),
    now=st.floats(0, 100),
    scope_changed=st.booleans(),
)
def test_what_next_rules(
    op: Operation, token: str | None, alive: bool | None, now: float, scope_changed: bool
) -> None:
    step = protocol.what_next(op, token=token, alive=alive, now=now, scope_changed=scope_changed)
    mine = op.state is State.DISPATCHED and op.owner is not None and op.owner.token == token
    # Only the lease holder runs the tool.
    assert isinstance(step, protocol.Run) == mine
    # Only a definite failure its caller was raised is tried again, under the same
    # authority; every other recorded outcome is replayed.
    retried = op.state is State.FAILED and (op.evidence or {}).get("raised") is True
    assert isinstance(step, protocol.Retry) == (retried and not scope_changed)
    if isinstance(step, protocol.Retry):
        change = Change(
            Event.RETRY, owner=owner("tok-c"), lease_expires_at=now + LEASE, evidence=step.evidence
        )
        moved = advance(op, change, expected_version=op.version, now=now)
        assert moved is not None and moved.state is State.DISPATCHED
        assert moved.attempts == op.attempts + 1 and moved.provider_key == op.provider_key
        assert protocol.what_next(moved, token="tok-c", alive=None, now=now) == protocol.Run()
    elif op.state in TERMINAL:
        assert isinstance(step, protocol.Replay)
    if op.state is State.DISPATCHED and not mine:
        if alive is True:
            assert isinstance(step, protocol.Wait)  # a live owner is never expired by time
        elif alive is False:
            assert isinstance(step, protocol.TakeOver)  # a dead one is gone at once
        else:
            live = op.lease_expires_at is not None and op.lease_expires_at > now
            assert isinstance(step, protocol.Wait) == live
    if isinstance(step, protocol.TakeOver):
        # The takeover is a legal transition that carries the lease it saw ...
        moved = advance(op, step.change, expected_version=op.version, now=now)
        assert moved is not None and moved.state is State.UNKNOWN and moved.owner is None
        # ... and loses to a heartbeat that renewed the lease in the meantime (only a
        # lease with an owner can be renewed: renewal compares the owner token).
        if op.owner is None or op.lease_expires_at is None:
            return
        renewed = dataclasses.replace(op, lease_expires_at=(op.lease_expires_at or 0) + 1)
        try:
            advance(renewed, step.change, expected_version=op.version, now=now)
        except StaleVersionError:
            pass
        else:
            raise AssertionError("a takeover went through over a renewed lease")


@given(op=ops, alive=st.sampled_from([True, False, None]), now=st.floats(0, 100))
def test_holder_gone_is_the_takeover_rule(op: Operation, alive: bool | None, now: float) -> None:
    """`holder_gone` (what recovery and the console ask, through
    ``lease.lease_expired``) says the sender is gone exactly when a resumer would take
    the operation over; nothing but a ``dispatched`` operation has a sender."""
    gone = protocol.holder_gone(op, alive=alive, now=now)
    if op.state is not State.DISPATCHED:
        assert not gone
        return
    step = protocol.what_next(op, token=None, alive=alive, now=now)
    assert gone == isinstance(step, protocol.TakeOver)


@given(
    outcome=st.sampled_from(
        [
            protocol.Succeeded("t", b"r"),
            protocol.Failed("t", b"e", "boom"),
            protocol.Ambiguous({"kind": "timeout"}),
        ]
    ),
    state=st.sampled_from(list(State)),
)
def test_a_late_result_is_evidence_never_a_send(outcome: protocol.Outcome, state: State) -> None:
    """A success settles an ``unknown`` or reviewed operation; anything else is a ``late``
    note that moves nothing but the version (and is never a send)."""
    current = make_op(state=state, owner=owner("tok-b") if state is State.DISPATCHED else None)
    change = protocol.late(current, outcome, token="tok-a", sender={"host": "a", "pid": 1})
    assert change.event not in (Event.DISPATCH, Event.RESEND, Event.RETRY)
    moved = advance(current, change, expected_version=current.version, now=1.0)
    assert moved is not None and moved.version == current.version + 1
    if isinstance(outcome, protocol.Succeeded) and state in (State.UNKNOWN, State.REVIEW):
        assert moved.state is State.CONFIRMED and moved.evidence["late"] is True  # type: ignore[index]
        return
    assert change.event is Event.LATE and change.evidence is not None
    assert change.evidence["kind"] == "late" and change.evidence["state_then"] == state.value
    assert change.evidence["sender"] == {"host": "a", "pid": 1}
    assert (moved.state, moved.evidence, moved.owner, moved.result) == (
        current.state, current.evidence, current.owner, current.result
    )


@given(raised=st.booleans())
def test_a_definite_failure_says_whether_it_was_raised(raised: bool) -> None:
    """What :func:`protocol.raised` reads is what :func:`protocol.settle` wrote."""
    op = make_op(state=State.DISPATCHED, owner=owner("tok-a"), lease_expires_at=LEASE, attempts=1)
    change = protocol.settle(protocol.Failed("t", b"e", "RateLimited: 429", raised=raised))
    failed = advance(op, change, expected_version=op.version, now=1.0)
    assert failed is not None and failed.state is State.FAILED
    assert protocol.raised(failed) is raised
    step = protocol.what_next(failed, token=None, alive=None, now=1.0)
    assert isinstance(step, protocol.Retry if raised else protocol.Replay)


def test_a_retried_failure_never_replays_the_old_error() -> None:
    """429 raised, retried, the retry's sender dies after the effect landed, a lookup
    confirms it: the model reads that it landed, not the first attempt's 429."""
    from langgraph_effects._runtime import messages

    op = make_op(state=State.DISPATCHED, owner=owner("tok-a"), lease_expires_at=LEASE, attempts=1)
    error = messages.dump(messages.ToolMessage("Error: 429", tool_call_id="call-1", status="error"))
    steps = [
        protocol.settle(protocol.Failed(*error, "RateLimited: 429", raised=True)),
        Change(Event.RETRY, owner=owner("tok-b"), lease_expires_at=2 * LEASE, evidence={"kind": "retry"}),
        Change(Event.LOSE, evidence={"kind": "lease"}),
        Change(Event.CONFIRM, evidence={"kind": "lookup", "found": True, "receipt": "R-1"}),
    ]
    for change in steps:
        moved = advance(op, change, expected_version=op.version, now=1.0)
        assert moved is not None
        op = moved
    assert (op.state, op.attempts, op.result) == (State.CONFIRMED, 2, None)
    message = messages.replay(op, tool_call_id="call-1", tool="send")
    assert message.status == "success" and "landed" in message.content


# -- an owner and a resumer, interleaved -----------------------------------------------


@dataclass
class World:
    """One operation, the clock, the provider, and the two workers' private state."""

    same_host: bool
    now: float = 0.0
    op: Operation = field(default_factory=make_op)
    sends: list[tuple[str, float, float]] = field(default_factory=list)
    """(sender, time sent, the lease expiry the sender last confirmed)."""
    a_phase: str = "idle"  # idle -> leased -> checked -> sent -> done
    a_version: int = 0
    a_confirmed: float = 0.0
    a_paused: bool = False
    a_dead: bool = False
    b_token: str | None = None
    b_confirmed: float = 0.0

    def move(self, change: Change, expected: int | None) -> bool:
        try:
            moved = advance(self.op, change, expected_version=expected, now=self.now)
        except StaleVersionError:
            return False
        if moved is not None:
            self.op = moved
        return True

    def a_can(self) -> bool:
        return not self.a_paused and not self.a_dead

    def a_alive(self) -> bool | None:
        """What B can prove about A: on one host, whether A's dispatch is still held."""
        if not self.same_host:
            return None
        return not self.a_dead and self.a_phase in ("leased", "checked", "sent")

    def step(self, action: str, dt: float) -> None:
        if action == "tick":
            self.now += dt
        elif action == "pause":
            self.a_paused = True
        elif action == "wake":
            self.a_paused = False
        elif action == "die":
            self.a_dead = True
        elif action == "a":
            self.step_a()
        elif action == "beat":
            if self.a_can() and self.a_phase in ("leased", "checked", "sent") and self.a_ours():
                self.op = dataclasses.replace(self.op, lease_expires_at=self.now + LEASE)
        elif action == "b":
            self.step_b()

    def a_ours(self) -> bool:
        return protocol.ours(self.op, "tok-a")

    def step_a(self) -> None:
        if not self.a_can():
            return
        if self.a_phase == "idle":
            change = Change(Event.DISPATCH, owner=owner("tok-a"), lease_expires_at=self.now + LEASE)
            if self.op.state is State.PENDING and self.move(change, self.op.version):
                self.a_phase, self.a_version = "leased", self.op.version
        elif self.a_phase == "leased":  # the last check before the tool runs
            if not self.a_ours():
                self.a_phase = "done"
                return
            if not protocol.lease_to_spare(self.op, now=self.now, lease_seconds=LEASE):
                self.op = dataclasses.replace(self.op, lease_expires_at=self.now + LEASE)
            self.a_phase, self.a_confirmed = "checked", self.op.lease_expires_at or 0.0
        elif self.a_phase == "checked":
            self.sends.append(("a", self.now, self.a_confirmed))
            self.a_phase = "sent"
        elif self.a_phase == "sent":
            outcome = protocol.Succeeded("t", b"r")
            if not self.move(protocol.settle(outcome), self.a_version):
                late = protocol.late(self.op, outcome, token="tok-a")
                if late is not None:
                    self.move(late, None)
            self.a_phase = "done"

    def step_b(self) -> None:
        alive = self.a_alive() if protocol.needs_liveness(self.op, self.b_token) else None
        step = protocol.what_next(self.op, token=self.b_token, alive=alive, now=self.now)
        if isinstance(step, protocol.TakeOver):
            self.move(step.change, self.op.version)
        elif isinstance(step, protocol.Reconcile):  # a strong lookup at the provider
            if self.sends:
                self.move(Change(Event.CONFIRM, evidence={"kind": "lookup"}), self.op.version)
            else:
                change = Change(Event.RESEND, owner=owner("tok-b"), lease_expires_at=self.now + LEASE)
                if self.move(change, self.op.version):
                    self.b_token, self.b_confirmed = "tok-b", self.now + LEASE
        elif isinstance(step, protocol.Dispatch):
            change = Change(Event.DISPATCH, owner=owner("tok-b"), lease_expires_at=self.now + LEASE)
            if self.move(change, self.op.version):
                self.b_token, self.b_confirmed = "tok-b", self.now + LEASE
        elif isinstance(step, protocol.Run):
            self.sends.append(("b", self.now, self.b_confirmed))
            self.move(protocol.settle(protocol.Succeeded("t", b"r")), self.op.version)


actions = st.lists(
    st.tuples(
        st.sampled_from(["tick", "pause", "wake", "die", "a", "a", "beat", "b", "b"]),
        st.floats(0, 2 * LEASE),
    ),
    max_size=40,
)


#: Issue 13 (3a): A paused between its last check and the send, past its lease; B
#: takes over, a strong lookup finds nothing, B re-sends; A wakes and sends.
PAUSED_PAST_LEASE = [
    ("a", 0.0), ("a", 0.0), ("pause", 0.0), ("tick", 2 * LEASE),
    ("b", 0.0), ("b", 0.0), ("b", 0.0), ("wake", 0.0), ("a", 0.0), ("a", 0.0),
]  # fmt: skip


@settings(max_examples=400)
@example(script=PAUSED_PAST_LEASE, same_host=True)
@example(script=PAUSED_PAST_LEASE, same_host=False)
@given(script=actions, same_host=st.booleans())
def test_owner_and_resumer_interleaved(script: list[tuple[str, float]], same_host: bool) -> None:
    world = World(same_host=same_host)
    for action, dt in script:
        world.step(action, dt)
        assert world.op.state in State
    if same_host:
        # Liveness is proved, so a paused owner is waited for however long: one send.
        assert len(world.sends) <= 1, world.sends
    else:
        # Across hosts only the clock tells: a second send happens only when the first
        # sender was paused past the lease it had confirmed (the documented residual).
        if len(world.sends) > 1:
            a_send = next(s for s in world.sends if s[0] == "a")
            assert a_send[1] >= a_send[2], world.sends  # A sent after its lease had run out
    # And nobody waits for ever: once A is gone, B settles it within a few steps.
    world.a_dead = True
    world.now += 2 * LEASE
    for _ in range(6):
        world.step_b()
    assert world.op.terminal, world.op
    assert len(world.sends) >= 1
