"""Cheap, killable workers: one long-lived process per cell, replaced when killed
(this module is the worker's end; the lab's end is `driver`).

A fresh interpreter per operation costs about a second of imports; the lab runs
thousands of operations. So workers come from a ``forkserver`` that has already
imported LangGraph and langchain-core: a new worker is a fork of a warm process
(milliseconds) and serves operations over a pipe until a crash point kills it,
after which the lab forks a replacement to resume the thread.

Protocol (parent -> worker): an `Attempt`, ``"go"`` after a rendezvous,
``None`` to exit. Worker -> parent: ``("done", AttemptReport, cpu)``,
``("failed", traceback)``, ``("arrived", point)`` at a rendezvous,
``("crash", point, cpu)`` right before the worker SIGKILLs itself, ``("paused",
point)`` right before it SIGSTOPs itself and ``("at", point)`` when an attempt
armed to announce it reaches the call. ``cpu``: the CPU seconds the worker used so
far (the lab's ``--timings``).
"""

from __future__ import annotations

import contextlib
import inspect
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, Final, Literal

from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command

from ..checkpoint.sqlite import AsyncEffectSqliteSaver
from ..errors import EffectsError
from ..recovery import recover
from .faults import CRASH_POINTS, AttemptFaults, Faults, LabClient, process_cpu
from .providers import Provider, ProviderMode
from .strategies import (
    EDITED,
    RATE_LIMIT_RETRY,
    TENANT,
    BuildContext,
    CellFiles,
    ToolsBuilder,
    WholeGraph,
    lab_graph,
)

#: Where the package keeps its lease lock files (see ``_runtime/lease.py``).
RUNTIME_DIR_ENV = "LANGGRAPH_EFFECTS_RUNTIME_DIR"

#: A lone worker at a rendezvous is released after this long (its twin may be
#: legitimately held back, e.g. waiting on the first one's lease).
RENDEZVOUS_TIMEOUT = 0.5


@dataclass(frozen=True)
class ProviderSettings:
    """How the cell's provider behaves (see `Provider`)."""

    retention: float = 24 * 3600.0
    lag: float = 0.2
    processing_time: float = 0.0

    def open(self, files: CellFiles, mode: ProviderMode) -> Provider:
        return Provider(
            files.provider,
            mode,
            retention=self.retention,
            lag=self.lag,
            processing_time=self.processing_time,
        )


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to build its graph; pickled to the worker."""

    strategy: str
    build: ToolsBuilder
    provider_mode: ProviderMode
    provider_settings: ProviderSettings
    crash_point: str
    files: CellFiles
    effect_saver: bool = False
    """Checkpoints through [`AsyncEffectSqliteSaver`][langgraph_effects.AsyncEffectSqliteSaver] (the ledger in
    the same file, and whatever the saver does to keep one runner per thread)
    instead of LangGraph's plain ``AsyncSqliteSaver``."""
    generation: int = 0
    """Workers of the cell replaced before this one (the builder sees it)."""
    sync: bool = False
    """The graph runs synchronously (``graph.invoke``) on
    [`EffectSqliteSaver`][langgraph_effects.EffectSqliteSaver] (`syncrow`)."""


@dataclass(frozen=True)
class Attempt:
    """One ``graph.ainvoke`` on an operation's thread."""

    kind: Literal["start", "resume", "recover", "answer", "inspect", "edit"]
    index: int
    operation: str
    body: str
    thread_id: str
    faults: AttemptFaults = field(default_factory=AttemptFaults)
    policy_version: int = 1
    resume: Any = None
    """``answer`` attempts: the value for ``Command(resume=...)``. (``inspect``
    runs nothing: it reports the thread's pending interrupts; ``recover`` runs
    [`recover`][langgraph_effects.recover] on the thread; ``edit`` sends an edited first
    message at the thread's first checkpoint, a branch.)"""
    turn: int = 1
    """``start`` attempts: the user's turn (a later turn adds one more request)."""
    tolerate: bool = False
    """An exception is a result, not a broken cell: a runner that lost a race for the
    thread is expected to fail (reported as ``refused``)."""
    run_id: str | None = None
    """``run_id`` in the config's ``configurable`` (a budget counted per run)."""


@dataclass(frozen=True)
class AttemptReport:
    """What the worker saw when ``ainvoke`` returned."""

    interrupts: list[tuple[str, Any]]
    tool_messages: int
    tool_errors: int
    final: str
    finished: bool = True
    """The thread has no pending work (no next node) once the attempt returned."""
    refused: str | None = None
    """A tolerated attempt that raised (or a recovery that reported the thread
    failed): the error, as ``Type: message``."""
    refused_ours: bool = False
    """Whether that error belongs to this package's hierarchy (``EffectsError``)."""


@dataclass(frozen=True)
class Done:
    """The attempt returned (finished, or stopped at an interrupt)."""

    report: AttemptReport


@dataclass(frozen=True)
class Killed:
    """The worker died by SIGKILL at the armed crash point ``point``."""

    point: str


WorkerResult = Done | Killed


class WorkerError(RuntimeError):
    """A worker failed in a way the lab did not inject: the cell is invalid."""


# -- worker side -------------------------------------------------------------------


def _saver(spec: WorkerSpec) -> contextlib.AbstractAsyncContextManager[AsyncSqliteSaver]:
    path = str(spec.files.checkpoints)
    if spec.effect_saver:
        return AsyncEffectSqliteSaver.from_conn_string(path)
    return AsyncSqliteSaver.from_conn_string(path)


def worker_context(
    spec: WorkerSpec,
    faults: Faults,
    provider: Provider,
    saver: BaseCheckpointSaver[Any],
    exits: contextlib.AsyncExitStack | None = None,
) -> BuildContext:
    """What a worker's strategy builder receives (``exits``: the async worker's stack)."""
    point = CRASH_POINTS.get(spec.crash_point)
    children = spec.files.children if point is not None and point.child else None
    return BuildContext(
        strategy=spec.strategy,
        provider_mode=spec.provider_mode,
        crash_point=spec.crash_point,
        client=LabClient(provider, faults, child_markers=children),
        faults=faults,
        files=spec.files,
        checkpointer=saver,
        exits=exits if exits is not None else contextlib.AsyncExitStack(),
        generation=spec.generation,
    )


def cell_graph(tools: Any, saver: BaseCheckpointSaver[Any], crash_point: str) -> Any:
    """The lab graph over a row's tools node, as the cell's column runs it (its
    scenario, and the ``RetryPolicy`` for its 429s)."""
    point = CRASH_POINTS.get(crash_point)
    return lab_graph(
        tools,
        saver,
        point.scenario if point is not None else "single",
        retry=RATE_LIMIT_RETRY if point is not None and point.rate_limited else None,
    )


def attempts(conn: Connection, faults: Faults) -> Iterator[Attempt]:
    """The attempts the lab sends, each with its faults armed, until it sends ``None``.

    Idle between attempts. Blocking here also holds back what an attempt left running
    on an event loop (sends still in flight after a sibling interrupted): they go on
    with the next attempt, which is when the lab wants them to."""
    while True:
        attempt = conn.recv()
        if attempt is None:
            return
        faults.arm(attempt.faults)
        yield attempt


def send_failure(conn: Connection) -> None:
    """Tell the lab why the worker failed (the exception being handled), rather than die
    with a bare exit code: the lab reads it first."""
    conn.send(("failed", traceback.format_exc()))


async def serve_async(conn: Connection, spec: WorkerSpec) -> None:
    faults = Faults(conn)
    provider = spec.provider_settings.open(spec.files, spec.provider_mode)
    async with (
        _saver(spec) as saver,
        contextlib.AsyncExitStack() as exits,
    ):
        await saver.setup()  # an AsyncEffectSqliteSaver sets up its ledger here, before recover() reads it
        ctx = worker_context(spec, faults, provider, saver, exits)
        try:
            tools = spec.build(ctx)
            if inspect.isawaitable(tools):
                tools = await tools
            graph = tools.compile(saver) if isinstance(tools, WholeGraph) else cell_graph(
                tools, saver, spec.crash_point
            )
        except Exception:
            send_failure(conn)
            return
        for attempt in attempts(conn, faults):
            try:
                report = await _run(graph, attempt, faults)
            except Exception:
                send_failure(conn)
            else:
                conn.send(("done", report, process_cpu()))
    provider.close()


def attempt_config(attempt: Attempt) -> Any:
    """The run config of an attempt: its thread, and the keys EffectToolNode reads its
    scope from (``scope_from`` in ``_runtime/binding.py``)."""
    configurable = {
        "thread_id": attempt.thread_id,
        "tenant_id": TENANT,
        "policy_version": attempt.policy_version,
    }
    if attempt.run_id is not None:
        configurable["run_id"] = attempt.run_id
    return {"configurable": configurable}


async def _run(graph: Any, attempt: Attempt, faults: Faults) -> AttemptReport:
    config = attempt_config(attempt)
    refused: BaseException | str | None = None
    if attempt.kind != "inspect":
        try:
            await _invoke(graph, attempt, config, faults)
        except Exception as error:
            if not attempt.tolerate:
                raise
            refused = error
    return attempt_report(await graph.aget_state(config), refused)


def attempt_report(snapshot: Any, refused: BaseException | str | None) -> AttemptReport:
    """What an attempt left: the thread's state after it, and the error it was refused
    with (a tolerated attempt's exception, or a failed recovery)."""
    values = snapshot.values or {}
    interrupts = [(i.id, i.value) for i in snapshot.interrupts]
    messages = values.get("messages", [])
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    if isinstance(refused, RecoveryFailed):
        refused_text, ours = str(refused), refused.ours
    elif refused is not None:
        refused_text, ours = f"{type(refused).__name__}: {refused}", isinstance(refused, EffectsError)
    else:
        refused_text, ours = None, False
    return AttemptReport(
        interrupts=interrupts,
        tool_messages=len(tool_messages),
        tool_errors=sum(1 for m in tool_messages if m.status == "error"),
        final=str(messages[-1].content) if messages else "",
        finished=not snapshot.next and bool(messages),
        refused=refused_text,
        refused_ours=ours,
    )


class RecoveryFailed(Exception):
    """``recover()`` reported the thread as failed (it reports, it does not raise)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        # recover() keeps the error as text; our errors name their class first.
        self.ours = any(error.startswith(f"{cls.__name__}:") for cls in _ours(EffectsError))


def raise_if_failed(report: Any) -> None:
    """Raise `RecoveryFailed` when ``recover()``'s report says the thread failed."""
    failed = [t for t in report.threads if t.action == "failed" or t.outcome == "error"]
    if failed:
        raise RecoveryFailed(failed[0].error or "recover() reported the thread failed")


def _ours(cls: type[BaseException]) -> list[type[BaseException]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _ours(sub))]


def start_payload(attempt: Attempt) -> dict[str, Any]:
    if attempt.turn > 1:
        return {"messages": [HumanMessage(f"Send notification {attempt.index} again.")]}
    return {
        "messages": [HumanMessage(f"Send notification {attempt.index}.")],
        "index": attempt.index,
        "operation": attempt.operation,
        "body": attempt.body,
    }


async def _edit(graph: Any, attempt: Attempt, config: Any) -> None:
    """The user edits their message, as a chat UI does it: the edited message is sent as
    new input at the checkpoint before the original one (the thread's first), a branch."""
    history = [s async for s in graph.aget_state_history(config)]
    payload, branch = edit_branch(attempt, config, history)
    await graph.ainvoke(payload, branch, durability="sync")


def edit_branch(attempt: Attempt, config: Any, history: Sequence[Any]) -> tuple[dict[str, Any], Any]:
    """The edited message, and the config of the thread's first checkpoint (``history``:
    the thread's states, newest first) to send it at."""
    first = history[-1].config["configurable"]["checkpoint_id"]
    payload = {
        "messages": [HumanMessage(f"Send notification {attempt.index}, edited.")],
        "index": attempt.index,
        "operation": attempt.operation + EDITED,
        "body": f"{attempt.body} (edited)",
    }
    return payload, {**config, "configurable": {**config["configurable"], "checkpoint_id": first}}


#: `attempt_input`'s answer when ``recover()`` is to run on the thread instead.
RECOVER: Final = object()

#: The attempt kinds that read the thread's state first (`attempt_input`).
RESUMING = ("resume", "recover")


def attempt_input(attempt: Attempt, snapshot: Any) -> Any:
    """What a start, resume, recover or answer attempt invokes the graph with, or
    `RECOVER` (``snapshot``: the thread's state, read for a resume or a recover)."""
    if attempt.kind == "start":
        return start_payload(attempt)
    if attempt.kind in RESUMING:
        if not snapshot.values and not snapshot.next:
            # Killed before the thread's first checkpoint: there is nothing to resume,
            # so the request is made again, as its caller would.
            return start_payload(replace(attempt, turn=1))
        return RECOVER if attempt.kind == "recover" else None
    return Command(resume=attempt.resume)


def recover_options(attempt: Attempt) -> dict[str, Any]:
    """The arguments a recover attempt runs ``recover()`` (or ``recover_sync``) with."""
    return {
        "thread_ids": [attempt.thread_id],
        "min_idle": 0,
        "config": {"configurable": {"policy_version": attempt.policy_version}},
    }


async def _invoke(graph: Any, attempt: Attempt, config: Any, faults: Faults) -> None:
    if attempt.kind == "edit":
        await _edit(graph, attempt, config)
        return
    snapshot = await graph.aget_state(config) if attempt.kind in RESUMING else None
    payload = attempt_input(attempt, snapshot)
    faults.start()
    if payload is RECOVER:
        raise_if_failed(await recover(graph, **recover_options(attempt)))
        return
    await graph.ainvoke(payload, config, durability="sync")
