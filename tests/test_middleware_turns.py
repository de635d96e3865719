"""What a turn through ``EffectMiddleware`` costs the graph (the steps and checkpoint
commits of plain ``create_agent``, no more), and its answers to dangling calls: given
in the model call, seen by the model right after their AIMessage, kept in the thread."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langsmith import Client
from langsmith.run_helpers import tracing_context

from langgraph_effects import AsyncEffectSqliteSaver, Effect, attach_ledger, current_operation
from langgraph_effects._integrations.middleware import EffectMiddleware
from langgraph_effects._runtime.messages import unanswered
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

CONFIG: Any = {"configurable": {"thread_id": "t1"}}
PATHS = ["sync", "async"]


class CountingSaver(InMemorySaver):
    """Counts checkpoint commits (``aput``/``aput_writes`` go through these too)."""

    def __init__(self) -> None:
        super().__init__()
        self.puts = 0
        self.put_writes_calls = 0

    def put(self, *args: Any, **kwargs: Any) -> Any:
        self.puts += 1
        return super().put(*args, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        self.put_writes_calls += 1
        super().put_writes(*args, **kwargs)


def _stream(agent: Any, payload: Any, path: str) -> list[str]:
    """Run one invocation; the names of the tasks it ran, step by step."""
    if path == "sync":
        events = list(agent.stream(payload, CONFIG, stream_mode="tasks"))
    else:

        async def collect() -> list[Any]:
            return [e async for e in agent.astream(payload, CONFIG, stream_mode="tasks")]

        events = asyncio.run(collect())
    return [e["name"] for e in events if "input" in e]


def _invoke(agent: Any, payload: Any, path: str) -> Any:
    if path == "sync":
        return agent.invoke(payload, CONFIG)
    return asyncio.run(agent.ainvoke(payload, CONFIG))


def _spy_lookups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the middleware's ledger look-ups for dangling calls."""
    lookups: list[int] = []
    original = EffectMiddleware._find_answers

    async def spy(self: EffectMiddleware, request: Any, *, sync: bool) -> Any:
        lookups.append(1)
        return await original(self, request, sync=sync)

    monkeypatch.setattr(EffectMiddleware, "_find_answers", spy)
    return lookups


def _dedup_sender(provider: Provider) -> Any:
    @tool
    def send(operation: str) -> str:
        """Send."""
        try:
            key = current_operation().provider_key
        except RuntimeError:  # plain create_agent: no operation, a key of our own
            key = f"plain-{operation}"
        return provider.apply({"operation": operation}, key=key).effect_id

    return send


def _variants() -> list[tuple[str, list[Any]]]:
    """Plain ``create_agent``, and the same with ``EffectMiddleware`` (a dedup tool)."""
    return [("plain", []), ("effects", [EffectMiddleware({"send": Effect(dedup_window=60)})])]


# -- no steps, no commits ------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_a_tool_turn_costs_the_steps_and_commits_of_plain_create_agent(
    tmp_path: Path, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    lookups = _spy_lookups(monkeypatch)

    send = _dedup_sender(provider)

    runs: dict[str, tuple[list[str], int, int]] = {}
    for label, middleware in _variants():
        saver = CountingSaver()
        agent = create_agent(
            ScriptedChatModel(script=call_each_then_finish([("send", {"operation": label})])),
            tools=[send],
            middleware=middleware,
            checkpointer=attach_ledger(saver, InMemoryLedger()),
        )
        tasks = _stream(agent, {"messages": [HumanMessage("go")]}, path)
        runs[label] = (tasks, saver.puts, saver.put_writes_calls)
    assert runs["plain"][0] == ["model", "tools", "model"]
    assert runs["effects"] == runs["plain"], runs  # same tasks, same commits
    assert runs["plain"][1:] == (5, 4)
    assert provider.count_effects() == {"plain": 1, "effects": 1}
    assert lookups == []  # no dangling call: no ledger look-up either


async def test_a_tool_turn_on_sqlite_saves_as_many_checkpoints_as_plain_create_agent(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")

    send = _dedup_sender(provider)

    saved: dict[str, int] = {}
    for label, middleware in _variants():
        async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / f"{label}.sqlite") as saver:
            await saver.setup()
            agent = create_agent(
                ScriptedChatModel(script=call_each_then_finish([("send", {"operation": label})])),
                tools=[send],
                middleware=middleware,
                checkpointer=saver,
            )
            await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
            saved[label] = len([c async for c in saver.alist(CONFIG)])
    assert saved == {"plain": 5, "effects": 5}
    assert provider.count_effects() == {"plain": 1, "effects": 1}


# -- dangling calls ------------------------------------------------------------------------


def _blind_agent(
    tmp_path: Path, seen: list[list[BaseMessage]], *, first: AIMessage | None = None, outer: Any = None
) -> tuple[Any, Provider]:
    """An agent whose first turn leaves its blind ``send`` call awaiting review; later
    turns answer ``"ok"``. ``seen``: what the model read at each call."""
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    @tool
    def send(operation: str) -> str:
        """Send."""
        provider.apply({"operation": operation})
        raise TimeoutError("read timed out")

    def script(messages: Any) -> AIMessage:
        seen.append(list(messages))
        if isinstance(messages[-1], HumanMessage) and messages[-1].content == "go":
            return first or call_each_then_finish([("send", {"operation": "t1:0"})])(messages)
        return AIMessage("ok")

    agent = create_agent(
        ScriptedChatModel(script=script),
        tools=[send],
        middleware=[*([outer] if outer else []), EffectMiddleware()],
        checkpointer=attach_ledger(InMemorySaver(), InMemoryLedger()),
    )
    return agent, provider


def _kinds(messages: list[BaseMessage]) -> list[str]:
    return [m.type for m in messages]


@pytest.mark.parametrize("path", PATHS)
def test_dangling_answers_are_seen_by_the_model_and_kept_in_the_thread(
    tmp_path: Path, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[BaseMessage]] = []
    agent, provider = _blind_agent(tmp_path, seen)
    lookups = _spy_lookups(monkeypatch)
    _invoke(agent, {"messages": [HumanMessage("go")]}, path)
    assert agent.get_state(CONFIG).interrupts  # the blind call awaits review
    assert lookups == []

    tasks = _stream(agent, {"messages": [HumanMessage("never mind, what's next?")]}, path)
    assert tasks == ["model"]  # the answers cost no step of their own
    assert lookups == [1]
    assert _kinds(seen[-1]) == ["human", "ai", "tool", "human"]  # the answer right after its call
    answer = seen[-1][2]
    assert isinstance(answer, ToolMessage) and answer.status == "error"
    assert "not known yet" in str(answer.content) and answer.artifact["state"] == "review"

    state = agent.get_state(CONFIG).values["messages"]
    assert _kinds(state) == ["human", "ai", "tool", "human", "ai"]
    assert state[2].content == answer.content and state[-1].content == "ok"
    assert unanswered(state) == []

    # The next turn reads the kept answers: no look-up, the same history.
    _invoke(agent, {"messages": [HumanMessage("and now?")]}, path)
    assert lookups == [1]
    assert [m.content for m in seen[-1]] == [m.content for m in [*state, HumanMessage("and now?")]]
    assert provider.count_requests("apply") == 1


@pytest.mark.parametrize("path", PATHS)
def test_dangling_answers_next_to_langchains_own_for_malformed_calls(tmp_path: Path, path: str) -> None:
    """``create_agent`` rewrites the history itself when it answers a malformed call;
    the answer to the dangling call is kept through that rewrite."""
    bad = {"name": "send", "args": "{oops", "id": "bad-1", "error": "bad json", "type": "invalid_tool_call"}
    first = AIMessage(
        "",
        tool_calls=[{"name": "send", "args": {"operation": "t1:0"}, "id": "call-0", "type": "tool_call"}],
        invalid_tool_calls=[bad],  # type: ignore[list-item]
    )
    seen: list[list[BaseMessage]] = []
    agent, provider = _blind_agent(tmp_path, seen, first=first)
    _invoke(agent, {"messages": [HumanMessage("go")]}, path)
    _invoke(agent, {"messages": [HumanMessage("never mind")]}, path)

    assert _kinds(seen[-1]) == ["human", "ai", "tool", "tool", "human"]
    answers = {m.tool_call_id: m for m in seen[-1][2:4] if isinstance(m, ToolMessage)}
    assert sorted(answers) == ["bad-1", "call-0"]  # both right after their AIMessage
    assert "not known yet" in str(answers["call-0"].content)
    assert "malformed" in str(answers["bad-1"].content)
    state = agent.get_state(CONFIG).values["messages"]
    assert _kinds(state) == ["human", "ai", "tool", "tool", "human", "ai"]
    assert sorted(getattr(m, "tool_call_id", "") for m in state[2:4]) == ["bad-1", "call-0"]
    assert state[-1].content == "ok" and unanswered(state) == []
    assert provider.count_requests("apply") == 1


class _Stamp(AgentMiddleware):
    """An outer model-call wrapper that rewrites the reply."""

    @staticmethod
    def _stamped(response: ModelResponse) -> ModelResponse:
        [reply] = response.result
        return ModelResponse(result=[reply.model_copy(update={"content": f"{reply.content} (checked)"})])

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._stamped(handler(request))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._stamped(await handler(request))


@pytest.mark.parametrize("path", PATHS)
def test_dangling_answers_keep_an_outer_middlewares_reply(tmp_path: Path, path: str) -> None:
    seen: list[list[BaseMessage]] = []
    agent, _ = _blind_agent(tmp_path, seen, outer=_Stamp())
    _invoke(agent, {"messages": [HumanMessage("go")]}, path)
    _invoke(agent, {"messages": [HumanMessage("never mind")]}, path)
    state = agent.get_state(CONFIG).values["messages"]
    assert _kinds(state) == ["human", "ai", "tool", "human", "ai"]
    assert "not known yet" in str(state[2].content)
    assert state[-1].content == "ok (checked)"


# -- the hooks as LangSmith sees them ------------------------------------------------------


class _Posts(Client):
    """A LangSmith client keeping the runs it is given: name and parent, by id."""

    def __init__(self) -> None:
        super().__init__(api_url="http://127.0.0.1:9", api_key="unused", info={}, auto_batch_tracing=False)
        self.posted: dict[str, tuple[str, str]] = {}

    def create_run(self, name: str, inputs: Any, run_type: Any, *args: Any, **kwargs: Any) -> None:
        self.posted[str(kwargs["id"])] = (name, str(kwargs.get("parent_run_id")))

    def update_run(self, *args: Any, **kwargs: Any) -> None:
        pass

    def parent(self, name: str) -> list[str]:
        """The names of the parents of the runs named ``name``."""
        return [self.posted.get(parent, ("-", ""))[0] for run, parent in self.posted.values() if run == name]


@pytest.mark.parametrize("path", PATHS)
def test_the_hooks_spans_hold_the_call(tmp_path: Path, path: str) -> None:
    """With LangSmith tracing on, the model's run, the tool's own run and the ``effect
    send`` run sit under the sync hooks' spans, and under the agent's ``model`` and
    ``tools`` runs on the async path."""
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    agent = create_agent(
        ScriptedChatModel(script=call_each_then_finish([("send", {"operation": "x"})])),
        tools=[_dedup_sender(provider)],
        middleware=[EffectMiddleware({"send": Effect(dedup_window=60)})],
        checkpointer=attach_ledger(InMemorySaver(), InMemoryLedger()),
    )
    client = _Posts()
    with tracing_context(enabled=True, client=client, project_name="effects"):
        _invoke(agent, {"messages": [HumanMessage("go")]}, path)
    if path == "sync":
        tool_parent, model_parent = "EffectMiddleware.wrap_tool_call", "EffectMiddleware.wrap_model_call"
    else:  # the async hooks return their awaitable (see the test below): their spans stay empty
        tool_parent, model_parent = "tools", "model"
    assert client.parent("send") == [tool_parent]
    assert client.parent("effect send") == [tool_parent]
    assert client.parent("ScriptedChatModel") == [model_parent] * 2
    assert provider.count_effects() == {"x": 1}


class _AsyncNoop(AgentMiddleware):
    """Hooks written as ``async def``, doing nothing: the control."""

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


def test_the_async_hooks_hand_no_work_to_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """create_agent wraps each hook in langsmith's ``traceable``; for an ``async def``
    hook that wrapper hands work to the default executor twice per call, even with
    tracing off. Ours return their awaitable from a plain method and add no hop. If
    the control stops adding hops, LangChain or langsmith changed: make the hooks
    ``async def`` (their LangSmith spans then hold the call, as the sync hooks' do)."""
    monkeypatch.delenv("LANGSMITH_TRACING", raising=False)
    monkeypatch.delenv("LANGCHAIN_TRACING_V2", raising=False)
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    send = _dedup_sender(provider)
    hops: list[Any] = []
    original = asyncio.BaseEventLoop.run_in_executor

    def counting(self: Any, executor: Any, func: Any, *args: Any) -> Any:
        hops.append(func)
        return original(self, executor, func, *args)

    monkeypatch.setattr(asyncio.BaseEventLoop, "run_in_executor", counting)

    def turn_hops(middleware: list[Any]) -> int:
        agent = create_agent(
            ScriptedChatModel(script=call_each_then_finish([("send", {"operation": "x"})])),
            tools=[send],
            middleware=middleware,
            checkpointer=attach_ledger(InMemorySaver(), InMemoryLedger()),
        )
        hops.clear()
        asyncio.run(agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG))
        # (A lease owner made on the lease thread when no spare is ready is ours, by design.)
        ours_by_design = ("langgraph_effects._runtime.lease", "langgraph_effects._runtime.heartbeat")
        return sum(1 for func in hops if getattr(func, "__module__", None) not in ours_by_design)

    plain = turn_hops([])
    ours = turn_hops([EffectMiddleware({"send": Effect(dedup_window=60)})])
    control = turn_hops([_AsyncNoop()])
    # Two model calls and one tool call a turn: 3 wrapped hook calls, 2 hops each.
    assert control - plain == 6, (plain, control)
    assert ours == plain, (plain, ours)
    assert provider.count_effects() == {"x": 2}  # sent: plain and control share a key, ours has its own
