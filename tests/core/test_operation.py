"""The pure operation state machine (``langgraph_effects.core.operation``).

Property tests drive :func:`advance` with random sequences of changes and check
them against a small independent model: which error a refused change raises,
that a refusal changes nothing, that an accepted change is a row of
``TRANSITIONS``, that terminal states stay terminal, that a decision applied
twice is a no-op, and how ``version`` and ``attempts`` move.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as note_event
from hypothesis import strategies as st

from langgraph_effects.core.operation import (
    MARKS,
    NOTES,
    REOPENING,
    SENDING,
    TERMINAL,
    TRANSITIONS,
    UNRESOLVED,
    VERDICTS,
    Change,
    Event,
    Operation,
    Owner,
    State,
    advance,
    create,
    mermaid,
)
from langgraph_effects.errors import (
    DecisionConflictError,
    IllegalTransitionError,
    StaleVersionError,
    TransitionError,
)
from tests.helpers.operations import build_op

OWNER = Owner(host="host-a", pid=4242, started=12345.0, token="tok-a")
OP_FIELDS: dict[str, Any] = {
    "thread_id": "thread-1",
    "tool": "send_email",
    "tool_call_id": "call-1",
    "args": {"to": "a@example.com", "body": "hi"},
    "args_hash": "h1:abc",
    "contract": "blind",
}


def make_op(**overrides: Any) -> Operation:
    return build_op(OP_FIELDS, **overrides)


def dispatch(owner: Owner = OWNER, lease: float = 100.0) -> Change:
    return Change(Event.DISPATCH, owner=owner, lease_expires_at=lease)


# -- strategies --------------------------------------------------------------------

owners = st.builds(
    Owner,
    host=st.sampled_from(["host-a", "host-b"]),
    pid=st.integers(1, 99999),
    started=st.floats(0, 1e6, allow_nan=False),
    token=st.text("abcdef0123456789", min_size=1, max_size=8),
)
#: A small pool so decision ids repeat, with contents that sometimes match.
decision_ids = st.sampled_from(["dec-1", "dec-2", "dec-3"])
decision_contents = st.sampled_from(
    [None, {}, {"verdict": "landed"}, {"verdict": "landed", "by": "alice"}, {"by": "bob"}]
)
evidences = st.none() | st.fixed_dictionaries(
    {"kind": st.sampled_from(["result", "error", "lookup", "dedup", "verdict", "timeout"])}
)


@st.composite
def changes(draw: st.DrawFn, state: State | None = None) -> Change:
    """A change; with ``state``, mostly one whose event is legal there, preferring
    events that keep the operation unresolved (so runs go deep before they end)."""
    legal = [e for (s, e) in TRANSITIONS if s is state]
    onward = [e for e in legal if TRANSITIONS[(state, e)] not in TERMINAL]
    pick = draw(st.integers(0, 5))
    if onward and pick < 3:
        event = draw(st.sampled_from(onward))
    elif legal and pick < 5:
        event = draw(st.sampled_from(legal))
    else:
        event = draw(st.sampled_from(list(Event)))
    # Mostly well-formed (so sequences get deep), sometimes missing what it needs.
    well_formed = draw(st.integers(0, 4)) > 0
    needs_lease = event in SENDING and well_formed
    needs_decision = event in VERDICTS and well_formed
    has_owner = needs_lease or draw(st.booleans())
    has_lease = needs_lease or draw(st.booleans())
    has_decision = needs_decision or draw(st.integers(0, 5)) == 0
    result = draw(st.none() | st.binary(min_size=1, max_size=8))
    return Change(
        event=event,
        evidence=draw(evidences),
        owner=draw(owners) if has_owner else None,
        lease_expires_at=draw(st.floats(0, 1e9, allow_nan=False)) if has_lease else None,
        result_type="str" if result is not None else None,
        result=result,
        decision_id=draw(decision_ids) if has_decision else None,
        decision=draw(decision_contents) if has_decision else None,
    )


#: How the caller states the version it read: right, absent, or wrong by some amount.
version_modes = st.sampled_from(["right"] * 6 + ["none"] * 2 + [-2, -1, 1, 2])
blind_steps = st.lists(st.tuples(changes(), version_modes), min_size=1, max_size=40)


# -- the model ---------------------------------------------------------------------


def _content(decision: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(decision or {})


@dataclasses.dataclass
class Model:
    """What the contract says should happen, written without looking at advance()."""

    state: State
    version: int
    attempts: int
    decisions: dict[str, dict[str, Any]]

    def expect(self, change: Change, expected_version: int | None) -> type[Exception] | None:
        """The error ``change`` must raise, ``None`` for a no-op, or ``Model`` if accepted."""
        if change.event in VERDICTS and change.decision_id is None:
            return ValueError
        if change.decision_id is not None and change.decision_id in self.decisions:
            if self.decisions[change.decision_id] == _content(change.decision):
                return None
            return DecisionConflictError
        if expected_version is not None and expected_version != self.version:
            return StaleVersionError
        if (self.state, change.event) not in TRANSITIONS:
            return IllegalTransitionError
        if change.event in SENDING and (change.owner is None or change.lease_expires_at is None):
            return ValueError
        return Model

    def apply(self, change: Change) -> None:
        self.state = TRANSITIONS[(self.state, change.event)]
        self.version += 1
        if change.event in SENDING:
            self.attempts += 1
        if change.decision_id is not None:
            self.decisions[change.decision_id] = _content(change.decision)


def _expected_version(mode: str | int, version: int) -> int | None:
    if mode == "right":
        return version
    if mode == "none":
        return None
    assert isinstance(mode, int)
    return version + mode


IDENTITY_FIELDS = (
    "op_id",
    "thread_id",
    "tool",
    "tool_call_id",
    "args",
    "args_hash",
    "provider_key",
    "contract",
    "checkpoint_ns",
    "tenant",
    "policy_version",
    "created_at",
    "extra",
)


class Run:
    """One operation driven step by step, checked against the model after each step."""

    def __init__(self, start_dispatched: bool) -> None:
        self.op = create(make_op(), now=1.0, change=dispatch() if start_dispatched else None)
        self.model = Model(self.op.state, self.op.version, self.op.attempts, decisions={})
        self.applied: list[tuple[Change, int | None]] = []  # accepted changes with decisions
        self.clock = 1.0

    def step(self, change: Change, mode: str | int) -> None:
        self.clock += 1.0
        before = self.op
        snapshot = copy.deepcopy(before)
        expected_version = _expected_version(mode, before.version)
        outcome = self.model.expect(change, expected_version)

        if outcome is Model:
            after = advance(before, change, expected_version=expected_version, now=self.clock)
            self._check_accepted(before, change, after)
            self.model.apply(change)
            note_event(f"row {before.state.value} --{change.event.value}--> {after.state.value}")
            if change.decision_id is not None:
                self.applied.append((change, expected_version))
            self.op = after
        elif outcome is None:
            assert advance(before, change, expected_version=expected_version, now=self.clock) is None
        else:
            with pytest.raises(outcome) as raised:
                advance(before, change, expected_version=expected_version, now=self.clock)
            if outcome is ValueError:
                assert not isinstance(raised.value, TransitionError)

        # Nothing the caller holds changed (nested values included): refusals and
        # no-ops leave the operation as it was; accepted steps return a new one.
        assert before == snapshot
        op, model = self.op, self.model
        assert (op.state, op.version, op.attempts) == (model.state, model.version, model.attempts)
        assert {d for d, _ in op.decisions} == set(model.decisions)
        # Terminal stays terminal, but for a retry of a definite failure (a mark, such
        # as a compensation, is a new version in the same state).
        if before.terminal and (change.event is MARKS.get(before.state) or change.event in NOTES):
            assert op.state is before.state
        elif before.terminal and REOPENING.get(before.state) is not change.event:
            assert op is before
        # Every decision applied so far is still a no-op when it arrives again,
        # whatever happened since and whatever version the re-sender read.
        for old, old_version in self.applied:
            assert advance(op, old, expected_version=old_version, now=self.clock) is None

    def _check_accepted(self, before: Operation, change: Change, after: Operation | None) -> None:
        assert after is not None
        assert isinstance(after.state, State)
        kept = (REOPENING.get(before.state), MARKS.get(before.state))
        assert not before.terminal or change.event in kept or change.event in NOTES, (
            "a terminal operation accepted an event"
        )
        # Every accepted step is a row of the table.
        assert TRANSITIONS[(before.state, change.event)] is after.state
        if change.event in NOTES:  # only the version (and the clock) move
            moved = {"version": before.version + 1, "updated_at": self.clock, "decisions": after.decisions}
            assert after == dataclasses.replace(before, **moved)
            return
        assert after.version == before.version + 1
        sending = change.event in SENDING
        assert after.attempts == before.attempts + (1 if sending else 0)
        assert after.owner == (change.owner if sending else None)
        assert after.lease_expires_at == (change.lease_expires_at if sending else None)
        assert after.dispatched_at == (self.clock if sending else before.dispatched_at)
        if sending:  # a new attempt keeps no outcome of an earlier one to replay
            assert after.result == change.result
        assert after.updated_at == self.clock
        for name in IDENTITY_FIELDS:
            assert getattr(after, name) == getattr(before, name), name

    def finish(self) -> None:
        if self.op.terminal:
            for event in set(Event) - {REOPENING.get(self.op.state), MARKS.get(self.op.state)} - NOTES:
                change = Change(event, owner=OWNER, lease_expires_at=1.0, decision_id="fresh")
                with pytest.raises(IllegalTransitionError):
                    advance(self.op, change, expected_version=self.op.version, now=self.clock)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start_dispatched=st.booleans(), sequence=blind_steps)
def test_blind_change_sequences(start_dispatched: bool, sequence: list[tuple[Change, str | int]]) -> None:
    """Any event at any time: mostly refusals, which must be exact and harmless."""
    run = Run(start_dispatched)
    for change, mode in sequence:
        run.step(change, mode)
    run.finish()


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start_dispatched=st.booleans(), data=st.data())
def test_guided_change_sequences(start_dispatched: bool, data: st.DataObject) -> None:
    """Events mostly legal in the current state, so runs go deep (review, verdicts, re-sends)."""
    run = Run(start_dispatched)
    for _ in range(data.draw(st.integers(1, 40), label="length")):
        change = data.draw(changes(state=run.op.state), label="change")
        run.step(change, data.draw(version_modes, label="version"))
    run.finish()


# -- the table, exhaustively -------------------------------------------------------


def _well_formed(event: Event) -> Change:
    return Change(
        event,
        owner=OWNER if event in SENDING else None,
        lease_expires_at=50.0 if event in SENDING else None,
        decision_id="dec" if event in VERDICTS else None,
    )


@pytest.mark.parametrize(("state", "event"), list(itertools.product(State, Event)))
def test_every_pair_is_either_a_row_or_refused(state: State, event: Event) -> None:
    op = dataclasses.replace(make_op(), state=state, version=5, attempts=2)
    change = _well_formed(event)
    target = TRANSITIONS.get((state, event))
    if target is None:
        with pytest.raises(IllegalTransitionError) as raised:
            advance(op, change, expected_version=5, now=9.0)
        assert raised.value.state == state.value and raised.value.event == event.value
    else:
        after = advance(op, change, expected_version=5, now=9.0)
        assert after is not None and after.state is target and after.version == 6


def test_terminal_states_have_no_outgoing_rows_but_a_retry() -> None:
    assert set(State) == TERMINAL | UNRESOLVED and not TERMINAL & UNRESOLVED
    for state, event in TRANSITIONS:
        assert state not in TERMINAL or event in (REOPENING.get(state), MARKS.get(state)) or event in NOTES
    for state, event in MARKS.items():
        assert TRANSITIONS[(state, event)] is state  # a mark moves nothing
    assert TRANSITIONS[(State.FAILED, Event.RETRY)] is State.DISPATCHED
    # Every unresolved state can still reach a terminal one.
    for state in UNRESOLVED:
        reachable, frontier = {state}, [state]
        while frontier:
            here = frontier.pop()
            for (source, _event), target in TRANSITIONS.items():
                if source is here and target not in reachable:
                    reachable.add(target)
                    frontier.append(target)
        assert reachable & TERMINAL, state


# -- refusals ----------------------------------------------------------------------


def test_verdict_without_decision_id_is_a_value_error() -> None:
    op = dataclasses.replace(make_op(), state=State.REVIEW, version=3)
    for event in VERDICTS:
        with pytest.raises(ValueError, match="decision_id"):
            advance(op, Change(event), expected_version=3, now=1.0)


def test_send_without_owner_or_lease_is_a_value_error() -> None:
    op = create(make_op(), now=1.0)
    for change in (
        Change(Event.DISPATCH),
        Change(Event.DISPATCH, owner=OWNER),
        Change(Event.DISPATCH, lease_expires_at=5.0),
    ):
        with pytest.raises(ValueError, match="owner and a lease"):
            advance(op, change, expected_version=1, now=2.0)
    unknown = dataclasses.replace(op, state=State.UNKNOWN)
    with pytest.raises(ValueError, match="owner and a lease"):
        advance(unknown, Change(Event.RESEND, owner=OWNER), expected_version=1, now=2.0)


def test_stale_version_is_refused_with_both_versions() -> None:
    op = create(make_op(), now=1.0, change=dispatch())
    with pytest.raises(StaleVersionError) as raised:
        advance(op, Change(Event.SUCCEED), expected_version=2, now=2.0)
    assert (raised.value.expected, raised.value.actual) == (2, 1)
    # expected_version=None skips the check, the table still applies.
    assert advance(op, Change(Event.SUCCEED), expected_version=None, now=2.0) is not None


def test_same_decision_twice_is_a_no_op_even_after_other_transitions() -> None:
    op = create(make_op(), now=1.0, change=dispatch())
    op = advance(op, Change(Event.LOSE), expected_version=1, now=2.0)
    assert op is not None and op.state is State.UNKNOWN
    verdict = Change(Event.NOT_LANDED, decision_id="d-1", decision={"by": "alice"})
    op = advance(op, verdict, expected_version=2, now=3.0)
    assert op is not None and op.state is State.PENDING and op.version == 3
    op = advance(op, dispatch(), expected_version=3, now=4.0)
    assert op is not None and op.state is State.DISPATCHED and op.attempts == 2
    # The operator's answer arrives again (a resumed node re-runs): nothing happens,
    # although NOT_LANDED is not allowed from DISPATCHED and version 2 is stale.
    assert advance(op, verdict, expected_version=2, now=5.0) is None
    # Same id, other content: refused.
    with pytest.raises(DecisionConflictError):
        advance(
            op,
            Change(Event.NOT_LANDED, decision_id="d-1", decision={"by": "mallory"}),
            expected_version=4,
            now=5.0,
        )


# -- create ------------------------------------------------------------------------


def test_create_pending() -> None:
    op = create(make_op(), now=7.0)
    assert op.state is State.PENDING
    assert (op.version, op.attempts) == (1, 0)
    assert op.created_at == op.updated_at == 7.0
    assert op.owner is None and op.lease_expires_at is None and op.dispatched_at is None
    assert op.decisions == ()


def test_create_dispatched_is_one_version() -> None:
    op = create(make_op(), now=7.0, change=dispatch(lease=37.0))
    assert op.state is State.DISPATCHED
    assert (op.version, op.attempts) == (1, 1)
    assert op.owner == OWNER and op.lease_expires_at == 37.0 and op.dispatched_at == 7.0
    assert op.created_at == op.updated_at == 7.0
    # The next transition is a compare-and-set on version 1.
    after = advance(op, Change(Event.SUCCEED, result=b"ok"), expected_version=1, now=8.0)
    assert after is not None and after.version == 2 and after.result == b"ok"


def test_create_resets_what_the_caller_passed() -> None:
    stale = dataclasses.replace(make_op(), state=State.CONFIRMED, version=9, attempts=4)
    op = create(stale, now=1.0)
    assert (op.state, op.version, op.attempts) == (State.PENDING, 1, 0)


def test_create_refuses_a_change_that_is_not_a_first_step() -> None:
    with pytest.raises(IllegalTransitionError):
        create(make_op(), now=1.0, change=Change(Event.SUCCEED))
    with pytest.raises(ValueError):
        create(make_op(), now=1.0, change=Change(Event.DISPATCH))



def test_owner_to_json_is_its_fields() -> None:
    full = dataclasses.replace(OWNER, lock="/tmp/lock", since=123.5, node="boot/4026531836")
    assert full.to_json() == dataclasses.asdict(full)
    # Rows written before a field existed look the same: unset fields are left out.
    assert OWNER.to_json() == {k: v for k, v in dataclasses.asdict(OWNER).items() if v is not None}
    assert Owner.from_json(full.to_json()) == full and Owner.from_json(OWNER.to_json()) == OWNER


# -- the diagram -------------------------------------------------------------------


def test_mermaid_lists_every_row_of_the_table() -> None:
    diagram = mermaid()
    assert diagram.startswith("stateDiagram-v2")
    lines = set(diagram.splitlines())
    moves = {row: target for row, target in TRANSITIONS.items() if row[1] not in NOTES}
    for (source, event), target in moves.items():
        assert f"    {source.value} --> {target.value}: {event.value}" in lines
    for state in TERMINAL:
        assert f"    {state.value} --> [*]" in lines
    arrows = [line for line in lines if "-->" in line and "[*]" not in line]
    assert len(arrows) == len(moves)  # notes (every state to itself) are not drawn
    assert all((state, event) in TRANSITIONS for state in State for event in NOTES)
