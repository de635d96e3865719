"""What telling OpenTelemetry costs an agent turn (issue 43, item 6).

One turn: a model asks for one effectful call, ``EffectToolNode`` sends it on
``AsyncEffectSqliteSaver``, the model answers. Three configurations, each timed in its own
process (OpenTelemetry's global providers are set once per process), the processes
alternated so drift hits all three alike:

- ``off``: as without the ``otel`` extra (``telemetry.ENABLED`` false: no hook does anything);
- ``api``: ``opentelemetry-api`` installed, no SDK configured (the API's no-op tracer and meter);
- ``sdk``: the SDK with a ``SimpleSpanProcessor`` into an ``InMemorySpanExporter`` and an
  ``InMemoryMetricReader``.

Usage::

    python benchmarks/telemetry_cost.py [--rounds 6] [--turns 40] [--hooks]

Prints each configuration's median turn and its 95% bootstrap interval, and the ratio
of each median to ``off`` with its interval. ``--hooks`` times the telemetry hooks one
sent call goes through, alone (no graph, no ledger), in microseconds per call
(``--turns`` then counts batches of 1,000 calls).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

MODES = ("off", "api", "sdk")
RESAMPLES = 2000


def _configure(mode: str) -> None:
    from langgraph_effects._runtime import telemetry

    if mode == "off":
        telemetry.ENABLED = False
    elif mode == "sdk":
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def _hooks(mode: str, batches: int) -> list[float]:
    """The hooks one sent call goes through (its open, its round, two transitions, the tool's run),
    alone: microseconds per call, one value per batch of 1,000 calls."""
    from bench_common import make_op

    from langgraph_effects import Effect
    from langgraph_effects._runtime import telemetry
    from langgraph_effects._runtime.calls import CallRecord
    from langgraph_effects.core.operation import Change, Event, State

    _configure(mode)
    op = make_op("op-bench")
    done = replace(op, state=State.CONFIRMED, attempts=1)
    effect = Effect(dedup_window=60)
    times: list[float] = []
    for _ in range(batches + 2):  # the first two warm up
        started = time.perf_counter()
        for _ in range(1000):
            c = CallRecord("call-1", "send_email", {}, effect, op)
            telemetry.opening([c])
            telemetry.call_started(c, {})
            with telemetry.dispatching(c):
                pass
            c.op = done
            telemetry.moved(c, "dispatched", Change(Event.SUCCEED))
            telemetry.call_ended(c, waits_for=None)
        times.append((time.perf_counter() - started) * 1000)  # ms per 1,000 = µs per call
    return times[2:]


async def _turns(mode: str, turns: int) -> list[float]:
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    from langgraph_effects import AsyncEffectSqliteSaver, Effect, EffectToolNode
    from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

    _configure(mode)
    from langgraph.graph import END, START, MessagesState, StateGraph

    @tool
    def send(n: int) -> str:
        """Send notification number ``n``."""
        return f"sent {n}"

    times: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        async with AsyncEffectSqliteSaver.from_conn_string(str(Path(folder) / "bench.sqlite")) as saver:
            await saver.setup()
            for i in range(turns + 5):  # the first five warm up
                model = ScriptedChatModel(script=call_each_then_finish([("send", {"n": i})]))

                def agent(state: MessagesState, model: Any = model) -> dict[str, Any]:
                    return {"messages": [model.invoke(state["messages"])]}

                builder = StateGraph(MessagesState)
                builder.add_node("agent", agent)
                builder.add_node("tools", EffectToolNode([send], effects={"send": Effect(dedup_window=60)}))
                builder.add_edge(START, "agent")
                builder.add_conditional_edges(
                    "agent", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
                )
                builder.add_edge("tools", "agent")
                graph = builder.compile(checkpointer=saver)
                config: Any = {"configurable": {"thread_id": f"t{i}"}}
                started = time.perf_counter()
                await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
                if i >= 5:
                    times.append((time.perf_counter() - started) * 1000)
    return times


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _interval(values: list[float], base: list[float] | None = None) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median (or of median/median(base))."""
    rng = random.Random(43)
    found = []
    for _ in range(RESAMPLES):
        a = [rng.choice(values) for _ in values]
        if base is None:
            found.append(_median(a))
        else:
            found.append(_median(a) / _median([rng.choice(base) for _ in base]))
    found.sort()
    return found[int(0.025 * (RESAMPLES - 1))], found[int(0.975 * (RESAMPLES - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--hooks", action="store_true", help="time the hooks alone (µs per call)")
    parser.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        found = _hooks(args.one, args.turns) if args.hooks else asyncio.run(_turns(args.one, args.turns))
        print(json.dumps(found))
        return
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            out = subprocess.run(
                [sys.executable, __file__, "--one", mode, "--turns", str(args.turns),
                 *(["--hooks"] if args.hooks else [])],
                check=True, capture_output=True, text=True,
            )
            samples[mode].extend(json.loads(out.stdout.strip().splitlines()[-1]))
    base = samples["off"]
    interval = "95% interval"
    unit = "median µs" if args.hooks else "median ms"
    print(f"{'mode':<5} {'n':>5} {unit:>10} {interval:>18} {'vs off':>7} {interval:>16}")
    for mode in MODES:
        values = samples[mode]
        low, high = _interval(values)
        r_low, r_high = _interval(values, base)
        print(
            f"{mode:<5} {len(values):>5} {_median(values):>10.2f} {f'[{low:.2f}, {high:.2f}]':>18} "
            f"{_median(values) / _median(base):>7.3f} {f'[{r_low:.3f}, {r_high:.3f}]':>16}"
        )


if __name__ == "__main__":
    main()
