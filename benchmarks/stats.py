"""The benchmarks' statistics: pyperf holds the samples, the runs' metadata and the medians.

Each configuration a scenario times becomes one ``pyperf.Benchmark`` (values in seconds,
in the order its batches ran), so ``--pyperf FILE`` writes a suite that ``python -m
pyperf stats FILE`` and ``python -m pyperf compare_to`` read. The medians and quartiles
are pyperf's.

The interval of a ratio of medians is the one thing pyperf does not give: it is a
percentile bootstrap over *paired* batches (batch ``i`` of the baseline ran right next
to batch ``i`` of the candidate, interleaved AB BA, so a pair is resampled together and
drift common to both stays common). It is the textbook percentile method (Efron &
Tibshirani, ch. 13), seeded, so the same samples give the same interval. We chose it
over ``scipy.stats.bootstrap`` (which does the same with ``paired=True``) so as not to
add scipy and numpy, tens of MB, to the ``bench`` extra for twenty lines.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pyperf

RESAMPLES = 2000
LEVEL = 0.95


def benchmark(name: str, values_ms: Sequence[float], **metadata: Any) -> pyperf.Benchmark:
    """One configuration's samples (milliseconds, in the order they ran) as a pyperf
    benchmark in seconds; a non-positive sample (a timer that did not move) is clamped to
    1 ns, as pyperf accepts only positive values."""
    values = [max(v / 1e3, 1e-9) for v in values_ms]
    meta = {"name": name, "unit": "second", **{k: v for k, v in metadata.items() if v is not None}}
    return pyperf.Benchmark([pyperf.Run(values, metadata=meta, collect_metadata=False)])


def median_ms(bench: pyperf.Benchmark) -> float:
    return float(bench.median()) * 1e3


def quartiles_ms(bench: pyperf.Benchmark) -> tuple[float, float]:
    return float(bench.percentile(25)) * 1e3, float(bench.percentile(75)) * 1e3


def ratio(top: pyperf.Benchmark, bottom: pyperf.Benchmark) -> float:
    """``median(top) / median(bottom)``."""
    return float(top.median()) / float(bottom.median())


def ratio_interval(
    top: pyperf.Benchmark, bottom: pyperf.Benchmark, *, seed: int = 15
) -> tuple[float, float]:
    """Paired percentile-bootstrap interval (95%) of ``median(top) / median(bottom)``.

    Resamples batch indices with replacement and takes each resample's ratio of the
    two medians (``statistics``' median through a pyperf benchmark would be slower
    for 2,000 resamples; the medians here are plain sorted middles).
    """
    a, b = list(top.get_values()), list(bottom.get_values())
    if len(a) != len(b) or not a:
        raise ValueError("a paired interval needs two samples of the same, non-zero length")
    if len(a) == 1:
        return a[0] / b[0], a[0] / b[0]
    rng = random.Random(seed)
    n = len(a)
    ratios = sorted(
        _middle([a[i] for i in idx]) / _middle([b[i] for i in idx])
        for idx in ([rng.randrange(n) for _ in range(n)] for _ in range(RESAMPLES))
    )
    tail = (1.0 - LEVEL) / 2
    return ratios[round(tail * (RESAMPLES - 1))], ratios[round((1 - tail) * (RESAMPLES - 1))]


def _middle(values: list[float]) -> float:
    values.sort()
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def compare(top: pyperf.Benchmark, bottom: pyperf.Benchmark) -> dict[str, Any]:
    """The ratio of medians and its interval, as the JSON and the tables carry them."""
    return {"ratio": ratio(top, bottom), "ratio_ci95": list(ratio_interval(top, bottom))}


def metadata() -> dict[str, Any]:
    """pyperf's description of this machine and interpreter (load, CPU model, frequency,
    Python build, ...), collected once at the start of a run."""
    probe = pyperf.Run([1.0], metadata={"name": "probe", "unit": "second"}, collect_metadata=True)
    return {k: v for k, v in pyperf.Benchmark([probe]).get_metadata().items() if k not in ("name", "unit")}


def suite(benchmarks: list[pyperf.Benchmark]) -> pyperf.BenchmarkSuite | None:
    """The run's benchmarks as one pyperf suite (names made unique), or None if empty."""
    return pyperf.BenchmarkSuite(benchmarks) if benchmarks else None


def versus(
    name: str,
    wall: Sequence[float],
    cpu: Sequence[float],
    base_wall: Sequence[float],
    base_cpu: Sequence[float],
) -> dict[str, Any]:
    """One row (``wall``/``cpu`` ms per batch) against another measured interleaved with it:
    medians, the wall ratio with its paired interval, and the CPU ratio."""
    w, c = benchmark(f"{name}/wall", wall), benchmark(f"{name}/cpu", cpu)
    bw, bc = benchmark(f"{name}/base_wall", base_wall), benchmark(f"{name}/base_cpu", base_cpu)
    lo, hi = ratio_interval(w, bw)
    return {"wall_ms": median_ms(w), "cpu_ms": median_ms(c), "ratio": ratio(w, bw), "ratio_ci95": [lo, hi],
            "cpu_ratio": ratio(c, bc)}


def versus_text(row: dict[str, Any]) -> str:
    """``x1.052 (1.010-1.090), CPU x1.031``: a :func:`versus` row as the scenarios print it."""
    lo, hi = row["ratio_ci95"]
    return f"x{row['ratio']:.3f} ({lo:.3f}-{hi:.3f}), CPU x{row['cpu_ratio']:.3f}"


def median_of(values: Sequence[float]) -> float:
    """The median of plain values (through pyperf, as every other median here)."""
    return float(pyperf.Benchmark([pyperf.Run([max(v, 1e-12) for v in values],
                                              metadata={"name": "m"}, collect_metadata=False)]).median())
