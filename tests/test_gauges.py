"""``observe_ledger``: the ledger's health as OpenTelemetry observable gauges, read by the
SDK's ``InMemoryMetricReader`` from another thread (as a periodic reader does) on a real
SQLite ledger seeded as in ``test_stats`` (two reviews and an approval waiting, an
``unknown`` operation 3 hours old, one ``dispatched``, one circuit breaker open)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from langgraph_effects.core.operation import UNRESOLVED
from langgraph_effects.operator import observe_ledger

from .test_operator import make_op, seed
from .test_stats import HOUR, populate, sqlite_ledger

P = "langgraph_effects."


async def gauges(reader: InMemoryMetricReader) -> dict[str, dict[frozenset[Any], float]]:
    """Every gauge point, collected on another thread: name -> attributes -> value."""
    data = await asyncio.to_thread(reader.get_metrics_data)
    found: dict[str, dict[frozenset[Any], float]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    found.setdefault(metric.name, {})[frozenset(point.attributes.items())] = point.value  # type: ignore[union-attr]
    return found


def by_state(found: dict[str, dict[frozenset[Any], float]]) -> dict[str, float]:
    return {dict(attrs)[P + "state"]: v for attrs, v in found[P + "operations.unresolved"].items()}


def single(found: dict[str, dict[frozenset[Any], float]], name: str) -> float:
    [value] = found[P + name].values()
    return value


async def test_the_gauges_report_the_ledgers_health_and_follow_it(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    async with sqlite_ledger(tmp_path) as ledger:
        await populate(ledger)
        async with observe_ledger(ledger, meter=meter, interval=0.05) as observed:
            found = await gauges(reader)
            assert by_state(found) == {
                **{s.value: 0 for s in UNRESOLVED}, "pending": 1, "dispatched": 1, "unknown": 1, "review": 2,
            }
            assert 3 * HOUR <= single(found, "operations.oldest_unresolved_age") < 3 * HOUR + 60
            assert single(found, "reviews.waiting") == 3  # two verdicts, one approval
            assert single(found, "circuits.open") == 1
            # The emails budget allows one send per tenant, and acme's was charged.
            assert found[P + "budgets.sends_left"] == {frozenset({(P + "budget", "emails")}): 0}

            # A new review: the task on this loop reads it within an interval.
            await seed(ledger, make_op(tenant="acme", thread_id="thread-n"), "review")
            for _ in range(100):
                await asyncio.sleep(0.05)
                found = await gauges(reader)
                if single(found, "reviews.waiting") == 4:
                    break
            assert single(found, "reviews.waiting") == 4 and by_state(found)["review"] == 3
            assert observed.reading is not None and observed.reading.waiting_count == 4
        # Closed: the gauges report nothing, rather than the last value.
        assert not any(name.startswith(P) for name in await gauges(reader))


async def test_a_failed_read_reports_nothing_until_a_read_succeeds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    async with sqlite_ledger(tmp_path) as ledger:
        await populate(ledger)
        observed = observe_ledger(ledger, meter=meter, interval=0.05)
        async with observed:
            assert single(await gauges(reader), "reviews.waiting") == 3
            real = ledger.count_operations

            async def broken(query: Any) -> Any:
                raise OSError("disk unplugged")

            ledger.count_operations = broken  # type: ignore[method-assign]
            with caplog.at_level(logging.WARNING, logger="langgraph_effects"):
                for _ in range(100):
                    await asyncio.sleep(0.05)
                    if observed.reading is None:
                        break
                assert not any(name.startswith(P) for name in await gauges(reader))
            assert "ledger gauges: reading" in caplog.text and "disk unplugged" in caplog.text
            ledger.count_operations = real  # type: ignore[method-assign]
            for _ in range(100):
                await asyncio.sleep(0.05)
                if observed.reading is not None:
                    break
            assert single(await gauges(reader), "reviews.waiting") == 3


async def test_bad_input_is_refused_before_anything_is_registered(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    async with sqlite_ledger(tmp_path) as ledger:
        for interval in (0, -1, float("nan"), float("inf"), True, "30"):
            with pytest.raises(ValueError, match="interval must be a number of seconds > 0"):
                observe_ledger(ledger, meter=meter, interval=interval)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="needs a Ledger"):
            observe_ledger("agent.sqlite", meter=meter)  # type: ignore[arg-type]
        started = observe_ledger(ledger, meter=meter, interval=30)
        await started.start()
        with pytest.raises(RuntimeError, match="already started"):
            await started.start()
        await started.aclose()
    assert not any(name.startswith(P) for name in await gauges(reader))
