"""Lease heartbeats: the lease of a running dispatch, renewed until its tool returns.

A dispatch's lease expires unless its owner renews it, and a worker on another host
takes an expired lease over (`langgraph_effects.core.protocol.holder_gone`). Each
running call renews its lease every third of ``lease_seconds`` from a thread of its
own, not from the event loop, so a tool that blocks the loop (a ``time.sleep``
inside ``async def``) keeps its lease, and a slow renewal (a database waiting out a
lock) holds back no other call's.

A renewal that fails is logged and tried again at the next beat: a missed heartbeat
only shortens the lease, it never fails the call. A renewal that finds the lease no
longer held under the call's token ends the heartbeat (the call learns it was taken
over when it records its outcome).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable

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
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"langgraph-effects-heartbeat-{name}", daemon=True
        )

    def start(self) -> Heartbeat:
        """Start renewing, on a thread of its own."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing (a renewal already running finishes). Never blocks."""
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        """Whether `stop` was called."""
        return self._stopped.is_set()

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            try:
                if not self._renew():
                    return
            except Exception as error:  # a missed heartbeat only shortens the lease
                log.warning("lease heartbeat %s failed: %s", self.name, error)


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
