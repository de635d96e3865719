"""Whatever strings a model produces: hashed canonically or refused, never a stuck thread.

JSON from a model can carry an unpaired surrogate (``"x\\ud800y"``). It cannot be
encoded as UTF-8, and LangGraph's checkpoint serializer stores it as ``?``. In the
arguments it is hashed as the checkpoint stores it, so the run that sees the raw
string and the resume that reads the checkpoint bind the same operation (no second
effect). In a tool call id it cannot be an identity: the call is refused with an
error ToolMessage naming :class:`MalformedToolCallError`, nothing is sent, and the
thread carries on. Effects are counted at a provider that keeps its own records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    Effect,
    EffectMiddleware,
    OperationQuery,
    current_operation,
    resume_command,
)
from langgraph_effects.core.identity import args_hash, canonical_json
from langgraph_effects.core.operation import State
from langgraph_effects.errors import MalformedToolCallError
from langgraph_effects.lab.providers import Provider
from langgraph_effects.testing import ScriptedChatModel
from tests.helpers.one_call import call, one_call_graph

RAW = "x\ud800y"
CONFIG: Any = {"configurable": {"thread_id": "t1"}}


def test_canonical_hash_of_a_lone_surrogate_is_the_checkpoints_form() -> None:
    assert canonical_json({"t": RAW}) == '{"t":"x?y"}'
    assert args_hash({"t": RAW}) == args_hash({"t": "x?y"})
    assert args_hash({"t": "é"}) != args_hash({"t": "?"})  # valid text is untouched
    assert args_hash({"t": RAW}, key=b"k").startswith("h1k:")


def blind_sender(provider: Provider, texts: list[str]) -> Any:
    @tool
    def send(label: str, text: str) -> str:
        """Send ``text``; the first attempt times out after the provider applied it."""
        texts.append(text)
        provider.apply({"operation": label})  # blind: the provider takes no key
        if current_operation().attempt == 1:
            raise TimeoutError("the provider did not answer in time")
        return "sent"

    return send


async def test_surrogate_args_through_effect_tool_node_and_a_resume(tmp_path: Path) -> None:
    """The first run sees the raw string, the resume after the review reads ``x?y`` back
    from the checkpoint: both bind the same operation, and nothing is sent twice."""
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    texts: list[str] = []
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
        await saver.setup()
        graph = one_call_graph(
            [blind_sender(provider, texts)], {}, saver, [call("send", label="L", text=RAW)]
        )
        await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
        state = await graph.aget_state(CONFIG)
        assert state.interrupts, "a blind timeout goes to review"
        [op] = await saver.ledger.unresolved()
        assert op.args_hash == args_hash({"label": "L", "text": "x?y"})
        await graph.ainvoke(
            resume_command(state.interrupts, {op.op_id: {"type": "landed"}}), CONFIG, durability="sync"
        )
        final = await graph.aget_state(CONFIG)
        ops = await saver.ledger.list_operations(
            OperationQuery(thread_id="t1")
        )
    assert texts == [RAW]  # sent once, with the model's own string
    assert provider.count_effects() == {"L": 1} and provider.count_requests("apply") == 1
    assert [o.state for o in ops] == [State.CONFIRMED]  # one operation, not a second one
    [message] = [m for m in final.values["messages"] if isinstance(m, ToolMessage)]
    assert "landed" in str(message.content)
    assert final.interrupts == ()


async def test_surrogate_in_a_call_id_is_refused_through_effect_tool_node(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    texts: list[str] = []
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
        await saver.setup()
        graph = one_call_graph(
            [blind_sender(provider, texts)],
            {},
            saver,
            [call("send", call_id="call-\udc00", label="L", text="hi")],
        )
        out = await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
        again = await graph.ainvoke(None, CONFIG, durability="sync")  # a resume: no raise
        assert await saver.ledger.list_operations(
            OperationQuery(thread_id="t1")
        ) == []
    [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert message.status == "error" and "was not sent" in str(message.content)
    assert message.artifact == {"error": MalformedToolCallError.__name__, "sent": False}
    assert provider.count_requests() == 0 and texts == []
    assert [m.type for m in again["messages"]] == [m.type for m in out["messages"]]


@pytest.mark.parametrize("bad", ["args", "id"])
async def test_surrogates_through_create_agent_and_middleware(tmp_path: Path, bad: str) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    texts: list[str] = []

    @tool
    def send(label: str, text: str) -> str:
        """Send ``text`` under our provider key."""
        texts.append(text)
        provider.apply({"operation": label}, key=current_operation().provider_key)
        return "sent"

    def script(messages: list[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage(content="done")
        call_id = "call-\ud800" if bad == "id" else "call-0"
        text = RAW if bad == "args" else "hi"
        return AIMessage(
            content="",
            id="ai-1",
            tool_calls=[{"name": "send", "args": {"label": "L", "text": text}, "id": call_id}],
        )

    agent = create_agent(
        ScriptedChatModel(script=script),
        tools=[send],
        middleware=[EffectMiddleware({"send": Effect(dedup_window=3600)})],
    )
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
        await saver.setup()
        agent.checkpointer = saver
        out = await agent.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
        await agent.ainvoke(None, CONFIG, durability="sync")  # resuming does not raise
        ops = await saver.ledger.list_operations(
            OperationQuery(thread_id="t1")
        )
    [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    if bad == "args":
        assert message.content == "sent" and texts == [RAW]
        assert provider.count_effects() == {"L": 1}
        assert [o.state for o in ops] == [State.CONFIRMED]
        assert ops[0].args_hash == args_hash({"label": "L", "text": "x?y"})
    else:
        assert message.status == "error" and "not valid text" in str(message.content)
        assert provider.count_requests() == 0 and ops == []
    assert out["messages"][-1].content == "done"


@pytest.mark.slow
def test_console_prints_an_operation_with_surrogate_args(tmp_path: Path) -> None:
    from .test_cli import run
    from .test_operator import make_op, seeded_ledger_file

    db = tmp_path / "agent.sqlite"
    seeded_ledger_file(db, (make_op("op_" + "5" * 32, args={"text": RAW}), "review"))
    for args in (("list",), ("show", "op_" + "5" * 32)):
        done = run("--db", str(db), *args)
        assert done.returncode == 0, done.stderr
        assert "x\\ud800y" in done.stdout  # printed escaped, not a crash
