"""Recovery finds a thread whose first step never ran, and the user's request is processed.

A real worker process (``tests.helpers.recovery_agent``) is SIGKILLed once LangGraph
saved the ``__start__`` task's writes (the user's input) and before the first
checkpoint after them, as when its connection dies there. LangGraph's ``get_state``
then reports ``next == ()`` for the thread, and the ledger holds nothing of it (no
tool call was made): recovery used to skip it, so the request was never answered.
Effects are counted at a provider that keeps its own records.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects.ledger.base import OperationQuery
from langgraph_effects.ledger.sqlite import SqliteLedger
from tests.helpers.recovery_agent import BEFORE_FIRST_CHECKPOINT, RecoverySpec, build, config_for

from .test_recovery import FACTORY, cli, crash, effects, recover_in_process, spec, thread_view

pytestmark = [pytest.mark.crash, pytest.mark.slow]


def first_step_never_ran(s: RecoverySpec) -> None:
    crash(s, BEFORE_FIRST_CHECKPOINT)


async def _langgraph_view(s: RecoverySpec) -> tuple[tuple[str, ...], list[str], int]:
    """(``next``, the names of the pending tasks, the ledger's operations) of the thread."""
    async with AsyncEffectSqliteSaver.from_conn_string(s.db) as saver:
        await saver.setup()
        state = await build(s, saver).aget_state(config_for(s))
        async with SqliteLedger.from_conn_string(s.db) as ledger:
            ops = await ledger.list_operations(OperationQuery())
        return tuple(state.next), [t.name for t in state.tasks], len(ops)


def test_a_thread_whose_first_step_never_ran_is_found_resumed_and_answered(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="dedup", provider_mode="dedup")
    first_step_never_ran(s)
    # What LangGraph says: nothing next, although the input was never processed.
    assert asyncio.run(_langgraph_view(s)) == ((), ["__start__"], 0)
    assert thread_view(s)["messages"][-1]["type"] == "human"
    assert effects(s) == {}

    # A worker may still be running a thread this fresh: reported, not touched.
    busy = asyncio.run(recover_in_process(s))
    assert [(t.thread_id, t.action) for t in busy.threads] == [("t1", "recently_active")]
    dry = asyncio.run(recover_in_process(s, min_idle=0, dry_run=True))
    assert [t.action for t in dry.threads] == ["would_resume"]
    assert "input never processed" in dry.threads[0].reason
    assert effects(s) == {}

    report = asyncio.run(recover_in_process(s, min_idle=0))
    [thread] = report.threads
    assert (thread.thread_id, thread.action, thread.outcome) == ("t1", "resumed", "completed")
    assert [op.how for op in thread.operations] == ["sent"]  # the call the resume made
    assert effects(s) == {"t1:0": 1}
    view = thread_view(s)
    assert [m["type"] for m in view["messages"]] == ["human", "ai", "tool", "ai"]
    assert view["messages"][-1]["content"] == "done"
    assert asyncio.run(_langgraph_view(s)) == ((), [], 1)  # done: nothing next, no task left

    again = asyncio.run(recover_in_process(s, min_idle=0))
    assert again.threads == () and again.nothing_to_do  # done: nothing pending anywhere
    assert effects(s) == {"t1:0": 1}


def test_threads_that_ended_are_not_listed(tmp_path: Path) -> None:
    """Finished, and paused at an interrupt (the run stopped there on purpose): neither
    is an unfinished thread; only the crashed one is."""
    s = spec(tmp_path, contract="blind", provider_mode="blind", timeout_after_effect=[0])
    done = replace(spec(tmp_path, contract="dedup", provider_mode="dedup"), thread="done")
    asyncio.run(_run_worker(done))
    asyncio.run(_run_worker(replace(s, thread="paused")))  # a blind timeout: review interrupt
    first_step_never_ran(replace(s, thread="crashed"))

    async def listed() -> list[str]:
        async with AsyncEffectSqliteSaver.from_conn_string(s.db) as saver:
            await saver.setup()
            return await saver.unfinished_threads()

    assert asyncio.run(listed()) == ["crashed"]


async def _run_worker(s: RecoverySpec) -> Any:
    from tests.helpers.recovery_agent import run

    return await run(s)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A Postgres URL whose ``search_path`` is a fresh schema (checkpoints and ledger)."""
    import psycopg

    from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver
    from tests.ledger.conftest import require_postgres

    base = require_postgres()
    if not base.startswith(("postgres://", "postgresql://")):
        pytest.skip("the console recognises a Postgres DSN by its URL scheme")
    schema = f"lge_unfinished_{os.getpid()}_{int(time.time() * 1000) % 10**8}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    dsn = base + ("&" if "?" in base else "?") + f"options=-csearch_path%3D{schema}"

    async def setup() -> None:
        async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
            await saver.setup()

    try:
        asyncio.run(setup())
        yield dsn
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.postgres
def test_recover_on_postgres_processes_input_whose_first_step_never_ran(tmp_path: Path, pg_url: str) -> None:
    s = replace(spec(tmp_path, contract="dedup", provider_mode="dedup", calls=2), db=pg_url)
    first_step_never_ran(s)
    assert effects(s) == {}

    busy = cli("recover", "--db", pg_url, "--graph", FACTORY, "--json", s=s)
    assert busy.returncode == 0, busy.stderr
    assert [t["action"] for t in json.loads(busy.stdout)["threads"]] == ["recently_active"]

    done = cli("recover", "--db", pg_url, "--graph", FACTORY, "--json", "--min-idle", "0", s=s)
    assert done.returncode == 0, done.stderr
    [thread] = json.loads(done.stdout)["threads"]
    assert (thread["thread_id"], thread["action"], thread["outcome"]) == ("t1", "resumed", "completed")
    assert sorted(op["how"] for op in thread["operations"]) == ["sent", "sent"]
    assert effects(s) == {"t1:0": 1, "t1:1": 1}

    again = cli("recover", "--db", pg_url, "--graph", FACTORY, "--json", "--min-idle", "0", s=s)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["threads"] == []
    assert effects(s) == {"t1:0": 1, "t1:1": 1}


# -- the threads that may be unfinished, kept beside the checkpoints ----------------------


def _open_threads_sqlite(db: str) -> set[str]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        found = {str(r[0]) for r in conn.execute("SELECT thread_id FROM effect_open_threads")}
    conn.close()
    return found


def test_the_open_threads_follow_saves_crashes_and_deletions(tmp_path: Path) -> None:
    """Only a thread that may be unfinished is kept (a finished one is not), a worker
    killed mid-step left its thread there, a deleted thread leaves it, and a database
    set up before the table existed gets it filled by ``setup()``."""
    import sqlite3

    s = spec(tmp_path, contract="blind", provider_mode="blind", timeout_after_effect=[0])
    asyncio.run(_run_worker(replace(spec(tmp_path, contract="dedup", provider_mode="dedup"), thread="done")))
    asyncio.run(_run_worker(replace(s, thread="paused")))
    first_step_never_ran(replace(s, thread="crashed"))
    first_step_never_ran(replace(s, thread="deleted"))
    assert _open_threads_sqlite(s.db) == {"paused", "crashed", "deleted"}

    async def listed(delete: str | None = None) -> list[str]:
        async with AsyncEffectSqliteSaver.from_conn_string(s.db) as saver:
            await saver.setup()
            if delete is not None:
                await saver.adelete_thread(delete)
            return await saver.unfinished_threads()

    assert asyncio.run(listed()) == ["crashed", "deleted"]
    assert asyncio.run(listed(delete="deleted")) == ["crashed"]
    assert _open_threads_sqlite(s.db) == {"paused", "crashed"}

    # As an earlier version left the database: no table, no triggers.
    with sqlite3.connect(s.db) as conn:
        for trigger in ("effect_open_on_checkpoint", "effect_open_on_writes", "effect_open_on_delete"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE effect_open_threads")
    conn.close()
    assert asyncio.run(listed()) == ["crashed"]
    assert _open_threads_sqlite(s.db) == {"crashed"}


@pytest.mark.postgres
def test_the_open_threads_on_postgres_follow_crashes_and_deletions(tmp_path: Path, pg_url: str) -> None:
    import psycopg

    from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver

    s = replace(spec(tmp_path, contract="dedup", provider_mode="dedup"), db=pg_url)
    asyncio.run(_run_worker(replace(s, thread="done")))
    first_step_never_ran(replace(s, thread="crashed"))
    first_step_never_ran(replace(s, thread="deleted"))

    def kept() -> set[str]:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            return {str(r[0]) for r in conn.execute("SELECT thread_id FROM effect_open_threads")}

    async def listed(delete: str | None = None) -> list[str]:
        async with AsyncEffectPostgresSaver.from_conn_string(pg_url) as saver:
            await saver.setup()
            if delete is not None:
                await saver.adelete_thread(delete)
            return await saver.unfinished_threads()

    async def prune(thread: str) -> None:
        async with AsyncEffectPostgresSaver.from_conn_string(pg_url) as saver:
            await saver.aprune([thread], strategy="keep_latest")

    assert kept() == {"crashed", "deleted"}
    asyncio.run(prune("done"))  # its older checkpoints go, its newest (finished) stays
    assert kept() == {"crashed", "deleted"}
    assert asyncio.run(listed()) == ["crashed", "deleted"]
    assert asyncio.run(listed(delete="deleted")) == ["crashed"]
    assert kept() == {"crashed"}
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as an earlier version left it
        conn.execute("DROP TABLE effect_open_threads")
        conn.execute("DROP FUNCTION effect_open_threads_row() CASCADE")
    assert asyncio.run(listed()) == ["crashed"]
    assert kept() == {"crashed"}
