"""What reusing dispatch lock files saves: a lock file per dispatch against one reused.

    python benchmarks/lease_files.py [--path node|middleware] [--fanout 8] [--batches 60]

Every dispatch owner holds a ``flock`` on a file its resumers probe
(``langgraph_effects._runtime.lease``). A process now keeps the file of a finished dispatch,
stamped idle, and stamps it again for the next one; before, each dispatch created,
locked and renamed a file of its own, and unlinked it when it ended. This measures
both in one process, on one agent (ours as shipped, on ``EffectSqliteSaver``, 0 ms
tool), alternating in shuffled batches of 4 turns (``bench_e2e.run_batch``: a full
garbage collection, not timed, before each):

* ``a file per dispatch``: a released file is unlinked and closed instead of kept
  (what the earlier code did; the files made for it are stamped too, 1 µs);
* ``reused``: as shipped.

Prints each variant's median wall and process CPU time per turn, and the ratio of
the second to the first with a paired bootstrap 95% interval; then what one owner
costs, made and released, both ways (a tight loop, CPU µs). ``EffectMiddleware``
takes one owner per call, ``EffectToolNode`` one per batch of calls.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_e2e
from bench_common import bootstrap_ratio_ci, parse_batched, ratio_of_medians

from langgraph_effects import EffectSqliteSaver
from langgraph_effects._runtime import lease

VARIANTS = ("a file per dispatch", "reused")
TURNS_PER_BATCH = 4
_SHIPPED = lease._retire


def use(variant: str) -> None:
    """Switch the lease module to ``variant`` (the kept idle files are closed when
    switching to a file per dispatch, so none is reused)."""
    if variant == "reused":
        lease._retire = _SHIPPED
        return
    lease._retire = lease._close  # a released file is unlinked and closed, as before
    with lease._held_lock:
        idle = lease._idle[:]
        lease._idle.clear()
    for slot in idle:
        lease._close(slot)


def owner_cost(variant: str, rounds: int = 2000) -> float:
    """CPU µs to make and release one owner (on this thread, blocking calls)."""
    use(variant)
    try:
        lease.release(lease.new_owner())
        started = time.process_time()
        for _ in range(rounds):
            lease.release(lease.new_owner())
        return (time.process_time() - started) / rounds * 1e6
    finally:
        use("reused")


Times = dict[str, tuple[list[float], list[float]]]


async def measure(agent: Any, batches: int, progress: Callable[[int], None]) -> Times:
    """Wall and CPU milliseconds per turn, one value per batch, for each variant."""
    for variant in VARIANTS:  # warm: spare owners, prepared statements
        use(variant)
        for _ in range(10):
            await bench_e2e.run_once(agent, "warm")
    times: Times = {name: ([], []) for name in VARIANTS}
    try:
        for done in range(batches):
            for variant in random.sample(VARIANTS, len(VARIANTS)):
                use(variant)
                wall, cpu = await bench_e2e.run_batch(agent, "lease", TURNS_PER_BATCH)
                times[variant][0].append(wall)
                times[variant][1].append(cpu)
            progress(done + 1)
    finally:
        use("reused")
    return times


def report(title: str, times: Times, costs: dict[str, float]) -> list[str]:
    """The table, then the cost of one owner each way."""
    lines = [title, f"{'':20s} {'wall ms':>8s} {'CPU ms':>7s}   vs a file per dispatch: wall (95% CI), CPU"]
    first_wall, first_cpu = times[VARIANTS[0]]
    for name in VARIANTS:
        wall, cpu = times[name]
        line = f"{name:20s} {statistics.median(wall):8.2f} {statistics.median(cpu):7.2f}"
        if name != VARIANTS[0]:
            lo, hi = bootstrap_ratio_ci(wall, first_wall)
            ratio, cpu_ratio = ratio_of_medians(wall, first_wall), ratio_of_medians(cpu, first_cpu)
            line += f"   x{ratio:.3f} ({lo:.3f}-{hi:.3f}), CPU x{cpu_ratio:.3f}"
        lines.append(line)
    lines.append(
        "one owner made and released: "
        + ", ".join(f"{name} {costs[name]:.1f} µs CPU" for name in VARIANTS)
    )
    return lines


async def main(path: str, fanout: int, batches: int) -> None:
    """Measure on a fresh SQLite file, then print the table."""

    def progress(done: int) -> None:
        if done % 10 == 0 or done == batches:
            print(f"  {done}/{batches} batches", flush=True)

    with tempfile.TemporaryDirectory(prefix="lease-files-") as tmp:
        async with EffectSqliteSaver.from_conn_string(Path(tmp) / "ours.db") as saver:
            await saver.setup()
            agent = bench_e2e.build_graph(path=path, effect=True, fanout=fanout, latency_ms=0, saver=saver)
            times = await measure(agent, batches, progress)
    costs = {variant: owner_cost(variant) for variant in VARIANTS}
    title = (
        f"{path}, fan-out {fanout}, 0 ms tool, SQLite: per turn, median of {batches} batches "
        f"of {TURNS_PER_BATCH} turns"
    )
    print("\n".join(report(title, times, costs)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=["node", "middleware"], default="middleware")
    args = parse_batched(parser, fanout=8, batches=60)
    asyncio.run(main(args.path, args.fanout, args.batches))
