"""One runner per thread: two runners resuming one thread never both proceed.

Every runner is a real process (``tests/helpers/fencing_agent.py``), released at the
same instant (each waits for a file the test creates once all are ready). The
model's follow-up differs on every call (pid, counter), as an LLM's does, so a
forked thread would send it twice under two operations the ledger cannot relate.
Effects are counted at a provider that keeps its own records; forks are looked for
with ``alist`` (a checkpoint with two children).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from psycopg.conninfo import make_conninfo

from langgraph_effects import _private
from langgraph_effects.errors import ThreadConflictError
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.base import OperationQuery
from tests.helpers.fencing_agent import FenceSpec, build, first_message, is_postgres, open_saver, spec_json
from tests.ledger import conftest as ledger_fixtures

pytestmark = pytest.mark.slow  # racing worker processes

ROOT = Path(__file__).resolve().parents[1]
pg_schema = ledger_fixtures.pg_schema
DEADLINE = 240.0  # seconds per worker on a loaded 2-core machine
DURABLE_WAIT = float(os.environ.get("FENCING_DURABLE_WAIT", "120"))  # a loser must end long before


# -- plumbing ------------------------------------------------------------------------------


def start(spec: FenceSpec) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.fencing_agent", spec_json(spec)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def crash(spec: FenceSpec) -> None:
    """Start each thread in its own process, SIGKILLed once the first effect landed."""
    for thread in spec.threads:
        proc = start(FenceSpec(**{**spec.__dict__, "mode": "crash", "threads": [thread], "go": None}))
        _, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == -9, f"the worker was not killed at the fault point:\n{err[-3000:]}"


def race(specs: list[FenceSpec], go: Path) -> list[dict[str, Any]]:
    """Start the workers, wait until all are ready, release them at once."""
    procs = [start(s) for s in specs]
    deadline = time.monotonic() + DEADLINE
    while sum(1 for p in go.parent.iterdir() if p.name.startswith(go.name + ".ready.")) < len(procs):
        assert time.monotonic() < deadline, "workers never got ready"
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"a worker died before the start:\n{p.communicate()[1][-4000:]}")
        time.sleep(0.02)
    go.touch()
    return [finish(p) for p in procs]


async def forks(db: str, threads: list[str]) -> list[str]:
    """Checkpoints with two or more children (per thread and namespace)."""
    found = []
    async with open_saver(db) as saver:
        for thread in threads:
            children: Counter[tuple[str, str]] = Counter()
            async for t in saver.alist({"configurable": {"thread_id": thread}}):
                parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
                if parent is not None:
                    children[(t.config["configurable"]["checkpoint_ns"], parent)] += 1
            found += [f"{thread}:{ns}:{cid} has {n} children" for (ns, cid), n in children.items() if n > 1]
    return found


async def unresolved(db: str) -> list[str]:
    async with open_saver(db) as saver:
        ops = await saver.ledger.list_operations(OperationQuery(limit=10_000))
    return [f"{o.op_id} {o.state.value}" for o in ops if not o.terminal]


def assert_exactly_intended(provider: str, threads: list[str], calls: int) -> None:
    counts = Provider(provider, "dedup").count_effects()
    intended = {f"{t}:{i}": 1 for t in threads for i in range(calls)}
    intended.update({f"{t}:follow": 1 for t in threads})
    assert counts == intended, f"the provider's records differ from the intended effects: {counts}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "agent.sqlite")
    schema: str = request.getfixturevalue("pg_schema")
    dsn = ledger_fixtures.require_postgres()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    scoped = make_conninfo(dsn, options=f"-c search_path={schema}")
    assert is_postgres(scoped)  # the workers must open Postgres, not a file named like the DSN

    async def setup() -> None:
        async with open_saver(scoped) as saver:
            await saver.setup()

    asyncio.run(setup())
    return scoped


def specs(
    db: str, provider: str, tmp: Path, modes: list[str], threads: list[str], **kw: Any
) -> list[FenceSpec]:
    go = str(tmp / "go")
    return [FenceSpec(db=db, provider=provider, mode=m, threads=threads, go=go, **kw) for m in modes]


def outcomes(results: list[dict[str, Any]], thread: str) -> list[str]:
    """Per runner: ok / refused / error for ``thread`` (recovery: its action)."""
    found = []
    for r in results:
        if "report" in r:
            found += [t["action"] for t in r["report"]["threads"] if t["thread_id"] == thread]
        else:
            found.append(r["threads"][thread]["outcome"])
    return found


# -- two runner processes on one thread ------------------------------------------------------


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_two_resumes_one_proceeds_the_other_is_refused(db: str, tmp_path: Path, durability: str) -> None:
    provider = str(tmp_path / "provider.sqlite")
    threads = ["t1"]
    crash(FenceSpec(db=db, provider=provider, mode="crash", threads=threads))
    # Both runners load the same checkpoint before either saves (overlap), so they collide.
    results = race(
        specs(db, provider, tmp_path, ["resume", "resume"], threads, durability=durability,
              overlap=str(tmp_path / "overlap"), durable_wait_seconds=DURABLE_WAIT),
        tmp_path / "go",
    )
    assert sorted(outcomes(results, "t1")) == ["ok", "refused"], results
    refused = next(r["threads"]["t1"] for r in results if r["threads"]["t1"]["outcome"] == "refused")
    assert "another runner" in refused["error"] and "nothing of it landed" in refused["error"]
    assert asyncio.run(forks(db, threads)) == []
    assert_exactly_intended(provider, threads, calls=2)
    assert asyncio.run(unresolved(db)) == []


def test_two_resumes_of_a_subgraph_thread(db: str, tmp_path: Path) -> None:
    # The crash is inside the subgraph, so both runners resume it in its own namespace.
    provider = str(tmp_path / "provider.sqlite")
    threads = ["t1"]
    crash(FenceSpec(db=db, provider=provider, mode="crash", threads=threads, subgraph=True))
    results = race(
        specs(db, provider, tmp_path, ["resume", "resume"], threads, subgraph=True,
              overlap=str(tmp_path / "overlap")),
        tmp_path / "go",
    )
    assert sorted(outcomes(results, "t1")) == ["ok", "refused"], results
    refused = next(r["threads"]["t1"] for r in results if r["threads"]["t1"]["outcome"] == "refused")
    assert "namespace 'agent:" in refused["error"], refused
    assert asyncio.run(forks(db, threads)) == []
    assert_exactly_intended(provider, threads, calls=2)
    assert asyncio.run(unresolved(db)) == []


def test_recover_racing_a_resume_after_a_kill_at_b(db: str, tmp_path: Path) -> None:
    provider = str(tmp_path / "provider.sqlite")
    threads = ["t1", "t2", "t3"]
    crash(FenceSpec(db=db, provider=provider, mode="crash", threads=threads))
    results = race(specs(db, provider, tmp_path, ["resume", "recover"], threads), tmp_path / "go")
    assert asyncio.run(forks(db, threads)) == []
    assert_exactly_intended(provider, threads, calls=2)
    assert asyncio.run(unresolved(db)) == []
    for thread in threads:
        worker, recovery = outcomes(results, thread)
        assert worker in ("ok", "refused"), results
        # A thread the worker holds is reported as such (or as live, or done), never as failed.
        assert recovery in ("resumed", "running_elsewhere", "in_flight_elsewhere", "nothing_to_do"), results
        assert worker == "ok" or recovery == "resumed", results  # one of them moved it on


def test_two_recoveries_at_once(db: str, tmp_path: Path) -> None:
    provider = str(tmp_path / "provider.sqlite")
    threads = ["t1"]
    crash(FenceSpec(db=db, provider=provider, mode="crash", threads=threads))
    results = race(
        specs(db, provider, tmp_path, ["recover", "recover"], threads, overlap=str(tmp_path / "overlap")),
        tmp_path / "go",
    )
    actions = sorted(outcomes(results, "t1"))
    assert actions == ["resumed", "running_elsewhere"], results
    elsewhere = next(t for r in results for t in r["report"]["threads"] if t["action"] == "running_elsewhere")
    assert elsewhere["error"] is None and "another runner" in elsewhere["reason"]
    assert asyncio.run(forks(db, threads)) == []
    assert_exactly_intended(provider, threads, calls=2)
    assert asyncio.run(unresolved(db)) == []


# -- the rule, at the saver ------------------------------------------------------------------


#: What a graph run's loop adds to the configs it hands its saver (one run's own object).
RUN = {_private.RUNTIME: object()}


def _config(thread: str, parent: str | None = None, ns: str = "", *, edit: bool = False) -> dict[str, Any]:
    """A runner's config for a save (``edit``: ``update_state``'s, without the loop's keys)."""
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns, **({} if edit else RUN)}
    if parent is not None:
        conf["checkpoint_id"] = parent
    return {"configurable": conf}


async def _put(
    saver: Any, thread: str, parent: str | None, source: str = "loop", ns: str = "", *, edit: bool = False
) -> str:
    checkpoint = empty_checkpoint()
    await saver.aput(_config(thread, parent, ns, edit=edit), checkpoint, {"source": source, "step": 0}, {})
    return str(checkpoint["id"])


async def _ids(saver: Any, thread: str, ns: str = "") -> list[str]:
    return [
        t.config["configurable"]["checkpoint_id"]
        async for t in saver.alist(_config(thread, ns=ns))
        if t.config["configurable"]["checkpoint_ns"] == ns
    ]


@pytest.mark.parametrize("ns", ["", "agent:1f0c2a"])
async def test_a_second_child_is_refused_and_nothing_of_it_is_stored(db: str, ns: str) -> None:
    async with open_saver(db) as saver:
        root = await _put(saver, "s1", None, "input", ns)
        with pytest.raises(ThreadConflictError, match="another runner already saved its first checkpoint"):
            await _put(saver, "s1", None, "input", ns)  # a run delivered twice to a new thread
        child = await _put(saver, "s1", root, ns=ns)
        with pytest.raises(ThreadConflictError) as refused:
            await _put(saver, "s1", root, ns=ns)
        assert refused.value.parent_id == root and refused.value.child_id == child
        assert sorted(await _ids(saver, "s1", ns)) == sorted([root, child])
        await _put(saver, "s1", child, ns=ns)  # the winner goes on


async def test_edits_are_not_refused_whatever_their_source(db: str) -> None:
    # update_state (any as_node) is not a runner: its saves carry no loop keys.
    async with open_saver(db) as saver:
        root = await _put(saver, "s2", None, "input")
        await _put(saver, "s2", root)
        update = await _put(saver, "s2", root, "update", edit=True)
        as_input = await _put(saver, "s2", root, "input", edit=True)  # as_node="__input__"
        copy = await _put(saver, "s2", root, "fork", edit=True)  # as_node="__copy__"
        assert {update, as_input, copy} <= set(await _ids(saver, "s2"))
        await _put(saver, "s2", as_input)  # the branch goes on
        # A runner's save is checked whatever its metadata says: the source is no pass.
        with pytest.raises(ThreadConflictError):
            await _put(saver, "s2", root, "fork")


async def test_late_task_results_of_the_loser_are_refused(db: str) -> None:
    async with open_saver(db) as winner, open_saver(db) as loser:
        root = await _put(winner, "s3", None, "input")
        await winner.aput_writes(_config("s3", root), [("messages", "from the winner")], "task-a")
        await _put(winner, "s3", root)
        # The winner's own late results for the checkpoint it moved past still land...
        await winner.aput_writes(_config("s3", root), [("messages", "late, winner")], "task-b")
        # ...the other runner's do not.
        with pytest.raises(ThreadConflictError, match="task results was not saved"):
            await loser.aput_writes(_config("s3", root), [("messages", "from the loser")], "task-c")
        stored = await winner.aget_tuple(_config("s3", root))
        assert stored is not None
        assert sorted(t for t, _, _ in stored.pending_writes or []) == ["task-a", "task-b"]


async def test_time_travel_and_update_state_still_branch(db: str, tmp_path: Path) -> None:
    provider = Provider(str(tmp_path / "provider.sqlite"), "dedup")
    async with open_saver(db) as saver:
        graph = build(FenceSpec(db=db, provider=str(provider.path), mode="start"), saver, provider)
        config = {"configurable": {"thread_id": "tt"}}
        await graph.ainvoke({"messages": [first_message("tt", 1)]}, config)
        history = [s async for s in graph.aget_state_history(config)]
        # The checkpoint where every send is answered and the model is next (it asks the follow-up).
        target = next(
            s for s in history
            if s.next == ("model",) and isinstance(s.values["messages"][-1], ToolMessage)
        )
        replayed = await graph.ainvoke(None, target.config)  # time travel: a replay from there
        assert replayed["messages"][-1].content == "done"
        sources = [t.metadata.get("source") async for t in saver.alist(config)]
        assert "fork" in sources
        updated = await graph.aupdate_state(target.config, {"messages": []}, as_node="tools")
        edited = await graph.ainvoke(None, updated)
        assert edited["messages"][-1].content == "done"
        # New input on an old checkpoint branches too (tests/test_fence_branches.py).
    assert len(await forks(db, ["tt"])) >= 1
    # Replaying after the first send never repeats it.
    counts = provider.count_effects()
    assert counts["tt:0"] == 1 and counts["tt:follow"] >= 1, counts


async def test_the_refusal_itself_is_not_stored(db: str) -> None:
    # A subgraph's refused save fails its task in the parent; LangGraph then stores the
    # task's exception on the parent's checkpoint. For a refused run, it is dropped.
    async with open_saver(db) as saver:
        root = await _put(saver, "s4", None, "input")
        error = ThreadConflictError("s4", "agent:1", root, "x")
        await saver.aput_writes(_config("s4", root), [("__error__", error)], "task-sub")
        await saver.aput_writes(_config("s4", root), [("__error__", ValueError("boom"))], "task-other")
        stored = await saver.aget_tuple(_config("s4", root))
        assert stored is not None
        assert [t for t, _, _ in stored.pending_writes or []] == ["task-other"]
