"""What a crash and its recovery look like from outside: OpenTelemetry spans and metric
points (the real SDK, in-memory exporter and reader) and the runs LangChain's tracer
records (what LangSmith shows). A worker is SIGKILLed after the provider applied the
call; the thread is resumed here, in this process, with the SDK configured."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.langchain import LangChainTracer, _patch_missing_metadata
from langchain_core.tracers.schemas import Run
from langsmith import Client
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from langgraph_effects import AsyncEffectSqliteSaver, Effect, EffectToolNode
from langgraph_effects._runtime.context import current_operation
from langgraph_effects._runtime.decisions import resume_command
from langgraph_effects.lab.providers import Provider
from tests.helpers import agent, run_python, traced_agent
from tests.helpers.agent import Spec, spec_json
from tests.ledger import conftest as ledger_fixtures

P = "langgraph_effects."


@pytest.fixture(scope="module")
def otel() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    """The SDK, installed once per process (OpenTelemetry's providers are set once)."""
    exporter = InMemorySpanExporter()
    reader = InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    if not isinstance(trace.get_tracer_provider(), TracerProvider):  # pragma: no cover
        pytest.skip("another test set a tracer provider in this process first")
    return exporter, reader


@pytest.fixture
def spans(otel: tuple[InMemorySpanExporter, InMemoryMetricReader]) -> InMemorySpanExporter:
    otel[0].clear()
    return otel[0]


def points(reader: InMemoryMetricReader) -> dict[tuple[str, frozenset[Any]], float]:
    """Cumulative metric points: a counter's sum, a histogram's count."""
    found: dict[tuple[str, frozenset[Any]], float] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    value = point.count if value is None else value  # type: ignore[attr-defined]
                    found[(metric.name, frozenset(point.attributes.items()))] = value
    return found


def grew(before: dict[Any, float], after: dict[Any, float], name: str, **attributes: str) -> float:
    """How much the points of ``name`` carrying ``attributes`` grew."""
    wanted = {(P + k if not k.startswith("gen_ai") else k.replace("_tool_", ".tool.")): v
              for k, v in attributes.items()}

    def total(found: dict[Any, float]) -> float:
        return sum(v for (n, attrs), v in found.items()
                   if n == name and all(dict(attrs).get(k) == v for k, v in wanted.items()))

    return total(after) - total(before)


def named(spans: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name.startswith(prefix)]


def ledger_op_ids(db: str) -> list[str]:
    if "://" in db or "dbname=" in db:  # a Postgres DSN whose search_path names the test's own schema
        with psycopg.connect(db) as pg:
            return [row[0] for row in pg.execute("SELECT op_id FROM effect_operations")]
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT op_id FROM effect_operations")]


def effects(s: Spec) -> int:
    return sum(Provider(s.provider, s.provider_mode).count_effects().values())  # type: ignore[arg-type]


class Runs(BaseTracer):
    """LangChain's tracer base (what LangSmith's tracer builds on), keeping runs in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[Run] = []

    def _persist_run(self, run: Run) -> None:
        pass

    def _end_trace(self, run: Run) -> None:
        super()._end_trace(run)
        if run.parent_run_id is None:  # a finished tree, its runs under it
            self.runs.append(run)

    def named(self, name: str) -> list[Run]:
        found: list[Run] = []
        stack = list(self.runs)
        while stack:
            run = stack.pop()
            if run.name == name:
                found.append(run)
            stack.extend(run.child_runs)
        return found


async def resume(s: Spec, *, callbacks: list[Any] | None = None, answer: Any = None) -> dict[str, Any]:
    """``agent.run`` in this process, with LangChain callbacks when given."""
    provider = agent.provider_for(s)
    config: Any = {"configurable": {"thread_id": s.thread}, "callbacks": callbacks or []}
    async with agent.open_async(s.db) as saver:
        await saver.setup()
        graph = agent.build(s, saver, provider)
        payload: Any = None
        if answer is not None:
            payload = resume_command((await graph.aget_state(config)).interrupts, answer)
        result = await graph.ainvoke(payload, config)
        return agent.describe(result, await graph.aget_state(config))


def crashed(tmp_path: Path, db: str | None = None, **kw: Any) -> Spec:
    """A worker SIGKILLed after the provider applied its call, before the outcome was recorded."""
    s = Spec(db=db or str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"), **kw)
    run_python("-m", "tests.helpers.agent", spec_json(replace(s, crash="before_outcome")), expect_kill=True)
    assert effects(s) == 1
    return s


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("kind", ["graph", "create_agent"])
@pytest.mark.parametrize(
    ("contract", "mode", "what", "action"),
    [
        ("dedup", "dedup", "resent_under_key", "resend"),
        ("lookup", "lookup", "landed_by_lookup", "confirm"),
        ("blind", "blind", "waiting_for_review", None),
    ],
)
async def test_crash_and_recovery_told_by_spans_and_metrics(
    tmp_path: Path, db: str, otel: Any, spans: InMemorySpanExporter,
    kind: str, contract: str, mode: str, what: str, action: str | None,
) -> None:
    """On SQLite and Postgres (the ``db`` fixture), ``EffectToolNode`` and ``create_agent``."""
    reader = otel[1]
    s = crashed(tmp_path, db, contract=contract, provider_mode=mode, kind=kind)
    [op_id] = ledger_op_ids(s.db)
    assert "traceparent" not in ledger_extra(s.db)  # the worker had no SDK: no span to record
    before = points(reader)

    await resume(s)

    assert effects(s) == 1
    [call] = named(spans, "execute_tool send")
    attributes = dict(call.attributes or {})
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "send"
    assert attributes["gen_ai.tool.call.id"] == "call-0"
    assert attributes[P + "operation_id"] == op_id  # ties this trace to the crashed one
    assert not call.links  # nothing recorded to link to
    assert attributes[P + "thread_id"] == "t1"
    assert attributes[P + "state_before"] == "dispatched"  # where the crash left it
    assert attributes[P + "what"] == what
    transitions = [dict(e.attributes or {}) for e in call.events if e.name == "transition"]
    # The resumer saw the dead worker's lease and took the call over first.
    assert transitions[0][P + "event"] == "lose"
    assert transitions[0][P + "state_after"] == "unknown"
    reconciles = named(spans, "reconcile send")
    if action is None:  # blind: nothing to ask the provider, an operator is asked
        assert attributes[P + "state_after"] == "review"
        assert not reconciles or dict(reconciles[0].attributes or {})[P + "action"] == "escalate"
    else:
        [reconciled] = reconciles
        assert reconciled.parent is not None and reconciled.parent.span_id == call.context.span_id
        assert dict(reconciled.attributes or {})[P + "action"] == action
        assert attributes[P + "state_after"] == "confirmed"
        after = points(reader)
        assert grew(before, after, "langgraph_effects.reconcile.duration", action=action) == 1
    dispatches = named(spans, "dispatch send")
    assert len(dispatches) == (1 if contract == "dedup" else 0)  # only a dedup re-send runs the tool
    after = points(reader)
    assert grew(before, after, "langgraph_effects.calls", what=what, contract=contract) == 1
    assert grew(before, after, "langgraph_effects.transitions", event="lose") == 1
    # Arguments and receipts stay out of spans.
    told = " ".join(str(v) for sp in spans.get_finished_spans() for v in (sp.attributes or {}).values())
    assert "t1:0" not in told and "eff_" not in told

    if contract == "blind":
        spans.clear()
        asked = points(reader)
        await resume(s, answer={op_id: {"type": "landed"}})
        [answered] = named(spans, "review_answered send")
        assert dict(answered.attributes or {})[P + "state_after"] == "confirmed"
        # One wait, from the question to the answer that settled it.
        assert grew(asked, points(reader), "langgraph_effects.review.wait", state_after="confirmed") == 1
        # The node's first round still sees it waiting; the answer's round replays it.
        *_, call = named(spans, "execute_tool send")
        assert dict(call.attributes or {})[P + "what"] == "replayed"
        assert effects(s) == 1


async def test_the_tools_own_spans_nest_under_dispatch(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("provider-client")

    @tool
    def pay(amount: int) -> str:
        """Pay ``amount``."""
        with tracer.start_as_current_span("POST /payments"):
            return f"paid {current_operation().provider_key}"

    s = Spec(db=str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"))
    async with AsyncEffectSqliteSaver.from_conn_string(s.db) as saver:
        await saver.setup()
        graph = agent.tool_loop(_model("pay", {"amount": 5}), EffectToolNode([pay], effects={"pay": Effect(
            dedup_window=60)}), saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "n"}})
    [http] = named(spans, "POST /payments")
    [dispatch] = named(spans, "dispatch pay")
    [call] = named(spans, "execute_tool pay")
    assert http.parent is not None and http.parent.span_id == dispatch.context.span_id
    assert dispatch.parent is not None and dispatch.parent.span_id == call.context.span_id
    assert dict(call.attributes or {})[P + "what"] == "sent"
    assert dict(call.attributes or {})[P + "state_before"] == "pending"
    assert dict(call.attributes or {})[P + "state_after"] == "confirmed"
    events = [dict(e.attributes or {})[P + "event"] for e in call.events if e.name == "transition"]
    assert events == ["dispatch", "succeed"]


def _model(name: str, args: dict[str, Any]) -> Any:
    from langchain_core.messages import AIMessage, ToolMessage

    def model(state: Any) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage("done")]}
        return {"messages": [AIMessage("", tool_calls=[{"name": name, "args": args, "id": "c1"}])]}

    return model


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("kind", ["graph", "create_agent"])
async def test_langchain_runs_say_landed_by_lookup_and_replayed(tmp_path: Path, kind: str) -> None:
    # Reconciled: a lookup found the effect the killed worker sent.
    s = crashed(tmp_path, contract="lookup", provider_mode="lookup", kind=kind)
    [op_id] = ledger_op_ids(s.db)
    runs = Runs()
    await resume(s, callbacks=[runs])
    [effect] = runs.named("effect send")
    assert effect.metadata[P + "operation_id"] == op_id
    assert effect.metadata[P + "what"] == "landed_by_lookup"
    assert effect.metadata[P + "state_before"] == "dispatched"
    assert effect.metadata[P + "state_after"] == "confirmed"
    assert "langgraph_effects:landed_by_lookup" in (effect.tags or [])
    assert not runs.named("send")  # the tool itself did not run again

    # Replayed: a blind call an operator confirmed answers from the ledger.
    (tmp_path / "blind").mkdir()
    b = crashed(tmp_path / "blind", contract="blind", provider_mode="blind", kind=kind)
    [blind_id] = ledger_op_ids(b.db)
    await resume(b)  # waits for review
    runs = Runs()
    await resume(b, callbacks=[runs], answer={blind_id: {"type": "landed"}})
    *_, effect = sorted(runs.named("effect send"), key=lambda r: r.start_time)
    assert effect.metadata[P + "what"] == "replayed"
    assert effect.metadata[P + "state_after"] == "confirmed"
    assert "langgraph_effects:replayed" in (effect.tags or [])
    assert effects(b) == 1


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """The checkpoint database: a SQLite file, or a Postgres DSN on a schema of its own."""
    if request.param == "sqlite":
        yield str(tmp_path / "agent.sqlite")
        return
    with ledger_fixtures.created_schema("lge_otel") as (_, dsn):
        yield dsn


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize(
    ("contract", "what"), [("dedup", "resent_under_key"), ("lookup", "landed_by_lookup")]
)
def test_sync_crash_and_recovery_told_by_spans(
    db: str, tmp_path: Path, spans: InMemorySpanExporter, contract: str, what: str
) -> None:
    """``graph.invoke`` on a sync saver: the calling thread runs the tool, the portal the ledger."""
    s = Spec(db=db, provider=str(tmp_path / "provider.sqlite"), contract=contract, provider_mode=contract,
             sync=True)
    run_python("-m", "tests.helpers.agent", spec_json(replace(s, crash="before_outcome")), expect_kill=True)

    out = agent.run_sync(replace(s, resume=True))

    [message] = [m for m in out["messages"] if m["type"] == "tool"]
    assert effects(s) == 1
    [call] = named(spans, "execute_tool send")
    attributes = dict(call.attributes or {})
    assert attributes[P + "operation_id"] == message["artifact"]["operation_id"]
    assert attributes[P + "what"] == what
    assert attributes[P + "state_after"] == "confirmed"
    [reconciled] = named(spans, "reconcile send")
    assert reconciled.parent is not None and reconciled.parent.span_id == call.context.span_id
    for dispatch in named(spans, "dispatch send"):  # the dedup re-send ran in the calling thread
        assert dispatch.parent is not None and dispatch.parent.span_id == call.context.span_id
    assert len(named(spans, "dispatch send")) == (1 if contract == "dedup" else 0)


async def test_effectful_task_run_tells_the_operation(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    """``@effectful``: the task's run has an ``effect`` child saying what the call did."""
    from langgraph.func import entrypoint, task

    from langgraph_effects._integrations.functional import effectful

    sent: list[str] = []

    @task
    @effectful(Effect(dedup_window=60))
    async def notify(to: str) -> str:
        sent.append(to)
        return f"notified {current_operation().provider_key}"

    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "wf.sqlite")) as saver:
        await saver.setup()

        @entrypoint(checkpointer=saver)
        async def workflow(to: str) -> str:
            return await notify(to)

        runs = Runs()
        await workflow.ainvoke("ada", {"configurable": {"thread_id": "wf"}, "callbacks": [runs]})
    [effect] = runs.named("effect notify")
    assert effect.metadata[P + "what"] == "sent"
    assert effect.metadata[P + "state_before"] == "pending"
    assert effect.metadata[P + "state_after"] == "confirmed"
    assert sent == ["ada"]
    [call] = named(spans, "execute_tool notify")
    assert dict(call.attributes or {})[P + "operation_id"] == effect.metadata[P + "operation_id"]


_POSTED: list[Run] = []


class LangSmithRuns(LangChainTracer):
    """LangSmith's own tracer, posting to a list instead of the LangSmith API (its copies,
    made for each nested tracing context, post to the same list)."""

    def _persist_run_single(self, run: Run) -> None:
        run.tags = self._get_tags(run)
        _patch_missing_metadata(self, run)
        _POSTED.append(run)

    @staticmethod
    def _update_run_single(run: Run) -> None:
        pass


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("kind", ["graph", "create_agent"])
async def test_the_tools_own_run_carries_the_operation(tmp_path: Path, kind: str) -> None:
    """A dedup call re-sent after the crash: the tool's own run says so (tags for any
    tracer, metadata in LangSmith's)."""
    s = crashed(tmp_path, contract="dedup", provider_mode="dedup", kind=kind)
    [op_id] = ledger_op_ids(s.db)
    runs = Runs()
    _POSTED.clear()
    client = Client(api_url="http://127.0.0.1:9", api_key="unused", info={})  # no /info request
    await resume(s, callbacks=[runs, LangSmithRuns(client=client, project_name="effects")])

    [tool_run] = runs.named("send")
    assert "langgraph_effects:resent_under_key" in (tool_run.tags or [])
    [posted] = [r for r in _POSTED if r.name == "send" and r.run_type == "tool"]
    assert posted.metadata[P + "operation_id"] == op_id
    assert posted.metadata[P + "what"] == "resent_under_key"
    assert posted.metadata[P + "state_before"] == "dispatched"
    [effect] = runs.named("effect send")
    assert effect.metadata[P + "state_after"] == "confirmed"
    assert effects(s) == 1


async def test_a_tool_that_pauses_itself_is_paused_not_failed(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    from langgraph.types import interrupt
    from opentelemetry.trace import StatusCode

    @tool
    def pay(amount: int) -> str:
        """Pay ``amount`` once a human agrees."""
        interrupt("ok to pay?")
        return "paid"

    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        node = EffectToolNode([pay], effects={"pay": Effect(dedup_window=60)})
        graph = agent.tool_loop(_model("pay", {"amount": 5}), node, saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "p"}})
    [call] = named(spans, "execute_tool pay")
    assert dict(call.attributes or {})[P + "what"] == "paused"
    assert dict(call.attributes or {})[P + "state_after"] == "pending"  # withdrawn: nothing sent
    assert call.status.status_code is not StatusCode.ERROR


async def test_a_send_over_budget_is_told_refused(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    from langgraph_effects import Budget

    sent: list[int] = []

    @tool
    def pay(amount: int) -> str:
        """Pay ``amount``."""
        sent.append(amount)
        return "paid"

    budget = Budget("payments", max_total=10, total_of="amount")
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        node = EffectToolNode([pay], effects={"pay": Effect(dedup_window=60, budgets=[budget])})
        graph = agent.tool_loop(_model("pay", {"amount": 50}), node, saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "b"}})
    assert sent == []
    [call] = named(spans, "execute_tool pay")
    assert dict(call.attributes or {})[P + "what"] == "refused"
    [refusal] = [dict(e.attributes or {}) for e in call.events if e.name == "refused"]
    assert refusal[P + "control"] == "budget:payments" and refusal[P + "asks"] is False


async def test_a_saga_undo_is_told_as_compensate(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    from langchain_core.messages import AIMessage, ToolMessage

    from langgraph_effects import Undo

    cancelled: list[str] = []

    class CardDeclinedError(Exception):
        pass

    @tool
    def book(trip: str) -> str:
        """Book ``trip``."""
        return "booked"

    @tool
    def charge(trip: str) -> str:
        """Charge for ``trip``."""
        raise CardDeclinedError("declined")

    def cancel(provider_key: str) -> str:
        cancelled.append(provider_key)
        return "cancelled"

    def model(state: Any) -> dict[str, Any]:
        done = [m.name for m in state["messages"] if isinstance(m, ToolMessage)]
        name = {0: "book", 1: "charge"}.get(len(done))
        if name is None:
            return {"messages": [AIMessage("done")]}
        call = {"name": name, "args": {"trip": "t-1"}, "id": f"c-{name}"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    effects = {
        "book": Effect(dedup_window=60, saga="trip", compensate=Undo(cancel)),
        "charge": Effect(dedup_window=60, saga="trip", definite_errors=[CardDeclinedError]),
    }
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        node = EffectToolNode([book, charge], effects=effects, handle_tool_errors=True)
        graph = agent.tool_loop(model, node, saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "s"}})
    assert len(cancelled) == 1
    [call] = named(spans, "execute_tool charge")
    assert dict(call.attributes or {})[P + "state_after"] == "failed"
    [undo] = named(spans, "compensate charge")
    assert undo.parent is not None and undo.parent.span_id == call.context.span_id
    assert dict(undo.attributes or {})[P + "compensation"] == "saga"


# -- one story: the crashed process's span, linked from the resumer's and the console's --


def ledger_extra(db: str) -> dict[str, Any]:
    """The ``extra`` of the one operation in ``db``."""
    if "://" in db or "dbname=" in db:
        with psycopg.connect(db) as pg:
            [(text,)] = pg.execute("SELECT extra FROM effect_operations").fetchall()
    else:
        with sqlite3.connect(db) as conn:
            [(text,)] = conn.execute("SELECT extra FROM effect_operations").fetchall()
    return json.loads(text)  # type: ignore[no-any-return]


def crashed_traced(tmp_path: Path, db: str | None = None, **kw: Any) -> tuple[Spec, dict[str, Any]]:
    """A worker with the SDK configured, SIGKILLed after the provider applied its call;
    the ``execute_tool`` span it started (and never ended: it was killed inside it)."""
    s = Spec(db=db or str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"), **kw)
    written = tmp_path / "first.spans.jsonl"
    worker = spec_json(replace(s, crash="before_outcome"))
    run_python("-m", "tests.helpers.traced_agent", str(written), worker, expect_kill=True)
    assert effects(s) == 1
    lines = traced_agent.read(written)
    [first] = [x for x in lines if x["at"] == "start" and x["name"] == "execute_tool send"]
    assert not [x for x in lines if x["at"] == "end" and x["span_id"] == first["span_id"]]
    # The tool ran under it in the crashed process: its dispatch span is its child.
    assert [x for x in lines if x["name"] == "dispatch send" and x["parent"] == first["span_id"]]
    return s, first


def links_to(span: ReadableSpan, first: dict[str, Any]) -> bool:
    linked = {(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") for link in span.links}
    return (first["trace_id"], first["span_id"]) in linked


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize(
    ("contract", "kind", "what"),
    [("dedup", "graph", "resent_under_key"), ("lookup", "create_agent", "landed_by_lookup"),
     ("blind", "graph", "waiting_for_review"), ("blind", "create_agent", "waiting_for_review")],
)
async def test_a_resumed_process_links_its_spans_to_the_crashed_ones(
    tmp_path: Path, db: str, otel: Any, spans: InMemorySpanExporter, contract: str, kind: str, what: str
) -> None:
    from langgraph_effects.operator import open_ledger, resolve_report

    reader = otel[1]
    s, first = crashed_traced(tmp_path, db, contract=contract, provider_mode=contract, kind=kind)
    # The intent recorded the span that wrote it, as a W3C traceparent.
    version, trace_id, span_id, flags = ledger_extra(s.db)["traceparent"].split("-")
    assert (version, trace_id, span_id) == ("00", first["trace_id"], first["span_id"])
    assert int(flags, 16) & 1  # sampled
    [op_id] = ledger_op_ids(s.db)

    await resume(s)

    [call] = named(spans, "execute_tool send")
    assert dict(call.attributes or {})[P + "what"] == what
    assert call.context.trace_id != int(first["trace_id"], 16)  # a trace of its own, linked
    assert links_to(call, first)
    for child in named(spans, "reconcile send") + named(spans, "dispatch send"):
        assert links_to(child, first)
    assert effects(s) == 1
    if contract != "blind":
        return

    spans.clear()
    if kind == "create_agent":  # the verdict answers the graph's interrupt
        await resume(s, answer={op_id: {"type": "landed"}})
        [answered] = named(spans, "review_answered send")
        assert links_to(answered, first)
        *_, replayed = named(spans, "execute_tool send")
        assert dict(replayed.attributes or {})[P + "what"] == "replayed" and links_to(replayed, first)
        assert effects(s) == 1
        return
    # An operator's verdict from the operator API, then the resume that replays it.
    before = points(reader)
    async with open_ledger(s.db) as ledger:
        op = await ledger.get(op_id)
        assert op is not None
        await resolve_report(ledger, op_id, {"type": "landed"}, expected_version=op.version, actor="alice")
    [resolved] = named(spans, "resolve send")
    told = dict(resolved.attributes or {})
    assert told[P + "operation_id"] == op_id and told[P + "channel"] == "api"
    assert told[P + "state_before"] == "review" and told[P + "state_after"] == "confirmed"
    assert told[P + "result"] == "landed"
    assert links_to(resolved, first)
    after = points(reader)
    assert grew(before, after, "langgraph_effects.operator.actions", action="resolve", result="landed") == 1
    assert grew(before, after, "langgraph_effects.transitions", event="landed", state_after="confirmed") == 1
    assert grew(before, after, "langgraph_effects.review.wait", state_after="confirmed") == 1
    await resume(s)
    *_, replayed = named(spans, "execute_tool send")
    assert dict(replayed.attributes or {})[P + "what"] == "replayed"
    assert links_to(replayed, first)
    assert effects(s) == 1


@pytest.mark.slow
@pytest.mark.crash
def test_the_consoles_recover_and_resolve_are_spans_linked_to_the_crashed_one(
    tmp_path: Path, otel: Any, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from langgraph_effects import cli

    reader = otel[1]
    s, first = crashed_traced(tmp_path, contract="blind", provider_mode="blind")
    [op_id] = ledger_op_ids(s.db)
    monkeypatch.setenv(traced_agent.SPEC_ENV, spec_json(s))
    before = points(reader)

    code = cli.main(["--db", s.db, "--json", "recover", "--graph", "tests.helpers.traced_agent:make_graph",
                     "--min-idle", "0"])
    report = json.loads(capsys.readouterr().out)

    assert code == 6 and report["threads"][0]["action"] == "resumed"  # waits for an operator now
    [recovery] = [sp for sp in named(spans, "recover") if sp.name == "recover"]
    assert dict(recovery.attributes or {})[P + "result"] == "needs_operator"
    [thread] = named(spans, "recover_thread")
    assert thread.parent is not None and thread.parent.span_id == recovery.context.span_id
    assert dict(thread.attributes or {})[P + "thread_id"] == "t1"
    assert dict(thread.attributes or {})[P + "result"] == "resumed"
    assert links_to(thread, first)
    [call] = named(spans, "execute_tool send")  # the resume, under the thread's span
    assert call.parent is not None and call.parent.span_id == thread.context.span_id
    assert links_to(call, first)
    assert grew(before, points(reader), "langgraph_effects.operator.actions", action="recover_thread",
                result="resumed") == 1

    with sqlite3.connect(s.db) as conn:
        [(version,)] = conn.execute("SELECT version FROM effect_operations").fetchall()
    landed = ["resolve", op_id, "--landed", "--expected-version", f"{version}"]
    code = cli.main(["--db", s.db, "--json", *landed])
    assert code == 0, capsys.readouterr()
    [resolved] = named(spans, "resolve send")
    assert dict(resolved.attributes or {})[P + "channel"] == "console"
    assert dict(resolved.attributes or {})[P + "state_after"] == "confirmed"
    assert links_to(resolved, first)
    assert effects(s) == 1


def test_the_consoles_compensate_is_a_span_over_the_undo(
    tmp_path: Path, otel: Any, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An effect recorded under a span (its traceparent in the intent, as a traced worker
    writes it), undone from the console: the undo runs under the console's span."""
    import asyncio

    from langgraph_effects import cli
    from langgraph_effects.core.operation import Change, Event
    from langgraph_effects.ledger.sqlite import SqliteLedger
    from langgraph_effects.testing._cases import dispatch, make_op

    reader = otel[1]
    provider = Provider(tmp_path / "provider.sqlite", mode="dedup")
    monkeypatch.setenv("COMPENSATION_PROVIDER", str(tmp_path / "provider.sqlite"))
    written = trace.get_tracer("worker").start_span("execute_tool book")
    written.end()
    context = written.get_span_context()
    first = {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}
    db = tmp_path / "ledger.sqlite"

    async def booked() -> str:
        op = make_op(tool="book", args={"room": "12"}, contract="dedup",
                     extra={"traceparent": f"00-{first['trace_id']}-{first['span_id']}-01"})
        async with SqliteLedger.from_conn_string(db) as ledger:
            await ledger.setup()
            await ledger.record_intents([op], change=dispatch())
            provider.apply({"operation": "book"}, key=op.provider_key)
            await ledger.transition(op.op_id, Change(Event.SUCCEED), expected_version=1)
        return op.op_id

    op_id = asyncio.run(booked())
    spans.clear()
    before = points(reader)

    code = cli.main(["--db", str(db), "--json", "compensate", op_id, "--effects",
                     "tests.helpers.compensation_worker:cli_effects"])

    assert code == 0 and json.loads(capsys.readouterr().out)["compensation"] == "undone"
    [compensation] = named(spans, "compensate book")
    told = dict(compensation.attributes or {})
    assert told[P + "operation_id"] == op_id and told[P + "channel"] == "console"
    assert told[P + "result"] == "compensate"
    assert links_to(compensation, first)
    [undo] = [sp for sp in named(spans, "execute_tool ") if sp.name != "execute_tool book"]
    assert undo.parent is not None and undo.parent.span_id == compensation.context.span_id
    assert grew(before, points(reader), "langgraph_effects.operator.actions", action="compensate",
                result="compensate") == 1
    assert sum(n for label, n in provider.count_effects().items() if label.startswith("cancel:")) == 1


_WITHOUT_THE_EXTRA = """
import asyncio, os, sys, tempfile
sys.modules["opentelemetry"] = None  # not installed: importing it fails
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph_effects import AsyncEffectSqliteSaver, Effect, EffectToolNode
from langgraph_effects._runtime import telemetry
from langgraph_effects.operator import list_operations, open_ledger, resolve_report
from tests.helpers import agent

@tool
def pay(amount: int) -> str:
    '''Pay ``amount`` (the gateway times out: a blind call then waits for review).'''
    raise TimeoutError("no answer")

def model(state):
    if any(isinstance(m, ToolMessage) for m in state["messages"]):
        return {"messages": [AIMessage("done")]}
    return {"messages": [AIMessage("", tool_calls=[{"name": "pay", "args": {"amount": 1}, "id": "c1"}])]}

async def main():
    db = os.path.join(tempfile.mkdtemp(), "agent.sqlite")
    async with AsyncEffectSqliteSaver.from_conn_string(db) as saver:
        await saver.setup()
        graph = agent.tool_loop(model, EffectToolNode([pay], effects={"pay": Effect()}), saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "x"}})
    async with open_ledger(db) as ledger:
        [op] = await list_operations(ledger)
        await resolve_report(ledger, op.op_id, {"type": "landed"}, expected_version=op.version, actor="a")
        return dict(op.extra), op.state.value

extra, state = asyncio.run(main())
print(__import__("json").dumps({"enabled": telemetry.ENABLED, "extra": extra, "state": state,
      "imported": [m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m] is not None]}))
"""


@pytest.mark.slow
def test_without_the_extra_nothing_of_opentelemetry_is_imported_or_recorded() -> None:
    """A blind call (waits for review) and the console's verdict on it, in a process where
    ``opentelemetry`` cannot be imported: nothing of it is, and no span is recorded."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _WITHOUT_THE_EXTRA], capture_output=True, text=True,
                          cwd=Path(__file__).parent.parent, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["enabled"] is False and out["imported"] == []
    assert "traceparent" not in out["extra"] and out["state"] == "review"


async def test_an_open_that_fails_ends_the_calls_span_failed(
    tmp_path: Path, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger is down when the intents are to be written: nothing is sent, and the
    span the open started ends failed (no round follows it)."""
    from opentelemetry.trace import StatusCode

    sent: list[int] = []

    @tool
    def pay(amount: int) -> str:
        """Pay ``amount``."""
        sent.append(amount)
        return "paid"

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionRefusedError("the ledger's database is down")

    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        monkeypatch.setattr(saver.ledger, "transact", down)
        node = EffectToolNode([pay], effects={"pay": Effect(dedup_window=60)})
        graph = agent.tool_loop(_model("pay", {"amount": 5}), node, saver)
        with pytest.raises(ConnectionRefusedError):
            await graph.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "x"}})
    assert sent == []
    [call] = named(spans, "execute_tool pay")
    assert call.status.status_code is StatusCode.ERROR
    assert dict(call.attributes or {})["error.type"] == "ConnectionRefusedError"
    assert dict(call.attributes or {})["gen_ai.tool.call.id"] == "c1"
