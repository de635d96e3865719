"""A ledger that lives for years, with real graphs and savers: a purge while a worker
runs turns, a thread deleted with its operations (refused while one is unresolved),
and a tenant's data erased, then shown and replayed."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from langgraph_effects import AsyncEffectPostgresSaver, AsyncEffectSqliteSaver, EffectSqliteSaver
from langgraph_effects.core.operation import Change, Event, State
from langgraph_effects.errors import UnresolvedOperationsError
from langgraph_effects.ledger.base import Ledger, OperationQuery
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.operator import forced_deletions, json_schema, purge
from langgraph_effects.testing.conformance import LOSE, dispatch, make_op, succeed
from tests.helpers import run_console
from tests.helpers.agent import Spec, build
from tests.helpers.agent import provider_for as provider_of

from .ledger.conftest import created_schema

DAY = 86400.0


def spec_for(tmp_path: Path, **kw: Any) -> Spec:
    return Spec(db=str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"), **kw)


def config(thread: str, tenant: str = "") -> Any:
    return {"configurable": {"thread_id": thread, **({"tenant_id": tenant} if tenant else {})}}


async def thread_ops(ledger: Ledger, thread: str) -> list[Any]:
    return await ledger.list_operations(OperationQuery(thread_id=thread, limit=1000))


async def stuck_in(ledger: Ledger, thread: str) -> str:
    """An operation of ``thread`` a crash left in doubt (``unknown``)."""
    op = make_op(thread_id=thread)
    await ledger.record_intents([op], change=dispatch())
    await ledger.transition(op.op_id, LOSE, expected_version=1)
    return op.op_id


async def settle(ledger: Ledger, op_id: str) -> None:
    decision = {"type": "abandon"}
    verdict = Change(Event.ABANDON, evidence={"kind": "verdict"}, decision_id="d1", decision=decision)
    await ledger.transition(op_id, verdict, expected_version=2)


# -- deleting a thread -----------------------------------------------------------------


async def delete_thread_scenario(saver: Any, spec: Spec) -> None:
    provider = provider_of(spec)
    graph = build(spec, saver, provider)
    for thread in ("t-del", "t-keep"):
        await graph.ainvoke({"messages": [HumanMessage("go")]}, config(thread))
    ledger = saver.ledger
    assert [op.state for op in await thread_ops(ledger, "t-del")] == [State.CONFIRMED]
    stuck = await stuck_in(ledger, "t-del")

    with pytest.raises(UnresolvedOperationsError, match=stuck):
        await saver.adelete_thread("t-del")
    assert await saver.aget_tuple(config("t-del")) is not None  # nothing was deleted
    assert len(await thread_ops(ledger, "t-del")) == 2

    await settle(ledger, stuck)
    await saver.adelete_thread("t-del")
    assert await forced_deletions(ledger) == []  # nothing unresolved: nothing to record
    assert await saver.aget_tuple(config("t-del")) is None
    assert await thread_ops(ledger, "t-del") == []
    assert [op.state for op in await thread_ops(ledger, "t-keep")] == [State.CONFIRMED]
    assert await saver.aget_tuple(config("t-keep")) is not None

    # Forced: the unresolved operation goes too; the decision is recorded, and kept.
    stuck = await stuck_in(ledger, "t-keep")
    before = time.time()
    await saver.adelete_thread("t-keep", force=True, actor="alice")
    assert await thread_ops(ledger, "t-keep") == [] and await saver.aget_tuple(config("t-keep")) is None
    [deletion] = await forced_deletions(ledger, thread_id="t-keep")
    assert (deletion.thread_id, deletion.actor) == ("t-keep", "alice") and deletion.at >= before
    assert [(o["operation_id"], o["state"]) for o in deletion.operations] == [(stuck, "unknown")]
    assert await forced_deletions(ledger, thread_id="t-del") == []
    # The thread id can be used again from scratch: its call runs (and is sent) anew.
    await graph.ainvoke({"messages": [HumanMessage("go")]}, config("t-keep"))
    assert provider.count_requests("apply") == 3
    assert await forced_deletions(ledger) == [deletion]  # the record outlives the thread's new run


async def test_delete_thread_on_sqlite(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, contract="blind", provider_mode="blind")
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        await delete_thread_scenario(saver, spec)


@pytest.mark.postgres
async def test_delete_thread_on_postgres(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, contract="blind", provider_mode="blind")
    with created_schema("lge_lifecycle") as (_, dsn):
        async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
            await saver.setup()
            await delete_thread_scenario(saver, spec)


def test_sync_delete_thread_refuses_then_deletes(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, contract="blind", provider_mode="blind", sync=True)
    with EffectSqliteSaver.from_conn_string(spec.db) as saver:
        saver.setup()
        graph = build(spec, saver, provider_of(spec))
        graph.invoke({"messages": [HumanMessage("go")]}, config("t-del"))
        ledger = saver.saver.ledger
        stuck = saver._run(stuck_in(ledger, "t-del"))
        with pytest.raises(UnresolvedOperationsError, match=stuck):
            saver.delete_thread("t-del")
        assert saver.get_tuple(config("t-del")) is not None
        saver.delete_thread("t-del", force=True)
        assert saver.get_tuple(config("t-del")) is None
        assert saver._run(thread_ops(ledger, "t-del")) == []


@pytest.mark.slow  # the console as a subprocess
def test_the_deletions_command_shows_who_deleted_what(tmp_path: Path) -> None:
    db = str(tmp_path / "agent.sqlite")

    async def forced() -> str:
        async with AsyncEffectSqliteSaver.from_conn_string(db) as saver:
            await saver.setup()
            stuck = await stuck_in(saver.ledger, "t-gone")
            await saver.adelete_thread("t-gone", force=True, actor="alice@ops")
            return stuck

    none = run_console("--db", db, "--json", "deletions")
    assert none.returncode == 4  # no ledger yet: nothing created
    stuck = asyncio.run(forced())
    shown = run_console("--db", db, "--json", "deletions", "--thread", "t-gone")
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    jsonschema.validate(out, json_schema("deletions"))
    [deletion] = out["deletions"]
    assert (deletion["thread_id"], deletion["actor"]) == ("t-gone", "alice@ops")
    assert [o["operation_id"] for o in deletion["operations"]] == [stuck]
    text = run_console("--db", db, "deletions")
    assert text.returncode == 0 and "alice@ops" in text.stdout and stuck in text.stdout, text.stdout
    other = run_console("--db", db, "--json", "deletions", "--thread", "t-other")
    assert json.loads(other.stdout) == {"deletions": []}


# -- purge while a worker runs turns ---------------------------------------------------


async def seed_old(db: str, *, settled: int, stuck: int) -> tuple[list[str], list[str]]:
    """``settled`` confirmed and ``stuck`` unknown operations, all 100 days old."""
    async with SqliteLedger.from_conn_string(db) as ledger:
        await ledger.setup()
        done = [make_op(thread_id=f"old-{i}") for i in range(settled)]
        await ledger.record_intents(done, change=dispatch())
        await asyncio.gather(*(ledger.transition(op.op_id, succeed(), expected_version=1) for op in done))
        stuck_ids = [await stuck_in(ledger, f"old-stuck-{i}") for i in range(stuck)]
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE effect_operations SET updated_at = updated_at - ?, created_at = created_at - ?",
                     (100 * DAY, 100 * DAY))
    return [op.op_id for op in done], stuck_ids


@pytest.mark.slow  # a graph doing turns in a thread while the purge runs
def test_purge_in_batches_while_a_worker_runs_turns(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, contract="blind", provider_mode="blind")
    provider = provider_of(spec)
    # The graph's tables first, then 300 settled operations and 3 in doubt, 100 days old.
    async def setup() -> None:
        async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
            await saver.setup()

    asyncio.run(setup())
    old, stuck = asyncio.run(seed_old(spec.db, settled=300, stuck=3))
    errors: list[BaseException] = []
    turns: list[tuple[float, float]] = []  # (start, end) of each turn the worker ran
    started, stop = threading.Event(), threading.Event()

    def worker() -> None:
        async def run() -> None:
            async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
                graph = build(spec, saver, provider)
                while not stop.is_set():  # turns until the purge is over
                    began = time.monotonic()
                    started.set()
                    await graph.ainvoke({"messages": [HumanMessage("go")]}, config(f"live-{len(turns)}"))
                    turns.append((began, time.monotonic()))

        try:
            asyncio.run(run())
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            started.set()

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait(30)

    async def purge_now() -> Any:
        async with SqliteLedger.from_conn_string(spec.db) as ledger:
            return await purge(ledger, 90 * DAY, dry_run=False, batch_size=7)

    began = time.monotonic()
    report = asyncio.run(purge_now())
    ended = time.monotonic()
    stop.set()
    thread.join(120)
    assert errors == [] and not thread.is_alive()
    assert sorted(report.removed) == sorted(old) and report.batches >= 300 // 7
    assert any(start < ended and end > began for start, end in turns)  # they overlapped

    async def read() -> tuple[dict[str, Any], list[Any]]:
        async with SqliteLedger.from_conn_string(spec.db) as ledger:
            left = await ledger.get_many([*old, *stuck])
            live = await ledger.list_operations(OperationQuery(limit=1000))
            return left, [op for op in live if op.thread_id.startswith("live-")]

    left, live = asyncio.run(read())
    assert set(left) == set(stuck)  # the settled old ones went; those in doubt stayed
    assert len(live) == len(turns) and all(op.state is State.CONFIRMED for op in live)
    assert provider.count_requests("apply") == len(turns)  # each turn's call sent once


@pytest.mark.slow  # the console as a subprocess
def test_the_purge_command_is_a_dry_run_unless_told(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.sqlite")
    old, stuck = asyncio.run(seed_old(db, settled=5, stuck=1))

    async def left() -> set[str]:
        async with SqliteLedger.from_conn_string(db) as ledger:
            return set(await ledger.get_many([*old, *stuck]))

    dry = run_console("--db", db, "--json", "purge", "--older-than", "90d")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    jsonschema.validate(report, json_schema("purge"))
    assert report["removed"] == 5 and report["dry_run"] is True
    assert asyncio.run(left()) == {*old, *stuck}
    human = run_console("--db", db, "purge", "--older-than", "90d", "--yes", "--batch-size", "2")
    assert human.returncode == 0, human.stderr
    assert "Removed 5 settled operation(s)" in human.stdout
    assert asyncio.run(left()) == set(stuck)
    refused = run_console("--db", db, "purge", "--older-than", "0", "--yes")
    assert refused.returncode == 2 and "longer than zero" in refused.stderr


# -- erasure ---------------------------------------------------------------------------


@pytest.mark.slow  # the console as a subprocess
def test_erase_a_tenant_then_show_and_replay(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, contract="blind", provider_mode="blind")
    provider = provider_of(spec)

    async def first_run() -> None:
        async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
            await saver.setup()
            graph = build(spec, saver, provider)
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config("t-acme", "acme"))
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config("t-globex", "globex"))

    asyncio.run(first_run())
    dry = run_console("--db", spec.db, "--json", "erase", "--tenant", "acme")
    assert dry.returncode == 0, dry.stderr
    [op_id] = json.loads(dry.stdout)["erased"]
    shown = json.loads(run_console("--db", spec.db, "--json", "show", op_id).stdout)
    assert shown["operation"]["args"] == {"operation": "t1:0"}  # a dry run erased nothing

    done = run_console("--db", spec.db, "--json", "erase", "--tenant", "acme", "--yes", "--actor", "dpo@acme")
    assert done.returncode == 0, done.stderr
    jsonschema.validate(json.loads(done.stdout), json_schema("erase"))
    assert json.loads(done.stdout)["erased"] == [op_id]

    shown = json.loads(run_console("--db", spec.db, "--json", "show", op_id).stdout)
    jsonschema.validate(shown, json_schema("show"))
    operation = shown["operation"]
    assert operation["operation_id"] == op_id and operation["state"] == "confirmed"
    assert operation["args"] == {} and operation["result"] is None
    assert operation["extra"]["erased"]["by"] == "dpo@acme"
    assert [e["event"] for e in shown["audit"]] == ["intent", "dispatch", "succeed", "erase"]
    assert all(set(e["evidence"] or {}) <= {"kind", "erased"} for e in shown["audit"])
    assert shown["audit"][-1]["actor"] == "dpo@acme"
    human = run_console("--db", spec.db, "show", op_id)
    assert "Data erased by dpo@acme" in " ".join(human.stdout.split())

    # The other tenant's operation is untouched.
    listed = json.loads(run_console("--db", spec.db, "--json", "list", "--all").stdout)
    other = [o for o in listed["operations"] if o["thread_id"] == "t-globex"]
    assert other and other[0]["args"] == {"operation": "t1:0"}

    async def replay() -> ToolMessage:
        async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
            graph = build(spec, saver, provider)
            history = [s async for s in graph.aget_state_history(config("t-acme", "acme"))]
            before_tools = next(s for s in history if s.next == ("tools",))
            await graph.ainvoke(None, before_tools.config)  # time travel: the call again
            state = await graph.aget_state(config("t-acme", "acme"))
            return [m for m in state.values["messages"] if isinstance(m, ToolMessage)][-1]

    message = asyncio.run(replay())
    assert provider.count_requests("apply") == 2  # replayed from the ledger, not re-sent
    assert message.content.startswith("The send call landed. Its arguments and result were erased")
    assert message.status == "success"
