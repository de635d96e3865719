"""Every integration on the sync path with the durable sync savers: ``graph.invoke`` and
``graph.stream`` on ``EffectSqliteSaver`` (and ``EffectPostgresSaver``), in
this process. Effects are counted at a provider that keeps its own records; the
ledger's states are read from the database the app wrote. A sync saver in an async
run, or an async saver in a sync run, is refused before anything is sent."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool, tool
from langgraph.func import entrypoint, task
from langgraph.types import Command

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    Effect,
    EffectPostgresSaver,
    EffectsError,
    EffectSqliteSaver,
    SyncMismatchError,
    current_operation,
    effectful,
    resume_command,
)
from langgraph_effects._integrations.middleware import EffectMiddleware
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects.lab.providers import Provider
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish
from tests.helpers.agent import Spec, build
from tests.ledger import conftest as ledger_fixtures

CONFIG: Any = {"configurable": {"thread_id": "t1"}}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A set-up sync saver of each backend (Postgres: a schema of its own)."""
    if request.param == "sqlite":
        with EffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as opened:
            opened.setup()
            yield opened
        return
    with (
        ledger_fixtures.created_schema("lge_syncpath") as (_, dsn),
        EffectPostgresSaver.from_conn_string(dsn, ledger_max_size=2) as pg,
    ):
        pg.setup()
        yield pg


def ledger_states(saver: Any) -> list[str]:
    from langgraph_effects import OperationQuery
    from langgraph_effects._runtime import portal as _portal

    return sorted(o.state.value for o in _portal.run(saver.ledger.list_operations(OperationQuery())))


def spec(tmp_path: Path, **kw: Any) -> Spec:
    return Spec(db="unused", provider=str(tmp_path / "provider.sqlite"), **kw)


def tool_messages(graph: Any) -> list[ToolMessage]:
    return [m for m in graph.get_state(CONFIG).values["messages"] if isinstance(m, ToolMessage)]


def test_tool_node_streams_and_time_travel_replays(saver: Any, tmp_path: Path) -> None:
    s = spec(tmp_path, calls=2)
    provider = Provider(s.provider, "dedup")
    graph = build(s, saver, provider)
    updates = list(graph.stream({"messages": [HumanMessage("go")]}, CONFIG, stream_mode="updates"))
    assert [next(iter(u)) for u in updates] == ["model", "tools", "model"]
    assert [m.artifact["state"] for m in tool_messages(graph)] == ["confirmed", "confirmed"]
    assert provider.count_requests("apply") == 2

    before_tools = next(h for h in graph.get_state_history(CONFIG) if h.next == ("tools",))
    graph.invoke(None, before_tools.config, durability="sync")  # time travel: replayed, not re-sent
    assert provider.count_requests("apply") == 2
    assert ledger_states(saver) == ["confirmed", "confirmed"]


def test_a_timeout_on_a_blind_tool_is_reviewed_and_the_answer_resumes(saver: Any, tmp_path: Path) -> None:
    s = spec(tmp_path, contract="blind", provider_mode="blind", timeout_after_effect=[0])
    provider = Provider(s.provider, "blind")
    graph = build(s, saver, provider)
    graph.invoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
    [pending] = graph.get_state(CONFIG).interrupts
    [entry] = pending.value["operations"]
    assert entry["state"] == "review" and provider.count_requests("apply") == 1

    answer = {entry["operation_id"]: {"type": "landed", "receipt": {"ticket": "T-2"}}}
    graph.invoke(resume_command(graph.get_state(CONFIG).interrupts, answer), CONFIG, durability="sync")
    [message] = tool_messages(graph)
    assert message.artifact["evidence"] == "verdict" and message.artifact["receipt"] == {"ticket": "T-2"}
    assert provider.count_effects() == {"t1:0": 1} and provider.count_requests("apply") == 1
    assert ledger_states(saver) == ["confirmed"]


def test_create_agent_approval_then_dispatch_once(saver: Any, tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    @tool
    def pay(invoice: str, amount: int) -> str:
        """Pay an invoice."""
        return provider.apply({"operation": invoice, "amount": amount}).effect_id

    model = ScriptedChatModel(script=call_each_then_finish([("pay", {"invoice": "inv-1", "amount": 5})]))
    effects = {"pay": Effect(approval="always")}
    agent = create_agent(model, tools=[pay], middleware=[EffectMiddleware(effects)], checkpointer=saver)
    agent.invoke({"messages": [HumanMessage("pay it")]}, CONFIG)
    [pending] = agent.get_state(CONFIG).interrupts
    assert pending.value["type"] == "effect_approval" and provider.count_requests("apply") == 0

    out = agent.invoke(Command(resume={pending.id: {"decisions": [{"type": "approve"}]}}), CONFIG)
    assert out["messages"][-1].content == "done"
    assert provider.count_requests("apply") == 1
    assert ledger_states(saver) == ["confirmed"]


def test_create_agent_answers_a_dangling_call_from_the_ledger(saver: Any, tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    seen: list[list[Any]] = []

    @tool
    def send(operation: str) -> str:
        """Send."""
        provider.apply({"operation": operation})
        raise TimeoutError("no answer")  # blind: may have landed, so it goes to review

    def script(messages: Any) -> Any:
        seen.append(list(messages))
        if len(messages) == 1:
            return AIMessage("", tool_calls=[{"name": "send", "args": {"operation": "t1:0"}, "id": "c0"}])
        return AIMessage("ok")

    agent = create_agent(ScriptedChatModel(script=script), tools=[send],
                         middleware=[EffectMiddleware({"send": Effect()})], checkpointer=saver)
    agent.invoke({"messages": [HumanMessage("go")]}, CONFIG)
    assert agent.get_state(CONFIG).interrupts  # the blind call awaits review
    agent.invoke({"messages": [HumanMessage("never mind")]}, CONFIG)  # moved on instead
    kinds = [m.type for m in seen[-1]]
    assert kinds == ["human", "ai", "tool", "human"]
    answer = seen[-1][2]
    assert answer.status == "error" and "not known yet" in str(answer.content)
    assert provider.count_requests("apply") == 1


def test_effectful_task_in_a_sync_entrypoint(saver: Any, tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")

    @task
    @effectful(Effect(dedup_window=3600))
    def notify(recipient: str) -> str:
        return provider.apply({"operation": recipient}, key=current_operation().provider_key).effect_id

    @entrypoint(checkpointer=saver)
    def notify_all(recipients: list[str]) -> list[str]:
        return [notify(r).result() for r in recipients]

    assert len(notify_all.invoke(["ann", "bob"], CONFIG, durability="sync")) == 2
    first = next(h for h in notify_all.get_state_history(CONFIG) if h.metadata["source"] == "input")
    notify_all.invoke(None, first.config, durability="sync")  # time travel: replayed from the ledger
    assert provider.count_effects() == {"ann": 1, "bob": 1} and provider.count_requests("apply") == 2
    assert ledger_states(saver) == ["confirmed", "confirmed"]


def test_a_slow_tool_keeps_its_lease_by_heartbeat(saver: Any, tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    expiries: list[float] = []
    lease_seconds = 1.0

    @tool
    def send(operation: str) -> str:
        """Send, slowly: longer than three leases."""
        until = time.monotonic() + 3.5 * lease_seconds
        while time.monotonic() < until:
            expiries.extend(_portal_lease_expiries(saver))
            time.sleep(0.2)
        return provider.apply({"operation": operation}, key=current_operation().provider_key).effect_id

    graph = build(spec(tmp_path), saver, provider)
    node = EffectToolNode([send], effects={"send": Effect(dedup_window=60)}, lease_seconds=lease_seconds)
    graph = _with_tools(graph, node, saver)
    graph.invoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
    assert len(set(expiries)) >= 3  # renewed while the tool ran (a lease is 1 s; it ran 3.5 s)
    assert provider.count_requests("apply") == 1
    assert ledger_states(saver) == ["confirmed"]


def _portal_lease_expiries(saver: Any) -> list[float]:
    from langgraph_effects import OperationQuery
    from langgraph_effects._runtime import portal as _portal

    ops = _portal.run(saver.ledger.list_operations(OperationQuery()))
    return [o.lease_expires_at for o in ops if o.lease_expires_at is not None]


def _with_tools(graph: Any, node: Any, saver: Any) -> Any:
    """The agent graph of ``graph`` with its tool node replaced by ``node``."""
    from tests.helpers.agent import tool_loop

    return tool_loop(graph.builder.nodes["model"].runnable, node, saver)


# -- the wrong side: refused before anything is read, saved or sent -------------------------


def test_an_async_saver_in_a_sync_run_names_the_sync_saver(tmp_path: Path) -> None:
    s = Spec(db=str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"))
    provider = Provider(s.provider, "dedup")

    async def main() -> None:
        async with AsyncEffectSqliteSaver.from_conn_string(s.db) as async_saver:
            await async_saver.setup()
            graph = build(s, async_saver, provider)
            for call in (  # in the saver's own thread, and from another one
                lambda: graph.invoke({"messages": [HumanMessage("go")]}, CONFIG),
                lambda: threading_result(lambda: graph.invoke({"messages": [HumanMessage("go")]}, CONFIG)),
            ):
                with pytest.raises(SyncMismatchError) as raised:
                    call()
                error = raised.value
                assert isinstance(error, EffectsError)
                assert error.used == "AsyncEffectSqliteSaver" and error.use == "EffectSqliteSaver"
                assert "Open EffectSqliteSaver instead" in str(error)
                assert "nothing was read, saved or sent" in str(error)

    asyncio.run(main())
    assert provider.count_requests("apply") == 0
    with sqlite3.connect(s.db) as db:
        assert db.execute("SELECT count(*) FROM checkpoints").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM effect_operations").fetchone() == (0,)


def test_a_sync_saver_in_an_async_run_names_the_async_saver(saver: Any, tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    graph = build(spec(tmp_path), saver, provider)
    with pytest.raises(SyncMismatchError) as raised:
        asyncio.run(graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG))
    is_postgres = isinstance(saver, EffectPostgresSaver)
    expected = "AsyncEffectPostgresSaver" if is_postgres else "AsyncEffectSqliteSaver"
    assert raised.value.use == expected and f"Open {expected} instead" in str(raised.value)
    assert provider.count_requests("apply") == 0
    assert list(saver.list(CONFIG)) == [] and ledger_states(saver) == []


def test_every_async_method_of_a_sync_saver_is_refused_naming_itself(saver: Any) -> None:
    checkpoint: Any = {"id": "1", "channel_values": {}, "channel_versions": {}, "versions_seen": {}}
    calls: dict[str, Any] = {
        "aget_tuple": lambda: saver.aget_tuple(CONFIG),
        "alist": lambda: saver.alist(CONFIG, limit=1),
        "aput": lambda: saver.aput(CONFIG, checkpoint, {}, {}),
        "aput_writes": lambda: saver.aput_writes(CONFIG, [("a", 1)], "task", task_path=""),
        "adelete_thread": lambda: saver.adelete_thread("t1"),
    }
    if isinstance(saver, EffectPostgresSaver):
        calls["aprune"] = lambda: saver.aprune(["t1"], strategy="delete")
    for method, call in calls.items():
        with pytest.raises(SyncMismatchError) as raised:
            made = call()
            if asyncio.iscoroutine(made):
                asyncio.run(made)
        assert raised.value.use == saver.async_name, method
        assert str(raised.value).startswith(f"{type(saver).__name__}.{method}: "), method
    assert list(saver.list(CONFIG)) == [] and ledger_states(saver) == []


def threading_result(fn: Any) -> Any:
    """Run ``fn`` in a new thread; its result, or raise what it raised."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as error:
            box["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


def test_an_async_only_tool_is_refused_before_its_call_is_recorded(saver: Any, tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")

    @tool
    async def send(operation: str) -> str:
        """Send (async only)."""
        return provider.apply({"operation": operation}).effect_id

    graph = _with_tools(build(spec(tmp_path), saver, provider), EffectToolNode([send]), saver)
    with pytest.raises(SyncMismatchError) as raised:
        graph.invoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
    assert raised.value.used == "send" and "ainvoke" in str(raised.value)
    assert ledger_states(saver) == [] and provider.count_requests("apply") == 0

    agent = create_agent(
        ScriptedChatModel(script=call_each_then_finish([("send", {"operation": "t2:0"})])),
        tools=[send], middleware=[EffectMiddleware({"send": Effect(dedup_window=60)})], checkpointer=saver,
    )
    with pytest.raises(SyncMismatchError):
        agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t2"}})
    assert ledger_states(saver) == [] and provider.count_requests("apply") == 0


def test_sync_and_dual_tools_run_in_one_sync_graph(saver: Any, tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")

    def apply(operation: str) -> str:
        return provider.apply({"operation": operation}, key=current_operation().provider_key).effect_id

    async def apply_async(operation: str) -> str:
        raise AssertionError("a sync run calls the sync implementation")

    dual = StructuredTool.from_function(func=apply, coroutine=apply_async, name="dual", description="Send.")
    plain = StructuredTool.from_function(func=apply, name="plain", description="Send.")
    calls = [("dual", {"operation": "a"}), ("plain", {"operation": "b"})]
    middleware = EffectMiddleware({"dual": Effect(), "plain": Effect()})
    model = ScriptedChatModel(script=call_each_then_finish(calls))
    agent = create_agent(model, tools=[dual, plain], middleware=[middleware], checkpointer=saver)
    out = agent.invoke({"messages": [HumanMessage("go")]}, CONFIG)
    assert out["messages"][-1].content == "done"
    assert provider.count_effects() == {"a": 1, "b": 1}
    assert ledger_states(saver) == ["confirmed", "confirmed"]


def test_update_state_branches_on_purpose_and_delete_thread_forgets_the_thread(
    saver: Any, tmp_path: Path
) -> None:
    s = spec(tmp_path)
    graph = build(s, saver, Provider(s.provider, "dedup"))
    graph.invoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
    before = next(h for h in graph.get_state_history(CONFIG) if h.next == ("tools",))
    # A second child of a checkpoint that has one: an edit, not a second runner.
    graph.update_state(before.config, {"messages": [AIMessage("edited")]}, as_node="model")
    listed = list(saver.list(CONFIG))
    parents = [t.parent_config["configurable"]["checkpoint_id"] for t in listed if t.parent_config]
    assert parents.count(before.config["configurable"]["checkpoint_id"]) == 2
    assert graph.get_state(CONFIG).values["messages"][-1].content == "edited"

    saver.delete_thread("t1")
    assert list(saver.list(CONFIG)) == [] and saver.get_tuple(CONFIG) is None


def test_a_forked_child_gets_its_own_portal() -> None:
    import multiprocessing

    from langgraph_effects._runtime import portal as _portal

    assert _portal.run(asyncio.sleep(0, result="parent")) == "parent"  # the parent's portal runs
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:  # a prefork worker (Celery, gunicorn): the portal thread is not copied
        assert pool.apply_async(_run_on_portal).get(timeout=60) == "child"


def test_the_portal_answers_with_the_coroutines_result_error_or_cancellation() -> None:
    import concurrent.futures
    import contextvars

    from langgraph_effects._runtime import portal as _portal

    seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")

    async def read_and_set() -> str:
        value = seen.get()
        seen.set("changed on the portal")
        return value

    async def fail() -> None:
        raise KeyError("from the portal")

    async def cancelled() -> None:
        raise asyncio.CancelledError

    async def on_the_loop() -> None:
        _portal.run(asyncio.sleep(0))

    token = seen.set("the caller's")
    try:
        assert _portal.run(read_and_set()) == "the caller's"  # a copy of the caller's context
        assert seen.get() == "the caller's"
    finally:
        seen.reset(token)
    with pytest.raises(KeyError, match="from the portal"):
        _portal.run(fail())
    with pytest.raises(concurrent.futures.CancelledError):
        _portal.run(cancelled())
    with pytest.raises(RuntimeError, match="use ainvoke/astream there"):
        _portal.run(on_the_loop())


def _run_on_portal() -> str:
    from langgraph_effects._runtime import portal as _portal

    result: str = _portal.run(asyncio.sleep(0, result="child"))
    return result


@pytest.mark.postgres
def test_an_async_postgres_saver_in_a_sync_run_names_the_sync_saver(tmp_path: Path) -> None:
    from langgraph_effects import AsyncEffectPostgresSaver

    provider = Provider(tmp_path / "provider.sqlite", "dedup")

    async def main(dsn: str) -> list[Any]:
        async with AsyncEffectPostgresSaver.from_conn_string(dsn, ledger_max_size=2) as async_saver:
            await async_saver.setup()
            graph = build(spec(tmp_path), async_saver, provider)
            with pytest.raises(SyncMismatchError) as raised:
                await asyncio.to_thread(graph.invoke, {"messages": [HumanMessage("go")]}, CONFIG)
            assert raised.value.use == "EffectPostgresSaver"
            return [t async for t in async_saver.alist(CONFIG)]

    with ledger_fixtures.created_schema("lge_syncside") as (_, dsn):
        assert asyncio.run(main(dsn)) == []  # no checkpoint saved
    assert provider.count_requests("apply") == 0


def test_the_msgpack_allowlist_reaches_the_async_saver_that_serializes(tmp_path: Path) -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    strict = JsonPlusSerializer(allowed_msgpack_modules=[("tests.helpers.agent", "Spec")])
    with EffectSqliteSaver.from_conn_string(tmp_path / "a.sqlite", serde=strict) as saver:
        clone = saver.with_allowlist({("tests.helpers.agent", "State")})  # what compile() asks
        assert type(clone) is EffectSqliteSaver and clone.saver is not saver.saver
        assert clone.serde is clone.saver.serde is not strict  # what serializes has the merged list
        assert clone.ledger is saver.ledger
        assert saver.with_allowlist({("tests.helpers.agent", "Spec")}) is saver  # nothing new


def test_a_call_its_wrapper_never_sends_is_handed_back_when_the_node_ends(saver: Any) -> None:
    """The node's end stands down a call whose lease its open took but whose tool a
    ``wrap_tool_call`` wrapper never ran; a call that finished has nothing to hand back."""
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import tools_condition

    from tests.helpers.agent import State
    from tests.helpers.lease_leaks import released_leases

    sent: list[int] = []

    @tool
    def send(n: int) -> str:
        """Send notification ``n``."""
        sent.append(n)
        return f"sent {n}"

    def skip_one(request: Any, handler: Any) -> Any:
        if request.tool_call["args"]["n"] == 1:
            return ToolMessage("skipped", tool_call_id=request.tool_call["id"], name="send")
        return handler(request)

    model = ScriptedChatModel(script=call_each_then_finish([("send", {"n": 0}), ("send", {"n": 1})]))
    builder = StateGraph(State)
    builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", EffectToolNode([send], effects={"send": Effect(dedup_window=60)},
                                             wrap_tool_call=skip_one))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", "__end__": "__end__"})
    builder.add_edge("tools", "model")
    graph = builder.compile(checkpointer=saver)
    with released_leases():
        graph.invoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
    assert sent == [0]
    assert ledger_states(saver) == ["confirmed", "pending"]  # withdrawn: provably never sent
