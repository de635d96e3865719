"""The fence refuses two runners and nothing else: LangGraph's deliberate branches.

Each scenario runs twice on one database: once with LangGraph's own saver (the ledger
attached, no fence) and once with ours. Both must branch the same way (a checkpoint
gets a second child) and send the same effects, counted at a provider that keeps its
own records. Two runner processes that name the same head are still two runners.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

from langgraph_effects import Effect
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime.context import current_operation
from langgraph_effects.lab.providers import Provider
from tests.helpers.agent import State
from tests.helpers.fencing_agent import FenceSpec, build, first_message, open_saver
from tests.test_fencing import (
    assert_exactly_intended,
    crash,
    db,
    forks,
    outcomes,
    pg_schema,
    race,
    specs,
    unresolved,
)

__all__ = ["db", "pg_schema"]  # fixtures


def send_tool(provider: Provider) -> Any:
    @tool
    def send(operation: str, note: str = "") -> str:
        """Send the notification for ``operation``."""
        receipt = provider.apply({"operation": operation, "note": note}, key=current_operation().provider_key)
        return f"sent {receipt.effect_id}"

    return send


def turn_model(state: State) -> dict[str, Any]:
    """One send per human message (labelled with its text), then "done"."""
    last = state["messages"][-1]
    if isinstance(last, HumanMessage):
        call = {"name": "send", "args": {"operation": str(last.content)}, "id": f"c-{os.urandom(4).hex()}",
                "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call])]}
    return {"messages": [AIMessage("done")]}


def with_remembering_subgraph(saver: Any, provider: Provider) -> Any:
    """A parent whose ``agent`` subgraph keeps its own memory (``checkpointer=True``)."""
    builder = StateGraph(State)
    builder.add_node("model", turn_model)
    tools = EffectToolNode([send_tool(provider)], effects={"send": Effect(dedup_window=3600)})
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "model")
    parent = StateGraph(State)
    parent.add_node("agent", builder.compile(checkpointer=True))
    parent.add_edge(START, "agent")
    parent.add_edge("agent", END)
    return parent.compile(checkpointer=saver)


async def first_checkpoint(graph: Any, config: dict[str, Any]) -> Any:
    """The thread's first checkpoint (before any input): where an edit of the first message branches."""
    return [s async for s in graph.aget_state_history(config)][-1]


async def edit_first_message(graph: Any, thread: str) -> Any:
    # The chat UIs' "edit message": submit(values, {checkpoint}) runs new input from the
    # checkpoint the edited message was sent from.
    config = {"configurable": {"thread_id": thread}}
    await graph.ainvoke({"messages": [first_message(thread, 1)]}, config)
    root = await first_checkpoint(graph, config)
    assert root.config["configurable"]["checkpoint_id"]
    return await graph.ainvoke({"messages": [first_message(f"{thread}-edited", 2)]}, root.config)


async def update_as_input_then_resume(graph: Any, thread: str) -> Any:
    config = {"configurable": {"thread_id": thread}}
    await graph.ainvoke({"messages": [first_message(thread, 1)]}, config)
    root = await first_checkpoint(graph, config)
    edited = {"messages": [first_message(f"{thread}-edited", 2)]}
    await graph.aupdate_state(root.config, edited, as_node="__input__")
    return await graph.ainvoke(None, config)


async def time_travel_over_a_remembering_subgraph(graph: Any, thread: str) -> Any:
    config = {"configurable": {"thread_id": thread}}
    await graph.ainvoke({"messages": [HumanMessage(f"{thread}-a")]}, config)
    await graph.ainvoke({"messages": [HumanMessage(f"{thread}-b")]}, config)
    # Back to where the second turn's agent was about to run; the subgraph replays from
    # its own checkpoint of then, which already has a child (the second turn).
    history = [s async for s in graph.aget_state_history(config)]
    before_b = next(
        s for s in history if s.next == ("agent",) and s.values["messages"][-1].content == f"{thread}-b"
    )
    return await graph.ainvoke(None, before_b.config)


CASES = {
    "edit message (new input at a checkpoint_id)": (edit_first_message, False),
    "update_state as __input__, then invoke(None)": (update_as_input_then_resume, False),
    "time travel over a subgraph with its own memory": (time_travel_over_a_remembering_subgraph, True),
}


async def scenario(db: str, provider: Provider, case: str, thread: str, *, plain: bool) -> dict[str, Any]:
    steps, remembering = CASES[case]
    async with open_saver(db, plain=plain) as saver:
        if remembering:
            graph = with_remembering_subgraph(saver, provider)
        else:
            graph = build(FenceSpec(db=db, provider=str(provider.path), mode="start"), saver, provider)
        final = await steps(graph, thread)
    return {"last": final["messages"][-1].content, "first": final["messages"][0].content}


@pytest.mark.parametrize("case", list(CASES))
def test_a_deliberate_branch_proceeds_as_in_plain_langgraph(db: str, tmp_path: Path, case: str) -> None:
    runs = {}
    for name, plain in (("plain", True), ("fenced", False)):
        provider = Provider(str(tmp_path / f"{name}.sqlite"), "dedup")
        runs[name] = asyncio.run(scenario(db, provider, case, f"t-{name}", plain=plain))
        runs[name]["effects"] = {
            label.removeprefix(f"t-{name}"): n for label, n in provider.count_effects().items()
        }
        runs[name]["forks"] = len(asyncio.run(forks(db, [f"t-{name}"])))
        runs[name]["first"] = str(runs[name]["first"]).removeprefix(f"t-{name}")
    assert runs["fenced"] == runs["plain"], runs
    assert runs["fenced"]["forks"] >= 1, runs  # the branch happened
    assert runs["fenced"]["last"] == "done", runs


def test_edit_message_effects_exactly_as_intended(db: str, tmp_path: Path) -> None:
    provider = Provider(str(tmp_path / "provider.sqlite"), "dedup")
    out = asyncio.run(scenario(db, provider, "edit message (new input at a checkpoint_id)", "e", plain=False))
    assert out["first"] == "e-edited"
    # The first turn's two sends once; the edited turn's three (two, then its follow-up) once.
    assert provider.count_effects() == {"e:0": 1, "e:follow": 1, "e-edited:0": 1, "e-edited:1": 1,
                                        "e-edited:follow": 1}
    assert asyncio.run(unresolved(db)) == []


def test_subgraph_time_travel_replays_the_turn_once(db: str, tmp_path: Path) -> None:
    provider = Provider(str(tmp_path / "provider.sqlite"), "dedup")
    case = "time travel over a subgraph with its own memory"
    out = asyncio.run(scenario(db, provider, case, "s", plain=False))
    assert out["last"] == "done"
    # The replayed turn runs its node again, as LangGraph's time travel does: one more send.
    assert provider.count_effects() == {"s-a": 1, "s-b": 2}
    assert asyncio.run(unresolved(db)) == []


@pytest.mark.slow
def test_two_runners_naming_the_same_head_are_still_two_runners(db: str, tmp_path: Path) -> None:
    # A checkpoint_id that names the head (nothing after it yet) is no branch point: a
    # chat UI's resume sent twice is refused once, as two plain resumes are.
    provider = str(tmp_path / "provider.sqlite")
    threads = ["t1"]
    crash(FenceSpec(db=db, provider=provider, mode="crash", threads=threads))
    results = race(
        specs(db, provider, tmp_path, ["resume", "resume"], threads, named=True,
              overlap=str(tmp_path / "overlap")),
        tmp_path / "go",
    )
    assert sorted(outcomes(results, "t1")) == ["ok", "refused"], results
    assert asyncio.run(forks(db, threads)) == []
    assert_exactly_intended(provider, threads, calls=2)
    assert asyncio.run(unresolved(db)) == []



def test_a_rolled_back_run_is_deleted_and_the_next_run_proceeds(db: str, tmp_path: Path) -> None:
    # multitask_strategy="rollback" on LangGraph's server: the run's checkpoints go
    # (adelete_for_runs), and the next run resumes the thread's head before it.
    async def run() -> dict[str, Any]:
        provider = Provider(str(tmp_path / "provider.sqlite"), "dedup")
        async with open_saver(db) as saver:
            graph = with_remembering_subgraph(saver, provider)
            config: dict[str, Any] = {"configurable": {"thread_id": "rb"}}
            for turn in ("1", "2"):
                await graph.ainvoke({"messages": [HumanMessage(f"rb-{turn}")]},
                                    {**config, "metadata": {"run_id": f"r{turn}"}})
            await saver.adelete_for_runs(["r2"])
            kept = [m.content for m in (await graph.aget_state(config)).values["messages"]]
            runs = {t.metadata.get("run_id") async for t in saver.alist(config)}
            final = await graph.ainvoke({"messages": [HumanMessage("rb-3")]}, config)
        return {"kept": kept, "runs": runs, "final": [m.content for m in final["messages"]],
                "effects": provider.count_effects()}

    out = asyncio.run(run())
    assert out["kept"][0] == "rb-1" and out["kept"][-1] == "done", out  # back to the end of turn 1
    assert "rb-2" not in out["kept"] and "r2" not in out["runs"] and "r1" in out["runs"], out
    assert out["final"][0] == "rb-1" and "rb-2" not in out["final"] and out["final"][-1] == "done", out
    assert out["effects"] == {"rb-1": 1, "rb-2": 1, "rb-3": 1}, out  # rb-2's landed before; never again
    assert asyncio.run(forks(db, ["rb"])) == []
