"""Where a turn's CPU goes, by thread and by file, for one checkout of the package.

    python benchmarks/turn_profile.py CHECKOUT BACKEND PATH FANOUT [--turns 100] [--save FILE]
        [--against FILE] [--threads]

Runs ``PATH`` (``node`` or ``middleware``) turns with ``FANOUT`` calls of a 0 ms tool on
``BACKEND`` (``sqlite`` or ``postgres``), the package imported from ``CHECKOUT`` (its
own ``benchmarks/scenarios/turn.py`` builds the agents), in one process:

* CPU per turn of the baseline agent and of ours, interleaved in batches of 10, with
  their ratio and the CPU added per call (``time.process_time``: every thread);
* with ``--threads``, that CPU split by thread (read from ``/proc/self/task``, so a
  thread's own work, such as the SQLite ledger's or the lease's file work, is told
  apart from the event loop's); the kernel counts in ticks, so use 200 turns or more;
* a cProfile of our turns with a CPU timer, each thread profiled apart (the event
  loop's and every thread started after import), summed by file: milliseconds of
  own time and calls per turn. ``--save FILE`` keeps it (JSON); ``--against FILE``
  prints the difference from a saved one (the same turns on another checkout), file
  by file, largest first.

Profiling inflates small Python calls several times over; read the differences for
where to look, and confirm with the CPU figures above it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import cProfile
import gc
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from proc_cpu import stat_cpu

_profiles: list[tuple[str, cProfile.Profile]] = []


def _profile_threads() -> None:
    """Every thread started from now on runs under a cProfile of its own (CPU timer)."""
    run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        _profiles.append((self.name, profile))
        profile.enable()
        try:
            run(self)
        finally:
            profile.disable()

    threading.Thread.run = profiled  # type: ignore[method-assign]


def thread_cpu() -> collections.Counter[str]:
    """CPU seconds so far of each live thread of this process, by thread name."""
    names = {t.native_id: _thread_name(t.name) for t in threading.enumerate()}
    out: collections.Counter[str] = collections.Counter()
    for tid in os.listdir("/proc/self/task"):
        out[names.get(int(tid), "other")] += stat_cpu(f"/proc/self/task/{tid}/stat")
    return out


def by_file(entries: list[Any]) -> dict[str, list[float]]:
    """Own time (seconds) and calls, summed by file (paths shortened), of cProfile's
    raw entries (``Profile.getstats()``: read without stopping the profile)."""
    out: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for entry in entries:
        code = entry.code
        filename = "(built-in)" if isinstance(code, str) else code.co_filename
        name = re.sub(r".*site-packages/|.*/lib/python3\.\d+/|^/.*?/(?=langgraph_effects/)", "", filename)
        out[name][0] += entry.inlinetime
        out[name][1] += entry.callcount
    return out


def minus(after: dict[str, list[float]], before: dict[str, list[float]]) -> dict[str, list[float]]:
    """``after`` less ``before``, file by file."""
    zero = [0.0, 0.0]
    return {k: [v[0] - before.get(k, zero)[0], v[1] - before.get(k, zero)[1]] for k, v in after.items()}


def _thread_name(name: str) -> str:
    return re.sub(r"[-_ ]?\d+$|\s*\(.*\)$", "", name)


async def main(args: argparse.Namespace) -> None:
    from scenarios import turn

    async with contextlib.AsyncExitStack() as stack:
        if args.backend == "sqlite":
            savers = turn.sqlite_savers(Path(tempfile.mkdtemp()) / "agent.sqlite")
        else:
            from bench_common import DEFAULT_PG_DSN, fresh_pg_database

            plain_db = await stack.enter_async_context(fresh_pg_database(DEFAULT_PG_DSN))
            ours_db = await stack.enter_async_context(fresh_pg_database(DEFAULT_PG_DSN))
            savers = turn.postgres_savers(plain_db, ours_db)
        pair = await stack.enter_async_context(savers)
        plain, ours = turn.build_pair(args.path, args.fanout, 0.0, pair)
        for _ in range(20):
            await turn.run_once(plain, "warm")
            await turn.run_once(ours, "warm")
        batches = max(1, args.turns // 10)
        turns = batches * 10
        cpu = {"plain": 0.0, "ours": 0.0}
        threads: dict[str, collections.Counter[str]] = {
            "plain": collections.Counter(),
            "ours": collections.Counter(),
        }
        for _ in range(batches):
            for name, graph in (("plain", plain), ("ours", ours)):
                gc.collect()
                before, start = thread_cpu(), time.process_time()
                for _ in range(10):
                    await turn.run_once(graph, name)
                cpu[name] += time.process_time() - start
                threads[name].update({k: v - before[k] for k, v in thread_cpu().items()})
        print(f"{args.checkout} {args.backend} {args.path} fan-out {args.fanout}, {turns} turns each, "
              f"load {os.getloadavg()[0]:.1f}")
        print(f"  CPU per turn: plain {cpu['plain'] * 1e3 / turns:.2f} ms, "
              f"ours {cpu['ours'] * 1e3 / turns:.2f} ms, ratio {cpu['ours'] / cpu['plain']:.3f}, "
              f"+{(cpu['ours'] - cpu['plain']) * 1e3 / turns / args.fanout:.3f} ms a call")
        if args.threads:
            for name, counted in threads.items():
                split = ", ".join(f"{k} {v * 1e3 / turns:.2f}" for k, v in counted.most_common() if v > 0)
                print(f"  {name} by thread (ms per turn): {split}")
        # The threads' profiles have run since they started: what they did during the
        # profiled turns is the difference of two readings.
        before_threads = {name: by_file(p.getstats()) for name, p in _profiles}
        loop = cProfile.Profile(time.thread_time)
        loop.enable()
        for _ in range(turns):
            await turn.run_once(ours, "profile")
        loop.disable()
        found = {"event loop": by_file(loop.getstats())}
        for name, p in _profiles:
            if name in before_threads:
                found[_thread_name(name)] = minus(by_file(p.getstats()), before_threads[name])
    report(found, turns, args)


def report(found: dict[str, dict[str, list[float]]], turns: int, args: argparse.Namespace) -> None:
    """Own time per turn by file for each thread, and against a saved run."""
    saved = json.loads(Path(args.against).read_text()) if args.against else {}
    for thread, files in found.items():
        total = sum(v[0] for v in files.values())
        if total * 1e3 / turns < 0.05:
            continue
        print(f"\n{thread}: {total * 1e3 / turns:.2f} ms own time per turn (profiled)")
        if thread in saved:
            other = saved[thread]
            zero = [0.0, 0.0]
            moved = {k: files.get(k, zero)[0] - other.get(k, zero)[0] for k in set(files) | set(other)}
            keys = sorted(moved, key=lambda k: -abs(moved[k]))
            print(f"  {'saved':>8} {'now':>8} {'change':>8}  calls saved/now  file")
            for key in keys[: args.top]:
                a, b = other.get(key, zero), files.get(key, zero)
                change = (b[0] - a[0]) * 1e3 / turns
                print(f"  {a[0] * 1e3 / turns:8.3f} {b[0] * 1e3 / turns:8.3f} {change:+8.3f}  "
                      f"{a[1] / turns:6.0f}/{b[1] / turns:<6.0f} {key}")
        else:
            for key, (own, calls) in sorted(files.items(), key=lambda kv: -kv[1][0])[: args.top]:
                print(f"  {own * 1e3 / turns:8.3f} ms {calls / turns:7.0f} calls  {key}")
    if args.save:
        Path(args.save).write_text(json.dumps(found))


def cli() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a checkout of the package (its root)")
    parser.add_argument("backend", choices=["sqlite", "postgres"])
    parser.add_argument("path", choices=["node", "middleware"])
    parser.add_argument("fanout", type=int)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--threads", action="store_true", help="CPU per turn split by thread")
    parser.add_argument("--save", help="keep the profiles (pstats) under this name")
    parser.add_argument("--against", help="print the difference from profiles saved under this name")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    sys.path[:0] = [str(checkout), str(checkout / "benchmarks")]
    import langgraph_effects

    if not str(Path(langgraph_effects.__file__).resolve()).startswith(str(checkout)):
        raise SystemExit(f"langgraph_effects came from {langgraph_effects.__file__}, not {checkout}")
    _profile_threads()
    asyncio.run(main(args))


if __name__ == "__main__":
    cli()
