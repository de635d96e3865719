"""What one runner per thread costs per checkpoint write (scenario ``fencing``).

``AsyncEffectSqliteSaver`` / ``AsyncEffectPostgresSaver`` check, in the same transaction as the
insert, that the parent checkpoint has no other child (and that a task's writes do
not land on a checkpoint another runner moved past). This script times LangGraph's
plain saver against ours, interleaved in the same run (round by round, alternating
which goes first), on the same kind of database, with the same checkpoints: each
step is one ``aput`` of a checkpoint holding a growing message history plus one
``aput_writes`` of a task's result, as a graph step does.

Prints, per backend, the median wall-clock time per step of each saver, the ratio
fenced / plain (ratio of medians) with a paired bootstrap 95% interval over rounds, and
the same ratio for this process's CPU time (the client's side; for Postgres the server's
work is not in it). On Postgres a third saver is timed in the same rounds: ours with
the fence's triggers disabled for its round (a what-if, never a way to run), which
splits what the fence costs into the triggers' work in the server and the rest
(the saver's own Python and statements, the index it adds)::

    python benchmarks/run.py fencing              # SQLite, and Postgres if reachable
    python benchmarks/run.py fencing --rounds 30 --steps 40 --json out.json
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import stats
from bench_common import fence_triggers_off, fresh_pg_database
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_effects import _private
from scenarios import opt, section

Opener = Callable[[], Any]


def _messages(n: int) -> list[Any]:
    out: list[Any] = [HumanMessage("please send the quarterly report to the finance team", id="h0")]
    for i in range(n):
        call = {"name": "send", "args": {"operation": f"op:{i}", "to": "finance@example.com"},
                "id": f"call-{i}", "type": "tool_call"}
        out.append(AIMessage("", tool_calls=[call], id=f"ai-{i}"))
        out.append(ToolMessage(f"sent eff_{i}", tool_call_id=f"call-{i}", id=f"tm-{i}"))
    return out


async def _chain(saver: Any, steps: int) -> None:
    """One fresh thread, ``steps`` graph steps: a checkpoint and a task's writes each."""
    thread = uuid.uuid4().hex
    parent: str | None = None
    run = {_private.RUNTIME: object()}  # what a graph run's loop adds: its saves are checked
    for step in range(steps):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": _messages(step // 2 + 1)}
        checkpoint["channel_versions"] = {"messages": step + 1}
        conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": "", **run}
        if parent is not None:
            conf["checkpoint_id"] = parent
        saved = await saver.aput({"configurable": conf}, checkpoint, {"source": "loop", "step": step},
                                 {"messages": step + 1})
        parent = saved["configurable"]["checkpoint_id"]
        written = {"configurable": {**saved["configurable"], **run}}
        await saver.aput_writes(written, [("messages", [AIMessage(f"step {step}")])], f"task-{step}")


#: Runs around one round of a variant (e.g. disables the triggers, then enables them).
Around = Callable[[], Any]


def _ratio(top: list[float], bottom: list[float]) -> tuple[float, list[float]]:
    """Ratio of medians and its paired interval (seconds per step, as pyperf keeps them)."""
    t = stats.benchmark("top", [v * 1e3 for v in top])
    b = stats.benchmark("bottom", [v * 1e3 for v in bottom])
    found = stats.compare(t, b)
    return found["ratio"], found["ratio_ci95"]


async def _compare(
    plain: Opener, fenced: Opener, *, rounds: int, steps: int, unfenced: Around | None = None
) -> dict[str, Any]:
    """Rounds of ``steps`` steps per saver, interleaved (the order rotates each round).

    ``unfenced``: an async context manager factory; when given, the fenced saver is
    also timed inside it, as a third variant ``triggers_off``."""
    names = ["plain", "fenced", *(["triggers_off"] if unfenced is not None else [])]
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    async with plain() as p, fenced() as f:
        savers = {"plain": p, "fenced": f, "triggers_off": f}
        await _chain(p, 3)  # warm up both (tables, statement caches)
        await _chain(f, 3)
        for r in range(rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for name in order:
                async with unfenced() if name == "triggers_off" and unfenced else contextlib.nullcontext():
                    w0, c0 = time.perf_counter(), time.process_time()
                    await _chain(savers[name], steps)
                    wall[name].append((time.perf_counter() - w0) / steps)
                    cpu[name].append((time.process_time() - c0) / steps)
    result: dict[str, Any] = {"rounds": rounds, "steps_per_round": steps}
    for name in names:
        result[f"{name}_ms_per_step"] = stats.median_of(wall[name]) * 1000
    for name in names[1:]:
        prefix = "" if name == "fenced" else f"{name}_"
        result[f"{prefix}ratio"], result[f"{prefix}ratio_ci95"] = _ratio(wall[name], wall["plain"])
        result[f"{prefix}cpu_ratio"], result[f"{prefix}cpu_ratio_ci95"] = _ratio(cpu[name], cpu["plain"])
    return result


def _sqlite_openers(folder: Path) -> tuple[Opener, Opener]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from langgraph_effects.checkpoint.sqlite import AsyncEffectSqliteSaver

    @asynccontextmanager
    async def plain() -> AsyncIterator[Any]:
        async with AsyncSqliteSaver.from_conn_string(str(folder / "plain.sqlite")) as saver:
            await saver.setup()
            yield saver

    @asynccontextmanager
    async def fenced() -> AsyncIterator[Any]:
        async with AsyncEffectSqliteSaver.from_conn_string(folder / "fenced.sqlite") as saver:
            await saver.setup()
            yield saver

    return plain, fenced


def _pg_openers(plain_dsn: str, fenced_dsn: str) -> tuple[Opener, Opener]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver

    @asynccontextmanager
    async def plain() -> AsyncIterator[Any]:
        async with AsyncPostgresSaver.from_conn_string(plain_dsn) as saver:
            await saver.setup()
            yield saver

    @asynccontextmanager
    async def fenced() -> AsyncIterator[Any]:
        async with AsyncEffectPostgresSaver.from_conn_string(fenced_dsn, ledger_max_size=2) as saver:
            await saver.setup()
            yield saver

    return plain, fenced


def _line(name: str, r: dict[str, Any]) -> str:
    line = (
        f"{name:9s} plain {r['plain_ms_per_step']:7.2f} ms/step  "
        f"fenced {r['fenced_ms_per_step']:7.2f} ms/step  "
        f"ratio {r['ratio']:.3f} [95% CI {r['ratio_ci95'][0]:.3f}-{r['ratio_ci95'][1]:.3f}]  "
        f"CPU ratio {r['cpu_ratio']:.3f} [{r['cpu_ratio_ci95'][0]:.3f}-{r['cpu_ratio_ci95'][1]:.3f}]"
    )
    if "triggers_off_ratio" in r:
        lo, hi = r["triggers_off_ratio_ci95"]
        cpu_lo, cpu_hi = r["triggers_off_cpu_ratio_ci95"]
        line += (
            f"\n{'':9s} what-if, ours with the triggers off {r['triggers_off_ms_per_step']:7.2f} ms/step  "
            f"ratio {r['triggers_off_ratio']:.3f} [95% CI {lo:.3f}-{hi:.3f}]  "
            f"CPU ratio {r['triggers_off_cpu_ratio']:.3f} [{cpu_lo:.3f}-{cpu_hi:.3f}]"
        )
    return line


CONFIGURATIONS = (
    "sqlite/plain", "sqlite/fenced", "postgres/plain", "postgres/fenced", "postgres/triggers_off"
)
QUICK = ["--rounds", "3", "--steps", "2"]


def options(group: Any) -> None:
    group.add_argument("--rounds", type=int, default=20)
    group.add_argument("--steps", type=int, default=30, help="checkpoint writes per round and saver")


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    rounds, steps = opt(args, "rounds", 20), opt(args, "steps", 30)
    results: dict[str, Any] = {}
    lines: list[str] = []
    with tempfile.TemporaryDirectory(dir=ctx.workdir) as tmp:
        plain, fenced = _sqlite_openers(Path(tmp))
        results["sqlite"] = await _compare(plain, fenced, rounds=rounds, steps=steps)
        lines += _line("sqlite", results["sqlite"]).splitlines()
    if ctx.pg_skip is None:
        async with fresh_pg_database(ctx.dsn) as plain_dsn, fresh_pg_database(ctx.dsn) as fenced_dsn:
            plain, fenced = _pg_openers(plain_dsn, fenced_dsn)
            results["postgres"] = await _compare(
                plain, fenced, rounds=rounds, steps=steps, unfenced=lambda: fence_triggers_off(fenced_dsn)
            )
            lines += _line("postgres", results["postgres"]).splitlines()
    else:
        lines.append(f"postgres  skipped: {ctx.pg_skip}")
    return section("fencing", lines, **results)
