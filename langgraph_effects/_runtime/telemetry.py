"""What effectful calls are doing, told to OpenTelemetry (spans and metrics) and to
LangChain's callbacks (the runs LangSmith shows).

The session calls in at the points a call's life turns: `call_started` and
`call_ended` around one call's round (`Session.call_steps`), `moved` for every
transition the dispatcher records (`Dispatcher.move`, the one place they are applied),
`reconciling`, `dispatching` and `compensating` around the work they time, and
`refused`. Nothing else in the package knows about OpenTelemetry.

OpenTelemetry is optional (the ``otel`` extra, ``opentelemetry-api`` only): without
it nothing is imported and every hook returns at once. With it and no SDK configured
the API's own no-op tracer and meter answer. Spans and runs carry ids, states and
counts only: never a call's arguments, its receipt or an operator's note.

Span tree of one call (attributes under ``langgraph_effects.``, GenAI conventions
where they exist)::

    execute_tool {tool}              the call's round: state_before/after, what
      reconcile {tool}               a crash left it in flight: action, event
      dispatch {tool}                current while the tool runs: its spans nest here
      compensate {tool}              undos it ordered
    events: transition (event, state_before, state_after, attempt), refused

A resumed process starts a new trace; ``langgraph_effects.operation_id`` on every
span ties it to the trace of the process that crashed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from ..core import protocol
from ..core.operation import Change, Event, Operation, State

if TYPE_CHECKING:
    from .calls import CallRecord

try:  # the ``otel`` extra
    from opentelemetry import context as otel_context
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace
except ImportError:  # pragma: no cover - exercised by the cost benchmark's bare run
    ENABLED = False
else:
    ENABLED = True

PREFIX = "langgraph_effects."
"""The prefix of this package's span attributes, metric attributes and run metadata."""

#: What a call did, in the ``langgraph_effects.what`` attribute and metadata.
SENT = "sent"
REPLAYED = "replayed"
LANDED_BY_LOOKUP = "landed_by_lookup"
RESENT_UNDER_KEY = "resent_under_key"
REFUSED = "refused"
WAITING_FOR_REVIEW = "waiting_for_review"
WAITING_FOR_APPROVAL = "waiting_for_approval"
PAUSED = "paused"
_WAITING = {"approval": WAITING_FOR_APPROVAL, "review": WAITING_FOR_REVIEW, "interrupt": PAUSED}

METRICS = {
    "transitions": "langgraph_effects.transitions",
    "calls": "langgraph_effects.calls",
    "dispatch": "langgraph_effects.dispatch.duration",
    "reconcile": "langgraph_effects.reconcile.duration",
    "review_wait": "langgraph_effects.review.wait",
}
"""The instruments' names (see docs/observing.md)."""


class _Instruments:
    """The tracer and instruments, made once from the global providers (proxies that
    follow an SDK configured later)."""

    def __init__(self) -> None:
        self.tracer = otel_trace.get_tracer("langgraph_effects")
        meter = otel_metrics.get_meter("langgraph_effects")
        self.transitions = meter.create_counter(
            METRICS["transitions"], unit="{transition}", description="Operation state transitions recorded"
        )
        self.calls = meter.create_counter(
            METRICS["calls"], unit="{call}", description="Effectful calls answered, by what happened"
        )
        self.dispatch = meter.create_histogram(
            METRICS["dispatch"], unit="s", description="Time the tool ran under its lease"
        )
        self.reconcile = meter.create_histogram(
            METRICS["reconcile"], unit="s", description="Time reconciliation took (dedup re-send or lookup)"
        )
        self.review_wait = meter.create_histogram(
            METRICS["review_wait"],
            unit="s",
            description="Time from a question (review or approval) to the answer that settled it",
        )


_made: _Instruments | None = None


def _instruments() -> _Instruments:
    global _made
    if _made is None:
        _made = _Instruments()
    return _made


@dataclass
class CallTrace:
    """One call's round as told: its span, its LangChain run and what it did."""

    span: Any
    state_before: str
    what: str | None = None
    ran: bool = False
    run: Any = None
    labels: dict[str, str] = field(default_factory=dict)


def _labels(c: CallRecord) -> dict[str, str]:
    """The low-cardinality attributes metric points carry."""
    return {"gen_ai.tool.name": c.tool, PREFIX + "contract": c.op.contract}


def _ids(op: Operation) -> dict[str, Any]:
    return {
        PREFIX + "operation_id": op.op_id,
        PREFIX + "thread_id": op.thread_id,
        PREFIX + "tenant": op.tenant,
    }


def _child(c: CallRecord, name: str) -> Any:
    trace: CallTrace | None = c.trace
    parent = otel_trace.set_span_in_context(trace.span) if trace is not None else None
    return _instruments().tracer.start_span(
        f"{name} {c.tool}", context=parent, attributes={**_ids(c.op), **_labels(c)}
    )


def _failed(span: Any, error: BaseException) -> None:
    """Mark ``span`` failed with the error's type (``error.type``), never its message."""
    span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR))
    span.set_attribute("error.type", type(error).__qualname__)


def _state(op: Operation) -> str:
    return op.state.value


# -- a call's round ----------------------------------------------------------------------


def call_started(c: CallRecord, config: Mapping[str, Any]) -> None:
    """A call's round begins: open its span and its LangChain run (``c.trace``)."""
    run = _run_started(c, config)
    if not ENABLED and run is None:
        return
    # A call the session's open recorded and dispatched at once was an intent a moment ago.
    opened = c.owner is not None and protocol.ours(c.op, c.owner.token)
    before = State.PENDING.value if opened else _state(c.op)
    span = None
    if ENABLED:
        span = _instruments().tracer.start_span(
            f"execute_tool {c.tool}",
            kind=otel_trace.SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": c.tool,
                "gen_ai.tool.call.id": c.call_id,
                **_ids(c.op),
                PREFIX + "contract": c.op.contract,
                PREFIX + "state_before": before,
            },
        )
    c.trace = CallTrace(span=span, state_before=before, run=run, labels=_labels(c))
    if opened:
        _transition(c, c.trace, Event.DISPATCH, before)


def call_ended(c: CallRecord, *, waits_for: str | None, error: BaseException | None = None) -> None:
    """The call's round is over: say what it did and close its span and run.
    ``waits_for``: ``approval`` or ``review`` (a human is asked), ``interrupt`` (the tool
    paused itself), ``None``; ``error``: what the call raised."""
    trace: CallTrace | None = c.trace
    if trace is None:
        return
    c.trace = None
    if error is not None:
        trace.what = None  # told by the error's type
    elif c.conflict is not None:
        trace.what = REFUSED
    elif waits_for is not None:  # a human is asked, whatever happened before in the round
        trace.what = _WAITING[waits_for]
    elif trace.what is None:  # not a re-send, a lookup's confirmation or a refusal
        trace.what = SENT if trace.ran else REPLAYED
    told = {
        PREFIX + "state_after": _state(c.op),
        PREFIX + "attempt": c.op.attempts,
        **({PREFIX + "what": trace.what} if trace.what else {}),
    }
    if trace.span is not None:
        trace.span.set_attributes(told)
        if error is not None:  # its type only: a message may echo an argument
            _failed(trace.span, error)
        trace.span.end()
        _instruments().calls.add(
            1, {**trace.labels, PREFIX + "what": trace.what or "error", PREFIX + "state_after": _state(c.op)}
        )
    if trace.run is not None:
        _run_ended(c, trace, error)


def moved(c: CallRecord, before: str, change: Change) -> None:
    """The dispatcher recorded a transition of ``c``'s operation (now ``c.op``)."""
    trace: CallTrace | None = c.trace
    if trace is not None:
        if change.event is Event.RESEND:
            trace.what = RESENT_UNDER_KEY
        elif change.event is Event.CONFIRM:
            trace.what = LANDED_BY_LOOKUP
    _transition(c, trace, change.event, before)


def _transition(c: CallRecord, trace: CallTrace | None, event: Event, before: str) -> None:
    if not ENABLED:
        return
    told = {
        PREFIX + "event": event.value,
        PREFIX + "state_before": before,
        PREFIX + "state_after": _state(c.op),
        PREFIX + "attempt": c.op.attempts,
    }
    if trace is not None and trace.span is not None:
        trace.span.add_event("transition", told)
    _instruments().transitions.add(
        1, {**_labels(c), PREFIX + "event": event.value, PREFIX + "state_after": _state(c.op)}
    )


def refused(c: CallRecord, kind: str, name: str, *, ask: bool) -> None:
    """A budget or circuit breaker refused the send (``ask``: it waits for an approver)."""
    trace: CallTrace | None = c.trace
    if trace is None:
        return
    trace.what = WAITING_FOR_APPROVAL if ask else REFUSED
    if trace.span is not None:
        trace.span.add_event("refused", {PREFIX + "control": f"{kind}:{name}", PREFIX + "asks": ask})


@contextmanager
def reconciling(c: CallRecord) -> Iterator[dict[str, str]]:
    """Around one reconciliation; the caller fills in ``action`` and ``event``."""
    result: dict[str, str] = {}
    if not ENABLED:
        yield result
        return
    span = _child(c, "reconcile")
    started = time.perf_counter()
    try:
        yield result
    except BaseException as error:
        _failed(span, error)
        result.setdefault("action", "error")
        raise
    finally:
        span.set_attributes({PREFIX + k: v for k, v in result.items()})
        span.end()
        _instruments().reconcile.record(
            time.perf_counter() - started,
            {**_labels(c), PREFIX + "action": result.get("action", "error")},
        )


@contextmanager
def dispatching(c: CallRecord) -> Iterator[None]:
    """Around the tool's own run: a span that is current while it runs, so the spans the
    tool makes (a provider's HTTP call) are its children; and, when a LangChain tracer
    listens, the operation in the tool run's own metadata and tags."""
    trace: CallTrace | None = c.trace
    if trace is None:
        yield
        return
    trace.ran = True
    with _tool_run_told(c, trace), _dispatch_span(c):
        yield


@contextmanager
def _dispatch_span(c: CallRecord) -> Iterator[None]:
    if not ENABLED:
        yield
        return
    span = _child(c, "dispatch")
    span.set_attribute(PREFIX + "attempt", c.op.attempts)
    token = otel_context.attach(otel_trace.set_span_in_context(span))
    started = time.perf_counter()
    try:
        yield
    finally:
        otel_context.detach(token)
        span.end()
        _instruments().dispatch.record(time.perf_counter() - started, _labels(c))


@contextmanager
def compensating(c: CallRecord, what: str) -> Iterator[None]:
    """Around the undos a settled call ordered (``what``: ``undo`` or ``saga``)."""
    if not ENABLED:
        yield
        return
    span = _child(c, "compensate")
    span.set_attribute(PREFIX + "compensation", what)
    try:
        yield
    finally:
        span.end()


def answered(ops: list[tuple[Operation, float | None]], *, count: int) -> None:
    """An operator's answer was recorded for ``ops`` (``count`` decisions), each with
    the time it began to wait for the answer (its last change before it), if known."""
    if not ENABLED:
        return
    made = _instruments()
    tracer = made.tracer
    for op, asked_at in ops:
        if asked_at is not None:
            labels = {"gen_ai.tool.name": op.tool, PREFIX + "state_after": _state(op)}
            made.review_wait.record(max(0.0, op.updated_at - asked_at), labels)
        span = tracer.start_span(
            f"review_answered {op.tool}",
            attributes={
                **_ids(op),
                "gen_ai.tool.name": op.tool,
                PREFIX + "state_after": _state(op),
                PREFIX + "decisions": count,
            },
        )
        span.end()


# -- LangChain runs (LangSmith) ---------------------------------------------------------


def _run_started(c: CallRecord, config: Mapping[str, Any]) -> Any:
    """The node's callbacks, when a handler listens (else ``None``): the call's run is
    made through them once the call knows what it did (`_run_ended`)."""
    callbacks = config.get("callbacks")
    if callbacks is None or not (callbacks if isinstance(callbacks, list) else callbacks.handlers):
        return None
    return callbacks


@contextmanager
def _tool_run_told(c: CallRecord, trace: CallTrace) -> Iterator[None]:
    """The runs started while the tool runs (its own, under the node's) carry the
    operation: tags for every tracer, metadata for LangSmith's (LangChain hands the
    tracing context's metadata to ``LangChainTracer`` alone)."""
    if trace.run is None:
        yield
        return
    from langsmith.run_helpers import tracing_context  # only traced runs pay for it

    what = trace.what or SENT
    metadata = {
        **_ids(c.op),
        PREFIX + "contract": c.op.contract,
        PREFIX + "state_before": trace.state_before,
        PREFIX + "attempt": c.op.attempts,
        PREFIX + "what": what,
    }
    with tracing_context(metadata=metadata, tags=["langgraph_effects", f"langgraph_effects:{what}"]):
        yield


def _run_ended(c: CallRecord, trace: CallTrace, error: BaseException | None) -> None:
    """A chain run ``effect {tool}`` beside the tool's own run (a replayed call has no
    other), its metadata the operation and what it did, tagged ``langgraph_effects:{what}``."""
    from langchain_core.callbacks import CallbackManager  # only traced runs pay for it

    what = trace.what or "error"
    manager = CallbackManager.configure(
        inheritable_callbacks=trace.run,
        local_tags=["langgraph_effects", f"langgraph_effects:{what}"],
        local_metadata={
            **_ids(c.op),
            PREFIX + "contract": c.op.contract,
            PREFIX + "state_before": trace.state_before,
            PREFIX + "state_after": _state(c.op),
            PREFIX + "attempt": c.op.attempts,
            PREFIX + "what": what,
        },
    )
    run = manager.on_chain_start(
        {"name": f"effect {c.tool}"},
        {"tool": c.tool, "tool_call_id": c.call_id},
        run_id=uuid4(),
        name=f"effect {c.tool}",
    )
    if error is not None:
        run.on_chain_error(error)
    else:
        run.on_chain_end({"state": _state(c.op), "what": what})
