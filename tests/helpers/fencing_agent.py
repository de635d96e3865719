"""Worker processes for ``tests/test_fencing.py``: two runners on one thread.

The graph: a scripted model asks for ``calls`` sends, then, once every send is
answered, for one follow-up send whose wording and tool_call_id differ on every
model call (the pid and a counter), as an LLM's would, then says "done". Effects
are counted at :class:`~langgraph_effects.lab.providers.Provider`, which keeps its
own records in its own SQLite file, by operation label (``T:0``, ``T:1``,
``T:follow``).

One command per process::

    python -m tests.helpers.fencing_agent SPEC_JSON

``mode`` is ``crash`` (start the threads; the process SIGKILLs itself at the
``before_outcome`` fault point: the first effect landed, its outcome not
recorded), ``start`` (start the threads, no crash), ``resume`` (a plain
``ainvoke(None)`` per thread) or ``recover`` (:func:`langgraph_effects.recover`
with ``min_idle=0``: an operator who wrongly believes no worker runs).

``subgraph``: the agent runs as the subgraph node ``agent`` of a parent graph, so
its checkpoints (and the collision) are in the namespace ``agent:<task id>``.

``go``: the worker touches ``go + ".ready.<pid>"`` once connected and its graph is
built, then waits until the file ``go`` exists, so the test releases several
workers at the same instant. ``overlap``: before its first checkpoint write the
worker touches ``overlap + ".<pid>"`` and waits (up to 30 s) until ``parties``
workers have, so every runner has loaded the same checkpoint before either saves
one (without it, one runner may finish before the other starts, and the race
is not exercised). In ``recover`` mode each also waits, before its resume, until
``parties`` recoveries have looked at the thread (``overlap + "-observed.<pid>"``):
otherwise one may look after the other took the operation over, and rightly
report it in flight elsewhere instead of racing it.

Prints one JSON line: per thread, ``ok`` / ``refused`` (a
:class:`~langgraph_effects.errors.ThreadConflictError`) / ``error``, and the
recovery report (``recover`` mode). ``named``: a resume names the thread's head by its
``checkpoint_id`` (what a chat UI sends with a resume), read just before it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import sys
import time
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from langgraph_effects import Effect, recover
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime import faults as _faults
from langgraph_effects._runtime.context import current_operation
from langgraph_effects.checkpoint.sqlite import AsyncEffectSqliteSaver
from langgraph_effects.errors import ThreadConflictError
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.attach import attach_ledger
from langgraph_effects.ledger.sqlite import SqliteLedger, connect
from tests.helpers.agent import State


@dataclass
class FenceSpec:
    db: str
    provider: str
    mode: str  # crash | start | resume | recover
    threads: list[str] = field(default_factory=lambda: ["t1"])
    calls: int = 2
    durability: str = "sync"
    go: str | None = None
    overlap: str | None = None
    parties: int = 2
    durable_wait_seconds: float = 30.0
    subgraph: bool = False  # the agent runs as a subgraph node of a parent graph
    plain: bool = False  # LangGraph's saver + attach_ledger: no fencing (the "before")
    named: bool = False  # resume naming the thread's head by checkpoint_id (as a chat UI may)
    sync: bool = False  # graph.invoke on SyncEffect*Saver (modes crash | start | resume)


_counter = itertools.count()


def model(state: State) -> dict[str, Any]:
    """First the sends, then one follow-up worded differently on every call, then done."""
    messages = state["messages"]
    thread = str(messages[0].content)
    asked = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    if not asked:
        calls = [
            {"name": "send", "args": {"operation": f"{thread}:{i}"}, "id": f"call-{i}", "type": "tool_call"}
            for i in range(int(str(messages[0].additional_kwargs.get("calls", 2))))
        ]
        return {"messages": [AIMessage("", tool_calls=calls, id=f"ai-{thread}-1")]}
    last = asked[-1]
    if any(c["id"] not in answered for c in last.tool_calls):
        raise AssertionError("the model ran before every call was answered")
    if len(asked) == 1:
        n = next(_counter)
        wording = f"all sent; confirming from pid {os.getpid()} (#{n}, {time.time():.6f})"
        call = {
            "name": "send",
            "args": {"operation": f"{thread}:follow", "note": wording},
            "id": f"follow-{os.getpid()}-{n}",
            "type": "tool_call",
        }
        return {"messages": [AIMessage(wording, tool_calls=[call], id=f"ai-{thread}-2-{os.getpid()}-{n}")]}
    return {"messages": [AIMessage("done", id=f"ai-{thread}-3")]}


def build(spec: FenceSpec, saver: Any, provider: Provider) -> Any:
    @tool
    def send(operation: str, note: str = "") -> str:
        """Send the notification for ``operation``."""
        op = current_operation()
        receipt = provider.apply({"operation": operation, "note": note}, key=op.provider_key)
        return f"sent {receipt.effect_id}"

    builder = StateGraph(State)
    builder.add_node("model", model)
    node = EffectToolNode([send], effects={"send": Effect(dedup_window=3600)})
    # How long a tool waits for its checkpoint under durability="async" (no public knob).
    node._settings = replace(node._settings, durable_wait_seconds=spec.durable_wait_seconds)
    builder.add_node("tools", node)
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "model")
    if not spec.subgraph:
        return builder.compile(checkpointer=saver)
    parent = StateGraph(State)
    parent.add_node("agent", builder.compile())
    parent.add_edge(START, "agent")
    parent.add_edge("agent", END)
    return parent.compile(checkpointer=saver)


def _wait_for(path: str, *, count: int = 1, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    folder, stem = os.path.split(path)
    while time.monotonic() < deadline:
        if count == 1 and os.path.exists(path):
            return True
        if count > 1 and sum(1 for n in os.listdir(folder or ".") if n.startswith(stem + ".")) >= count:
            return True
        time.sleep(0.01)
    return False


async def _meet(stem: str, parties: int) -> None:
    """Touch ``stem.<pid>``, then wait (up to 30 s) until ``parties`` processes have."""
    Path(f"{stem}.{os.getpid()}").touch()
    await asyncio.to_thread(_wait_for, stem, count=parties, timeout=30.0)


def _with_overlap(saver: Any, spec: FenceSpec) -> None:
    """Hold the first checkpoint write until ``parties`` runners have reached theirs."""
    if spec.overlap is None:
        return
    original = saver.aput
    state = {"first": True}

    async def aput(*args: Any, **kwargs: Any) -> Any:
        if state["first"]:
            state["first"] = False
            await _meet(spec.overlap, spec.parties)
        return await original(*args, **kwargs)

    saver.aput = aput


def _with_observed(graph: Any, spec: FenceSpec) -> None:
    """Hold recovery's resume until ``parties`` recoveries have classified the thread."""
    if spec.overlap is None:
        return
    original = graph.ainvoke

    async def ainvoke(*args: Any, **kwargs: Any) -> Any:
        await _meet(f"{spec.overlap}-observed", spec.parties)
        return await original(*args, **kwargs)

    graph.ainvoke = ainvoke


def is_postgres(db: str) -> bool:
    """A Postgres URL or key=value conninfo (what ``make_conninfo`` returns), not a file path."""
    if db.startswith(("postgres://", "postgresql://")):
        return True
    return re.search(r"(^|\s)(host|dbname|user)=", db) is not None


@asynccontextmanager
async def open_saver(db: str, *, plain: bool = False) -> AsyncIterator[Any]:
    """``AsyncEffectPostgresSaver`` for a Postgres DSN (set up beforehand), else ``AsyncEffectSqliteSaver``.

    ``plain``: LangGraph's own saver with the ledger attached (``attach_ledger``), which
    does not fence threads: what the race did before the one-runner rule.
    """
    if is_postgres(db):
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver
        from langgraph_effects.ledger.postgres import PostgresLedger

        if plain:
            async with (
                AsyncPostgresSaver.from_conn_string(db) as bare,
                PostgresLedger.from_conn_string(db, max_size=2) as ledger,
            ):
                yield attach_ledger(bare, ledger)
        else:
            async with AsyncEffectPostgresSaver.from_conn_string(db, ledger_max_size=2) as saver:
                yield saver
    elif plain:
        async with AsyncSqliteSaver.from_conn_string(db) as bare:
            ledger = SqliteLedger(await connect(db), where=f"sqlite:{db}")
            try:
                await ledger.setup()
                await bare.setup()
                yield attach_ledger(bare, ledger)
            finally:
                await ledger.aclose()
    else:
        async with AsyncEffectSqliteSaver.from_conn_string(db) as saver:
            await saver.setup()
            yield saver


def first_message(thread: str, calls: int) -> HumanMessage:
    return HumanMessage(thread, additional_kwargs={"calls": calls})


async def run(spec: FenceSpec) -> dict[str, Any]:
    provider = Provider(spec.provider, "dedup")
    if spec.mode == "crash":
        _faults.install("before_outcome", lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
    out: dict[str, Any] = {"pid": os.getpid(), "threads": {}}
    async with open_saver(spec.db, plain=spec.plain) as saver:
        graph = build(spec, saver, provider)
        _with_overlap(saver, spec)
        if spec.go is not None:
            Path(f"{spec.go}.ready.{os.getpid()}").touch()
            await asyncio.to_thread(_wait_for, spec.go)
        if spec.mode == "recover":
            _with_observed(graph, spec)
            report = await recover(graph, min_idle=0, thread_ids=spec.threads, durability=spec.durability)  # type: ignore[arg-type]
            out["report"] = report.to_json()
            return out
        for thread in spec.threads:
            config: dict[str, Any] = {"configurable": {"thread_id": thread}}
            if spec.named:
                config = (await graph.aget_state(config)).config
            payload = None if spec.mode == "resume" else {"messages": [first_message(thread, spec.calls)]}
            try:
                await graph.ainvoke(payload, config, durability=spec.durability)
                out["threads"][thread] = {"outcome": "ok"}
            except ThreadConflictError as error:
                out["threads"][thread] = {"outcome": "refused", "error": str(error)}
            except Exception as error:
                out["threads"][thread] = {
                    "outcome": "error",
                    "error": f"{type(error).__name__}: {error}",
                    "trace": traceback.format_exc()[-2000:],
                }
    return out


def _invoke_each(spec: FenceSpec, graph: Any, out: dict[str, Any]) -> None:
    """``graph.invoke`` each thread of ``spec`` (a sync graph), recording its outcome."""
    for thread in spec.threads:
        config: dict[str, Any] = {"configurable": {"thread_id": thread}}
        payload = None if spec.mode == "resume" else {"messages": [first_message(thread, spec.calls)]}
        try:
            graph.invoke(payload, config, durability=spec.durability)
            out["threads"][thread] = {"outcome": "ok"}
        except ThreadConflictError as error:
            out["threads"][thread] = {"outcome": "refused", "error": str(error)}
        except Exception as error:
            out["threads"][thread] = {"outcome": "error", "error": f"{type(error).__name__}: {error}",
                                      "trace": traceback.format_exc()[-2000:]}


def run_sync(spec: FenceSpec) -> dict[str, Any]:
    """:func:`run` for a sync app: ``SyncEffect*Saver`` and ``graph.invoke``."""
    from langgraph_effects import EffectPostgresSaver, EffectSqliteSaver

    provider = Provider(spec.provider, "dedup")
    if spec.mode == "crash":
        _faults.install("before_outcome", lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
    out: dict[str, Any] = {"pid": os.getpid(), "threads": {}}
    kind = EffectPostgresSaver if is_postgres(spec.db) else EffectSqliteSaver
    with kind.from_conn_string(spec.db) as saver:
        saver.setup()
        graph = build(spec, saver, provider)
        _with_overlap(saver.saver, spec)  # the async saver every sync call runs
        if spec.go is not None:
            Path(f"{spec.go}.ready.{os.getpid()}").touch()
            _wait_for(spec.go)
        _invoke_each(spec, graph, out)
    return out


def spec_json(spec: FenceSpec) -> str:
    return json.dumps(asdict(spec))


def main() -> None:
    spec = FenceSpec(**json.loads(sys.argv[1]))
    out = run_sync(spec) if spec.sync else asyncio.run(run(spec))
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
