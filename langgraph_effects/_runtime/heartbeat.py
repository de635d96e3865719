"""Lease heartbeats: one scheduler thread per process renews every running dispatch.

A thread, not a task on the event loop: a tool that blocks the loop (a
``time.sleep`` inside ``async def``) must not let its lease lapse on other hosts.
One thread for all of them, not one each: starting a thread per call costs more
than the whole ledger commit it protects, and most calls finish long before their
first renewal is due. Renewals themselves run on a small pool, so one slow
renewal (a database waiting out a lock) does not hold the others back.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("langgraph_effects")

#: The scheduler looks at its heap at least this often (seconds), so a heartbeat due
#: later than that is added without waking the thread.
_TICK = 1.0

#: A blocking renewal: extends the lease, ``False`` once it is no longer ours.
Renew = Callable[[], bool]


class Heartbeat:
    """Renews one lease every ``interval`` seconds (first after one interval) until
    :meth:`stop` or until ``renew`` returns ``False`` (the lease is no longer ours)."""

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
        if not self.stopped:
            self.stopped = True
            _scheduler().dropped()

    def beat(self) -> bool:
        """Renew once; whether to keep beating."""
        if self.stopped:
            return False
        try:
            return bool(self._renew())
        except Exception as error:  # a missed heartbeat only shortens the lease
            log.warning("lease heartbeat %s failed: %s", self.name, error)
            return True


class _Scheduler:
    """The process's heartbeat thread: a heap of due times, woken when one is added."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, Heartbeat]] = []
        self._seq = itertools.count()
        self._stopped = 0
        self._wake_at = 0.0  # when the thread will next look at the heap on its own
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="langgraph-effects-renew")
        self._thread = threading.Thread(target=self._run, name="langgraph-effects-heartbeat", daemon=True)
        self._thread.start()

    def add(self, beat: Heartbeat, when: float) -> None:
        with self._cond:
            heapq.heappush(self._due, (when, next(self._seq), beat))
            # Woken only if it would sleep past this one: a call that starts and ends
            # between two ticks costs no thread wake-up at all.
            if when < self._wake_at:
                self._cond.notify()

    def dropped(self) -> None:
        """A heartbeat stopped: forget stopped ones once they are most of the heap."""
        with self._cond:
            self._stopped += 1
            if self._stopped * 2 > len(self._due):
                self._due = [entry for entry in self._due if not entry[2].stopped]
                heapq.heapify(self._due)
                self._stopped = 0

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._due and self._due[0][0] <= now:
                        break
                    self._wake_at = min(self._due[0][0] if self._due else now + _TICK, now + _TICK)
                    self._cond.wait(self._wake_at - now)
                self._wake_at = 0.0  # awake: adding never needs to notify
                _, _, beat = heapq.heappop(self._due)
                if beat.stopped:
                    self._stopped = max(0, self._stopped - 1)
                    continue
            self._pool.submit(self._fire, beat)

    def _fire(self, beat: Heartbeat) -> None:
        if beat.beat() and not beat.stopped:
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
