"""What a turn leaves for Python's garbage collector: baseline against ours (scenario
``gc_churn``).

    python benchmarks/run.py gc_churn [--path node|middleware] [--fanout 8] [--turns 1000]

CPython runs a full collection of the whole process (every tracked object: ~60 ms in
an agent process here) when enough objects have survived into its oldest
generation. Objects that live a while and then die (a bounded cache's entries) feed
that stream; flat tuples of strings do not, as the collector stops tracking them.
For the baseline agent and ours, on one SQLite file, this prints per ``--turns``
turns: the full collections and their time, the objects promoted into the oldest
generation per turn (sampled over 60 turns, by type), and the tracked objects the
process holds afterwards.
"""

from __future__ import annotations

import collections
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

from scenarios import opt, section
from scenarios import turn as bench_e2e

CONFIGURATIONS = ("baseline", "ours")
QUICK = ["--turns", "20", "--fanout", "2"]


def options(group: Any) -> None:
    group.add_argument("--path", choices=["node", "middleware"], default="node")
    group.add_argument("--fanout", type=int, default=8)
    group.add_argument("--turns", type=int, default=1000)


class FullCollections:
    """Counts and times the collector's full (oldest generation) collections."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.times.append(time.perf_counter() - self._started)


async def promoted_per_turn(graph: Any, turns: int = 60) -> collections.Counter[str]:
    """Objects that reached the oldest generation during ``turns`` turns, by type."""
    gc.collect()
    gc.freeze()  # what was there before is out of the count
    try:
        for _ in range(turns):
            await bench_e2e.run_once(graph, "promoted")
        gc.collect(0)
        gc.collect(1)
        return collections.Counter(type(o).__qualname__ for o in gc.get_objects(2))
    finally:
        gc.unfreeze()


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    path, fanout, turns = opt(args, "path", "node"), opt(args, "fanout", 8), opt(args, "turns", 1000)
    full = FullCollections()
    lines = [f"{path}, fan-out {fanout}, 0 ms tool, SQLite"]
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=ctx.workdir) as tmp:
        async with bench_e2e.sqlite_savers(Path(tmp) / "gc.sqlite") as savers:
            plain, ours = bench_e2e.build_pair(path, fanout, 0, savers)
            for name, graph in (("baseline", plain), ("ours", ours)):
                for _ in range(30):
                    await bench_e2e.run_once(graph, "warm")
                full.times.clear()
                gc.callbacks.append(full)
                try:
                    for done in range(turns):
                        await bench_e2e.run_once(graph, name)
                        if (done + 1) % 250 == 0:
                            ctx.log(f"  {name}: {done + 1}/{turns} turns")
                finally:
                    gc.callbacks.remove(full)
                times, tracked = list(full.times), len(gc.get_objects())
                promoted = await promoted_per_turn(graph)
                top = ", ".join(f"{kind} {n / 60:.1f}" for kind, n in promoted.most_common(4))
                rows[name] = {"full_collections": len(times), "turns": turns,
                              "ms_per_turn": sum(times) * 1000 / turns,
                              "promoted_per_turn": sum(promoted.values()) / 60, "tracked_after": tracked}
                lines.append(
                    f"{name:9s} {len(times)} full collections in {turns} turns "
                    f"({sum(times) * 1000 / turns:.3f} ms/turn, {max(times, default=0) * 1000:.0f} ms the "
                    f"longest); {sum(promoted.values()) / 60:.1f} objects/turn promoted ({top}); "
                    f"{tracked:,} tracked objects after"
                )
    return section("gc_churn", lines, rows=rows)
