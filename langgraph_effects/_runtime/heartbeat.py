"""Lease heartbeats: the lease of a running dispatch, renewed until its tool returns.

A dispatch's lease expires unless its owner renews it, and a worker on another host
takes an expired lease over (`langgraph_effects.core.protocol.holder_gone`). Running
calls renew their leases every third of ``lease_seconds`` from one thread per
process, not from the event loop, so a tool that blocks the loop (a ``time.sleep``
inside ``async def``) keeps its lease; the renewals themselves run on a small pool,
so a slow one (a database waiting out a lock) holds back no other call's.

A renewal that fails is logged and tried again at the next beat: a missed heartbeat
only shortens the lease, it never fails the call. A renewal that finds the lease no
longer held under the call's token ends the heartbeat (the call learns it was taken
over when it records its outcome).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ..ledger.base import Ledger

log = logging.getLogger("langgraph_effects")

#: A blocking renewal: extends the lease, ``False`` once it is no longer ours.
Renew = Callable[[], bool]


class Heartbeat:
    """Renews one lease every ``interval`` seconds (first after one interval) until
    `stop`, or until ``renew`` returns ``False`` (the lease is no longer ours)."""

    def __init__(self, renew: Renew, *, interval: float, name: str = "lease") -> None:
        self._renew = renew
        self.interval = interval
        self.name = name
        self.stopped = False

    def start(self) -> Heartbeat:
        """Start renewing. Never blocks."""
        _scheduler().add(self, time.monotonic() + self.interval)
        return self

    def stop(self) -> None:
        """Stop renewing (a renewal already running finishes). Never blocks."""
        _scheduler().remove(self)

    def beat(self) -> bool:
        """Renew once; whether to keep beating."""
        if self.stopped:
            return False
        try:
            return bool(self._renew())
        except Exception as error:  # a missed heartbeat only shortens the lease
            log.warning("lease heartbeat %s failed: %s", self.name, error)
            return True


#: The scheduler looks at its heartbeats at least this often (seconds), so one due
#: later than that is added without waking its thread.
_TICK = 1.0


class _Scheduler:
    """The process's heartbeat thread: it sleeps until the next renewal is due and
    hands the due ones to a small pool, so one slow renewal holds back no other."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._cond = threading.Condition()
        self._due: dict[Heartbeat, float] = {}
        self._wake_at = 0.0  # when the thread next looks on its own
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="langgraph-effects-renew")
        threading.Thread(target=self._run, name="langgraph-effects-heartbeat", daemon=True).start()

    def add(self, beat: Heartbeat, when: float) -> None:
        with self._cond:
            if beat.stopped:
                return
            self._due[beat] = when
            if when < self._wake_at:
                self._cond.notify()

    def remove(self, beat: Heartbeat) -> None:
        with self._cond:
            beat.stopped = True
            self._due.pop(beat, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [beat for beat, when in self._due.items() if when <= now]
                for beat in due:
                    del self._due[beat]
                if not due:
                    self._wake_at = min([*self._due.values(), now + _TICK])
                    self._cond.wait(self._wake_at - now)
                    continue
            for beat in due:
                self._pool.submit(self._fire, beat)

    def _fire(self, beat: Heartbeat) -> None:
        if beat.beat():
            self.add(beat, time.monotonic() + beat.interval)


_lock = threading.Lock()
_current: _Scheduler | None = None


def _scheduler() -> _Scheduler:
    """The scheduler of this process (a forked child makes its own: threads do not fork)."""
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = _Scheduler()
        return _current


def start(ledger: Ledger, op_id: str, token: str, *, lease_seconds: float) -> Heartbeat:
    """Renew the lease ``token`` holds on ``op_id`` every third of ``lease_seconds``,
    each time to ``lease_seconds`` from then, until the heartbeat is stopped.

    Call it on the event loop the ledger is used from: a ledger without a renewer
    usable from any thread (`Ledger.lease_renewer`, e.g. an in-process one) is
    renewed on that loop, the beats still timed by the thread.
    """
    interval = lease_seconds / 3
    blocking = ledger.lease_renewer()
    if blocking is not None:
        renewer = blocking

        def renew() -> bool:
            return renewer(op_id, token, time.time() + lease_seconds)

    else:
        loop = asyncio.get_running_loop()

        def renew() -> bool:
            if loop.is_closed():
                return False  # nothing runs on it any more, this call included
            future = asyncio.run_coroutine_threadsafe(
                ledger.renew_lease(op_id, token, time.time() + lease_seconds), loop
            )
            try:
                return future.result(timeout=interval)
            except concurrent.futures.TimeoutError:
                future.cancel()
                raise TimeoutError(f"the event loop did not renew the lease in {interval:.1f} s") from None

    return Heartbeat(renew, interval=interval, name=op_id[:12]).start()
