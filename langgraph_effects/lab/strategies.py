"""The lab's extension point: a registry of strategies, and the graph they plug into.

A *strategy* is one way of running the lab's effectful tool call: a row of the
table. Every strategy runs in the same tiny LangGraph graph, one thread per
operation::

    START -> model -> tools -> model -> END

``model`` is scripted (no LLM): it asks for one ``send_notification`` call, and
after an error ``ToolMessage`` re-plans the call once with a new
``tool_call_id``, as a model would. ``tools`` is whatever the strategy builds:
the prebuilt ``ToolNode`` for the seed rows, ``EffectToolNode`` for ours.
Some columns run another scenario (`faults.Scenario`): two turns whose
model repeats its ids, a follow-up call worded per worker, or an AIMessage with
two sends and a read-only question that calls ``interrupt()`` (strategies add
`scenario_tools` to their node for it).

To add a row, write a module-level builder and register it::

    def build(ctx: BuildContext) -> ToolsNode: ...      # runs in the worker

    register(Strategy(name="effect-dedup", build=build, providers=("dedup",),
                      ours=True, audit=count_unresolved))

and list its module in `BUILTIN_MODULES` so workers and the CLI import it.
The builder runs inside the worker process (it must be importable by name, so
no lambdas); it may be ``async`` (to open a ledger, say) and register cleanups on
``ctx.exits``. ``answer_review``, ``audit`` and ``check`` run in the lab's parent
process.
"""

from __future__ import annotations

import importlib
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import RetryPolicy, interrupt

from .faults import CRASH_POINTS, Faults, LabClient, Scenario
from .providers import EffectRecord, ProviderError, ProviderMode, RateLimited

#: Modules that register strategies when imported (the workers preload them).
BUILTIN_MODULES: list[str] = [
    "langgraph_effects.lab.seed",
    "langgraph_effects.lab.ours",
    "langgraph_effects.lab.entrypoint",
    "langgraph_effects.lab.syncrow",
    "langgraph_effects.lab.mcprow",
    "langgraph_effects.lab.controlrow",
]

TOOL_NAME = "send_notification"
#: Who each thread of the ``entrypoint`` scenario notifies (its operation label plus
#: ``/<name>``).
RECIPIENTS = ("ann", "bob", "cy")
#: The read-only sibling of the ``siblings`` scenario; it asks the user with ``interrupt()``.
QUESTION_TOOL = "ask_human"
#: The ``type`` of its interrupt: the lab answers it itself (it is not a review).
QUESTION_TYPE = "lab_question"
#: The first call plus one re-planned retry after an error ToolMessage.
MAX_CALLS = 2
TENANT = "tenant-lab"


class LabState(MessagesState):
    """Graph state: the conversation plus the operation this thread is about."""

    index: int
    operation: str
    body: str


class ListState(TypedDict):
    """The ``two-turns`` state: messages in a plain list (no merging by message id,
    which would fold a repeated id into the earlier message)."""

    messages: Annotated[list[AnyMessage], operator.add]
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
    own database (on its own connection), as ``AsyncEffectSqliteSaver`` keeps it."""

    @classmethod
    def under(cls, workdir: Path) -> CellFiles:
        return cls(
            workdir=workdir,
            checkpoints=workdir / "checkpoints.sqlite",
            provider=workdir / "provider.sqlite",
            local=workdir / "local.sqlite",
            ledger=workdir / "checkpoints.sqlite",
        )

    @property
    def children(self) -> Path:
        """Marker files of child senders still on their way (``child-process``)."""
        return self.workdir / "children"

    @property
    def runtime(self) -> Path:
        """The lease lock files of the cell's workers (``LANGGRAPH_EFFECTS_RUNTIME_DIR``):
        the cell is one deployment on one host, its workers share the directory."""
        return self.workdir / "runtime"


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
    generation: int = 0
    """How many workers of this cell were replaced before this one (a new process)."""

    @property
    def scenario(self) -> Scenario:
        """What the cell's threads do (the column's scenario)."""
        return CRASH_POINTS[self.crash_point].scenario if self.crash_point in CRASH_POINTS else "single"

    @property
    def handled_errors(self) -> bool | tuple[type[Exception], ...]:
        """``handle_tool_errors`` for the cell's tools node: every error becomes an error
        ToolMessage, except where the node carries a ``RetryPolicy`` for the 429s
        (``definite-retry``): those must reach it."""
        point = CRASH_POINTS.get(self.crash_point)
        return (ProviderError, TimeoutError) if point is not None and point.rate_limited else True


@dataclass(frozen=True)
class WholeGraph:
    """What a builder returns to run its own graph instead of the lab's (a Functional
    API entrypoint): ``compile(checkpointer) -> compiled graph``."""

    compile: Callable[[BaseCheckpointSaver[Any]], Any]


#: ``build(ctx) -> tools node`` (or an awaitable of one): anything
#: ``StateGraph.add_node`` accepts, or a `WholeGraph`.
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
    open_by_thread: Mapping[str, int] = field(default_factory=dict)
    """Non-terminal operations per thread id (a stopped thread's are excused)."""


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
        effect_saver: the graph checkpoints through ``AsyncEffectSqliteSaver`` (the
            ledger in the same file), as this package recommends, instead of
            LangGraph's plain ``AsyncSqliteSaver``.
        sync: the worker runs the graph synchronously (``graph.invoke``) on
            ``EffectSqliteSaver`` (`syncrow`); the builder is then a
            plain function and its tools are sync.
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
    effect_saver: bool = False
    sync: bool = False

    def columns(self) -> tuple[str, ...]:
        """The crash points this strategy runs, in table order."""
        runs = [
            cp
            for cp, point in CRASH_POINTS.items()
            if point.only_rows is None or self.name in point.only_rows  # another API's path
        ]
        if self.crash_points is not None:
            return tuple(cp for cp in runs if cp in self.crash_points)
        return tuple(cp for cp in runs if self.ours or not CRASH_POINTS[cp].ours_only)


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
    """Every strategy, after importing `BUILTIN_MODULES`, in registration order."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    return dict(_REGISTRY)


# -- the graph ------------------------------------------------------------------


def _tool_call(name: str, args: dict[str, Any], call_id: str) -> ToolCall:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


#: The ``edit-branch`` column: the edited message's send is labelled ``<operation>/edited``.
EDITED = "/edited"


def _call(state: LabState, number: int) -> AIMessage:
    index = state["index"]
    args = {"operation": state["operation"], "body": state["body"]}
    # A branch is a new conversation: the model server mints new ids in it.
    ids = f"{index}-{number}" + ("-edited" if state["operation"].endswith(EDITED) else "")
    return AIMessage(
        content="",
        id=f"ai-{ids}",
        tool_calls=[_tool_call(TOOL_NAME, args, f"call-{ids}")],
    )


def intended_effects(scenario: Scenario, operation: str) -> dict[str, int]:
    """The effects one thread of ``scenario`` is meant to have, per operation label."""
    if scenario == "two-turns":
        return {operation: 2}  # two turns, each asking for it once
    if scenario == "follow-up":
        return {operation: 1, f"{operation}/follow-up": 1}
    if scenario == "siblings":
        return {f"{operation}/a": 1, f"{operation}/b": 1}
    if scenario == "saga":
        return {operation: 1, f"{operation}{UNDO}": 1}  # sent, then undone once
    if scenario == "entrypoint":
        return {f"{operation}/{name}": 1 for name in RECIPIENTS}
    return {operation: 1}


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


def no_replan_model(state: LabState) -> dict[str, list[AnyMessage]]:
    """One call, never re-planned: after an error the model gives up (only the tools
    node's ``RetryPolicy`` may try the call again)."""
    messages = state["messages"]
    if not any(isinstance(m, AIMessage) and m.tool_calls for m in messages):
        return {"messages": [_call(state, 1)]}
    last = messages[-1]
    summary = last.content if isinstance(last, ToolMessage) else "nothing to do"
    return {"messages": [AIMessage(content=f"done: {summary}", id=f"ai-{state['index']}-end")]}


#: The ``saga`` scenario's second call, refused by the provider, and the undo's label suffix.
CHARGE_TOOL = "charge_card"
UNDO = "/undo"


def saga_model(state: LabState) -> dict[str, list[AnyMessage]]:
    """A send, then a charge of the same saga (which the provider refuses), then done."""
    messages = state["messages"]
    calls = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    last, index = messages[-1], state["index"]
    if not calls:
        return {"messages": [_call(state, 1)]}
    if len(calls) == 1 and isinstance(last, ToolMessage) and last.status != "error":
        args = {"operation": state["operation"], "amount": index}
        call = _tool_call(CHARGE_TOOL, args, f"call-{index}-charge")
        return {"messages": [AIMessage(content="", id=f"ai-{index}-charge", tool_calls=[call])]}
    summary = last.content if isinstance(last, ToolMessage) else "nothing to do"
    return {"messages": [AIMessage(content=f"done: {summary}", id=f"ai-{index}-end")]}


#: The id a model server that does not mint ids gives every message it returns.
REPEATED_MESSAGE_ID = "chatcmpl-0"


def repeating_model(state: ListState) -> dict[str, list[AnyMessage]]:
    """A model server that repeats itself: every response has the same message id, and
    tool calls are numbered per response (``call_0`` every turn). Each user turn asks
    for the same notification, so each turn is one more intended effect."""
    last = state["messages"][-1]
    if isinstance(last, HumanMessage):
        args = {"operation": state["operation"], "body": state["body"]}
        call = _tool_call(TOOL_NAME, args, "call_0")
        return {"messages": [AIMessage(content="", id=REPEATED_MESSAGE_ID, tool_calls=[call])]}
    summary = last.content if isinstance(last, ToolMessage) else "nothing to do"
    return {"messages": [AIMessage(content=f"done: {summary}", id=REPEATED_MESSAGE_ID)]}


def follow_up_model(state: LabState) -> dict[str, list[AnyMessage]]:
    """One call, then a follow-up call whose wording depends on who planned it.

    An LLM asked twice words its follow-up differently; here the follow-up names
    the worker process that planned it (and gets fresh ids, as from a model
    server). Two runners that both get this far therefore plan two different
    follow-ups, and both are effects.
    """
    messages = state["messages"]
    calls = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    last = messages[-1]
    index = state["index"]
    if not calls:
        return {"messages": [_call(state, 1)]}
    if len(calls) == 1 and isinstance(last, ToolMessage):
        pid = os.getpid()
        args = {
            "operation": f"{state['operation']}/follow-up",
            "body": f"follow-up to {last.content}, planned by worker {pid}",
        }
        call = _tool_call(TOOL_NAME, args, f"call-{index}-follow-up-{pid}")
        return {"messages": [AIMessage(content="", id=f"ai-{index}-follow-up-{pid}", tool_calls=[call])]}
    summary = last.content if isinstance(last, ToolMessage) else "nothing to do"
    return {"messages": [AIMessage(content=f"done: {summary}", id=f"ai-{index}-end")]}


def siblings_model(state: LabState) -> dict[str, list[AnyMessage]]:
    """One AIMessage with two sends and, between them, a question to the user."""
    messages = state["messages"]
    index, operation, body = state["index"], state["operation"], state["body"]
    if not any(isinstance(m, AIMessage) and m.tool_calls for m in messages):
        calls = [
            _tool_call(TOOL_NAME, {"operation": f"{operation}/a", "body": body}, f"call-{index}-a"),
            _tool_call(QUESTION_TOOL, {"question": f"Also notify b for #{index}?"}, f"call-{index}-ask"),
            _tool_call(TOOL_NAME, {"operation": f"{operation}/b", "body": body}, f"call-{index}-b"),
        ]
        return {"messages": [AIMessage(content="", id=f"ai-{index}-1", tool_calls=calls)]}
    done = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
    return {"messages": [AIMessage(content="done: " + "; ".join(done), id=f"ai-{index}-end")]}


_MODELS: dict[Scenario, Any] = {
    "single": scripted_model,
    "two-turns": repeating_model,
    "follow-up": follow_up_model,
    "siblings": siblings_model,
    "no-replan": no_replan_model,
    "saga": saga_model,
}


def question_tool(ctx: BuildContext) -> BaseTool:
    """The read-only sibling: asks the user through ``interrupt()``.

    On an attempt that holds its sends in flight it first waits until both sends
    are at the provider, so that the interrupt surfaces while they are running.
    """
    faults = ctx.faults

    @tool(QUESTION_TOOL)
    async def ask_human(question: str) -> str:
        """Ask the user a yes/no question."""
        await faults.until_held(2)
        answer = interrupt({"type": QUESTION_TYPE, "question": question})
        return f"the user said {answer}"

    return ask_human


def scenario_tools(ctx: BuildContext) -> list[BaseTool]:
    """Tools the cell's scenario needs besides ``send_notification``."""
    return [question_tool(ctx)] if ctx.scenario == "siblings" else []


def _route(state: dict[str, Any]) -> str:  # any scenario's state (not a schema)
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


#: The ``definite-retry`` column's policy on the tools node: retry a 429 at once.
RATE_LIMIT_RETRY = RetryPolicy(initial_interval=0.01, jitter=False, max_attempts=3, retry_on=RateLimited)


def lab_graph(
    tools: Any,
    checkpointer: BaseCheckpointSaver[Any],
    scenario: Scenario = "single",
    *,
    retry: RetryPolicy | None = None,
) -> CompiledStateGraph[Any]:
    """The graph every strategy runs in: the scenario's scripted model, the strategy's
    tools node (with ``retry`` as its ``RetryPolicy``)."""
    graph: StateGraph[Any] = StateGraph(ListState if scenario == "two-turns" else LabState)
    graph.add_node("model", _MODELS[scenario])
    graph.add_node("tools", tools, retry_policy=retry)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", _route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)
