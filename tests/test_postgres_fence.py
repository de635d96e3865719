"""``AsyncEffectPostgresSaver``'s fence on the wire: what a fenced save costs in round trips,
and that one round trip keeps the rule (the cross-process races are in test_fencing.py).

Round trips are counted in libpq's own protocol trace: every ``Sync`` the client sends
is a point where it waits for the server's ``ReadyForQuery``.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import pq

from langgraph_effects import _private
from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver
from langgraph_effects.errors import ConfigurationError, ThreadConflictError

from .ledger.conftest import created_schema

pytestmark = pytest.mark.postgres


@pytest.fixture
def schema_and_dsn() -> Iterator[tuple[str, str]]:
    with created_schema("lge_fence") as made:
        yield made


@pytest.fixture
def pg_schema(schema_and_dsn: tuple[str, str]) -> str:
    return schema_and_dsn[0]


@pytest.fixture
def dsn(schema_and_dsn: tuple[str, str]) -> str:
    """The test database, with the test's own schema first on the search_path."""
    return schema_and_dsn[1]


@asynccontextmanager
async def effect_saver(dsn: str, *, pipeline: bool = False) -> AsyncIterator[AsyncEffectPostgresSaver]:
    async with AsyncEffectPostgresSaver.from_conn_string(dsn, pipeline=pipeline, ledger_max_size=1) as saver:
        await saver.setup()
        yield saver


@contextmanager
def sent(conn: Any) -> Iterator[dict[str, int]]:
    """Count the ``Sync`` (round trips) and ``Execute`` (statements) messages ``conn``
    sends inside the block (filled in when it ends)."""
    counted: dict[str, int] = {}
    with tempfile.NamedTemporaryFile("w+", suffix=".pqtrace") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield counted
        finally:
            conn.pgconn.untrace()  # flushes what libpq buffered
        trace.seek(0)
        lines = [line.split("\t") for line in trace.read().splitlines()]
    for kind in ("Sync", "Execute"):
        counted[kind] = sum(1 for p in lines if len(p) >= 3 and p[0] == "F" and p[2].strip() == kind)


def checkpoint(text: str, version: int) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": [AIMessage(text)]}
    cp["channel_versions"] = {"messages": version}
    return cp


async def put(saver: Any, parent: Any, text: str, version: int, source: str = "loop", *,
              edit: bool = False) -> Any:
    """A runner's save (its config carries the loop's keys), or with ``edit`` one
    ``update_state`` makes (it never does). Returns the saved config as the runner
    goes on with it (its task results are saved under it)."""
    conf = {k: v for k, v in parent["configurable"].items() if k not in RUN}
    saved = await saver.aput({"configurable": conf if edit else {**conf, **RUN}}, checkpoint(text, version),
                             {"source": source, "step": version}, {"messages": version})
    return {"configurable": {**saved["configurable"], **RUN}}


#: What a graph run's loop adds to the configs it hands its saver (one run's own object).
RUN = {_private.RUNTIME: object()}


def root(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def count_rows(saver: AsyncEffectPostgresSaver, sql: str, *params: Any) -> int:
    async with saver.ledger.pool.connection() as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("pipeline", [False, True], ids=["connection", "saver pipeline"])
async def test_a_fenced_save_sends_what_langgraphs_sends(dsn: str, pipeline: bool) -> None:
    # The fence runs inside LangGraph's own statements (a trigger): a checked save is
    # the same statements in the same one round trip as the plain saver's.
    async with AsyncPostgresSaver.from_conn_string(dsn) as plain:
        await plain.setup()
        start = await put(plain, root(uuid.uuid4().hex), "a", 1)
        with sent(plain.conn) as plain_put:
            await put(plain, start, "b", 2)
        with sent(plain.conn) as plain_writes:
            await plain.aput_writes(start, [("messages", [AIMessage("w")])], "task-1")
    assert plain_put["Sync"] == plain_writes["Sync"] == 1

    async with effect_saver(dsn, pipeline=pipeline) as saver:
        first = await put(saver, root(uuid.uuid4().hex), "a", 1)
        counts = {}
        with sent(saver.conn) as counts["writes, checked"]:
            await saver.aput_writes(first, [("messages", [AIMessage("w")])], "task-1")
        with sent(saver.conn) as counts["checkpoint, checked"]:
            second = await put(saver, first, "b", 2)
        with sent(saver.conn) as counts["writes, own late ones"]:
            await saver.aput_writes(first, [("messages", [AIMessage("late")])], "task-2")
        with sent(saver.conn) as counts["checkpoint, deliberate branch"]:
            await put(saver, first, "fork", 3, source="update", edit=True)
        third = await put(saver, second, "c", 4)
        with sent(saver.conn) as counts["writes, own late ones, older"]:
            await saver.aput_writes(first, [("messages", [AIMessage("later")])], "task-3")
        assert counts == {
            "writes, checked": plain_writes,
            "checkpoint, checked": plain_put,
            # The trigger knows the session's last save (a child of ``first``): it
            # takes task results on ``first`` as its session's own by itself.
            "writes, own late ones": plain_writes,
            # Telling it that a save branches on purpose is one statement more (rare:
            # time travel, edits)...
            "checkpoint, deliberate branch": {"Sync": 1, "Execute": plain_put["Execute"] + 1},
            # ...and so is telling it that results on an older checkpoint are its own.
            "writes, own late ones, older": {"Sync": 1, "Execute": plain_writes["Execute"] + 1},
        }, counts
        assert await count_rows(saver, "SELECT count(*) FROM checkpoint_writes WHERE checkpoint_id = %s",
                                first["configurable"]["checkpoint_id"]) == 3
        assert second["configurable"]["checkpoint_id"] and third["configurable"]["checkpoint_id"]


async def test_the_trigger_takes_as_its_own_only_what_the_saver_does(dsn: str) -> None:
    # Another saver on the same connection (so the same session) did not move past
    # ``start``: its task results there are refused, though the session's last save
    # is a child of ``start``; and the saver that did goes on.
    async with effect_saver(dsn) as saver:
        thread = uuid.uuid4().hex
        start = await put(saver, root(thread), "start", 1)
        await put(saver, start, "child", 2)
        other = AsyncEffectPostgresSaver(saver.conn, saver.ledger)
        with pytest.raises(ThreadConflictError):
            await other.aput_writes(start, [("messages", [AIMessage("late")])], "task-other")
        await saver.aput_writes(start, [("messages", [AIMessage("late")])], "task-own")
        assert await count_rows(saver, "SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s "
                                "AND task_id = %s", thread, "task-own") == 1
        assert await count_rows(saver, "SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s "
                                "AND task_id = %s", thread, "task-other") == 0


async def test_a_plain_saver_sharing_the_tables_is_left_alone(dsn: str) -> None:
    # The triggers fence the sessions of our savers only. LangGraph's own saver on the
    # same tables saves as it always did: its task results often land after the next
    # checkpoint (it serialises them in a thread before it takes its lock).
    thread = uuid.uuid4().hex
    async with effect_saver(dsn) as saver, AsyncPostgresSaver.from_conn_string(dsn) as plain:
        start = await put(plain, root(thread), "start", 1)
        await put(plain, start, "child", 2)
        await plain.aput_writes(start, [("messages", [AIMessage("late")])], "task-late")
        await put(plain, start, "second child", 3)  # not ours to refuse
        assert await count_rows(saver, "SELECT count(*) FROM checkpoints WHERE thread_id = %s", thread) == 3
        # ...while our saver, on the same thread, keeps the rule.
        with pytest.raises(ThreadConflictError):
            await put(saver, start, "third child", 4)


@pytest.mark.parametrize("mode", ["pipeline", "saver pipeline", "explicit transaction"])
async def test_a_refused_save_lands_nothing_and_the_connection_goes_on(
    dsn: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    thread = uuid.uuid4().hex
    async with effect_saver(dsn) as winner, effect_saver(dsn, pipeline=mode == "saver pipeline") as loser:
        if mode == "explicit transaction":
            loser.supports_pipeline = False  # libpq without pipeline mode: BEGIN ... COMMIT
        start = await put(winner, root(thread), "start", 1)
        moved = await put(winner, start, "winner", 2)

        with pytest.raises(ThreadConflictError) as refused:
            await put(loser, start, "loser", 7)
        assert refused.value.parent_id == start["configurable"]["checkpoint_id"]
        assert refused.value.child_id == moved["configurable"]["checkpoint_id"]
        assert "another runner" in str(refused.value) and "nothing of it landed" in str(refused.value)
        # Neither the checkpoint nor the blob its LangGraph statements stored landed.
        assert await count_rows(winner, "SELECT count(*) FROM checkpoints WHERE thread_id = %s", thread) == 2
        assert await count_rows(
            winner, "SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %s AND version = '7'", thread
        ) == 0

        with pytest.raises(ThreadConflictError, match="task results"):
            await loser.aput_writes(start, [("messages", [AIMessage("late")])], "task-loser")
        assert await count_rows(winner, "SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s",
                                thread) == 0
        await winner.aput_writes(start, [("messages", [AIMessage("late")])], "task-winner")  # its own

        # The loser's connection is fine: a deliberate branch and a new thread go through.
        await put(loser, start, "an edit", 8, source="update", edit=True)
        await put(loser, root(uuid.uuid4().hex), "other thread", 1)
        # A second root of a thread is a fork too.
        with pytest.raises(ThreadConflictError, match="first checkpoint"):
            await put(loser, root(thread), "second start", 9)
    # The statements the refusal aborted were collected, not left for psycopg to log.
    assert not [r for r in caplog.records if r.name.startswith("psycopg")], caplog.records


async def test_a_saver_on_a_pool_is_fenced_in_each_save(dsn: str) -> None:
    # On a pool the saver's session is not its own: each save tells the trigger to
    # fence it, one statement more in the same round trip.
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    from langgraph_effects.ledger.postgres import PostgresLedger

    thread = uuid.uuid4().hex
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    async with (
        effect_saver(dsn) as winner,
        AsyncConnectionPool(dsn, min_size=1, max_size=1, kwargs=kwargs, open=False) as pool,
        PostgresLedger.from_conn_string(dsn, max_size=1) as ledger,
    ):
        pooled = AsyncEffectPostgresSaver(pool, ledger)
        start = await put(winner, root(thread), "start", 1)
        await put(winner, start, "winner", 2)
        with pytest.raises(ThreadConflictError, match="checkpoint"):
            await put(pooled, start, "loser", 3)
        with pytest.raises(ThreadConflictError, match="task results"):
            await pooled.aput_writes(start, [("messages", [AIMessage("late")])], "task-loser")
        # Its own thread goes on, and its own late task results land.
        own = await put(pooled, root(uuid.uuid4().hex), "own", 1)
        await put(pooled, own, "next", 2)
        async with pool.connection() as conn:
            pass  # the pool's one connection, traced while the saver has it
        with sent(conn) as late:
            await pooled.aput_writes(own, [("messages", [AIMessage("late")])], "task-own")
        assert late == {"Sync": 1, "Execute": 2}, late  # mode + LangGraph's one write
        assert await count_rows(winner, "SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s",
                                own["configurable"]["thread_id"]) == 1


async def test_setup_leaves_the_fence_alone_once_it_is_current(dsn: str, pg_schema: str) -> None:
    async with effect_saver(dsn) as saver:
        find = ("SELECT sum(p.xmin::text::bigint) FROM pg_proc p "
                "JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE p.proname IN ('effect_checkpoint_fence', 'effect_checkpoint_fence_row') "
                "AND n.nspname = %s")
        # This test's own schema only: other tests' schemas on the server have triggers too.
        triggers = ("SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE t.tgname = 'effect_one_runner_per_thread' AND n.nspname = %s")
        before = await count_rows(saver, find, pg_schema)  # in the checkpoints' schema
        await saver.setup()
        assert await count_rows(saver, find, pg_schema) == before  # not replaced: no owner needed
        assert await count_rows(saver, triggers, pg_schema) == 2  # checkpoints, checkpoint_writes

        # The trigger of an earlier version called the check function; on a database
        # that lost it, the saver says to run setup(), which brings the current trigger.
        async with saver.ledger.pool.connection() as conn:
            await conn.execute(_EARLIER_TRIGGER_FUNCTION)
            await conn.execute("DROP FUNCTION effect_checkpoint_fence")
        with pytest.raises(ConfigurationError, match=r"setup\(\)"):
            await put(saver, root(uuid.uuid4().hex), "a", 1)
        await saver.setup_fencing()
        await put(saver, root(uuid.uuid4().hex), "a", 1)
        async with saver.ledger.pool.connection() as conn:
            await conn.execute("DROP FUNCTION effect_checkpoint_fence")
        await put(saver, root(uuid.uuid4().hex), "b", 1)  # today's trigger checks by itself


#: The shape of an earlier version's trigger function: the check in a function of its own.
_EARLIER_TRIGGER_FUNCTION = """
CREATE OR REPLACE FUNCTION effect_checkpoint_fence_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('langgraph_effects.fence', true) = 'on' THEN
        PERFORM effect_checkpoint_fence('k'::text, 'lock'::text, NEW.thread_id, NEW.checkpoint_ns,
                                        NULL::text, ''::text);
    END IF;
    RETURN NEW;
END $$
"""


async def test_a_saver_will_not_save_unfenced(dsn: str) -> None:
    # A database set up by an older version (or whose triggers were dropped) has no
    # fence: the saver says so at its first save instead of saving without it.
    async with effect_saver(dsn) as saver, saver.ledger.pool.connection() as conn:
        await conn.execute("DROP TRIGGER effect_one_runner_per_thread ON checkpoint_writes")
    async with AsyncEffectPostgresSaver.from_conn_string(dsn, ledger_max_size=1) as fresh:
        with pytest.raises(ConfigurationError, match=r"no one-runner-per-thread triggers.*setup\(\)"):
            await put(fresh, root(uuid.uuid4().hex), "a", 1)
        await fresh.setup()
        await put(fresh, root(uuid.uuid4().hex), "a", 1)
