"""Cheap, killable workers: one long-lived process per cell, replaced when killed.

A fresh interpreter per operation costs about a second of imports; the lab runs
thousands of operations. So workers come from a ``forkserver`` that has already
imported LangGraph and langchain-core: a new worker is a fork of a warm process
(milliseconds) and serves operations over a pipe until a crash point kills it,
after which the lab forks a replacement to resume the thread.

Protocol (parent -> worker): an :class:`Attempt`, ``"go"`` after a rendezvous,
``None`` to exit. Worker -> parent: ``("done", AttemptReport)``,
``("failed", traceback)``, ``("arrived", point)`` at a rendezvous, and
``("crash", point)`` right before the worker SIGKILLs itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import multiprocessing
import signal
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext
from typing import Any, Literal

from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command

from .faults import AttemptFaults, Faults, LabClient
from .providers import Provider, ProviderMode
from .strategies import BUILTIN_MODULES, TENANT, BuildContext, CellFiles, ToolsBuilder, lab_graph

#: A lone worker at a rendezvous is released after this long (its twin may be
#: legitimately held back, e.g. waiting on the first one's lease).
RENDEZVOUS_TIMEOUT = 0.5


@dataclass(frozen=True)
class ProviderSettings:
    """How the cell's provider behaves (see :class:`~.providers.Provider`)."""

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


@dataclass(frozen=True)
class Attempt:
    """One ``graph.ainvoke`` on an operation's thread."""

    kind: Literal["start", "resume", "answer", "inspect"]
    index: int
    operation: str
    body: str
    thread_id: str
    faults: AttemptFaults = field(default_factory=AttemptFaults)
    policy_version: int = 1
    resume: Any = None
    """``answer`` attempts: the value for ``Command(resume=...)``. (``inspect``
    runs nothing: it reports the thread's pending interrupts.)"""


@dataclass(frozen=True)
class AttemptReport:
    """What the worker saw when ``ainvoke`` returned."""

    interrupts: list[tuple[str, Any]]
    tool_messages: int
    tool_errors: int
    final: str


@dataclass(frozen=True)
class Done:
    """The attempt returned (finished, or stopped at an interrupt)."""

    report: AttemptReport


@dataclass(frozen=True)
class Killed:
    """The worker died by SIGKILL at the armed crash point ``point``."""

    point: str


Outcome = Done | Killed


class WorkerError(RuntimeError):
    """A worker failed in a way the lab did not inject: the cell is invalid."""


# -- worker side -------------------------------------------------------------------


def serve(conn: Connection, spec: WorkerSpec) -> None:
    """The worker process's entry point."""
    asyncio.run(_serve(conn, spec))


async def _serve(conn: Connection, spec: WorkerSpec) -> None:
    faults = Faults(conn)
    provider = spec.provider_settings.open(spec.files, spec.provider_mode)
    async with (
        AsyncSqliteSaver.from_conn_string(str(spec.files.checkpoints)) as saver,
        contextlib.AsyncExitStack() as exits,
    ):
        ctx = BuildContext(
            strategy=spec.strategy,
            provider_mode=spec.provider_mode,
            crash_point=spec.crash_point,
            client=LabClient(provider, faults),
            faults=faults,
            files=spec.files,
            checkpointer=saver,
            exits=exits,
        )
        tools = spec.build(ctx)
        if inspect.isawaitable(tools):
            tools = await tools
        graph = lab_graph(tools, saver)
        while True:
            # Idle between attempts: blocking here holds nothing the loop needs.
            attempt = conn.recv()
            if attempt is None:
                break
            faults.arm(attempt.faults)
            try:
                report = await _run(graph, attempt)
            except Exception:
                conn.send(("failed", traceback.format_exc()))
            else:
                conn.send(("done", report))
    provider.close()


async def _run(graph: Any, attempt: Attempt) -> AttemptReport:
    config = {
        "configurable": {
            "thread_id": attempt.thread_id,
            # The keys EffectToolNode reads its scope from (engine.scope_from).
            "tenant_id": TENANT,
            "policy_version": attempt.policy_version,
        }
    }
    if attempt.kind == "inspect":
        snapshot = await graph.aget_state(config)
        result = {**snapshot.values, "__interrupt__": list(snapshot.interrupts)}
    else:
        payload: Any
        if attempt.kind == "start":
            payload = {
                "messages": [HumanMessage(f"Send notification {attempt.index}.")],
                "index": attempt.index,
                "operation": attempt.operation,
                "body": attempt.body,
            }
        elif attempt.kind == "resume":
            payload = None
        else:
            payload = Command(resume=attempt.resume)
        result = await graph.ainvoke(payload, config, durability="sync")
    interrupts = [(i.id, i.value) for i in result.get("__interrupt__", [])]
    messages = result.get("messages", [])
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    return AttemptReport(
        interrupts=interrupts,
        tool_messages=len(tool_messages),
        tool_errors=sum(1 for m in tool_messages if m.status == "error"),
        final=str(messages[-1].content) if messages else "",
    )


# -- parent side -------------------------------------------------------------------

#: Serialises everything that may read a worker's exit status. With a fork server
#: that status is 8 bytes on the process's sentinel pipe, read by whichever thread
#: polls first: ``Process.start()`` polls *every* child (multiprocessing's
#: ``_cleanup``), so a cell starting a worker on one thread could race the join of
#: a just-killed worker on another, and the loser records exit code 255
#: (CPython gh-130895). Cells run on several threads, so every poll takes this lock.
_PROCESS_LOCK = threading.Lock()


def context() -> ForkServerContext:
    """The multiprocessing context: a fork server with the heavy imports preloaded."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__, *BUILTIN_MODULES])
    return ctx


class WorkerHandle:
    """The lab's end of one worker process."""

    def __init__(self, ctx: ForkServerContext, spec: WorkerSpec) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(child, spec), daemon=True)
        with _PROCESS_LOCK:
            self.process.start()
        # Drop our copy of the child's end, or its death would never read as EOF.
        child.close()
        self.crash_point: str | None = None

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def receive(self) -> tuple[str, Any] | None:
        """The next message, or ``None`` once the worker is gone."""
        try:
            message: tuple[str, Any] = self.conn.recv()
        except (EOFError, ConnectionResetError):
            return None
        if message[0] == "crash":
            self.crash_point = str(message[1])
        return message

    def reap(self) -> Killed:
        """The worker is gone: prove it was our SIGKILL at an armed point."""
        code = self._join(10)
        if code != -signal.SIGKILL or self.crash_point is None:
            raise WorkerError(f"worker died unexpectedly (exit code {code}, crash point {self.crash_point})")
        self.conn.close()
        return Killed(self.crash_point)

    def _join(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` for the worker to end; its exit code, or ``None``."""
        wait([self.process.sentinel], timeout)  # select only: reads nothing
        with _PROCESS_LOCK:
            self.process.join(0)
            return self.process.exitcode

    def _alive(self) -> bool:
        with _PROCESS_LOCK:
            return self.process.is_alive()

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not."""
        if self._alive():
            with contextlib.suppress(OSError):  # it may be dying already
                self.conn.send(None)
            self._join(5)
        if self._alive():
            self.process.kill()
            self._join(5)
        self.conn.close()


def drive(runs: Sequence[tuple[WorkerHandle, Attempt]], *, deadline_seconds: float = 120.0) -> list[Outcome]:
    """Run attempts on several workers at once and collect each one's outcome.

    Workers armed with a rendezvous are released together once every worker
    still running is waiting at it, or after :data:`RENDEZVOUS_TIMEOUT`.
    """
    for handle, attempt in runs:
        handle.send(attempt)
    handles = [handle for handle, _ in runs]
    outcomes: dict[int, Outcome] = {}
    waiting: dict[int, float] = {}
    deadline = time.monotonic() + deadline_seconds
    while len(outcomes) < len(handles):
        active = [i for i in range(len(handles)) if i not in outcomes]
        if waiting and (
            set(active) <= set(waiting) or time.monotonic() - min(waiting.values()) > RENDEZVOUS_TIMEOUT
        ):
            for i in waiting:
                handles[i].send("go")
            waiting.clear()
        if time.monotonic() > deadline:
            for handle in handles:
                handle.process.kill()
            raise WorkerError(f"attempt did not finish within {deadline_seconds} s")
        ready = wait([handles[i].conn for i in active], timeout=0.05 if waiting else 1.0)
        for i in active:
            if handles[i].conn not in ready:
                continue
            message = handles[i].receive()
            if message is None:
                outcomes[i] = handles[i].reap()
                waiting.pop(i, None)
            elif message[0] == "done":
                outcomes[i] = Done(message[1])
            elif message[0] == "failed":
                raise WorkerError(f"the attempt raised in the worker:\n{message[1]}")
            elif message[0] == "arrived":
                waiting[i] = time.monotonic()
    return [outcomes[i] for i in range(len(handles))]
