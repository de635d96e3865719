"""Admission controls as pure code: durable budgets and circuit breakers.

A tool's [`Effect`][langgraph_effects.Effect] may declare [`Budget`][langgraph_effects.Budget]s (how many
sends, or how much of an argument summed, per thread, run or tenant, optionally per
time window) and a [`CircuitBreaker`][langgraph_effects.CircuitBreaker] (stop sending to a provider that keeps
failing). Both are one mechanism: *control rows* (`ControlRow`, keyed by a
control name and a scope) that the ledger locks in the transaction that commits a
send, and that these functions read and rewrite:

* `admit`: may this send leave now? (and the rows that record it if so);
* `controls_after`: what a transition of the send does to the rows (a definite failure gives
  its budget share back; failures and timeouts open a circuit, a success closes it).

An operation holds at most one share of each budget: the *hold* row (keyed by the
operation id) records what it was charged, so a re-dispatch of an operation that
still holds its share is not charged twice, and a refund gives back exactly what
was charged, in the window it was charged in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from ..errors import InvalidOptionError
from . import options as o
from ._fields import seconds

Per = Literal["thread", "run", "tenant"]
"""What a budget is counted per (always within one tenant)."""
OnExceed = Literal["refuse", "approve"]
"""What a send over budget does: answered with a refusal, or held for an approver."""
Key = tuple[str, str]
"""A control row's key: (control, scope)."""

HOLD = "hold"
"""The control name of the rows that record what an operation was charged."""


@o.checked_options
@dataclass(frozen=True)
class Budget:
    """A durable budget on sends, shared by every tool whose `Effect` lists it.

    Args:
        name: the budget's name; tools listing budgets of the same name share it.
        max_sends: the most sends allowed per scope (and window).
        max_total: the most of argument ``total_of`` summed over sends.
        total_of: the argument summed for ``max_total`` (e.g. ``"amount"``); a call
            without a number there is refused.
        per: ``"thread"``, ``"run"`` (``run_id`` in the config) or ``"tenant"``;
            every budget is counted within one tenant.
        window: a fixed time window (seconds or ``timedelta``): the count starts
            again at each multiple of it. ``None``: the budget never renews.
        on_exceed: ``"refuse"`` answers the model with a refusal (nothing is sent);
            ``"approve"`` asks an approver, who may allow that one send over budget.
    """

    name: str
    max_sends: int | None = None
    max_total: float | None = None
    total_of: str | None = None
    per: Per = "tenant"
    window: float | timedelta | None = None
    on_exceed: OnExceed = "refuse"

    def __post_init__(self) -> None:
        o.check_all("Budget", self, _BUDGET_OPTIONS)
        if self.max_sends is None and self.max_total is None:
            raise o.refuse(
                "Budget", "max_sends", None, _BUDGET_OPTIONS["max_sends"],
                f"Budget {self.name!r} limits nothing: give max_sends and/or max_total.",
            )
        if self.max_total is not None and self.total_of is None:
            raise o.refuse(
                "Budget", "total_of", None, _BUDGET_OPTIONS["total_of"],
                f"Budget {self.name!r}: max_total needs total_of, the argument to sum (e.g. 'amount').",
            )

    @property
    def control(self) -> str:
        """The control name of its rows."""
        return "budget:" + self.name


@o.checked_options
@dataclass(frozen=True)
class CircuitBreaker:
    """A durable circuit breaker for one provider (or a named group of tools).

    Args:
        name: the provider's name; tools naming the same breaker share it.
        failures: this many definite failures or ambiguous outcomes (timeouts,
            errors) within ``within`` seconds open the circuit.
        within: the window the failures are counted in.
        cooldown: how long an open circuit refuses every send; after it, one probing
            send is let through (half-open): its success closes the circuit, its
            failure opens it again. A probe with no outcome after another cooldown
            (its worker died) lets the next send probe instead.
    """

    name: str
    failures: int = 5
    within: float | timedelta = 60.0
    cooldown: float | timedelta = 30.0

    def __post_init__(self) -> None:
        o.check_all("CircuitBreaker", self, _BREAKER_OPTIONS)

    @property
    def control(self) -> str:
        """The control name of its row."""
        return "circuit:" + self.name

    @property
    def key(self) -> Key:
        """Its row's key: one row per breaker, shared by every tenant."""
        return (self.control, "")


#: What each option of `Budget` accepts (checked when it is made).
_BUDGET_OPTIONS: dict[str, o.Accepts] = {
    "name": o.name(),
    "max_sends": o.optional(o.whole(0)),
    "max_total": o.optional(o.amount()),
    "total_of": o.optional(o.name()),
    "per": o.one_of("thread", "run", "tenant"),
    "window": o.optional(o.duration(positive=True)),
    "on_exceed": o.one_of("refuse", "approve"),
}

#: What each option of `CircuitBreaker` accepts.
_BREAKER_OPTIONS: dict[str, o.Accepts] = {
    "name": o.name(),
    "failures": o.whole(1),
    "within": o.duration(positive=True),
    "cooldown": o.duration(positive=True),
}


@dataclass(frozen=True)
class Controls:
    """What one tool declares: its budgets and its circuit breaker."""

    budgets: tuple[Budget, ...] = ()
    circuit: CircuitBreaker | None = None

    def __bool__(self) -> bool:
        return bool(self.budgets) or self.circuit is not None


@dataclass(frozen=True)
class ControlRow:
    """One stored control row: ``state`` is plain JSON (its shape is this module's)."""

    control: str
    scope: str
    state: Mapping[str, Any] = field(default_factory=dict)
    updated_at: float = 0.0

    @property
    def key(self) -> Key:
        """(control, scope): what the row is stored under."""
        return (self.control, self.scope)


@dataclass(frozen=True)
class Call:
    """What a send's scope keys and amounts are taken from."""

    op_id: str
    thread_id: str
    tenant: str
    args: Mapping[str, Any]
    run_id: str | None = None


@dataclass(frozen=True)
class Refusal:
    """A send that may not leave: which control refused it, and why (for the model)."""

    kind: Literal["budget", "circuit"]
    name: str
    reason: str
    ask: bool = False
    """``True``: an approver may allow it once (a budget with ``on_exceed="approve"``)."""


@dataclass(frozen=True)
class Admission:
    """What `admit` decided: a refusal, or the rows to write with the send."""

    refusal: Refusal | None
    writes: tuple[ControlRow, ...] = ()


def hold_key(op_id: str) -> Key:
    """The key of the row recording what operation ``op_id`` was charged."""
    return (HOLD, op_id)


def budget_scope(budget: Budget, call: Call, now: float) -> str:
    """The scope a send of ``call`` at ``now`` is counted in (tenant, per, window)."""
    parts: list[Any] = [call.tenant]
    if budget.per == "thread":
        parts.append(call.thread_id)
    elif budget.per == "run":
        if not call.run_id:
            raise ValueError(
                f"Budget {budget.name!r} is counted per run, but the run has no run_id: pass "
                "config={'configurable': {'run_id': ...}} (or the config's run_id)"
            )
        parts.append(call.run_id)
    window = seconds(budget.window)
    if window is not None:
        parts.append(math.floor(now / window) * window)
    return json.dumps(parts)


def admit_keys(controls: Controls, call: Call, now: float) -> list[Key]:
    """The rows `admit` reads, in the order every worker locks them."""
    keys = {hold_key(call.op_id)}
    keys.update((b.control, budget_scope(b, call, now)) for b in controls.budgets)
    if controls.circuit is not None:
        keys.add(controls.circuit.key)
    return sorted(keys)


def circuit_status(breaker: CircuitBreaker, state: Mapping[str, Any], now: float) -> str:
    """``"closed"``, ``"open"`` (refusing), ``"half-open"`` (a probe may go) or
    ``"probing"`` (a probe is out: refusing)."""
    opened = state.get("opened_at")
    if opened is None:
        return "closed"
    cooldown = seconds(breaker.cooldown) or 0.0
    if now < float(opened) + cooldown:
        return "open"
    probe_at = state.get("probe_at")
    if state.get("probe") and probe_at is not None and now < float(probe_at) + cooldown:
        return "probing"
    return "half-open"


def _amount(budget: Budget, call: Call) -> float | str:
    """The amount a send adds to ``budget``'s total, or why it has none."""
    if budget.total_of is None:
        return 0.0
    value = call.args.get(budget.total_of)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return (
            f"budget {budget.name!r} sums the argument {budget.total_of!r}, and this call's "
            f"{budget.total_of!r} is {value!r}, not a number"
        )
    return float(value)


def _row(rows: Mapping[Key, ControlRow], key: Key) -> ControlRow:
    return rows.get(key) or ControlRow(key[0], key[1])


def _over(budget: Budget, used: Mapping[str, Any], amount: float) -> str | None:
    """Why one more send of ``amount`` would exceed ``budget`` (``None``: it fits)."""
    sends, total = int(used.get("sends", 0)), float(used.get("total", 0.0))
    if budget.max_sends is not None and sends + 1 > budget.max_sends:
        return f"budget {budget.name!r} allows {budget.max_sends} send(s) and {sends} were sent"
    if budget.max_total is not None and total + amount > budget.max_total:
        left = max(budget.max_total - total, 0.0)
        return (
            f"budget {budget.name!r} allows a total {budget.total_of} of {budget.max_total:g}; "
            f"{total:g} was sent, {left:g} is left and this call asks {amount:g}"
        )
    return None


def _window_note(budget: Budget) -> str:
    window = seconds(budget.window)
    scope = {"thread": "this thread", "run": "this run", "tenant": "this tenant"}[budget.per]
    return f" in {scope}" + (f" (the window renews every {window:g}s)" if window else "")


def admit(
    controls: Controls,
    call: Call,
    rows: Mapping[Key, ControlRow],
    *,
    now: float,
    override: bool = False,
    keyed_at: float | None = None,
) -> Admission:
    """Whether a send of ``call`` may leave at ``now``, given the rows of
    `admit_keys` as stored (missing rows are empty).

    ``override``: an approver allowed this send over budget (it is still counted).
    A re-send that settles an earlier, ambiguous send never comes here (it is not
    gated: see `ledger.controls.CHARGING`). An operation that already holds its
    share (its hold row has charges) is not charged again. ``keyed_at``: the time
    `admit_keys` was asked at (the rows were locked then; default ``now``).
    """
    writes: list[ControlRow] = []
    breaker = controls.circuit
    if breaker is not None:
        row = _row(rows, breaker.key)
        status = circuit_status(breaker, row.state, now)
        if status in ("open", "probing"):
            wait = float(row.state["opened_at"]) + (seconds(breaker.cooldown) or 0.0) - now
            why = (
                f"the circuit {breaker.name!r} is open after repeated failures; it lets one "
                f"probing send through in {max(wait, 0.0):.0f}s"
                if status == "open"
                else f"the circuit {breaker.name!r} is half-open and its one probing send is out"
            )
            return Admission(Refusal("circuit", breaker.name, why))
        if status == "half-open":
            writes.append(_evolve(row, now, probe=call.op_id, probe_at=now, **_shape(breaker)))
    hold = _row(rows, hold_key(call.op_id))
    if hold.state.get("charges"):
        return Admission(None, tuple(writes))
    charges: list[list[Any]] = []
    for budget in controls.budgets:
        key = (budget.control, budget_scope(budget, call, now if keyed_at is None else keyed_at))
        row = _row(rows, key)
        amount = _amount(budget, call)
        if isinstance(amount, str):
            return Admission(Refusal("budget", budget.name, amount))
        over = _over(budget, row.state, amount)
        if over is not None and not override:
            reason = over + _window_note(budget)
            return Admission(Refusal("budget", budget.name, reason, ask=budget.on_exceed == "approve"))
        sends, total = int(row.state.get("sends", 0)), float(row.state.get("total", 0.0))
        limits = {"max_sends": budget.max_sends, "max_total": budget.max_total}  # for the console
        writes.append(_evolve(row, now, sends=sends + 1, total=total + amount, **limits))
        charges.append([key[0], key[1], amount])
    if charges:
        writes.append(_evolve(hold, now, charges=charges))
    return Admission(None, tuple(writes))


Signal = Literal["success", "failure", "refund", "other"]
"""What a transition says to the controls (see `signal_of`)."""


def signal_of(event: str, evidence: Mapping[str, Any] | None) -> Signal:
    """What a transition of an operation with controls tells them: ``"refund"`` when
    it proves nothing was applied (``fail``, ``withdraw``, ``not_landed``: the
    operation gives its budget share back; ``fail`` also counts as a circuit
    failure), ``"success"`` for ``succeed``, ``"failure"`` for an ambiguous
    outcome of the tool (``lose`` with a timeout or an error, not a lost lease)."""
    if event in ("fail", "withdraw", "not_landed"):
        return "refund"
    if event == "succeed":
        return "success"
    if event == "lose" and (evidence or {}).get("kind") in ("timeout", "error"):
        return "failure"
    return "other"


def charged_keys(hold: ControlRow | None) -> list[Key]:
    """The budget rows an operation's hold charged."""
    if hold is None:
        return []
    return sorted({(str(c[0]), str(c[1])) for c in hold.state.get("charges") or ()})


def controls_after(
    controls: Controls,
    op_id: str,
    event: str,
    evidence: Mapping[str, Any] | None,
    rows: Mapping[Key, ControlRow],
    *,
    now: float,
) -> tuple[ControlRow, ...]:
    """The rows to write when an operation's transition ``event`` is recorded, given
    its hold row, the rows it charged (`charged_keys`) and its circuit's row."""
    signal = signal_of(event, evidence)
    writes: list[ControlRow] = []
    hold = rows.get(hold_key(op_id))
    if signal == "refund" and hold is not None and hold.state.get("charges"):
        for control, scope, amount in hold.state["charges"]:
            row = _row(rows, (str(control), str(scope)))
            sends = max(int(row.state.get("sends", 0)) - 1, 0)
            total = max(float(row.state.get("total", 0.0)) - float(amount), 0.0)
            writes.append(_evolve(row, now, sends=sends, total=total))
        writes.append(_evolve(hold, now, charges=[]))
    breaker = controls.circuit
    if breaker is not None and signal != "other":
        failed = signal == "failure" or event == "fail"
        if signal == "refund" and not failed:  # a withdrawal says nothing of the provider
            return tuple(writes)
        row = _row(rows, breaker.key)
        writes.append(_circuit_after(breaker, row, op_id, failed=failed, now=now))
    return tuple(writes)


def _circuit_after(
    breaker: CircuitBreaker, row: ControlRow, op_id: str, *, failed: bool, now: float
) -> ControlRow:
    state = row.state
    if not failed:
        if state.get("opened_at") is None and not state.get("failures"):
            return row
        return ControlRow(row.control, row.scope, {"failures": [], **_shape(breaker)}, now)
    within = seconds(breaker.within) or 0.0
    failures = [float(t) for t in state.get("failures") or () if now - float(t) < within]
    failures = [*failures, now][-breaker.failures :]
    opened = state.get("opened_at")
    probe = state.get("probe")
    if probe == op_id or (opened is None and len(failures) >= breaker.failures):
        opened_state = {"failures": failures, "opened_at": now, **_shape(breaker)}
        return ControlRow(row.control, row.scope, opened_state, now)
    return _evolve(row, now, failures=failures, **_shape(breaker))


def _shape(breaker: CircuitBreaker) -> dict[str, Any]:
    """What a breaker's row keeps of its declaration, for the console."""
    return {"threshold": breaker.failures, "cooldown": seconds(breaker.cooldown)}


def _evolve(row: ControlRow, now: float, **state: Any) -> ControlRow:
    return ControlRow(row.control, row.scope, {**row.state, **state}, now)


def describe(row: ControlRow, *, now: float) -> dict[str, Any] | None:
    """What the console shows of a stored row (``None``: a row nobody charged yet).

    A budget: its name, scope, sends and total used, and what is left of the limits
    recorded with its last charge. A circuit breaker: its name and status
    (``closed``, ``open``, ``half-open`` or ``probing``), recent failures, and when
    it opened."""
    state = row.state
    if row.control.startswith("budget:") and "sends" in state:
        sends, total = int(state.get("sends", 0)), float(state.get("total", 0.0))
        max_sends, max_total = state.get("max_sends"), state.get("max_total")
        return {
            "kind": "budget",
            "name": row.control.removeprefix("budget:"),
            "scope": json.loads(row.scope) if row.scope.startswith("[") else row.scope,
            "sends": sends,
            "sends_left": None if max_sends is None else max(int(max_sends) - sends, 0),
            "total": total,
            "total_left": None if max_total is None else max(float(max_total) - total, 0.0),
            "updated_at": row.updated_at,
        }
    if row.control.startswith("circuit:") and state:
        cooldown = float(state.get("cooldown") or 0.0)
        breaker = CircuitBreaker(row.control.removeprefix("circuit:"), cooldown=cooldown or 1.0)
        return {
            "kind": "circuit",
            "name": breaker.name,
            "status": circuit_status(breaker, state, now),
            "failures": len(state.get("failures") or ()),
            "threshold": state.get("threshold"),
            "opened_at": state.get("opened_at"),
            "updated_at": row.updated_at,
        }
    return None


def controls_of(budgets: Sequence[Budget], circuit: CircuitBreaker | None) -> Controls:
    """The `Controls` of an effect's declaration (checked: no budget named twice)."""
    names = [b.name for b in budgets]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InvalidOptionError(
            f"Effect(budgets=...): a tool lists the budget(s) {twice} twice; list each once.",
            owner="Effect", option="budgets", given=list(budgets), accepts="budgets of distinct names",
        )
    return Controls(tuple(budgets), circuit)
