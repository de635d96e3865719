"""What reusing dispatch lock files saves: a lock file per dispatch against one reused
(scenario ``lease_files``).

    python benchmarks/run.py lease_files [--path node|middleware] [--fanout 8] [--batches 60]

Every dispatch owner holds a ``flock`` on a file its resumers probe
(``langgraph_effects._runtime.lease``). A process now keeps the file of a finished dispatch,
stamped idle, and stamps it again for the next one; before, each dispatch created,
locked and renamed a file of its own, and unlinked it when it ended. This measures
both in one process, on one agent (ours as shipped, on ``AsyncEffectSqliteSaver``, 0 ms
tool), alternating in shuffled batches of 4 turns (``scenarios.turn.run_batch``: a full
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

import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import stats

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects._runtime import lease
from scenarios import batched_options, check_batched, opt, section
from scenarios import turn as bench_e2e

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


def report(title: str, times: Times, costs: dict[str, float]) -> tuple[list[str], dict[str, Any]]:
    """The table, then the cost of one owner each way."""
    lines = [title, f"{'':20s} {'wall ms':>8s} {'CPU ms':>7s}   vs a file per dispatch: wall (95% CI), CPU"]
    rows: dict[str, Any] = {}
    for name in VARIANTS:
        wall, cpu = times[name]
        rows[name] = {"wall_ms": stats.median_of(wall), "cpu_ms": stats.median_of(cpu),
                      "owner_cpu_us": costs[name]}
        line = f"{name:20s} {rows[name]['wall_ms']:8.2f} {rows[name]['cpu_ms']:7.2f}"
        if name != VARIANTS[0]:
            rows[name]["vs_first"] = stats.versus(name, wall, cpu, *times[VARIANTS[0]])
            line += f"   {stats.versus_text(rows[name]['vs_first'])}"
        lines.append(line)
    lines.append(
        "one owner made and released: "
        + ", ".join(f"{name} {costs[name]:.1f} µs CPU" for name in VARIANTS)
    )
    return lines, rows


CONFIGURATIONS = VARIANTS
QUICK = ["--path", "middleware", "--fanout", "2", "--batches", "2"]
check = check_batched


def options(group: Any) -> None:
    group.add_argument("--path", choices=["node", "middleware"], default="middleware")
    batched_options(group, fanout=8, batches=60)


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    """Measure on a fresh SQLite file, then the table."""
    path, fanout, batches = opt(args, "path", "middleware"), opt(args, "fanout", 8), opt(args, "batches", 60)

    def progress(done: int) -> None:
        if done % 10 == 0 or done == batches:
            ctx.log(f"  {done}/{batches} batches")

    with tempfile.TemporaryDirectory(prefix="lease-files-", dir=ctx.workdir) as tmp:
        async with AsyncEffectSqliteSaver.from_conn_string(Path(tmp) / "ours.db") as saver:
            await saver.setup()
            agent = bench_e2e.build_graph(path=path, effect=True, fanout=fanout, latency_ms=0, saver=saver)
            times = await measure(agent, batches, progress)
    costs = {variant: owner_cost(variant) for variant in VARIANTS}
    title = (
        f"{path}, fan-out {fanout}, 0 ms tool, SQLite: per turn, median of {batches} batches "
        f"of {TURNS_PER_BATCH} turns"
    )
    lines, rows = report(title, times, costs)
    return section("lease_files", lines, rows=rows)
