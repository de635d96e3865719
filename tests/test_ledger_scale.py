"""Recovery and the console read what is unfinished through indexes, whatever the size
of the ledger: verdicts are found however old and however many operations were
decided, ``list`` pages with a cursor, and the plans of the key queries use the
indexes (a regression to a full scan fails here). Real SQLite ledgers; the Postgres
half is in ``tests/ledger/test_ledger_scale_postgres.py``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import pytest

from langgraph_effects._runtime.operator import list_operations, resolve
from langgraph_effects.cli.failures import BadInput
from langgraph_effects.cli.listing import format_cursor, parse_cursor
from langgraph_effects.core.operation import UNRESOLVED, State
from langgraph_effects.ledger import sqlite as sqlite_ledger
from langgraph_effects.ledger.base import OperationQuery, cursor
from langgraph_effects.ledger.query import listing_sql
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.recovery import DEFAULT_VERDICTS_WITHIN, observe
from langgraph_effects.recovery.observe import _candidate_threads
from tests.helpers import run_console

from .test_operator import make_op, new_ledger_file, seed, seeded_ledger_file

YEAR = 365 * 86400.0


async def test_a_verdict_behind_many_decided_operations_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More decided operations than one read returns (the page made 3 here; it was a
    cap of 1,000,000 that left the newest verdicts unread) and a verdict a year old."""
    monkeypatch.setattr(observe, "PAGE", 3)
    path = await new_ledger_file(tmp_path / "agent.sqlite")
    async with SqliteLedger.from_conn_string(path) as ledger:
        old = await seed(ledger, make_op(thread_id="decided-long-ago"), "review")
        await resolve(
            ledger, old.op_id, {"type": "landed"}, expected_version=old.version, actor="a", channel="console"
        )
    with sqlite3.connect(path) as db:
        db.execute("UPDATE effect_operations SET updated_at = updated_at - ?", (YEAR,))
    db.close()
    async with SqliteLedger.from_conn_string(path) as ledger:
        for i in range(12):  # decided by their results, not by an operator
            await seed(ledger, make_op(thread_id=f"done-{i}"), "confirmed")
        new = await seed(ledger, make_op(thread_id="decided-now"), "review")
        await resolve(
            ledger,
            new.op_id,
            {"type": "abandon", "reason": "dup"},
            expected_version=new.version,
            actor="a",
            channel="console",
        )
        assert await _candidate_threads(ledger, None, verdicts_within=None) == [
            "decided-long-ago",
            "decided-now",
        ]
        assert await _candidate_threads(ledger, None, verdicts_within=DEFAULT_VERDICTS_WITHIN) == [
            "decided-now"
        ]


async def test_list_pages_see_every_row_once_while_rows_are_added(tmp_path: Path) -> None:
    path = await new_ledger_file(tmp_path / "agent.sqlite")
    async with SqliteLedger.from_conn_string(path) as ledger:
        first = [
            await seed(ledger, make_op(thread_id=f"t-{i}"), "confirmed" if i % 3 else "review")
            for i in range(25)
        ]
        added: list[str] = []

        async def add() -> None:
            for i in range(10):
                [op] = await ledger.record_intents([make_op(thread_id=f"late-{i}")])
                added.append(op.op_id)
                await asyncio.sleep(0.002)

        writer = asyncio.create_task(add())
        seen: list[str] = []
        after = None
        while True:
            page = await list_operations(ledger, states=list(State), limit=4, after=after)
            seen += [op.op_id for op in page]
            if len(page) < 4:
                if writer.done():
                    break
                await writer
            after = cursor(page[-1]) if page else after
        await writer
    assert len(seen) == len(set(seen))  # no row twice
    assert set(seen) == {op.op_id for op in first} | set(added)  # every row, the new ones too


@pytest.mark.slow  # the console as a subprocess
def test_the_console_lists_every_operation_page_by_page(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    stored = seeded_ledger_file(
        path, *[(make_op(thread_id=f"t-{i}"), "confirmed" if i % 2 else "unknown") for i in range(7)]
    )
    seen: list[str] = []
    after: list[str] = []
    while True:
        done = run_console("list", "--db", str(path), "--all", "--limit", "3", "--json", *after)
        assert done.returncode == 0, done.stderr
        page = json.loads(done.stdout)
        seen += [op["operation_id"] for op in page["operations"]]
        if page["next"] is None:
            break
        after = ["--after", page["next"]]
    assert seen == [op.op_id for op in sorted(stored, key=cursor)]
    bad = run_console("list", "--db", str(path), "--all", "--after", "yesterday")
    assert bad.returncode != 0 and "the `next` value a full page printed" in bad.stderr + bad.stdout


def test_a_cursor_reads_back_exactly() -> None:
    assert parse_cursor(format_cursor((1780000000.123456, "op:1"))) == (1780000000.123456, "op:1")
    with pytest.raises(BadInput, match="the `next` value a full page printed"):
        parse_cursor("yesterday")


# -- the plans ---------------------------------------------------------------------------

#: query -> the index its plan must read.
KEY_QUERIES: dict[str, tuple[OperationQuery, str]] = {
    "recover: unresolved work": (OperationQuery(states=UNRESOLVED), "effect_operations_unresolved"),
    "list --state dispatched": (
        OperationQuery(states=frozenset({State.DISPATCHED})),
        "effect_operations_unresolved",
    ),
    "recover: verdicts of the last 7 days": (
        OperationQuery(
            states=frozenset({State.CONFIRMED, State.ABANDONED}),
            updated_after=time.time() - 7 * 86400,
            verdicts=True,
        ),
        "effect_operations_verdicts",
    ),
    "recover: verdicts ever, next page": (
        OperationQuery(
            states=frozenset({State.CONFIRMED, State.ABANDONED}), verdicts=True, after=(1.0, "op")
        ),
        "effect_operations_verdicts",
    ),
    "list --state review, next page": (
        OperationQuery(states=frozenset({State.REVIEW}), after=(1.0, "op")),
        "effect_operations_unresolved",
    ),
    "a thread's operations": (OperationQuery(thread_id="t-1"), "effect_operations_payload"),
    "list --all": (OperationQuery(states=frozenset(State)), "effect_operations_changed"),
    "list --all, next page": (
        OperationQuery(states=frozenset(State), after=(1.0, "op")),
        "effect_operations_changed",
    ),
}


def plan_lines(path: Path, query: OperationQuery) -> list[str]:
    sql, params = listing_sql("effect_operations", query, "?")
    with sqlite3.connect(path) as db:
        rows = db.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    db.close()
    return [str(row[-1]) for row in rows]


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger file shaped like a real one, small: 200 operations over 100 threads,
    one in ten unresolved, a few decided by an operator."""

    async def fill() -> Path:
        path = await new_ledger_file(tmp_path_factory.mktemp("plans") / "agent.sqlite")
        async with SqliteLedger.from_conn_string(path) as ledger:
            for i in range(200):
                state = "dispatched" if i % 10 == 0 else "review" if i % 40 == 1 else "confirmed"
                op = await seed(ledger, make_op(thread_id=f"t-{i // 2}"), state)
                if state == "review":
                    await resolve(
                        ledger, op.op_id, {"type": "landed"}, expected_version=op.version, actor="a"
                    )
        return path

    return asyncio.run(fill())


@pytest.mark.parametrize("analyzed", [False, True], ids=["no statistics", "analyzed"])
@pytest.mark.parametrize("name", list(KEY_QUERIES))
def test_sqlite_plans_read_the_index(grown: Path, tmp_path: Path, name: str, analyzed: bool) -> None:
    path = tmp_path / "copy.sqlite"
    with sqlite3.connect(grown) as source, sqlite3.connect(path) as copy:
        source.backup(copy)
        if analyzed:
            copy.execute("ANALYZE")
    source.close()
    copy.close()
    query, index = KEY_QUERIES[name]
    lines = plan_lines(path, query)
    assert any(f"USING INDEX {index}" in line for line in lines), lines
    assert not any(line == "SCAN effect_operations" for line in lines), lines


async def test_migration_from_the_previous_schema_keeps_rows_and_adds_the_indexes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agent.sqlite"
    with monkeypatch.context() as previous:
        previous.setattr(sqlite_ledger, "MIGRATIONS", sqlite_ledger.MIGRATIONS[:3])
        async with SqliteLedger.from_conn_string(path) as ledger:
            await ledger.setup()
            stored = await seed(ledger, make_op(thread_id="t-old"), "review")
            assert await ledger.schema_version() == 3
    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
        assert await ledger.schema_version() == sqlite_ledger.SCHEMA_VERSION == 5
        assert await ledger.get(stored.op_id) == stored
        verdict = await resolve(
            ledger,
            stored.op_id,
            {"type": "landed"},
            expected_version=stored.version,
            actor="a",
            channel="console",
        )
        found = await ledger.list_operations(OperationQuery(verdicts=True))
        assert found == [verdict]
    with sqlite3.connect(path) as db:
        names = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    db.close()
    assert {"effect_operations_changed", "effect_operations_verdicts", "effect_deletions_thread"} <= names


def test_unfinished_threads_reads_only_the_open_threads(tmp_path: Path) -> None:
    """``unfinished_threads()`` starts from ``effect_open_threads`` and probes the
    checkpoints and writes of those threads by index: no scan of either table, with
    2,000 finished threads and 2 open ones, with statistics and without."""
    from langgraph_effects import AsyncEffectSqliteSaver
    from langgraph_effects.checkpoint import _unfinished
    from langgraph_effects.checkpoint.sqlite import _SOURCE

    path = tmp_path / "agent.sqlite"

    async def setup() -> list[str]:
        async with AsyncEffectSqliteSaver.from_conn_string(path) as saver:
            await saver.setup()
        _fill_checkpoints(path)
        async with AsyncEffectSqliteSaver.from_conn_string(path) as saver:
            return await saver.unfinished_threads()

    assert asyncio.run(setup()) == ["input-only", "mid-step"]
    sql = _unfinished.unfinished_sql("writes", _SOURCE, "?")
    with sqlite3.connect(path) as db:
        for analyzed in (False, True):
            if analyzed:
                db.execute("ANALYZE")
            lines = [str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + sql, _unfinished.PARAMS)]
            scans = [line for line in lines if line.startswith("SCAN")]
            assert scans == ["SCAN o"], lines  # the open threads, nothing else
            assert sum(line.startswith("SEARCH") for line in lines) == 4, lines  # newest, its row, its writes
    db.close()


def _fill_checkpoints(path: Path) -> None:
    """2,000 finished threads of 5 checkpoints, each with writes on all but its newest;
    one thread whose newest checkpoint is its input, one with writes on its newest."""
    rows, writes = [], []
    for t in range(2000):
        for k in range(5):
            checkpoint = f"{k:08d}"
            rows.append((f"t-{t}", checkpoint, json.dumps({"source": "input" if k == 0 else "loop"})))
            if k < 4:
                writes.append((f"t-{t}", checkpoint, "messages"))
    rows += [("input-only", "00000001", json.dumps({"source": "input"}))]
    rows += [("mid-step", "00000002", json.dumps({"source": "loop"}))]
    writes += [("mid-step", "00000002", "messages")]
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, metadata) "
            "VALUES (?, '', ?, 'json', x'7b7d', CAST(? AS BLOB))",
            rows,
        )
        db.executemany(
            "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, "
            "value) VALUES (?, '', ?, 'task', 0, ?, 'json', x'7b7d')",
            writes,
        )
    db.close()
