"""The lab's extension point: a registry of strategies, and the graph they plug into.

A *strategy* is one way of running the lab's effectful tool call: a row of the
table. Every strategy runs in the same tiny LangGraph graph, one thread per
operation::

    START -> model -> tools -> model -> END

``model`` is scripted (no LLM): it asks for one ``send_notification`` call, and
after an error ``ToolMessage`` re-plans the call once with a new
``tool_call_id``, as a model would. ``tools`` is whatever the strategy builds:
the prebuilt ``ToolNode`` for the seed rows, ``EffectToolNode`` for ours.

To add a row, write a module-level builder and register it::

    def build(ctx: BuildContext) -> ToolsNode: ...      # runs in the worker

    register(Strategy(name="effect-dedup", build=build, providers=("dedup",),
                      ours=True, audit=count_unresolved))

and list its module in :data:`BUILTIN_MODULES` so workers and the CLI import it.
The builder runs inside the worker process (it must be importable by name, so
no lambdas); it may be ``async`` (to open a ledger, say) and register cleanups on
``ctx.exits``. ``answer_review``, ``audit`` and ``check`` run in the lab's parent
process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from .faults import CRASH_POINTS, Faults, LabClient
from .providers import EffectRecord, ProviderMode

#: Modules that register strategies when imported (the workers preload them).
BUILTIN_MODULES: list[str] = ["langgraph_effects.lab.seed", "langgraph_effects.lab.ours"]

TOOL_NAME = "send_notification"
#: The first call plus one re-planned retry after an error ToolMessage.
MAX_CALLS = 2
TENANT = "tenant-lab"


class LabState(MessagesState):
    """Graph state: the conversation plus the operation this thread is about."""

    index: int
    operation: str
    body: str


@dataclass(frozen=True)
class CellFiles:
    """The files of one cell (one strategy x provider x crash point)."""

    workdir: Path
    checkpoints: Path
    """The graph's checkpoints (AsyncSqliteSaver)."""
    provider: Path
    """The provider's own records: the worker calls into it, the parent counts from it."""
    local: Path
    """A database the strategy may use for its own local records (markers)."""
    ledger: Path
    """Where an effect ledger lives, for strategies that keep one: the checkpoints'
    own database (on its own connection), as ``EffectSqliteSaver`` keeps it."""

    @classmethod
    def under(cls, workdir: Path) -> CellFiles:
        return cls(
            workdir=workdir,
            checkpoints=workdir / "checkpoints.sqlite",
            provider=workdir / "provider.sqlite",
            local=workdir / "local.sqlite",
            ledger=workdir / "checkpoints.sqlite",
        )


@dataclass(frozen=True)
class BuildContext:
    """What a strategy's builder receives, inside the worker process."""

    strategy: str
    provider_mode: ProviderMode
    crash_point: str
    client: LabClient
    """The provider, with the lab's crash points A/B and the timeouts around it."""
    faults: Faults
    """Tool code calls ``faults.reach("C")`` right after the provider answered,
    before recording anything (A and B are inside ``client.send``)."""
    files: CellFiles
    checkpointer: BaseCheckpointSaver[Any]
    exits: AsyncExitStack = field(default_factory=AsyncExitStack)
    """Closed when the worker exits cleanly (a killed worker closes nothing)."""


#: ``build(ctx) -> tools node`` (or an awaitable of one): anything
#: ``StateGraph.add_node`` accepts.
ToolsBuilder = Callable[[BuildContext], Any]


@dataclass(frozen=True)
class ReviewCase:
    """One review round, handed to a strategy's ``answer_review`` in the parent.

    ``effects`` is the provider's truth for the operation (what an operator
    checks before answering); ``interrupts`` are ``(interrupt id, value)`` pairs.
    """

    operation: str
    thread_id: str
    provider_mode: ProviderMode
    crash_point: str
    interrupts: Sequence[tuple[str, Any]]
    effects: Sequence[EffectRecord]


#: ``answer_review(case) -> value`` for ``Command(resume=value)``.
ReviewAnswerer = Callable[[ReviewCase], Any]


@dataclass(frozen=True)
class AuditCounts:
    """What a strategy's own records say after a cell."""

    non_terminal: int
    """Operations left in a non-terminal state (must be 0 for ours)."""
    details: Mapping[str, int] = field(default_factory=dict)
    """Anything else the records tell (kept in the JSON rows), e.g. automatic re-sends."""


#: ``audit(files) -> AuditCounts``, run in the parent after the cell finished.
CellAudit = Callable[[CellFiles], AuditCounts]


@dataclass(frozen=True)
class CellReport:
    """A finished cell, handed to a strategy's ``check`` in the parent."""

    files: CellFiles
    provider_mode: ProviderMode
    crash_point: str
    intended: int
    faulted: int
    """Operations whose first attempt was armed with the cell's fault."""
    kills: int
    sends: int
    """``apply`` requests the provider received."""
    effects: int
    sent_to_review: int
    reviews_answered: int
    tool_errors: int
    """Error ToolMessages left in the threads (each one is a call the model saw fail)."""
    audit: AuditCounts | None


#: ``check(report) -> problems``: the strategy's own invariants for one cell; any
#: problem is a violation (it decides the exit code for rows of ours).
CellCheck = Callable[[CellReport], Sequence[str]]


@dataclass(frozen=True)
class Strategy:
    """One row family of the lab.

    Args:
        name: the row's name (``--strategies`` takes it).
        build: ``(BuildContext) -> tools node``; a module-level function.
        providers: the provider modes it runs against: one row per mode.
        ours: rows of this package. Their invariants (0 duplicates, 0 missing,
            0 left non-terminal) decide the lab's exit code; the seed rows are
            expected to fail and never do.
        crash_points: the columns it runs; default every crash point, less the
            ``ours_only`` ones for strategies that are not ours.
        answer_review: answers the graph's interrupts as an operator who checked
            the provider would. Without it an interrupt is left pending.
        audit: counts non-terminal operations in the strategy's own records.
            Required for ours: an unaudited row cannot prove its invariant.
        check: the strategy's own invariants beyond 0 duplicates / 0 missing /
            0 non-terminal (e.g. "a blind provider is never re-sent to").
        summary: one line for ``--list``.
    """

    name: str
    build: ToolsBuilder
    providers: tuple[ProviderMode, ...]
    ours: bool = False
    crash_points: tuple[str, ...] | None = None
    answer_review: ReviewAnswerer | None = None
    audit: CellAudit | None = None
    check: CellCheck | None = None
    summary: str = ""

    def columns(self) -> tuple[str, ...]:
        """The crash points this strategy runs, in table order."""
        if self.crash_points is not None:
            return tuple(cp for cp in CRASH_POINTS if cp in self.crash_points)
        return tuple(cp for cp, point in CRASH_POINTS.items() if self.ours or not point.ours_only)


_REGISTRY: dict[str, Strategy] = {}


def register(strategy: Strategy) -> Strategy:
    """Add a strategy to the lab (idempotent for the same object)."""
    if strategy.ours and strategy.audit is None:
        raise ValueError(f"strategy {strategy.name!r} is ours but has no audit")
    unknown = set(strategy.crash_points or ()) - set(CRASH_POINTS)
    if unknown:
        raise ValueError(f"strategy {strategy.name!r}: unknown crash points {sorted(unknown)}")
    if not strategy.providers:
        raise ValueError(f"strategy {strategy.name!r} runs against no provider")
    existing = _REGISTRY.get(strategy.name)
    if existing is not None and existing is not strategy:
        raise ValueError(f"a strategy named {strategy.name!r} is already registered")
    _REGISTRY[strategy.name] = strategy
    return strategy


def registered() -> dict[str, Strategy]:
    """Every strategy, after importing :data:`BUILTIN_MODULES`, in registration order."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    return dict(_REGISTRY)


# -- the graph ------------------------------------------------------------------


def _call(state: LabState, number: int) -> AIMessage:
    index = state["index"]
    return AIMessage(
        content="",
        id=f"ai-{index}-{number}",
        tool_calls=[
            {
                "name": TOOL_NAME,
                "args": {"operation": state["operation"], "body": state["body"]},
                "id": f"call-{index}-{number}",
                "type": "tool_call",
            }
        ],
    )


def scripted_model(state: LabState) -> dict[str, list[AnyMessage]]:
    """A deterministic stand-in for the model, driven by the conversation.

    It keeps no state of its own, so a resumed graph or a second worker sees
    exactly what the first one did.
    """
    messages = state["messages"]
    calls = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    last = messages[-1]
    if not calls:
        return {"messages": [_call(state, 1)]}
    if isinstance(last, ToolMessage) and last.status == "error" and len(calls) < MAX_CALLS:
        return {"messages": [_call(state, len(calls) + 1)]}
    summary = last.content if isinstance(last, ToolMessage) else "nothing to do"
    return {"messages": [AIMessage(content=f"done: {summary}", id=f"ai-{state['index']}-end")]}


def _route(state: LabState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def lab_graph(tools: Any, checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any]:
    """The graph every strategy runs in: scripted model, the strategy's tools node."""
    graph = StateGraph(LabState)
    graph.add_node("model", scripted_model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", _route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)
