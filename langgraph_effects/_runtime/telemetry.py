"""What effectful calls are doing, told to OpenTelemetry (spans and metrics) and to
LangChain's callbacks (the runs LangSmith shows).

The session calls in at the points a call's life turns: `opening` before its open
records the intents, `call_started` and `call_ended` around one call's round
(`Session.call_steps`), `moved` for every transition the dispatcher records
(`Dispatcher.move`, the one place they are applied), `reconciling`, `dispatching` and
`compensating` around the work they time, and `refused`. What operators do (the
console and the operator API: ``resolve``, ``compensate``, ``recover``) is told
through `acting`. Nothing else in the package knows about OpenTelemetry.

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
    review_answered {tool}           an answer given through the graph

    resolve {tool}, compensate {tool}    an operator's verdict, undo (`acting`)
    recover                              a recovery run
      recover_thread                     one thread: its resume's spans nest here

A call's first ``execute_tool`` span starts before its intent is written, and its
span context (a W3C ``traceparent``) is recorded with the intent, in the operation's
``extra`` (`TRACEPARENT`), when a span is recorded (an SDK is configured and samples
it). Every later span of the operation, in this process or in one that resumed it
after a crash (its ``execute_tool`` round: a replay, a reconciliation, a re-send; its
``reconcile`` and ``compensate`` children, ``review_answered``, and what an operator
does to it: `acting`), carries a span link to that first span, so a trace backend
shows the crash and the recovery as one story; ``langgraph_effects.operation_id`` on
every span ties them too.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
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
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
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

TRACEPARENT = "traceparent"
"""The key of `Operation.extra` holding the W3C ``traceparent`` of the operation's first
``execute_tool`` span (written with the intent, only when that span is recorded)."""

METRICS = {
    "transitions": "langgraph_effects.transitions",
    "calls": "langgraph_effects.calls",
    "dispatch": "langgraph_effects.dispatch.duration",
    "reconcile": "langgraph_effects.reconcile.duration",
    "review_wait": "langgraph_effects.review.wait",
    "operator": "langgraph_effects.operator.actions",
}
"""The instruments' names (see docs/observing.md)."""


class _Instruments:
    """The tracer and instruments, made once from the global providers (proxies that
    follow an SDK configured later)."""

    def __init__(self) -> None:
        self.tracer = otel_trace.get_tracer("langgraph_effects")
        self.w3c = TraceContextTextMapPropagator()  # reads a recorded ``traceparent``
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
        self.operator = meter.create_counter(
            METRICS["operator"],
            unit="{action}",
            description="What operators did (resolve, compensate, recover), by result",
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
    link: Any = None
    """The link to the operation's first span, when this round is not it."""


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
    link = trace.link if trace is not None else _link(c.op)
    return _instruments().tracer.start_span(
        f"{name} {c.tool}",
        context=parent,
        attributes={**_ids(c.op), **_labels(c)},
        links=[link] if link is not None else None,
    )


def _traceparent(span: Any) -> str | None:
    """``span``'s W3C ``traceparent``, when it is recorded (else ``None``)."""
    context = span.get_span_context()
    if not context.is_valid or not context.trace_flags.sampled:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def _link(op: Operation, *, unless: str | None = None) -> Any:
    """A link to ``op``'s first span (`TRACEPARENT`), unless ``unless`` is that span or
    it recorded none."""
    recorded = op.extra.get(TRACEPARENT)
    if not isinstance(recorded, str) or recorded == unless:
        return None
    read = _instruments().w3c.extract({"traceparent": recorded})
    first = otel_trace.get_current_span(read).get_span_context()
    if not first.is_valid:
        return None
    return otel_trace.Link(first, {PREFIX + "link": "first_span"})


def _failed(span: Any, error: BaseException) -> None:
    """Mark ``span`` failed with the error's type (``error.type``), never its message."""
    span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR))
    span.set_attribute("error.type", type(error).__qualname__)


def _state(op: Operation) -> str:
    return op.state.value


# -- a call's round ----------------------------------------------------------------------


def opening(calls: Iterable[CallRecord]) -> None:
    """The session is about to record the intents of ``calls``: start each call's first
    ``execute_tool`` span (`call_started` goes on with it) and, when it is recorded, put
    its ``traceparent`` in the intent (`TRACEPARENT`). A call bound to an operation
    recorded before keeps that operation's, and its spans link to it."""
    if not ENABLED:
        return
    tracer = _instruments().tracer
    for c in calls:
        span = tracer.start_span(f"execute_tool {c.tool}", kind=otel_trace.SpanKind.INTERNAL)
        c.trace = CallTrace(span=span, state_before="")
        first = _traceparent(span)
        if first is not None:
            c.op = replace(c.op, extra={**c.op.extra, TRACEPARENT: first})


def not_opened(calls: Iterable[CallRecord], error: BaseException) -> None:
    """The open that `opening` started spans for raised ``error``: no round follows, so
    each span ends here, failed."""
    for c in calls:
        trace: CallTrace | None = c.trace
        if trace is None or trace.span is None:
            continue
        c.trace = None
        trace.span.set_attributes(
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": c.tool,
             "gen_ai.tool.call.id": c.call_id, **_ids(c.op)}
        )
        _failed(trace.span, error)
        trace.span.end()


def call_started(c: CallRecord, config: Mapping[str, Any]) -> None:
    """A call's round begins: open its span and its LangChain run (``c.trace``)."""
    run = _run_started(config)
    if not ENABLED and run is None:
        return
    # A call the session's open recorded and dispatched at once was an intent a moment ago.
    opened = c.owner is not None and protocol.ours(c.op, c.owner.token)
    before = State.PENDING.value if opened else _state(c.op)
    span = link = None
    if ENABLED:
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": c.tool,
            "gen_ai.tool.call.id": c.call_id,
            **_ids(c.op),
            PREFIX + "contract": c.op.contract,
            PREFIX + "state_before": before,
        }
        started: CallTrace | None = c.trace  # the span `opening` started for the first round
        if started is not None:
            span = started.span
            span.set_attributes(attributes)
            link = _link(c.op, unless=_traceparent(span))
            if link is not None:
                span.add_link(link.context, link.attributes)
        else:
            link = _link(c.op)
            span = _instruments().tracer.start_span(
                f"execute_tool {c.tool}",
                kind=otel_trace.SpanKind.INTERNAL,
                attributes=attributes,
                links=[link] if link is not None else None,
            )
    c.trace = CallTrace(span=span, state_before=before, run=run, labels=_labels(c), link=link)
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
    """Around the undos a settled call ordered (``what``: ``undo`` or ``saga``): a span
    that is current while they run, so each undo's own ``execute_tool`` nests under it."""
    if not ENABLED:
        yield
        return
    span = _child(c, "compensate")
    span.set_attribute(PREFIX + "compensation", what)
    token = otel_context.attach(otel_trace.set_span_in_context(span))
    told = _ACTING.set("compensate")  # the operator API's compensate, called from here, is this span
    try:
        yield
    finally:
        _ACTING.reset(told)
        otel_context.detach(token)
        span.end()


# -- what operators do (the console and the operator API) -------------------------------

#: The action an `acting` span is current for: the same action nested in it (the
#: operator API's ``compensate`` called by ``finish_compensations``, or by a call's own
#: undo) is told by that span alone.
_ACTING: ContextVar[str | None] = ContextVar("langgraph_effects_acting", default=None)
#: Links a span of `acting` carries at most (one per operation it acts on).
MAX_LINKS = 32


class Acting:
    """What an operator's action (`acting`) tells as it learns it."""

    def __init__(self, span: Any, action: str, labels: dict[str, str]) -> None:
        self._span = span
        self._action = action
        self._labels = labels
        self._links = 0
        self.result: str | None = None
        """What came of it (``resolve``: the verdict, ``compensate``: the compensation's
        verdict, ``recover``: the thread's action), for the span and the metric point."""

    def operation(self, op: Operation) -> None:
        """The operation acted on: its ids and tool, and a link to its first span."""
        if self._span is None:
            return
        self._span.update_name(f"{self._action} {op.tool}")
        self._span.set_attributes({**_ids(op), "gen_ai.tool.name": op.tool, PREFIX + "contract": op.contract})
        self._labels.update({"gen_ai.tool.name": op.tool, PREFIX + "contract": op.contract})
        self.linked([op])

    def linked(self, ops: Iterable[Operation]) -> None:
        """Link the span to the first span of each of ``ops`` (the operations a recovered
        thread holds), `MAX_LINKS` at most."""
        if self._span is None:
            return
        for op in ops:
            if self._links >= MAX_LINKS:
                return
            link = _link(op)
            if link is not None:
                self._span.add_link(link.context, {**link.attributes, PREFIX + "operation_id": op.op_id})
                self._links += 1

    def moved(self, before: Operation, after: Operation, events: Iterable[Event]) -> None:
        """The action moved ``before`` to ``after`` through ``events`` (each counted as a
        transition); a verdict on a question that waited is timed as a review's wait."""
        if self._span is None:
            return
        made = _instruments()
        labels = {"gen_ai.tool.name": after.tool, PREFIX + "contract": after.contract}
        for event in events:
            self._span.add_event(
                "transition", {PREFIX + "event": event.value, PREFIX + "state_after": _state(after)}
            )
            made.transitions.add(
                1, {**labels, PREFIX + "event": event.value, PREFIX + "state_after": _state(after)}
            )
        self._span.set_attributes({PREFIX + "state_after": _state(after), PREFIX + "attempt": after.attempts})
        settled = after.terminal or after.state is State.PENDING  # a verdict answered it
        if before.state in (State.UNKNOWN, State.REVIEW) and settled:
            made.review_wait.record(
                max(0.0, after.updated_at - before.updated_at),
                {"gen_ai.tool.name": after.tool, PREFIX + "state_after": _state(after)},
            )

    def attributes(self, **told: str | int | bool) -> None:
        """More of what the action is (``thread_id``, ``dry_run``...), under the prefix."""
        if self._span is not None:
            self._span.set_attributes({PREFIX + k: v for k, v in told.items()})


_QUIET = Acting(None, "", {})


@contextmanager
def acting(action: str, *, channel: str | None = None) -> Iterator[Acting]:
    """Around an operator's action (``resolve``, ``compensate``, ``recover``,
    ``recover_thread``; ``channel``: ``console`` or ``api``, when it is known): a span
    ``{action} {tool}`` that is current while it runs (a resume or an undo it runs nests
    under it), linked to the first span of each operation it acts on, and a point of
    ``langgraph_effects.operator.actions``."""
    if not ENABLED or _ACTING.get() == action:
        yield _QUIET
        return
    labels = {PREFIX + "action": action, **({PREFIX + "channel": channel} if channel else {})}
    span = _instruments().tracer.start_span(action, attributes=labels)
    told = Acting(span, action, dict(labels))
    token = otel_context.attach(otel_trace.set_span_in_context(span))
    nested = _ACTING.set(action)
    try:
        yield told
    except BaseException as error:
        _failed(span, error)
        told.result = told.result or "error"
        raise
    finally:
        _ACTING.reset(nested)
        otel_context.detach(token)
        if told.result is not None:
            span.set_attribute(PREFIX + "result", told.result)
        span.end()
        _instruments().operator.add(1, {**told._labels, PREFIX + "result": told.result or "done"})


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
        link = _link(op)
        span = tracer.start_span(
            f"review_answered {op.tool}",
            attributes={
                **_ids(op),
                "gen_ai.tool.name": op.tool,
                PREFIX + "state_after": _state(op),
                PREFIX + "decisions": count,
            },
            links=[link] if link is not None else None,
        )
        span.end()


# -- LangChain runs (LangSmith) ---------------------------------------------------------


def _run_started(config: Mapping[str, Any]) -> Any:
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
