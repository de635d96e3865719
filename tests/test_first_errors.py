"""The first errors a new user meets say what to do (issue 40, item 2): a forgotten
``setup()`` (the same on SQLite and Postgres), the async saver opened with a sync
``with``, a resume of a thread that has no checkpoint. Nothing is sent in any of them,
and nothing is written."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from langgraph_effects import (
    AsyncEffectPostgresSaver,
    AsyncEffectSqliteSaver,
    Effect,
    EffectMiddleware,
    EffectPostgresSaver,
    EffectSqliteSaver,
    recover,
    resume_command,
)
from langgraph_effects.errors import NothingToResumeError, NotSetUpError, ReviewError, SyncMismatchError
from langgraph_effects.testing import Provider, ScriptedChatModel, call_each_then_finish

from .ledger.conftest import created_schema

CONFIG: Any = {"configurable": {"thread_id": "t1"}}
INPUTS: Any = {"messages": [HumanMessage("send the receipt")]}


def agent(provider: Provider, saver: Any) -> Any:
    @tool
    def email_receipt(to: str) -> str:
        """Email a receipt."""
        provider.apply({"to": to})
        return "sent"

    model = ScriptedChatModel(script=call_each_then_finish([("email_receipt", {"to": "ada@example.com"})]))
    middleware = [EffectMiddleware({"email_receipt": Effect()})]
    return create_agent(model, tools=[email_receipt], middleware=middleware, checkpointer=saver)


def tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


SETUP_PHRASES = (
    "has no checkpoint tables and no langgraph-effects ledger yet",
    "Run the saver's setup() once after opening it and before the first run",
    "`await saver.setup()`; `saver.setup()` on a sync saver",
    "Nothing was read, saved or sent.",
)


def test_a_forgotten_setup_on_sqlite_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    path = tmp_path / "agent.sqlite"

    async def go() -> NotSetUpError:
        async with AsyncEffectSqliteSaver.from_conn_string(path) as saver:
            with pytest.raises(NotSetUpError) as caught:
                await agent(provider, saver).ainvoke(INPUTS, CONFIG)
            return caught.value

    error = asyncio.run(go())
    assert str(error).startswith(f"AsyncEffectSqliteSaver: sqlite:{path} has no checkpoint tables")
    assert all(phrase in str(error) for phrase in SETUP_PHRASES), str(error)
    assert provider.count_requests() == 0
    assert tables(path) == []  # nothing half-created: no checkpoint table, no ledger table


def test_a_forgotten_setup_on_the_sync_sqlite_saver_is_refused_alike(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    path = tmp_path / "agent.sqlite"
    with EffectSqliteSaver.from_conn_string(path) as saver, pytest.raises(NotSetUpError) as caught:
        agent(provider, saver).invoke(INPUTS, CONFIG)
    assert all(phrase in str(caught.value) for phrase in SETUP_PHRASES)
    assert str(caught.value).startswith("EffectSqliteSaver: ")  # the class the user opened
    assert provider.count_requests() == 0 and tables(path) == []


def test_after_setup_the_same_run_works(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    async def go() -> None:
        async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
            await saver.setup()
            await agent(provider, saver).ainvoke(INPUTS, CONFIG)
        async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
            await agent(provider, saver).ainvoke(INPUTS, {"configurable": {"thread_id": "t2"}})

    asyncio.run(go())  # a second worker on a set-up database needs no setup() of its own
    assert provider.count_requests() == 2


@pytest.fixture
def pg_dsn() -> Iterator[tuple[str, str]]:
    with created_schema("lge_first") as made:
        yield made


@pytest.mark.postgres
def test_a_forgotten_setup_on_postgres_is_refused_with_the_same_words(pg_dsn: tuple[str, str]) -> None:
    import psycopg

    schema, dsn = pg_dsn
    provider_dir = Path(__import__("tempfile").mkdtemp())
    provider = Provider(provider_dir / "provider.sqlite", "blind")

    async def go() -> NotSetUpError:
        async with AsyncEffectPostgresSaver.from_conn_string(dsn, ledger_max_size=1) as saver:
            with pytest.raises(NotSetUpError) as caught:
                await agent(provider, saver).ainvoke(INPUTS, CONFIG)
            return caught.value

    error = asyncio.run(go())
    assert str(error).startswith("AsyncEffectPostgresSaver: postgres:")
    assert all(phrase in str(error) for phrase in SETUP_PHRASES), str(error)
    assert provider.count_requests() == 0
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchone()
    assert found == (0,)  # nothing written


def test_the_async_saver_in_a_sync_with_names_the_sync_saver(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    with pytest.raises(SyncMismatchError) as caught, AsyncEffectSqliteSaver.from_conn_string(path):
        pass  # pragma: no cover - never entered
    error = caught.value
    assert (error.used, error.use) == ("AsyncEffectSqliteSaver", EffectSqliteSaver.__name__)
    assert str(error) == (
        "AsyncEffectSqliteSaver.from_conn_string(...) opens an async saver: use it with `async with` in "
        "async code (ainvoke/astream). For sync code (a plain `with`, invoke/stream), open "
        "EffectSqliteSaver.from_conn_string(...) instead: the same database, ledger and setup(). "
        "Nothing was opened."
    )
    assert not path.exists()
    with pytest.raises(SyncMismatchError, match=r"EffectPostgresSaver\.from_conn_string"), (
        AsyncEffectPostgresSaver.from_conn_string("postgresql://nobody@127.0.0.1:1/none")
    ):
        pass  # pragma: no cover - never entered


def test_the_sync_saver_in_an_async_with_names_the_async_saver(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"

    async def enter(opener: Any) -> None:
        async with opener:
            pass  # pragma: no cover - never entered

    with pytest.raises(SyncMismatchError) as caught:
        asyncio.run(enter(EffectSqliteSaver.from_conn_string(path)))
    error = caught.value
    assert (error.used, error.use) == ("EffectSqliteSaver", AsyncEffectSqliteSaver.__name__)
    assert str(error) == (
        "EffectSqliteSaver.from_conn_string(...) opens a sync saver: use it with a plain `with` in "
        "sync code (invoke/stream). For async code (`async with`, ainvoke/astream), open "
        "AsyncEffectSqliteSaver.from_conn_string(...) instead: the same database, ledger and setup(). "
        "Nothing was opened."
    )
    assert not path.exists()
    with pytest.raises(SyncMismatchError, match=r"AsyncEffectPostgresSaver\.from_conn_string"):
        asyncio.run(enter(EffectPostgresSaver.from_conn_string("postgresql://nobody@127.0.0.1:1/none")))
    with EffectSqliteSaver.from_conn_string(path) as saver:  # the plain `with` still opens it
        saver.setup()
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None


def test_a_resume_of_a_thread_with_no_checkpoint_says_there_is_nothing_to_resume(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    typo: Any = {"configurable": {"thread_id": "t-typo"}}

    async def go() -> tuple[NothingToResumeError, ReviewError, Any]:
        async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
            await saver.setup()
            graph = agent(provider, saver)
            state = await graph.aget_state(typo)
            with pytest.raises(NothingToResumeError) as from_state:
                resume_command(state, {"op_1": {"type": "not_landed"}})
            with pytest.raises(ReviewError) as from_interrupts:
                resume_command(state.interrupts, {"op_1": {"type": "not_landed"}})
            report = await recover(graph, thread_ids=["t-typo"], min_idle=0)
            return from_state.value, from_interrupts.value, report

    error, bare, report = asyncio.run(go())
    assert (error.thread_id, error.has_checkpoint) == ("t-typo", False)
    assert str(error) == (
        "there is nothing to resume for thread 't-typo': the graph's checkpointer has no checkpoint "
        "for it. Check the thread_id (a typo starts an empty thread), and that the graph is compiled "
        "with the checkpointer (the same database, and schema on Postgres) the thread ran with. "
        "Nothing was sent."
    )
    assert "check the config's thread_id" in str(bare) and "resume_command(state, ...)" in str(bare)
    [thread] = report.threads
    assert thread.action == "nothing_to_do" and thread.reason == str(error)
    assert provider.count_requests() == 0


def test_a_resume_of_a_thread_that_is_not_paused_says_so(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    async def go() -> NothingToResumeError:
        async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
            await saver.setup()
            graph = agent(provider, saver)
            await graph.ainvoke(INPUTS, CONFIG)
            with pytest.raises(NothingToResumeError) as caught:
                resume_command(await graph.aget_state(CONFIG), {"op_1": {"type": "not_landed"}})
            return caught.value

    error = asyncio.run(go())
    assert error.has_checkpoint and "it is not paused at an interrupt" in str(error)
    assert provider.count_requests() == 1  # the run itself; the refused resume sent nothing
