"""The ledger's health as OpenTelemetry observable gauges, fed from
[`stats`][langgraph_effects.operator.stats] (docs/observing.md, "Gauges").

OpenTelemetry calls an observable gauge's callback from its metric reader's thread,
synchronously; the ledger is async and bound to the application's event loop. So a
task on that loop reads ``stats`` every ``interval`` seconds and keeps the last
reading, and the callbacks report it: every value is as of that reading, at most
``interval`` seconds (plus one read) old. The callbacks never touch the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from ..core.operation import UNRESOLVED
from ..ledger.base import Ledger
from .stats import LedgerStats, stats

try:  # the ``otel`` extra
    from opentelemetry import metrics as otel_metrics
except ImportError:  # pragma: no cover - the tests run with the extra
    otel_metrics = None  # type: ignore[assignment]

__all__ = ["LedgerGauges", "observe_ledger"]

log = logging.getLogger("langgraph_effects")

GAUGES = {
    "unresolved": "langgraph_effects.operations.unresolved",
    "oldest": "langgraph_effects.operations.oldest_unresolved_age",
    "waiting": "langgraph_effects.reviews.waiting",
    "circuits": "langgraph_effects.circuits.open",
    "budget": "langgraph_effects.budgets.sends_left",
}
"""The gauges' names (see docs/observing.md)."""


class LedgerGauges:
    """Observable gauges of one ledger's health, read by a task on the running loop.

    Made by [`observe_ledger`][langgraph_effects.operator.observe_ledger]; use it as an
    async context manager, or call `start` and `aclose` (an app's lifespan)."""

    def __init__(self, ledger: Ledger, *, meter: Any, interval: float, tenant: str | None) -> None:
        self.ledger = ledger
        self.interval = interval
        self.tenant = tenant
        self.reading: LedgerStats | None = None
        """The last reading (``None`` before the first one, after a failed one and
        once closed): what the callbacks report."""
        self._meter = meter
        self._task: asyncio.Task[None] | None = None
        self._registered = False

    async def start(self) -> LedgerStats:
        """Read the ledger once (a ledger that cannot be read raises here), register the
        gauges and start the task that reads it every ``interval`` seconds."""
        if self._task is not None:
            raise RuntimeError("these gauges are already started; call aclose() first")
        reading = await self.refresh()
        if not self._registered:
            self._register()
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return reading

    async def refresh(self) -> LedgerStats:
        """Read ``stats`` now and keep the reading."""
        self.reading = await stats(self.ledger, tenant=self.tenant, limit=1)
        return self.reading

    async def aclose(self) -> None:
        """Stop reading; the gauges report nothing from now on (OpenTelemetry cannot
        unregister an instrument)."""
        task, self._task = self._task, None
        self.reading = None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> LedgerGauges:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.refresh()
            except Exception:  # a ledger briefly unreachable: report nothing until it answers
                self.reading = None
                log.warning("ledger gauges: reading %s failed", self.ledger.where, exc_info=True)

    def _register(self) -> None:
        for key, callback, unit, description in (
            ("unresolved", self._unresolved, "{operation}",
             "Unresolved operations, by state (as of the last reading)"),
            ("oldest", self._oldest, "s",
             "How long the least recently changed unresolved operation has been unchanged"),
            ("waiting", self._waiting, "{operation}",
             "Operations waiting for a human (a verdict or an approval)"),
            ("circuits", self._circuits, "{circuit}",
             "Circuit breakers open"),
            ("budget", self._budgets, "{send}",
             "Sends left in the scope of each budget that is closest to its limit"),
        ):
            self._meter.create_observable_gauge(
                GAUGES[key], callbacks=[callback], unit=unit, description=description
            )
        self._registered = True

    def _observations(self, values: Iterable[tuple[float, dict[str, str]]]) -> list[Any]:
        assert otel_metrics is not None
        return [otel_metrics.Observation(value, attributes) for value, attributes in values]

    def _unresolved(self, options: Any) -> list[Any]:
        reading = self.reading
        if reading is None:
            return []
        by_state = reading.by_state
        return self._observations(
            (by_state.get(state, 0), {"langgraph_effects.state": state.value})
            for state in sorted(UNRESOLVED, key=lambda s: s.value)
        )

    def _oldest(self, options: Any) -> list[Any]:
        reading = self.reading
        if reading is None:
            return []
        oldest = reading.oldest_unresolved
        return self._observations([(0.0 if oldest is None else reading.at - oldest.updated_at, {})])

    def _waiting(self, options: Any) -> list[Any]:
        reading = self.reading
        return [] if reading is None else self._observations([(reading.waiting_count, {})])

    def _circuits(self, options: Any) -> list[Any]:
        reading = self.reading
        if reading is None:
            return []
        return self._observations([(sum(c["status"] == "open" for c in reading.circuits), {})])

    def _budgets(self, options: Any) -> list[Any]:
        reading = self.reading
        if reading is None:
            return []
        least: dict[str, int] = {}
        for budget in reading.budgets:
            left = budget["sends_left"]
            if left is not None:
                least[budget["name"]] = min(left, least.get(budget["name"], left))
        return self._observations(
            (left, {"langgraph_effects.budget": name}) for name, left in sorted(least.items())
        )


def observe_ledger(
    ledger: Ledger, *, meter: Any = None, interval: float = 30.0, tenant: str | None = None
) -> LedgerGauges:
    """Observable gauges of the ledger's health, for an app's metrics (opt-in; needs the
    ``otel`` extra and, to export anything, the OpenTelemetry SDK):

    * ``langgraph_effects.operations.unresolved`` (by ``langgraph_effects.state``),
    * ``langgraph_effects.operations.oldest_unresolved_age`` (seconds; 0 when none),
    * ``langgraph_effects.reviews.waiting`` (a verdict or an approval),
    * ``langgraph_effects.circuits.open``,
    * ``langgraph_effects.budgets.sends_left`` (by ``langgraph_effects.budget``: the
      sends left in that budget's scope closest to its limit; budgets with a send limit).

    A task on the running loop reads [`stats`][langgraph_effects.operator.stats]
    every ``interval`` seconds (unresolved rows only); the gauges report the last
    reading, so a value is at most ``interval`` seconds (plus one read) old. A failed
    read is logged and the gauges report nothing until a read succeeds. ``tenant``
    counts that tenant's operations only. ``meter``: default, the global meter
    provider's ``langgraph_effects`` meter. Observe a ledger once per meter.

        from langgraph_effects.operator import observe_ledger, open_ledger

        async with open_ledger("agent.sqlite", read_only=True) as ledger:
            async with observe_ledger(ledger, interval=30):
                await serve()  # the SDK's reader exports the gauges meanwhile
    """
    if otel_metrics is None:
        raise RuntimeError(
            'observe_ledger needs OpenTelemetry: pip install "langgraph-effects[otel]"'
            " (and the SDK, to export)"
        )
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not (
        math.isfinite(interval) and interval > 0
    ):
        raise ValueError(f"interval must be a number of seconds > 0, not {interval!r}")
    if not isinstance(ledger, Ledger):
        raise TypeError(
            f"observe_ledger needs a Ledger (open_ledger(...) gives one), not {type(ledger).__name__}"
        )
    chosen = meter if meter is not None else otel_metrics.get_meter("langgraph_effects")
    return LedgerGauges(ledger, meter=chosen, interval=float(interval), tenant=tenant)
