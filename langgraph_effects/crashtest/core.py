"""Crash-test a user's own graph: a control run, then one faulted run per point and call.

The parent process plans the runs, drives the worker processes with the crash
lab's driver (`langgraph_effects.lab.driver.drive_workers`), answers effect reviews
as an operator who asked the provider would, and counts every thread's effects
with the user's probe, the only ground truth. Workers are in `.worker`.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import random as _random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from .._runtime.decisions import REVIEW_TYPE, resume_command
from .._runtime.targets import load_target
from ..errors import ConfigurationError, EffectsError, TargetNotFoundError
from ..lab.driver import _PROCESS_LOCK, WorkerHandle, drive_workers
from ..lab.driver import context as lab_context
from ..lab.worker import Done, Killed, WorkerError
from .results import CrashReport as CrashReport
from .results import RunResult as RunResult
from .worker import (
    CALLBACK_POINTS,
    DISPATCHER_POINTS,
    MCP_LOST,
    Fault,
    Job,
    RunReport,
    Spec,
    ToolCall,
    build_graph,
    open_checkpointer,
    serve,
)

TWO_RUNNERS = "two-runners"
RANDOM = "random"
#: Every point ``points=`` / ``--points`` accepts, in matrix order.
POINTS = (*CALLBACK_POINTS, *DISPATCHER_POINTS, MCP_LOST, TWO_RUNNERS)
POINT_SUMMARIES = {
    "before-tool": "killed as the tool starts (on_tool_start)",
    "after-tool": "killed after the tool returned, before the graph recorded it (on_tool_end)",
    "timeout": "the tool ran, its caller got a TimeoutError instead of the result (no kill)",
    "after-intent": "EffectToolNode/EffectMiddleware: killed after the intent is durable, before the send",
    "before-outcome": (
        "EffectToolNode/EffectMiddleware: killed after the send, before the outcome is recorded"
    ),
    MCP_LOST: (
        "an MCP tools/call: the server applied and answered it, the caller gets 'connection closed' "
        "instead (no kill)"
    ),
    TWO_RUNNERS: "killed after the tool returned, then two processes resume the thread at once",
    RANDOM: "killed at a random moment of the run (--random N)",
}
#: Attempts per run (the first, resumes, review answers) before it counts as unfinished.
MAX_ATTEMPTS = 8
DEFAULT_INPUT: dict[str, Any] = {"messages": [{"role": "user", "content": "Go ahead."}]}


class CrashtestUsageError(ConfigurationError):
    """The crash test was called wrongly: a bad target, option or factory result."""


class CrashtestRunError(EffectsError):
    """A run could not be made (the probe raised, the control run failed, a worker broke)."""


# -- targets -------------------------------------------------------------------------


def target_name(obj: str | Callable[..., Any], what: str) -> str:
    """``MODULE:ATTR`` for ``obj``: workers import the factory and the probe by name."""
    if isinstance(obj, str):
        module, sep, attr = obj.partition(":")
        if not sep or not module or not attr:
            raise CrashtestUsageError(f"{what} takes MODULE:ATTR, e.g. myapp.agent:make_graph (got {obj!r}).")
        return obj
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not callable(obj) or not module_name or not qualname or "<" in qualname or module_name == "__main__":
        raise CrashtestUsageError(
            f"{what}: {obj!r} cannot be imported by name in a worker process; pass a module-level "
            "function (or its 'MODULE:ATTR' name) from an importable module."
        )
    return f"{module_name}:{qualname}"


def _resolve(target: str, what: str) -> Any:
    try:
        found = load_target(target)  # also from the current directory, as the workers import it
    except TargetNotFoundError as error:
        raise CrashtestUsageError(f"{what} {target}: {error.reason}") from error
    if not callable(found):
        raise CrashtestUsageError(f"{what} {target} is a {type(found).__name__}, not a callable.")
    return found


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__module__}.{type(value).__qualname__} ({text[:80]}{'…' if len(text) > 80 else ''})"


def _check_signature(factory: Callable[..., Any], name: str) -> None:
    """A factory that cannot take the checkpointer is a usage error, not a failed run."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C callable: find out by calling it
        return
    named = signature.parameters.get("checkpointer")
    try:
        if named is not None and named.kind in (named.POSITIONAL_OR_KEYWORD, named.KEYWORD_ONLY):
            signature.bind(checkpointer=None)  # how worker.build_graph calls it
        else:
            signature.bind(None)
    except TypeError as error:
        shown = signature.replace(return_annotation=signature.empty)
        raise CrashtestUsageError(
            f"the factory {name}{shown} cannot be called with the checkpointer ({error}). It must "
            "take it, as make_graph(checkpointer) or make_graph(*, checkpointer), and compile the "
            "graph with it."
        ) from error


async def _check_factory(factory: Callable[..., Any], name: str, db: str) -> None:
    """Build the graph once here, so that a factory returning something else is a usage error."""
    from langgraph.pregel import Pregel

    _check_signature(factory, name)
    async with open_checkpointer(db) as checkpointer:
        await checkpointer.setup()
        try:
            graph = await build_graph(factory, checkpointer)
        except Exception as error:
            raise CrashtestRunError(f"the factory {name} raised {type(error).__name__}: {error}") from error
    if not isinstance(graph, Pregel):
        hint = ""
        if hasattr(graph, "compile"):
            hint = " It looks like a graph builder: return builder.compile(checkpointer=checkpointer)."
        raise CrashtestUsageError(
            f"the factory {name} returned {_describe(graph)}, not a compiled LangGraph graph. It must "
            f"take the checkpointer and return e.g. builder.compile(checkpointer=checkpointer) or "
            f"create_agent(..., checkpointer=checkpointer).{hint}"
        )


async def _probe(probe: Callable[[str], Any], name: str, thread_id: str) -> int:
    try:
        value = probe(thread_id)
        if inspect.isawaitable(value):
            value = await value
    except Exception as error:
        raise CrashtestRunError(
            f"the probe {name} raised {type(error).__name__}: {error} (asked about thread "
            f"{thread_id!r}); crashtest counts effects only through the probe, so nothing can be judged."
        ) from error
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CrashtestRunError(
            f"the probe {name} returned {value!r} for thread {thread_id!r}; it must return the number "
            "of effects the provider holds for that thread (an int >= 0)."
        )
    return value


# -- workers -------------------------------------------------------------------------


def _context(extra: Sequence[str] = ()) -> ForkServerContext:
    """The lab's fork server (LangGraph preloaded), plus this module and ``extra``."""
    return lab_context(["langgraph_effects.crashtest.worker", *extra])


class _Handle(WorkerHandle):
    """A lab worker handle whose process serves `.worker.serve` instead of the lab's."""

    def __init__(self, ctx: ForkServerContext, spec: Spec) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(child, spec), daemon=True)
        with _PROCESS_LOCK:
            self.process.start()
        child.close()  # or the child's death would never read as EOF
        self.crash_point = None


def _drive(runs: list[tuple[_Handle, Job]], deadline: float) -> list[Done | Killed]:
    # The lab's driver only pipes the attempt to the worker; what it is, is the worker's business.
    return drive_workers(cast(Any, runs), deadline_seconds=deadline)


def _report(outcome: Done) -> RunReport:
    return cast(RunReport, outcome.report)


class _Pool:
    """The current worker, replaced when one dies; twins for the two-runner resume."""

    def __init__(self, ctx: ForkServerContext, spec: Spec, deadline: float) -> None:
        self.ctx, self.spec, self.deadline = ctx, spec, deadline
        self.current: _Handle | None = None
        self.started = 0

    def _handle(self) -> _Handle:
        if self.current is None:
            self.current = _Handle(self.ctx, self.spec)
            self.started += 1
        return self.current

    def run(self, job: Job) -> tuple[Done | Killed, int]:
        """Run ``job``; its outcome and how many processes it used."""
        fresh = self.current is None
        handle = self._handle()
        outcome = _drive([(handle, job)], self.deadline)[0]
        if isinstance(outcome, Killed):
            self.current = None
        return outcome, int(fresh)

    def spawn_twins(self) -> list[_Handle]:
        """Start two processes now: they import the factory while the first attempt runs,
        so that later they reach the rendezvous together (the lab's driver releases a
        lone waiter after half a second)."""
        self.started += 2
        return [_Handle(self.ctx, self.spec), _Handle(self.ctx, self.spec)]

    def run_twins(self, twins: list[_Handle], job: Job) -> tuple[list[Done | Killed], int]:
        """Two fresh processes resume the thread at once (released together)."""
        try:
            return _drive([(h, job) for h in twins], self.deadline), 2
        finally:
            for handle in twins:
                handle.close()

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


# -- the crash test ------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    point: str
    call: int | None
    tool: str | None
    fault: Fault | None = None
    kill_after: float | None = None


async def crashtest(
    factory: str | Callable[..., Any],
    probe: str | Callable[[str], Any],
    *,
    input: Any = None,
    config: Mapping[str, Any] | None = None,
    points: Sequence[str] | None = None,
    random: int = 0,
    seed: int | None = None,
    db: str | None = None,
    workdir: str | os.PathLike[str] | None = None,
    on_run: Callable[[RunResult, int, int], None] | None = None,
    deadline_seconds: float = 300.0,
    sync: bool = False,
) -> CrashReport:
    """Crash-test the graph ``factory`` builds, counting effects with ``probe``.

    Args:
        factory: ``factory(checkpointer)`` (or ``factory(checkpointer=...)``, sync or
            async) returning the compiled graph; a module-level callable or its
            ``"MODULE:ATTR"`` name (workers import it by name).
        probe: ``probe(thread_id) -> int`` (or an awaitable of one): how many effects
            the provider holds for that thread. Also imported by name in the
            control run's worker, to answer reviews call by call.
        input: the graph input of every run (default: one user message).
        config: merged into every run's config (``configurable`` merged key by key).
        points: the fault points to run (default: every point that applies; see
            `POINTS`); each runs once per tool call of the control run.
        random: extra runs killed at a random moment of the run.
        seed: seeds the random kills.
        db: a ``postgresql://`` DSN to run on ``AsyncEffectPostgresSaver`` (default: a
            fresh ``AsyncEffectSqliteSaver`` file per run under ``workdir``).
        workdir: keep the runs' SQLite files here (default: a temporary directory).
        on_run: called as ``on_run(run, done, total)`` after every finished run.
        deadline_seconds: the longest one attempt may take.
        sync: run every attempt as a sync app does: ``graph.invoke`` on ``SyncEffect*Saver``.

    Returns:
        A `CrashReport` (``duplicates``, ``missing``, ``matrix()``, ``verdict()``).

    Raises:
        CrashtestUsageError: bad targets or options, a factory that returns no graph.
        CrashtestRunError: the control run could not be made (the probe raised, say).
    """
    started = time.perf_counter()
    factory_name = target_name(factory, "factory")
    probe_name = target_name(probe, "probe")
    factory_fn = _resolve(factory_name, "factory")
    probe_fn = _resolve(probe_name, "probe") if isinstance(probe, str) else probe
    chosen, user_config = _check_options(points, random, config)
    own_dir = workdir is None
    base = Path(tempfile.mkdtemp(prefix="crashtest-")) if workdir is None else Path(workdir)
    base.mkdir(parents=True, exist_ok=True)
    name = f"crashtest-{uuid.uuid4().hex[:8]}"

    def db_for(thread: str) -> str:
        return db if db is not None else str(base / f"{thread}.sqlite")

    pool: _Pool | None = None
    try:
        await _check_factory(factory_fn, factory_name, db_for(f"{name}-check"))
        spec = Spec(factory=factory_name, probe=probe_name, cwd=os.getcwd(), env=dict(os.environ), sync=sync)
        pool = _Pool(_context(), spec, deadline_seconds)
        graph_input = DEFAULT_INPUT if input is None else input
        session = _Session(pool, probe_fn, probe_name, graph_input, user_config, db_for)
        result, control = await _survey(session, f"{name}-control", factory_name, chosen)
        plans = _plan(chosen, control, result, random, seed)
        for number, plan in enumerate(plans, start=1):
            thread = f"{name}-{number}-{plan.point}" + (f"-{plan.call}" if plan.call else "")
            run = await _faulted_run(session, plan, thread, control.calls, result.expected)
            result.runs.append(run)
            if on_run is not None:
                on_run(run, number, len(plans))
        result.seconds = time.perf_counter() - started
        return result
    finally:
        if pool is not None:
            pool.close()
        if own_dir:
            shutil.rmtree(base, ignore_errors=True)


def _check_options(
    points: Sequence[str] | None, random: int, config: Mapping[str, Any] | None
) -> tuple[list[str], dict[str, Any]]:
    """The fault points chosen and the user's config, once both are known to be usable."""
    chosen = list(points) if points is not None else list(POINTS)
    unknown = [p for p in chosen if p not in POINTS]
    if unknown:
        raise CrashtestUsageError(
            f"unknown fault point(s) {', '.join(unknown)}; choose from {', '.join(POINTS)}."
        )
    if random < 0:
        raise CrashtestUsageError(f"random must be >= 0, not {random}.")
    user_config = dict(config or {})
    if not isinstance(user_config.get("configurable", {}), Mapping):
        raise CrashtestUsageError("config['configurable'] must be a mapping.")
    if "thread_id" in user_config.get("configurable", {}):
        raise CrashtestUsageError("config: leave out thread_id: every run gets a fresh thread of its own.")
    return chosen, user_config


@dataclass(frozen=True)
class _Session:
    """What every run of one crash test shares: the workers, the probe, the input and config."""

    pool: _Pool
    probe: Callable[[str], Any]
    probe_name: str
    graph_input: Any
    config: dict[str, Any]
    db_for: Callable[[str], str]

    async def count(self, thread: str) -> int:
        """The probe's count of effects for ``thread``."""
        return await _probe(self.probe, self.probe_name, thread)


async def _survey(
    session: _Session, control: str, factory_name: str, chosen: list[str]
) -> tuple[CrashReport, RunReport]:
    """The control run (no fault): the effects every thread should hold, and the calls to aim at."""
    await session.count(control)  # a probe that cannot answer stops us here
    report = await _control(session, control)
    dispatcher_seen = sorted({e.point for e in report.dispatcher}, key=DISPATCHER_POINTS.index)
    result = CrashReport(
        factory=factory_name,
        probe=session.probe_name,
        control_thread=control,
        expected=await session.count(control),
        calls=report.calls,
        dispatcher_points=dispatcher_seen,
        points=chosen,
        runs=[],
        control_seconds=report.seconds,
    )
    return result, report


def _plan(
    chosen: Sequence[str], control: RunReport, result: CrashReport, random: int, seed: int | None
) -> list[_Plan]:
    plans: list[_Plan] = []
    by_id = {c.tool_call_id: c for c in control.calls if c.tool_call_id}
    for point in POINTS:
        if point not in chosen:
            continue
        if point in DISPATCHER_POINTS:
            events = [e for e in control.dispatcher if e.point == point]
            if not events:
                result.not_applicable[point] = (
                    "the control run never reached it: the graph does not run its tools through "
                    "EffectToolNode / EffectMiddleware"
                )
            for event in events:
                call = by_id.get(event.tool_call_id) if event.tool_call_id else None
                index = call.index if call is not None else event.index
                plans.append(_Plan(point, index, event.tool, Fault(point, event.index)))
            continue
        if point == MCP_LOST:
            _plan_mcp(plans, control, result, by_id)
            continue
        if not control.calls:
            result.not_applicable[point] = "the control run made no tool call"
        for call in control.calls:
            aim = "after-tool" if point == TWO_RUNNERS else point
            plans.append(_Plan(point, call.index, call.tool, Fault(aim, call.index)))
    rng = _random.Random(seed)
    span = max(control.seconds, 0.05)
    plans.extend(_Plan(RANDOM, None, None, kill_after=rng.uniform(0.0, span)) for _ in range(random))
    if not plans:
        why = "; ".join(f"{p}: {reason}" for p, reason in result.not_applicable.items())
        raise CrashtestRunError(
            f"no faulted run could be planned ({why or 'no point chosen'}). Check --input "
            "(the control run must call a tool) and --points."
        )
    return plans


def _plan_mcp(
    plans: list[_Plan], control: RunReport, result: CrashReport, by_id: Mapping[str, ToolCall]
) -> None:
    """One run per MCP ``tools/call`` of the control run, named by the tool call it served."""
    if not control.mcp_calls:
        result.not_applicable[MCP_LOST] = (
            "the control run made no MCP tools/call (its tools are not MCP tools on the official SDK)"
        )
    for event in control.mcp_calls:
        call = by_id.get(event.tool_call_id) if event.tool_call_id else None
        index = call.index if call is not None else event.index
        plans.append(_Plan(MCP_LOST, index, event.tool, Fault(MCP_LOST, event.index)))


async def _run_job(pool: _Pool, job: Job) -> tuple[Done | Killed, int]:
    try:
        return await asyncio.to_thread(pool.run, job)
    except WorkerError as error:
        pool.close()  # whatever state it is in, do not reuse it
        raise CrashtestRunError(f"thread {job.thread_id}: {error}") from error


async def _control(session: _Session, thread: str) -> RunReport:
    db = session.db_for(thread)
    await _setup(db)
    job = Job("start", thread, db, input=session.graph_input, config=session.config, record=True)
    outcome, _ = await _run_job(session.pool, job)
    if isinstance(outcome, Killed):  # pragma: no cover - nothing is armed
        raise CrashtestRunError(f"the control run's worker died at {outcome.point}")
    report = _report(outcome)
    if report.probe_error is not None:
        raise CrashtestRunError(
            f"the probe raised {report.probe_error} in the control run's worker, asked about thread "
            f"{thread!r} before a tool call; crashtest counts effects only through the probe."
        )
    if report.error is not None:
        raise CrashtestRunError(f"the control run (no fault) raised {report.error}; fix that first.")
    if report.interrupts:
        raise CrashtestRunError(
            f"the control run (no fault) stopped at an interrupt crashtest cannot answer: "
            f"{report.interrupts[0][1]!r}"
        )
    if not report.finished:
        raise CrashtestRunError("the control run (no fault) returned before the graph finished.")
    return report


async def _setup(db: str) -> None:
    async with open_checkpointer(db) as checkpointer:
        await checkpointer.setup()


async def _started(db: str, thread: str) -> bool:
    """Whether ``thread`` has a checkpoint, i.e. a resume has something to continue."""
    async with open_checkpointer(db) as checkpointer:
        at = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        return await checkpointer.aget_tuple(at) is not None


async def _faulted_run(
    session: _Session, plan: _Plan, thread: str, calls: list[ToolCall], expected: int
) -> RunResult:
    """One fresh thread faulted as ``plan`` says, resumed (and reviews answered) until it finished."""
    started = time.perf_counter()
    pool, config, db = session.pool, session.config, session.db_for(thread)
    run = RunResult(plan.point, plan.call, plan.tool, thread, expected, kill_after=plan.kill_after)
    if db.endswith(".sqlite"):
        await _setup(db)
    job = Job(
        "start",
        thread,
        db,
        input=session.graph_input,
        config=config,
        fault=plan.fault,
        kill_after=plan.kill_after,
    )
    resume = Job("resume", thread, db, config=config)
    # The same start without the fault: for an attempt that ended before the first checkpoint.
    restart = Job("start", thread, db, input=session.graph_input, config=config)
    if plan.kill_after is not None:
        # Random moments are drawn over the control run's length, measured in a fresh
        # process (first calls are slower): start this run in a fresh one too.
        pool.close()
    twins = pool.spawn_twins() if plan.point == TWO_RUNNERS else None
    try:
        outcome, _ = await _run_job(pool, job)
        run.processes = 1
        for attempt in range(1, MAX_ATTEMPTS + 1):
            if isinstance(outcome, Killed):
                run.kills += 1
                run.fault_reached = True
                if twins is not None and await _started(db, thread):
                    outcome = await _twins(pool, twins, resume, run)
                    twins = None
                else:
                    outcome = await _go_on(pool, run, resume, restart)
                continue
            report = _report(outcome)
            run.fault_reached = run.fault_reached or report.fault_reached
            if report.finished:
                run.finished = True
                break
            if attempt == MAX_ATTEMPTS:
                break
            if report.error is not None:
                run.errors.append(report.error)
            if report.error is None and report.interrupts:
                answer = _answer(report.interrupts, calls, await session.count(thread))
                if answer is None:
                    value = report.interrupts[0][1]
                    run.problem = f"stopped at an interrupt crashtest cannot answer: {value!r}"
                    break
                run.reviews += 1
                outcome, used = await _run_job(pool, Job("answer", thread, db, config=config, resume=answer))
                run.processes += used
            else:
                outcome = await _go_on(pool, run, resume, restart)
        if not run.finished and run.problem is None:
            run.problem = f"the thread did not finish within {MAX_ATTEMPTS} attempts"
    except CrashtestRunError as error:
        run.problem = str(error)
    finally:
        for handle in twins or ():  # the fault was never reached: the twins were not needed
            handle.close()
    run.effects = await session.count(thread)
    run.seconds = time.perf_counter() - started
    return run


async def _go_on(pool: _Pool, run: RunResult, resume: Job, restart: Job) -> Done | Killed:
    """Resume the thread; or, when it has no checkpoint yet (the attempt ended before the
    graph saved its input), start it again: a run that never started has nothing to
    resume (LangGraph would raise ``EmptyInputError``), and no tool of it can have run."""
    job = resume
    if not await _started(resume.db, resume.thread_id):
        run.restarts += 1
        job = restart
    outcome, used = await _run_job(pool, job)
    run.processes += used
    return outcome


async def _twins(pool: _Pool, twins: list[_Handle], resume: Job, run: RunResult) -> Done | Killed:
    """Two runners resume at once; then the thread is looked at as one (a third plain resume)."""
    twin = Job("resume", resume.thread_id, resume.db, config=resume.config, rendezvous=True)
    try:
        outcomes, used = await asyncio.to_thread(pool.run_twins, twins, twin)
    except WorkerError as error:
        raise CrashtestRunError(f"thread {resume.thread_id}: {error}") from error
    run.processes += used
    for number, outcome in enumerate(outcomes, start=1):
        if isinstance(outcome, Killed):
            raise CrashtestRunError(
                f"thread {resume.thread_id}: runner {number} was killed, nothing armed it"
            )
        if _report(outcome).error is not None:
            run.errors.append(f"runner {number}: {_report(outcome).error}")
    for outcome in outcomes:
        if isinstance(outcome, Done) and _report(outcome).finished:
            return outcome
    # Neither finished (one lost a race, or a review waits): continue from the thread's state.
    outcome, used = await _run_job(pool, resume)
    run.processes += used
    return outcome


def _matching_call(entry: Mapping[str, Any], calls: Sequence[ToolCall]) -> ToolCall | None:
    by_id = [c for c in calls if c.tool_call_id and c.tool_call_id == entry.get("tool_call_id")]
    if by_id:
        return by_id[0]
    same = [c for c in calls if c.tool == entry.get("tool") and c.args == entry.get("args")]
    return same[0] if len(same) == 1 else None


def _answer(interrupts: Sequence[tuple[str, Any]], calls: Sequence[ToolCall], now: int) -> Any:
    """Answer effect reviews as an operator who asked the provider: ``landed`` when it holds the effect.

    The probe counts per thread, so a call's effect is taken to have landed when
    the thread holds more effects than the control run's thread held when that
    call started. ``None`` when an interrupt is not an effect review, or a
    reviewed call cannot be matched to one of the control run's. ``now``: the
    probe's count for the thread.
    """
    decisions: dict[str, Any] = {}
    for _, value in interrupts:
        if not (isinstance(value, Mapping) and value.get("type") == REVIEW_TYPE):
            return None
        for entry in value.get("operations", ()):
            call = _matching_call(entry, calls)
            if call is None or call.effects_before is None:
                return None
            if now > call.effects_before:
                decisions[entry["operation_id"]] = {
                    "type": "landed",
                    "receipt": {"crashtest": f"the probe counts {now} effect(s) for the thread"},
                }
            else:
                decisions[entry["operation_id"]] = {"type": "not_landed"}
    pending = [SimpleNamespace(id=interrupt_id, value=value) for interrupt_id, value in interrupts]
    return resume_command(pending, decisions).resume


def summary(point: str) -> str:
    """What ``point`` does, in a few words."""
    return POINT_SUMMARIES.get(point, "EffectToolNode/EffectMiddleware: killed at this fault point")


def points_help() -> str:
    """The fault points, one line each (for ``--help``)."""
    return "\n".join(f"  {name:<15} {summary(name)}" for name in (*POINTS, RANDOM))
