"""The lab's end of its workers: the fork server they come from, one `WorkerHandle`
per worker process, and the `Driver` that runs attempts on them (`drive_workers`).

The worker's end (what runs inside the process, and the protocol both ends speak)
is `worker`; `serve` is the process's entry point, which picks the async worker
(`worker.serve_async`) or the sync one (`syncrow.serve_sync`).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing import spawn
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext
from typing import Any

from .strategies import BUILTIN_MODULES
from .syncrow import serve_sync
from .worker import (
    RENDEZVOUS_TIMEOUT,
    RUNTIME_DIR_ENV,
    Attempt,
    Done,
    Killed,
    WorkerError,
    WorkerResult,
    WorkerSpec,
    serve_async,
)


def serve(conn: Connection, spec: WorkerSpec) -> None:
    """The worker process's entry point."""
    # The cell's own lock directory, beside its files (tmpfs in a default run): not
    # the user's shared one, which every new worker would sweep once, lock by lock.
    os.environ[RUNTIME_DIR_ENV] = str(spec.files.runtime)
    if spec.sync:
        serve_sync(conn, spec)
        return
    asyncio.run(serve_async(conn, spec))



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
