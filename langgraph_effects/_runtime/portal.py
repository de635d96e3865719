"""Run the async core from sync code (``graph.invoke``) without a second implementation.

The ledger is async. A sync node runs its ledger work on one background event loop
(a "portal"), passing the caller's ``contextvars`` so LangGraph's config context
travels with it. A ledger bound to a loop of its own (``ledger.loop``, e.g. a
Postgres pool opened there) is driven on that loop instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _forget_in_child() -> None:
    """A forked child has no portal thread (only the forking thread survives a fork):
    it starts its own on first use instead of waiting on the parent's forever."""
    global _loop, _lock
    _loop, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _portal_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="langgraph-effects-portal", daemon=True
            )
            thread.start()
            _loop = loop
        return _loop


def run(coro: Coroutine[Any, Any, T], *, loop: asyncio.AbstractEventLoop | None = None) -> T:
    """Run ``coro`` to completion from sync code, in a copy of the caller's context."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    target = loop if loop is not None and loop.is_running() else _portal_loop()
    if target is running:
        coro.close()
        raise RuntimeError(
            "a sync LangGraph call (invoke/stream) ran on the event loop that owns the "
            "ledger; use ainvoke/astream there, or call invoke from another thread"
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
