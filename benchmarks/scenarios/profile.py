"""Where the time a missed target adds goes: a profile of one path's turn on SQLite.

Part of scenario ``turn`` (not a scenario of its own): ``benchmarks/run.py`` runs this,
unless ``--no-profile``, for each path and fan-out whose SQLite row missed its
target (zero-latency tool). Three views: wall time awaiting each ledger method (those
the ledger has; a method renamed away is skipped); cProfile of the event-loop thread
(candidate minus baseline self time per turn, by function and by package); cProfile of
the ledger's own aiosqlite thread. Then, when the saver still checks the ledger's
schema on every checkpointer call, a what-if measured like the main table.
"""

from __future__ import annotations

import cProfile
import itertools
import pstats
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from langgraph_effects._private import run_in_connection_thread
from langgraph_effects.ledger.base import Ledger
from scenarios.turn import LEDGER_PATHS, OURS, Scenario, build_pair, run_batch, run_once

_ROOT = str(Path(__file__).resolve().parents[2]) + "/"


async def what_if_setup_once(
    plain: Any, effect: Any, effect_saver: Any, *, runs: int, repeats: int
) -> dict[str, Any]:
    """Three variants interleaved in one window (order rotating through all 6
    permutations): ToolNode, EffectToolNode as shipped, and EffectToolNode whose saver
    checks the ledger's schema once instead of at the start of every checkpointer call
    (``AsyncSqliteSaver`` calls ``self.setup()`` in each method; the patch is an instance
    attribute on this saver, removed after each batch)."""
    patched = AsyncSqliteSaver.setup.__get__(effect_saver)
    orders = list(itertools.permutations(("plain", "effect", "once")))
    times: dict[str, list[float]] = {"plain": [], "effect": [], "once": []}
    cpu: dict[str, list[float]] = {"plain": [], "effect": [], "once": []}
    await run_batch(plain, "whatif-warm", runs)
    await run_batch(effect, "whatif-warm", runs)
    for rep in range(repeats):
        for name in orders[rep % len(orders)]:
            if name == "once":
                effect_saver.setup = patched
            try:
                wall, used = await run_batch(plain if name == "plain" else effect, f"whatif-{name}", runs)
            finally:
                if name == "once":
                    del effect_saver.setup
            times[name].append(wall)
            cpu[name].append(used)
    def ratios(top: list[float], bottom: list[float]) -> list[float]:
        return [t / b for t, b in zip(top, bottom, strict=True) if b > 0]

    return {
        "repeats": repeats,
        "runs_per_batch": runs,
        "toolnode_ms": median(times["plain"]),
        "effect_ms": median(times["effect"]),
        "effect_setup_once_ms": median(times["once"]),
        "overhead": median(ratios(times["effect"], times["plain"])),
        "overhead_setup_once": median(ratios(times["once"], times["plain"])),
        "cpu_overhead": median(ratios(cpu["effect"], cpu["plain"])),
        "cpu_overhead_setup_once": median(ratios(cpu["once"], cpu["plain"])),
    }

_LEDGER_METHODS = (
    "setup",
    "record_intents",
    "transition",
    "get_many",
    "find_by_payload",
    "list_operations",
    "renew_lease",
)


@dataclass
class _Timed:
    calls: int = 0
    seconds: float = 0.0


@dataclass
class _Busy:
    """Wall time during which at least one ledger call was pending (overlaps counted once)."""

    active: int = 0
    since: float = 0.0
    seconds: float = 0.0

    def enter(self) -> None:
        if self.active == 0:
            self.since = time.perf_counter()
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        if self.active == 0:
            self.seconds += time.perf_counter() - self.since


def _instrument(ledger: Ledger, busy: _Busy) -> dict[str, _Timed]:
    """Wall time spent awaiting each ledger method (instance attributes, removed after)."""
    timings: dict[str, _Timed] = {}
    for name in _LEDGER_METHODS:
        original = getattr(ledger, name, None)
        if original is None:
            continue
        slot = timings.setdefault(name, _Timed())

        def wrap(
            fn: Callable[..., Awaitable[Any]], slot: _Timed = slot
        ) -> Callable[..., Awaitable[Any]]:
            async def timed(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                busy.enter()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    busy.leave()
                    slot.calls += 1
                    slot.seconds += time.perf_counter() - start

            return timed

        setattr(ledger, name, wrap(original))
    return timings


def _uninstrument(ledger: Ledger) -> None:
    for name in _LEDGER_METHODS:
        ledger.__dict__.pop(name, None)


def _group(key: tuple[str, int, str]) -> str:
    filename, _line, func = key
    if filename == "~" and ("poll" in func or "select" in func):
        return "event loop idle (waiting for I/O or a thread)"
    for marker, name in (
        ("langgraph_effects", "langgraph_effects"),
        ("langgraph/checkpoint", "langgraph checkpointer"),
        ("langgraph", "langgraph"),
        ("langchain_core", "langchain_core"),
        ("pydantic", "pydantic"),
        ("aiosqlite", "aiosqlite"),
        ("asyncio", "asyncio"),
        ("json", "json"),
        ("uuid", "uuid"),
        ("~", "builtins"),
    ):
        if marker in filename:
            return name
    return "other"


def _per_run(stats: pstats.Stats, runs: int) -> dict[tuple[str, int, str], tuple[float, float, int]]:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return {key: (tt / runs, ct / runs, nc) for key, (_cc, nc, tt, ct, _callers) in raw.items()}


def _label(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func
    short = filename.split("site-packages/")[-1].removeprefix(_ROOT)
    return f"{short}:{line}({func})"


async def profile_sqlite(
    path: str,
    savers: tuple[Any, Any],
    fanout: int,
    runs: int,
    unprofiled: dict[str, Any] | None,
    *,
    what_if_runs: int,
    what_if_repeats: int,
) -> dict[str, Any]:
    """Where the time our turn on ``path`` adds goes (zero-latency tool, SQLite).

    Three views: wall time awaiting each ledger method; cProfile of the event-loop
    thread (candidate minus baseline self time, per run, by function and by package);
    cProfile of the ledger's own aiosqlite thread (SQLite statements, commits, codec).
    Then a what-if, measured like the main table: the same run with the ledger's
    schema check done once instead of on every checkpointer call (the saver calls
    ``self.setup()`` at the start of each method; the patch is local to this run).
    """
    effect_saver = savers[1]
    plain, effect = build_pair(path, fanout, 0.0, savers)
    for _ in range(3):
        await run_once(plain, "prof-warm")
        await run_once(effect, "prof-warm")

    # 1. Wall time inside ledger calls (no profiler running), runs alternating one by one.
    busy = _Busy()
    timings = _instrument(effect_saver.ledger, busy)
    plain_runs: list[float] = []
    effect_runs: list[float] = []
    try:
        for i in range(runs):
            for name in ("plain", "effect") if i % 2 == 0 else ("effect", "plain"):
                start = time.perf_counter()
                await run_once(plain if name == "plain" else effect, "prof-ledger")
                (plain_runs if name == "plain" else effect_runs).append(time.perf_counter() - start)
    finally:
        _uninstrument(effect_saver.ledger)
    plain_wall, effect_wall = median(plain_runs) * 1e3, median(effect_runs) * 1e3
    added = effect_wall - plain_wall
    ledger_ms = {
        name: {"calls_per_run": t.calls / runs, "ms_per_run": t.seconds * 1e3 / runs}
        for name, t in timings.items()
        if t.calls
    }
    ledger_total = busy.seconds * 1e3 / runs

    # 2. cProfile of the event loop's thread, baseline and candidate.
    profiles: dict[str, pstats.Stats] = {}
    thread_prof = cProfile.Profile()
    for name, graph in (("toolnode", plain), ("effect", effect)):
        prof = cProfile.Profile()
        if name == "effect":
            await run_in_connection_thread(effect_saver.ledger.conn, lambda db: thread_prof.enable())
        prof.enable()
        try:
            for _ in range(runs):
                await run_once(graph, "prof-cpu")
        finally:
            prof.disable()
            if name == "effect":
                await run_in_connection_thread(effect_saver.ledger.conn, lambda db: thread_prof.disable())
        profiles[name] = pstats.Stats(prof)
    base = _per_run(profiles["toolnode"], runs)
    cand = _per_run(profiles["effect"], runs)
    base_total = sum(tt for tt, _, _ in base.values()) * 1e3
    cand_total = sum(tt for tt, _, _ in cand.values()) * 1e3

    diffs: list[tuple[float, tuple[str, int, str]]] = []
    for key in set(base) | set(cand):
        d = (cand.get(key, (0.0, 0.0, 0))[0] - base.get(key, (0.0, 0.0, 0))[0]) * 1e3
        diffs.append((d, key))
    diffs.sort(reverse=True)
    total_added = cand_total - base_total
    groups: dict[str, float] = {}
    for d, key in diffs:
        g = _group(key)
        groups[g] = groups.get(g, 0.0) + d
    top_self = [
        {
            "function": _label(key),
            "added_self_ms_per_run": d,
            "share": d / total_added if total_added else 0,
            "calls_per_run": [base.get(key, (0, 0, 0))[2] / runs, cand.get(key, (0, 0, 0))[2] / runs],
        }
        for d, key in diffs[:15]
    ]
    added_calls = sorted(
        (
            (cand.get(key, (0, 0, 0))[2] - base.get(key, (0, 0, 0))[2]) / runs,
            key,
        )
        for key in set(base) | set(cand)
    )[::-1][:15]
    ours = sorted(
        (
            (ct * 1e3, key)
            for key, (_tt, ct, _nc) in cand.items()
            if "langgraph_effects" in key[0] and "/benchmarks/" not in key[0]
        ),
        reverse=True,
    )[:15]
    # 4. What if EffectSqliteSaver.setup() checked the ledger's schema only once?
    what_if: dict[str, Any] | None = None
    if ledger_ms.get("setup", {}).get("calls_per_run", 0) > 1:
        what_if = await what_if_setup_once(
            plain, effect, effect_saver, runs=what_if_runs, repeats=what_if_repeats
        )
    thread_stats = _per_run(pstats.Stats(thread_prof), runs)
    idle = ("SimpleQueue", "_queue")  # aiosqlite's worker waiting for the next request
    thread_top = sorted(
        (
            (tt * 1e3, key)
            for key, (tt, _ct, _nc) in thread_stats.items()
            if not any(marker in key[2] for marker in idle)
        ),
        reverse=True,
    )[:10]
    return {
        "path": path,
        "backend": "sqlite",
        "fanout": fanout,
        "runs": runs,
        "added_ms_per_run_unprofiled": added,
        "added_ms_per_run_main_table": (unprofiled or {}).get("added_ms_per_run"),
        "wall_ms_per_run": {"toolnode": plain_wall, "effect_instrumented": effect_wall},
        "awaiting_ledger_ms_per_run": ledger_total,
        "awaiting_ledger_share_of_added": ledger_total / added if added > 0 else None,
        "ledger_methods": ledger_ms,
        "event_loop_thread": {
            "self_ms_per_run_toolnode": base_total,
            "self_ms_per_run_effect": cand_total,
            "added_self_ms_per_run": total_added,
            "added_by_package": dict(sorted(groups.items(), key=lambda kv: -kv[1])),
            "top_added_self": top_self,
            "most_added_calls": [
                {"function": _label(key), "added_calls_per_run": n} for n, key in added_calls
            ],
            "langgraph_effects_cumulative": [
                {"function": _label(key), "cumulative_ms_per_run": ms} for ms, key in ours
            ],
        },
        "what_if_ledger_setup_once": what_if,
        "ledger_thread_top_self": [
            {"function": _label(key), "self_ms_per_run": ms} for ms, key in thread_top
        ],
    }


async def profile_missed(
    rows: dict[str, dict[str, Any]], savers: tuple[Any, Any], ctx: Any
) -> dict[str, Any]:
    """A profile for each ledger path and fan-out whose SQLite row missed its target."""
    import bench_report

    out: dict[str, Any] = {}
    for path in LEDGER_PATHS:
        missed = sorted(
            {r["fanout"] for r in rows.values() if r["path"] == path and bench_report.time_met(r) is False}
        )
        for fanout in missed:
            ctx.log(f"  profiling {OURS[path]} on SQLite, fan-out {fanout} (a target was missed)")
            key = Scenario(path, "sqlite", 0.0, fanout).key
            out[f"{path}/sqlite/fanout={fanout}"] = await profile_sqlite(
                path, savers, fanout, 3 if ctx.quick else 60, rows.get(key),
                what_if_runs=2, what_if_repeats=3 if ctx.quick else 36,
            )
    return out
