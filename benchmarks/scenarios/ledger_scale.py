"""Recovery and the console on a grown ledger (scenario ``ledger_scale``): what a dry-run
``recover``, the candidate and verdict lookups, ``list`` and ``unfinished_threads`` cost
with N settled operations, against an empty ledger in the same run.

    python benchmarks/run.py ledger_scale [--operations 100000] [--threads-checkpointed 20000]
        [--repeat 3] [--backends sqlite,postgres]

Each backend gets two databases made by the savers' own ``setup()``: *empty* (only the
unresolved work) and *grown*. Both hold 100 unresolved operations (dispatched, their
sender gone), each on a thread of its own. The grown one also holds ``--operations``
confirmed ones, 10 per thread, changed over the last 30 days, one in a thousand of those
older than a week decided by an operator through the console (the rest by their tool's
result); each with 2 or 3 audit rows, arguments of about 210 bytes and a result of
about 250, copied by one bulk ``INSERT ... SELECT`` from template rows made by the
package's own state machine and row codec; and ``--threads-checkpointed`` finished
threads of 5 checkpoints each. So both hold the same unfinished work, and only the
lookup of verdicts over all time has more to find. Then, ``--repeat`` times, interleaved
(empty, grown): ``recover(graph, dry_run=True)``; the candidate threads of the last 7
days (``_candidate_threads``, what ``recover`` runs first); the verdict lookup over all
time (``verdicts_within=None``); ``list`` (its default view: unresolved, 100) and the first
page of ``list --all``; ``unfinished_threads()``; ``--turns`` ``EffectToolNode`` turns
(one tool call each, on a fresh thread); the reads of a few milliseconds ten times a
sample. Figures are per call.

Each figure is timed twice: wall time (median), and CPU time (this process's, plus on
Postgres the server processes serving that database, read from ``/proc``; the total
over all repeats, divided by them), which the load of a shared machine barely moves.
The check, on CPU time: each of the turn, ``recover``, the 7-day verdict lookup,
``list`` and ``unfinished_threads()`` on the grown ledger within 10% of the empty one's
(or within 1 ms, below which the kernel's 10 ms ticks decide); ``recover`` holds the same
unfinished work in both, so its allowance is the same 10%. The verdict lookup over
all time is not checked: it finds more verdicts on the grown ledger, and reads them.
Also printed: the bytes each settled operation adds to the ledger's tables and indexes
(operations and audit rows; SQLite's ``dbstat``, Postgres's ``pg_total_relation_size``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import psycopg
from bench_common import OWNER, fresh_pg_database
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import MessagesState, StateGraph
from pg_cpu import backend_cpu
from psycopg.conninfo import conninfo_to_dict

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects._runtime import messages
from langgraph_effects._runtime.operator import list_operations, resolve
from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver
from langgraph_effects.core.operation import Change, Event, Operation, State
from langgraph_effects.ledger.base import COLUMNS, Ledger, to_row
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.recovery import recover
from langgraph_effects.recovery.observe import _candidate_threads
from scenarios import opt, section
from scenarios.turn import build_graph, run_once

CONFIGURATIONS = ("sqlite", "postgres")
QUICK = ["--operations", "2000", "--threads-checkpointed", "200", "--repeat", "1"]
UNRESOLVED = 100
#: Grown over empty, beyond which a checked figure fails (or beyond `SLACK_MS`, the
#: larger of the two).
WITHIN = 1.10
SLACK_MS = 1.0
WEEK = 7 * 86400.0
SPAN = 30 * 86400.0


def _op(op_id: str) -> Operation:
    """An operation with arguments of about 210 bytes (as stored)."""
    return Operation(
        op_id=op_id,
        thread_id="thread-template",
        tool="send_email",
        tool_call_id="call_template",
        args={
            "to": "customer-000123@example.com",
            "subject": "Your invoice for November",
            "body": "Hello, please find attached your invoice. The amount is due within 30 days "
            "of this message. Reply to this address with any question.",
            "amount": 1297,
        },
        args_hash="h1:" + uuid.uuid5(uuid.NAMESPACE_OID, op_id).hex * 2,
        provider_key=f"lge:{op_id}",
        contract="dedup",
        tenant="",
        policy_version="v1",
        message_id="msg-template",
        task_id=uuid.uuid5(uuid.NAMESPACE_URL, op_id).hex,
        checkpoint_id="1f0c2d4e-aaaa-6bbb-8000-000000000001",
    )


async def _templates() -> dict[str, dict[str, Any]]:
    """Rows reached through the real ledger rules: confirmed by its result, confirmed by
    an operator's verdict, and dispatched by a sender whose lease is long over."""
    ledger = InMemoryLedger()
    dispatch = Change(
        Event.DISPATCH, owner=OWNER, lease_expires_at=time.time() - 3600, evidence={"kind": "intent"}
    )
    kind, blob = messages.dump(
        ToolMessage(
            content="sent msg_0123456789: delivered to customer-000123@example.com, queued at the "
            "relay, 1 recipient accepted, 0 rejected; tracking id 7c1e9b0a-55d2-4f1e-9d1c",
            name="send_email",
            tool_call_id="call_template",
        )
    )
    done, verdict, open_ = await ledger.record_intents(
        [_op(n) for n in ("done", "verdict", "open")], change=dispatch
    )
    done = await ledger.transition(
        done.op_id,
        Change(Event.SUCCEED, evidence={"kind": "result"}, result_type=kind, result=blob),
        expected_version=done.version,
    )
    lost = await ledger.transition(
        verdict.op_id,
        Change(Event.LOSE, evidence={"kind": "timeout", "error": "ReadTimeout"}),
        expected_version=verdict.version,
    )
    decided = await resolve(
        ledger, lost.op_id, {"type": "landed"}, expected_version=lost.version, actor="ops", channel="console"
    )
    return {"done": to_row(done), "verdict": to_row(decided), "open": to_row(open_)}


def _copies(
    template: str, first: str, count: str, where: str, marks: tuple[str, str], cast: str
) -> tuple[str, str]:
    """``INSERT ... SELECT`` statements that copy the ``template`` table's row once per
    ``i`` (a series given as ``first``/``count``; ``where`` filters it) into the ledger
    tables: operations, then 2 or 3 audit rows each. ``marks``: the parameters of the
    newest row's time and of the step between two rows' times."""
    start, step = marks
    per_thread = 1 if first == "open" else 10
    changed = {
        "op_id": f"'{first}-' || i",
        "thread_id": f"'{first}-thread-' || (i / {per_thread})",
        "tool_call_id": "'call_' || i",
        "provider_key": f"'lge:{first}-' || i",
        "args_hash": "'h1:' || i",
        "created_at": f"{start} - {step} * i{cast}",
        "updated_at": f"{start} - {step} * i{cast}",
    }
    columns = ", ".join(COLUMNS)
    values = ", ".join(changed.get(c, f"t.{c}") for c in COLUMNS)
    ops = (
        f"INSERT INTO effect_operations ({columns}) SELECT {values} FROM {template} t, {count} WHERE {where}"
    )
    audit = (
        "INSERT INTO effect_audit (op_id, seq, at, actor, from_state, to_state, event, version, evidence) "
        f"SELECT '{first}-' || i, s.seq, {start} - {step} * i{cast}, 'langgraph-effects', 'dispatched', "
        '\'confirmed\', \'succeed\', s.seq + 1, \'{"kind": "result", "note": "recorded by the tool node"}\' '
        f"FROM {count}, (SELECT 0 AS seq UNION ALL SELECT 1 UNION ALL SELECT 2) s "
        f"WHERE ({where}) AND s.seq < 2 + i % 2"
    )
    return ops, audit


def _verdicts(settled: int) -> str:
    """Which rows of the series are decided by an operator: one in a thousand, among
    those changed more than a week ago (8 of the 30 days: the graph answered them)."""
    return f"i % 1000 = 0 AND i > {settled * 8 // 30}"


def _fill_sqlite(path: str, templates: dict[str, dict[str, Any]], settled: int, threads: int) -> None:
    now = time.time()
    series = (
        "(WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {}) SELECT i FROM n)"
    )
    with sqlite3.connect(path) as db:
        for name, row in templates.items():
            db.execute(f"CREATE TEMP TABLE tpl_{name} AS SELECT * FROM effect_operations WHERE 0")
            db.execute(
                f"INSERT INTO tpl_{name} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                [row[c] for c in COLUMNS],
            )
        jobs = [("open", "open", UNRESOLVED, "1", now, 60.0)]
        if settled:
            jobs += [
                ("done", "op", settled, f"NOT ({_verdicts(settled)})", now, SPAN / settled),
                ("verdict", "op", settled, _verdicts(settled), now, SPAN / settled),
            ]
        for name, first, count, where, start, step in jobs:
            ops, audit = _copies(f"tpl_{name}", first, series.format(count), where, (":start", ":step"), "")
            db.execute(ops, {"start": start, "step": step})
            db.execute(audit, {"start": start, "step": step})
        if threads:
            serde = JsonPlusSerializer()
            db.executemany(
                "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, "
                "metadata) VALUES (?, '', ?, ?, ?, CAST(? AS BLOB))",
                [
                    (t, c, *serde.dumps_typed({**empty_checkpoint(), "id": c}), m)
                    for t, c, m in _checkpoints(threads)
                ],
            )
        db.execute("ANALYZE")


def _fill_postgres(dsn: str, templates: dict[str, dict[str, Any]], settled: int, threads: int) -> None:
    now = time.time()
    with psycopg.connect(dsn, autocommit=True) as db:
        for name, row in templates.items():
            db.execute(f"CREATE TEMP TABLE tpl_{name} AS SELECT * FROM effect_operations WHERE false")
            db.execute(
                f"INSERT INTO tpl_{name} ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})",
                [row[c] for c in COLUMNS],
            )
        jobs = [("open", "open", UNRESOLVED, "true", now, 60.0)]
        if settled:
            jobs += [
                ("done", "op", settled, f"NOT ({_verdicts(settled)})", now, SPAN / settled),
                ("verdict", "op", settled, _verdicts(settled), now, SPAN / settled),
            ]
        for name, first, count, where, start, step in jobs:
            series = f"generate_series(0, {count - 1}) AS g(i)"
            marks = ("%(start)s", "%(step)s")
            ops, audit = _copies(f"tpl_{name}", first, series, where, marks, "::float8")
            db.execute(ops.replace(" % ", " %% "), {"start": start, "step": step})
            db.execute(audit.replace(" % ", " %% "), {"start": start, "step": step})
        if threads:
            copy = "COPY checkpoints (thread_id, checkpoint_id, checkpoint, metadata) FROM STDIN"
            with db.cursor().copy(copy) as pipe:
                for thread, checkpoint, meta in _checkpoints(threads):
                    pipe.write_row((thread, checkpoint, json.dumps(_checkpoint(checkpoint)), meta))
        db.execute("ANALYZE")


def _checkpoints(threads: int) -> list[tuple[str, str, str]]:
    """(thread, checkpoint id, metadata) of 5 checkpoints per thread, the last one finished."""
    rows = []
    for t in range(threads):
        for k in range(5):
            source = "input" if k == 0 else "loop"
            rows.append(
                (f"cp-thread-{t}", f"{k:08d}-{uuid.uuid4()}", json.dumps({"source": source, "step": k}))
            )
    return rows


def _checkpoint(checkpoint_id: str) -> dict[str, Any]:
    """An empty checkpoint as LangGraph stores it (its channel values apart)."""
    stored = dict(empty_checkpoint())
    stored.pop("channel_values", None)
    stored["id"] = checkpoint_id
    return stored


def _graph(saver: Any) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {})
    graph.set_entry_point("agent")
    return graph.compile(checkpointer=saver)


Measure = Callable[[Any, Ledger], Awaitable[int]]


async def _recover(saver: Any, ledger: Ledger) -> int:
    return len((await recover(_graph(saver), ledger=ledger, dry_run=True, min_idle=0)).threads)


async def _candidates(saver: Any, ledger: Ledger) -> int:
    return len(await _candidate_threads(ledger, None, verdicts_within=WEEK))


async def _verdicts_ever(saver: Any, ledger: Ledger) -> int:
    return len(await _candidate_threads(ledger, None, verdicts_within=None))


async def _list(saver: Any, ledger: Ledger) -> int:
    return len(await list_operations(ledger))


async def _list_all(saver: Any, ledger: Ledger) -> int:
    return len(await list_operations(ledger, states=list(State)))


async def _unfinished(saver: Any, ledger: Ledger) -> int:
    return len(await saver.unfinished_threads())


TURNS = 5


async def _turns(saver: Any, ledger: Ledger) -> int:
    graph = build_graph(path="node", effect=True, fanout=1, latency_ms=0.0, saver=saver)
    for _ in range(TURNS):
        await run_once(graph, "scale")
    return TURNS


MEASURES: dict[str, Measure] = {
    "turn (EffectToolNode, 1 call)": _turns,
    "recover --dry-run": _recover,
    "candidates (7 days)": _candidates,
    "verdict lookup (all time)": _verdicts_ever,
    "list (default)": _list,
    "list --all (first page)": _list_all,
    "unfinished_threads()": _unfinished,
}
#: How many times each sample runs a measure (a turn: `TURNS` in one sample): the reads
#: of a few milliseconds ten times, so the server's CPU, read in 10 ms ticks, adds up.
CALLS = {name: 1 if name.startswith(("turn", "recover")) else 10 for name in MEASURES}

#: The figures the check holds within `WITHIN` of the empty ledger's.
CHECKED = (
    "turn (EffectToolNode, 1 call)",
    "recover --dry-run",
    "candidates (7 days)",
    "list (default)",
    "list --all (first page)",
    "unfinished_threads()",
)


def _within(row: dict[str, Any]) -> bool:
    empty, grown = row["empty_cpu_ms"], row["grown_cpu_ms"]
    return bool(grown <= max(empty * WITHIN, empty + SLACK_MS))


def _sqlite_ledger_bytes(path: str) -> int:
    """The bytes of the ledger's operations and audit rows, with their indexes."""
    with sqlite3.connect(path) as db:
        row = db.execute(
            "SELECT SUM(d.pgsize) FROM dbstat d JOIN sqlite_master m ON m.name = d.name "
            "WHERE m.tbl_name IN ('effect_operations', 'effect_audit')"
        ).fetchone()
    db.close()
    return int(row[0] or 0)


def _postgres_ledger_bytes(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(
            "SELECT pg_total_relation_size('effect_operations') + pg_total_relation_size('effect_audit')"
        ).fetchone()
    return int(row[0]) if row else 0


ServerCpu = Callable[[], Awaitable[float]]


async def _no_server() -> float:
    return 0.0


def _server_of(admin_dsn: str, target: str) -> ServerCpu:
    """The CPU seconds used so far by the server processes serving ``target``'s database."""
    dbname = conninfo_to_dict(target).get("dbname")

    async def used() -> float:
        async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as admin:
            cur = await admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,)
            )
            return backend_cpu([int(r[0]) for r in await cur.fetchall()])

    return used


@asynccontextmanager
async def _sqlite(
    settled: int, threads: int, templates: dict[str, dict[str, Any]]
) -> AsyncIterator[tuple[Any, int, ServerCpu]]:
    path = os.path.join(tempfile.mkdtemp(), "agent.sqlite")
    async with AsyncEffectSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
    _fill_sqlite(path, templates, settled, threads)
    async with AsyncEffectSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
        yield saver, _sqlite_ledger_bytes(path), _no_server


@asynccontextmanager
async def _postgres(
    dsn: str, settled: int, threads: int, templates: dict[str, dict[str, Any]]
) -> AsyncIterator[tuple[Any, int, ServerCpu]]:
    async with fresh_pg_database(dsn) as target:
        async with AsyncEffectPostgresSaver.from_conn_string(target) as saver:
            await saver.setup()
        _fill_postgres(target, templates, settled, threads)
        async with AsyncEffectPostgresSaver.from_conn_string(target) as saver:
            await saver.setup()
            yield saver, _postgres_ledger_bytes(target), _server_of(dsn, target)


async def _compare(
    empty: tuple[Any, ServerCpu], grown: tuple[Any, ServerCpu], repeat: int
) -> dict[str, dict[str, Any]]:
    times: dict[str, dict[str, list[float]]] = {m: {"empty": [], "grown": []} for m in MEASURES}
    cpu: dict[str, dict[str, float]] = {m: {"empty": 0.0, "grown": 0.0} for m in MEASURES}
    found: dict[str, dict[str, int]] = {m: {} for m in MEASURES}
    for _ in range(repeat):
        for name, measure in MEASURES.items():
            for side, (saver, server) in (("empty", empty), ("grown", grown)):
                served, used = await server(), time.process_time()
                started = time.perf_counter()
                for _ in range(CALLS[name]):
                    found[name][side] = await measure(saver, saver.ledger)
                times[name][side].append(time.perf_counter() - started)
                cpu[name][side] += time.process_time() - used + await server() - served
    per = {name: CALLS[name] * (TURNS if name.startswith("turn") else 1) for name in MEASURES}
    rows: dict[str, dict[str, Any]] = {
        name: {
            "empty_ms": statistics.median(times[name]["empty"]) * 1000 / per[name],
            "grown_ms": statistics.median(times[name]["grown"]) * 1000 / per[name],
            "empty_cpu_ms": cpu[name]["empty"] * 1000 / repeat / per[name],
            "grown_cpu_ms": cpu[name]["grown"] * 1000 / repeat / per[name],
            "found": found[name],
        }
        for name in MEASURES
    }
    for name in CHECKED:
        rows[name]["within"] = _within(rows[name])
    return rows


def options(group: Any) -> None:
    group.add_argument(
        "--operations", type=int, default=100_000, help="settled operations in the grown ledger"
    )
    group.add_argument(
        "--threads-checkpointed", type=int, default=20_000, help="threads with 5 checkpoints each"
    )
    group.add_argument("--repeat", type=int, default=3)
    group.add_argument("--backends", default="sqlite,postgres")


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    settled = opt(args, "operations", 100_000)
    threads = opt(args, "threads_checkpointed", 20_000)
    repeat = opt(args, "repeat", 3)
    backends = [b for b in str(opt(args, "backends", "sqlite,postgres")).split(",") if b]
    templates = await _templates()
    lines: list[str] = []
    rows: dict[str, Any] = {}
    sizes: dict[str, float] = {}
    for name in backends:
        if name == "postgres" and ctx.pg_skip is not None:
            lines.append(f"postgres: skipped ({ctx.pg_skip})")
            continue
        async with AsyncExitStack() as stack:
            if name == "sqlite":
                empty, empty_bytes, empty_cpu = await stack.enter_async_context(_sqlite(0, 0, templates))
                ctx.log(f"ledger_scale: filling sqlite with {settled} operations")
                grown, grown_bytes, grown_cpu = await stack.enter_async_context(
                    _sqlite(settled, threads, templates)
                )
            else:
                empty, empty_bytes, empty_cpu = await stack.enter_async_context(
                    _postgres(ctx.dsn, 0, 0, templates)
                )
                ctx.log(f"ledger_scale: filling postgres with {settled} operations")
                grown, grown_bytes, grown_cpu = await stack.enter_async_context(
                    _postgres(ctx.dsn, settled, threads, templates)
                )
            rows[name] = await _compare((empty, empty_cpu), (grown, grown_cpu), repeat)
            per_op = (grown_bytes - empty_bytes) / settled if settled else 0.0
        lines.append(
            f"{name}: {settled} settled + {UNRESOLVED} unresolved operations, "
            f"{threads} x 5 checkpoints (wall: median of {repeat}; CPU: mean; a turn: ms each; "
            "found: empty/grown; the check is on CPU)"
        )
        for measure, row in rows[name].items():
            verdict = {True: "ok", False: "OVER 10%", None: ""}[row.get("within")]
            lines.append(
                f"  {measure:<30} wall {row['empty_ms']:8.1f} -> {row['grown_ms']:8.1f} ms   "
                f"CPU {row['empty_cpu_ms']:8.1f} -> {row['grown_cpu_ms']:8.1f} ms "
                f"x{row['grown_cpu_ms'] / max(row['empty_cpu_ms'], 1e-9):5.2f}   "
                f"found {row['found'].get('empty')}/{row['found'].get('grown')}   {verdict}"
            )
        sizes[name] = per_op
        lines.append(f"  ledger bytes per settled operation (tables and indexes): {per_op:,.0f}")
    return section("ledger_scale", lines, rows=rows, bytes_per_operation=sizes)
