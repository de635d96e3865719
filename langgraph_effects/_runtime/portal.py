"""Run the async core from sync code (``graph.invoke``) without a second implementation.

The ledger is async. A sync node runs its ledger work on one background event loop
(a "portal"), passing the caller's ``contextvars`` so LangGraph's config context
travels with it. Work whose ledger lives on another running loop (an async saver's,
for a sync subgraph inside an async run) is driven on that loop instead (``loop=``).

A thread of the portal loop's own executor never waits for the portal loop: the
loop's work needs those threads (LangGraph's async Postgres saver serializes there),
so executor threads that all wait for it would stop the loop for good, and with it
every sync run of the process. `run` refuses such a call at once, and blocking
sync work that may come back to the portal (``graph.invoke`` from a coroutine) runs
on a thread of its own (`in_thread`), never on the executor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from langchain_core.runnables.config import var_child_runnable_config

from .. import _private

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
#: ``executor`` is set on the threads of the portal loop's executor.
_thread = threading.local()


def _mark_executor_thread() -> None:
    _thread.executor = True


def _forget_in_child() -> None:
    """A forked child has no portal thread (only the forking thread survives a fork):
    it starts its own on first use instead of waiting on the parent's forever."""
    global _loop, _lock
    _loop, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def _portal_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            # The loop's default executor (``to_thread``), as asyncio would make it, its
            # threads marked so that `run` can refuse them.
            loop.set_default_executor(
                concurrent.futures.ThreadPoolExecutor(
                    thread_name_prefix="langgraph-effects-portal-executor",
                    initializer=_mark_executor_thread,
                )
            )
            thread = threading.Thread(
                target=loop.run_forever, name="langgraph-effects-portal", daemon=True
            )
            thread.start()
            _loop = loop
        return _loop


def run_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop the running graph's checkpointer lives on, if it has one (an
    async saver keeps it as ``loop``): a sync subgraph or task inside an async run
    drives its ledger there, where the async run drives the same ledger. ``None``
    outside a graph run and for a sync checkpointer (their work runs on the portal)."""
    config = var_child_runnable_config.get()
    saver = _private.checkpointer(config) if config else None
    found = getattr(saver, "loop", None)
    return found if isinstance(found, asyncio.AbstractEventLoop) else None


def run(coro: Coroutine[Any, Any, T], *, loop: asyncio.AbstractEventLoop | None = None) -> T:
    """Run ``coro`` to completion from sync code, in a copy of the caller's context: on
    ``loop`` when it is given and running, else on the loop the running graph's
    checkpointer lives on when that one runs (`run_loop`), else on the portal's."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is None or not loop.is_running():
        loop = run_loop()
    target = loop if loop is not None and loop.is_running() else _portal_loop()
    if target is running:
        coro.close()
        raise RuntimeError(
            "a sync LangGraph call (invoke/stream) ran on the event loop that owns the "
            "ledger; use ainvoke/astream there, or call invoke from another thread"
        )
    if target is _loop and getattr(_thread, "executor", False):
        coro.close()
        raise RuntimeError(
            "a sync call that waits for langgraph-effects' background event loop ran on a "
            "thread of that loop's own executor, which the loop needs to make progress: "
            "enough of them would stop it for good. Run the blocking call with "
            "langgraph_effects._runtime.portal.in_thread, not asyncio.to_thread"
        )
    ctx = contextvars.copy_context()
    # Released by the loop once the task is done; the caller waits by acquiring it.
    done = threading.Lock()
    done.acquire()
    outcome: list[Any] = []  # [error or None, task]: read once ``done`` is released

    def start() -> None:
        def finish(t: asyncio.Task[T]) -> None:
            # Retrieved here, on the loop, even if the caller stopped waiting.
            outcome.append(concurrent.futures.CancelledError() if t.cancelled() else t.exception())
            outcome.append(t)
            done.release()

        target.create_task(coro).add_done_callback(finish)  # the task runs in ctx

    target.call_soon_threadsafe(start, context=ctx)
    done.acquire()
    error, task = outcome
    if error is not None:
        raise error
    result: T = task.result()
    return result


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Await ``fn(*args, **kwargs)`` run on a new thread of its own, in a copy of the
    caller's context: for blocking sync work that may wait for the portal loop (a
    sync graph's ``invoke``), which must not hold a thread of the loop's executor
    (see the module). One thread per call: each stands for one caller waiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.cancelled():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def target() -> None:
        try:
            result, error = ctx.run(fn, *args, **kwargs), None
        except BaseException as raised:
            result, error = None, raised
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=target, name="langgraph-effects-portal-caller", daemon=True).start()
    return await future
