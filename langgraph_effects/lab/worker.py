"""Cheap, killable workers: one long-lived process per cell, replaced when killed.

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

import asyncio
import contextlib
import inspect
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing import spawn
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext
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
    BUILTIN_MODULES,
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


def serve(conn: Connection, spec: WorkerSpec) -> None:
    """The worker process's entry point."""
    # The cell's own lock directory, beside its files (tmpfs in a default run): not
    # the user's shared one, which every new worker would sweep once, lock by lock.
    os.environ[RUNTIME_DIR_ENV] = str(spec.files.runtime)
    if spec.sync:
        from .syncrow import serve_sync

        serve_sync(conn, spec)
        return
    asyncio.run(_serve(conn, spec))


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


async def _serve(conn: Connection, spec: WorkerSpec) -> None:
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


# -- parent side -------------------------------------------------------------------

#: Serialises everything that may read a worker's exit status. With a fork server
#: that status is 8 bytes on the process's sentinel pipe, read by whichever thread
#: polls first: ``Process.start()`` polls *every* child (multiprocessing's
#: ``_cleanup``), so a cell starting a worker on one thread could race the join of
#: a just-killed worker on another, and the loser records exit code 255
#: (CPython gh-130895). Cells run on several threads, so every poll takes this lock.
_PROCESS_LOCK = threading.Lock()


def context(extra: Sequence[str] = ()) -> ForkServerContext:
    """The multiprocessing context: a fork server with the heavy imports preloaded
    (the lab's, then ``extra``, then `zygote`)."""
    ctx = multiprocessing.get_context("forkserver")
    # Ignored once the server runs; a preload that fails to import is skipped. The
    # zygote comes last: it freezes what the others imported.
    ctx.set_forkserver_preload([__name__, *BUILTIN_MODULES, *extra, f"{__package__}.zygote"])
    _share_main()
    return ctx


#: The lab's ``__main__`` path, for the fork server (`zygote`).
MAIN_ENV = "LANGGRAPH_EFFECTS_LAB_MAIN"


def _share_main() -> None:
    """Name ``__main__``'s path, as multiprocessing sends it to each worker, for the fork
    server to import (it inherits the environment; see `zygote`)."""
    path = spawn.get_preparation_data("lab").get("init_main_from_path")
    if path:
        os.environ[MAIN_ENV] = path
    else:
        os.environ.pop(MAIN_ENV, None)


def forkserver_pid() -> int | None:
    """The fork server's process id once it runs (its CPU includes the workers it reaped)."""
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    return pid if isinstance(pid, int) else None


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
        self.killed_by_lab = False
        self.cpu = 0.0
        """CPU seconds the worker reported last (it reports with every attempt and kill)."""

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def receive(self) -> tuple[Any, ...] | None:
        """The next message, or ``None`` once the worker is gone."""
        try:
            message: tuple[Any, ...] = self.conn.recv()
        except (EOFError, ConnectionResetError):
            return None
        if message[0] == "crash":
            self.crash_point = str(message[1])
        if len(message) > 2 and isinstance(message[2], float):
            self.cpu = message[2]  # the worker's CPU seconds so far
        return message

    def kill_now(self) -> None:
        """SIGKILL the worker from the lab (a kill at a random moment)."""
        self.crash_point = "random"
        self.killed_by_lab = True
        self.process.kill()

    def stopped(self) -> bool:
        """Whether the worker is stopped (``SIGSTOP``), as the kernel says."""
        pid = self.process.pid
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            return False
        return stat[stat.rfind(")") + 2 :].split()[0] in ("T", "t")

    def resume_process(self) -> None:
        """``SIGCONT`` a stopped worker."""
        if self.process.pid is not None:
            os.kill(self.process.pid, signal.SIGCONT)

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
        if self._alive() and self.stopped():
            self.resume_process()
        if self._alive():
            with contextlib.suppress(OSError):  # it may be dying already
                self.conn.send(None)
            self._join(5)
        if self._alive():
            self.process.kill()
            self._join(5)
        self.conn.close()


class Driver:
    """Attempts running on several workers at once, collected as they finish.

    Workers armed with a rendezvous are released together once every worker still
    running is waiting at it, or after `RENDEZVOUS_TIMEOUT`. A worker that
    stopped itself (``SIGSTOP``) is *paused*: not finished, until the lab continues
    it (`WorkerHandle.resume_process`) and it reports. An attempt armed with
    ``kill_after`` is SIGKILLed by the lab that long after it was sent.
    """

    def __init__(self, runs: Sequence[tuple[WorkerHandle, Attempt]], *, deadline_seconds: float = 120.0):
        self.handles = [handle for handle, _ in runs]
        self.outcomes: dict[int, WorkerResult] = {}
        self.paused: set[int] = set()
        self.reached: set[int] = set()  # attempts that announced they reached the call
        self._waiting: dict[int, float] = {}
        self._kill_at: dict[int, float] = {}
        self._deadline = time.monotonic() + deadline_seconds
        self._deadline_seconds = deadline_seconds
        sent = time.monotonic()
        for i, (handle, attempt) in enumerate(runs):
            handle.send(attempt)
            # Other drivers' jobs (crashtest) carry no lab faults: they kill themselves.
            kill_after = getattr(getattr(attempt, "faults", None), "kill_after", None)
            if kill_after is not None:
                self._kill_at[i] = sent + kill_after

    def done(self, i: int) -> bool:
        """Whether attempt ``i`` has its outcome."""
        return i in self.outcomes

    def until(self, condition: Callable[[], bool], *, within: float | None = None) -> bool:
        """Collect messages until ``condition()`` holds or ``within`` seconds passed."""
        limit = None if within is None else time.monotonic() + within
        while not condition():
            if limit is not None and time.monotonic() >= limit:
                return False
            self._step(limit)
        return True

    def finish(self) -> list[WorkerResult]:
        """Collect until every attempt has its outcome; the outcomes, in order."""
        self.until(lambda: len(self.outcomes) == len(self.handles))
        return [self.outcomes[i] for i in range(len(self.handles))]

    def _step(self, limit: float | None) -> None:
        handles = self.handles
        active = [i for i in range(len(handles)) if i not in self.outcomes]
        now = time.monotonic()
        running = [i for i in active if i not in self.paused]
        if self._waiting and (
            set(running) <= set(self._waiting) or now - min(self._waiting.values()) > RENDEZVOUS_TIMEOUT
        ):
            for i in self._waiting:
                handles[i].send("go")
            self._waiting.clear()
        for i, at in list(self._kill_at.items()):
            if i in self.outcomes:
                del self._kill_at[i]
            elif now >= at and not handles[i].conn.poll():
                # A random moment: wherever the worker is, it dies now.
                handles[i].kill_now()
                del self._kill_at[i]
        if now > self._deadline and not self.paused:
            for handle in handles:
                handle.process.kill()
            raise WorkerError(f"attempt did not finish within {self._deadline_seconds} s")
        timeout = 0.05 if self._waiting else 1.0
        if self._kill_at:
            timeout = min(timeout, max(0.0, min(self._kill_at.values()) - now))
        if limit is not None:
            timeout = max(0.0, min(timeout, limit - now))
        ready = wait([handles[i].conn for i in active], timeout=timeout)
        for i in active:
            if handles[i].conn not in ready:
                continue
            message = handles[i].receive()
            if message is None:
                self.outcomes[i] = handles[i].reap()
                self._waiting.pop(i, None)
                self.paused.discard(i)
            elif message[0] == "done":
                self.outcomes[i] = Done(message[1])
                self.paused.discard(i)
            elif message[0] == "failed":
                raise WorkerError(f"the attempt raised in the worker:\n{message[1]}")
            elif message[0] == "arrived":
                self._waiting[i] = time.monotonic()
            elif message[0] == "paused":
                self.paused.add(i)
            elif message[0] == "at":
                self.reached.add(i)


def drive_workers(
    runs: Sequence[tuple[WorkerHandle, Attempt]], *, deadline_seconds: float = 120.0
) -> list[WorkerResult]:
    """Run attempts on several workers at once and collect each one's outcome
    (see `Driver`)."""
    return Driver(runs, deadline_seconds=deadline_seconds).finish()
