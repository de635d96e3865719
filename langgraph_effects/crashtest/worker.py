"""The crash test's worker process: runs the user's graph once per attempt, and dies on cue.

A worker is a fork of the crash lab's warm fork server (LangGraph already
imported). It imports the user's factory by name, and for every `Job`
opens the run's checkpointer, builds the graph and calls ``graph.ainvoke`` with a
LangChain callback handler in the run config. Callbacks reach every tool call of
any graph (a plain ``ToolNode``, ``create_agent``, a tool called by hand inside a
node), so the handler can break a call at three moments no graph can opt out of:

* ``before-tool``: ``on_tool_start``, the tool is about to run: SIGKILL;
* ``after-tool``: ``on_tool_end``, the tool returned, the graph has not recorded
  it yet: SIGKILL;
* ``timeout``: ``on_tool_end`` raises ``TimeoutError`` (``raise_error``), so
  the caller sees a timeout for a call that did its work (no kill).

Graphs built on ``EffectToolNode`` / ``EffectMiddleware`` also pass the dispatcher's
own fault points (`langgraph_effects._runtime.faults`), where the worker can die too.

Graphs whose tools are MCP tools (any client on the official SDK's
``ClientSession``: ``langchain-mcp-adapters``, this package's ``EffectKeyInterceptor``
and ``mcp_lookup``) also pass ``mcp-lost``: every ``tools/call`` the attempt makes is
counted, and the armed one goes to the server and is answered, then its caller gets
the SDK's "connection closed" error instead of the answer (no kill).

The protocol is the lab's (`langgraph_effects.lab.worker`), so the lab's
parent-side driver runs these workers unchanged: ``("done", RunReport)``,
``("failed", traceback)`` for a harness failure (the graph raising is *not* one: it
is reported in ``RunReport.error``), ``("arrived", point)`` at a rendezvous and
``("crash", point)`` right before the SIGKILL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import inspect
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Literal, NamedTuple
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langgraph.types import Command

from .._runtime import faults as _faults
from ..core.operation import Operation
from ..lab.faults import AttemptFaults, Faults

#: Fault points every graph passes through (LangChain's tool callbacks).
CALLBACK_POINTS = ("before-tool", "after-tool", "timeout")


def dispatcher_point(name: str) -> str:
    """The crash test's name for a dispatcher fault point (``after_intent`` -> ``after-intent``)."""
    return name.replace("_", "-")


DISPATCHER_POINTS = tuple(dispatcher_point(p) for p in _faults.POINTS)
#: An MCP ``tools/call`` the server applied and answered; its caller never gets the answer.
MCP_LOST = "mcp-lost"


@dataclass(frozen=True)
class Spec:
    """What every worker of one crash test needs; pickled to the worker."""

    factory: str
    """``MODULE:ATTR`` of ``factory(checkpointer) -> compiled graph``."""
    probe: str | None
    """``MODULE:ATTR`` of the probe, called in the control run only (see `Job`)."""
    cwd: str
    env: dict[str, str]
    """The crash test's environment: a fork server child inherits the server's, not ours."""
    sync: bool = False
    """Run each attempt as a sync app does: ``graph.invoke`` on ``SyncEffect*Saver``."""


class Fault(NamedTuple):
    """Break the ``call``-th event at ``point`` (1-based, counted within one attempt)."""

    point: str
    call: int


@dataclass(frozen=True)
class Job:
    """One ``graph.ainvoke`` on one run's thread."""

    kind: Literal["start", "resume", "answer"]
    thread_id: str
    db: str
    """A SQLite path, or a ``postgresql://`` DSN."""
    input: Any = None
    config: dict[str, Any] = field(default_factory=dict)
    resume: Any = None
    fault: Fault | None = None
    kill_after: float | None = None
    """Seconds after ``ainvoke`` starts at which the worker SIGKILLs itself (``--random``)."""
    rendezvous: bool = False
    """Wait until the parent releases every worker of this resume at once."""
    record: bool = False
    """Control run: ask the probe before every tool call how many effects the thread
    holds, so that reviews can later be answered call by call."""

    @property
    def faults(self) -> AttemptFaults:
        """What the lab's driver arms for this job: nothing (the worker faults and kills
        itself, see `fault` and `kill_after`)."""
        return _DRIVER_ARMS_NOTHING


_DRIVER_ARMS_NOTHING = AttemptFaults()


@dataclass(frozen=True)
class ToolCall:
    """One tool call the attempt saw (``on_tool_start``), in the order they started."""

    index: int
    tool: str
    tool_call_id: str | None
    args: Any
    effects_before: int | None = None
    """The probe's count for the thread when the call started (control run only)."""


@dataclass(frozen=True)
class FaultEvent:
    """The dispatcher reached one of its fault points for an operation."""

    point: str
    index: int
    tool: str
    tool_call_id: str | None


@dataclass(frozen=True)
class RunReport:
    """What one attempt did, as the worker saw it."""

    calls: list[ToolCall]
    dispatcher: list[FaultEvent]
    interrupts: list[tuple[str, Any]]
    finished: bool
    """The thread has nothing left to run (and no interrupt pending)."""
    error: str | None
    """The graph raised (a fault's timeout, a lost race, a bug): ``Type: message``."""
    seconds: float
    fault_reached: bool
    probe_error: str | None = None
    """The probe raised when the control run asked it before a tool call."""
    mcp_calls: list[FaultEvent] = field(default_factory=list)
    """The MCP ``tools/call`` requests the attempt made (point ``mcp-lost``), in order."""


def load(target: str) -> Any:
    """The object named ``MODULE:ATTR`` (dotted attributes allowed)."""
    module_name, _, attr = target.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


# -- worker side -------------------------------------------------------------------


class _Killer:
    """Sends ``("crash", point)`` and SIGKILLs the process; can be disarmed by the main thread."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._armed = True

    def arm(self) -> None:
        with self._lock:
            self._armed = True

    def die(self, point: str) -> None:
        with self._lock:
            if not self._armed:
                return  # the attempt already finished: a late random timer
            self._conn.send(("crash", point))
            os.kill(os.getpid(), signal.SIGKILL)

    def disarm(self) -> None:
        with self._lock:
            self._armed = False


class FaultHandler(BaseCallbackHandler):
    """Sees every tool call of the run; breaks the armed one (see the module docstring).

    A sync handler run inline: LangChain calls it directly on the async path *and*
    on the sync one (a sync tool runs under a sync callback manager in an executor
    thread, where an async handler's exception would only be logged).
    """

    raise_error = True  # so that the ``timeout`` fault reaches the tool's caller
    run_inline = True

    def __init__(self, job: Job, killer: _Killer, probe: Callable[[str], Any] | None) -> None:
        self.job = job
        self.killer = killer
        self.probe = probe
        self.calls: list[ToolCall] = []
        self.dispatcher: list[FaultEvent] = []
        self.mcp_calls: list[FaultEvent] = []
        self.fault_reached = False
        self.probe_error: str | None = None
        self._runs: dict[UUID, int] = {}
        self._dispatcher_counts: dict[str, int] = {}

    def _armed(self, point: str, index: int) -> bool:
        fault = self.job.fault
        hit = fault is not None and fault.point == point and fault.call == index
        if hit:
            self.fault_reached = True
        return hit

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        index = len(self.calls) + 1
        self._runs[run_id] = index
        before = None
        if self.probe is not None and self.probe_error is None:
            try:
                before = _call_probe(self.probe, self.job.thread_id)
            except Exception as exc:  # never let the probe change what the graph sees
                self.probe_error = f"{type(exc).__name__}: {exc}"
        name = kwargs.get("name") or (serialized or {}).get("name") or "?"
        args = inputs if inputs is not None else input_str
        self.calls.append(ToolCall(index, str(name), kwargs.get("tool_call_id"), _plain(args), before))
        if self._armed("before-tool", index):
            self.killer.die("before-tool")

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        index = self._runs.get(run_id)
        if index is None:
            return
        if self._armed("after-tool", index):
            self.killer.die("after-tool")
        if self._armed("timeout", index):
            raise TimeoutError("crashtest: the tool ran, but its caller saw a timeout")

    def dispatcher_hook(self, name: str, op: Operation) -> None:
        """Installed at the dispatcher's fault points (`langgraph_effects._runtime.faults.install`)."""
        point = dispatcher_point(name)
        index = self._dispatcher_counts.get(point, 0) + 1
        self._dispatcher_counts[point] = index
        self.dispatcher.append(FaultEvent(point, index, op.tool, op.tool_call_id))
        if self._armed(point, index):
            self.killer.die(point)

    def mcp_answered(self, name: str) -> None:
        """An MCP ``tools/call`` of ``name`` was answered; the armed one loses its answer."""
        index = len(self.mcp_calls) + 1
        running = self.calls[-1] if self.calls else None
        self.mcp_calls.append(FaultEvent(MCP_LOST, index, name, running.tool_call_id if running else None))
        if self._armed(MCP_LOST, index):
            from mcp.shared.exceptions import McpError
            from mcp.types import CONNECTION_CLOSED, ErrorData

            message = "Connection closed (crashtest: the server applied the call; its answer was lost)"
            raise McpError(ErrorData(code=CONNECTION_CLOSED, message=message))


@contextlib.contextmanager
def mcp_calls_seen(handler: FaultHandler) -> Iterator[None]:
    """Route every MCP ``ClientSession.call_tool`` of the attempt through ``handler``
    (nothing to do without the MCP SDK)."""
    try:
        from mcp.client.session import ClientSession
    except ModuleNotFoundError:
        yield
        return
    original = ClientSession.call_tool

    async def call_tool(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, name, *args, **kwargs)
        handler.mcp_answered(name)
        return result

    ClientSession.call_tool = call_tool  # type: ignore[method-assign]
    try:
        yield
    finally:
        ClientSession.call_tool = original  # type: ignore[method-assign]


def _plain(value: Any) -> Any:
    """Arguments as JSON-like data (tool inputs may hold injected, unpicklable objects)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if _jsonish(v)}
    return value if _jsonish(value) else repr(value)


def _jsonish(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_jsonish(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _jsonish(v) for k, v in value.items())
    return False


def _call_probe(probe: Callable[[str], Any], thread_id: str) -> int:
    """The probe's count, from inside a callback (no await there: an async probe runs
    on a loop of its own in a helper thread; the control run waits for it)."""
    value = probe(thread_id)
    if inspect.isawaitable(value):
        awaitable = value

        async def wait() -> Any:
            return await awaitable

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            value = pool.submit(asyncio.run, wait()).result()
    return int(value)


@contextlib.asynccontextmanager
async def open_checkpointer(db: str, *, sync: bool = False) -> AsyncIterator[Any]:
    """A fresh checkpointer on ``db``: the one of the backend the registry names for it
    (``AsyncEffectSqliteSaver`` for a path, ``AsyncEffectPostgresSaver`` for a DSN); with ``sync``,
    their sync twins (opened and closed on the package's portal loop)."""
    from ..ledger.registry import open_checkpointer as backend_checkpointer

    if sync:
        from ..checkpoint.sync import EffectPostgresSaver, EffectSqliteSaver
        from ..ledger.registry import is_postgres_dsn

        kind = EffectPostgresSaver if is_postgres_dsn(db) else EffectSqliteSaver
        with kind.from_conn_string(db) as twin:
            yield twin
        return
    async with backend_checkpointer(db) as saver:
        yield saver


async def build_graph(factory: Callable[..., Any], checkpointer: Any) -> Any:
    """``factory(checkpointer)`` (or ``factory(checkpointer=...)``), awaited when it is async."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or C callable: positional it is
        parameters = {}  # type: ignore[assignment]
    named = parameters.get("checkpointer")
    if named is not None and named.kind in (named.POSITIONAL_OR_KEYWORD, named.KEYWORD_ONLY):
        graph = factory(checkpointer=checkpointer)
    else:
        graph = factory(checkpointer)
    if inspect.isawaitable(graph):
        graph = await graph
    return graph


def serve(conn: Connection, spec: Spec) -> None:
    """The worker process's entry point."""
    # The timeout fault raises from a callback on purpose; LangChain would log each one.
    logging.getLogger("langchain_core.callbacks.manager").setLevel(logging.ERROR)
    os.environ.clear()
    os.environ.update(spec.env)
    os.chdir(spec.cwd)
    if spec.cwd not in sys.path:
        sys.path.insert(0, spec.cwd)
    asyncio.run(_serve(conn, spec))


async def _serve(conn: Connection, spec: Spec) -> None:
    factory = load(spec.factory)
    probe = load(spec.probe) if spec.probe else None
    killer = _Killer(conn)
    while True:
        job = conn.recv()  # idle between attempts: blocking here holds nothing
        if job is None:
            break
        try:
            report = await _attempt(conn, job, factory, probe if job.record else None, killer, spec.sync)
        except Exception:
            conn.send(("failed", traceback.format_exc()))
        else:
            conn.send(("done", report))


async def _attempt(
    conn: Connection,
    job: Job,
    factory: Callable[..., Any],
    probe: Callable[[str], Any] | None,
    killer: _Killer,
    sync: bool = False,
) -> RunReport:
    handler = FaultHandler(job, killer, probe)
    for name in _faults.POINTS:
        _faults.install(name, handler.dispatcher_hook)
    with mcp_calls_seen(handler):
        return await _run_attempt(conn, job, factory, handler, killer, sync)


async def _run_attempt(
    conn: Connection,
    job: Job,
    factory: Callable[..., Any],
    handler: FaultHandler,
    killer: _Killer,
    sync: bool,
) -> RunReport:
    config = dict(job.config)
    config["configurable"] = {**job.config.get("configurable", {}), "thread_id": job.thread_id}
    config["callbacks"] = [*(job.config.get("callbacks") or []), handler]
    payload: Any
    if job.kind == "start":
        payload = job.input
    elif job.kind == "resume":
        payload = None
    else:
        payload = Command(resume=job.resume)
    error: str | None = None
    try:
        async with open_checkpointer(job.db, sync=sync) as checkpointer:
            graph = await build_graph(factory, checkpointer)
            if job.rendezvous:
                # Two runners resuming the same thread: both are ready, released together.
                faults = Faults(conn)
                faults.arm(AttemptFaults(rendezvous=True))
                faults.meet("resume")
            killer.arm()
            timer = None
            if job.kill_after is not None:
                timer = threading.Timer(job.kill_after, killer.die, ("random",))
                timer.daemon = True
            started = time.perf_counter()
            if timer is not None:
                timer.start()
            try:
                if sync:  # as a sync app runs it, off this event loop
                    await asyncio.to_thread(graph.invoke, payload, config, durability="sync")
                else:
                    await graph.ainvoke(payload, config, durability="sync")
            except Exception as exc:  # the graph's own failure is an outcome, not a harness error
                error = f"{type(exc).__name__}: {exc}"
            finally:
                killer.disarm()
                if timer is not None:
                    timer.cancel()
            seconds = time.perf_counter() - started
            at = {"configurable": config["configurable"]}
            snapshot = await (asyncio.to_thread(graph.get_state, at) if sync else graph.aget_state(at))
    finally:
        _faults.clear()
    interrupts = [(i.id, i.value) for i in snapshot.interrupts]
    return RunReport(
        calls=handler.calls,
        dispatcher=handler.dispatcher,
        interrupts=interrupts,
        finished=error is None and not interrupts and not snapshot.next,
        error=error,
        seconds=seconds,
        fault_reached=handler.fault_reached,
        probe_error=handler.probe_error,
        mcp_calls=handler.mcp_calls,
    )
