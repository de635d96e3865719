"""Operation identity under real processes: one operation per turn, the same one on
every later attempt of that turn, whatever ids the model server hands out.

Each turn runs in its own worker process (``tests/helpers/turns_agent.py``); crashes
are real SIGKILLs; effects are counted at a provider that keeps its own records."""

from __future__ import annotations

import json
import signal
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.lab.providers import Provider
from tests.helpers.forked import run_module
from tests.helpers.turns_agent import TurnSpec, spec_json

pytestmark = [pytest.mark.crash, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


def run_turn(spec: TurnSpec, *, expect_kill: bool = False) -> dict[str, Any]:
    proc = run_module("tests.helpers.turns_agent", spec_json(spec), cwd=ROOT, timeout=180)
    if expect_kill:
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
        return {}
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def effects(spec: TurnSpec) -> int:
    mode = "dedup" if spec.contract == "dedup" else "blind"
    return sum(Provider(spec.provider, mode).count_effects().values())


def operations(spec: TurnSpec) -> list[tuple[str, str]]:
    with sqlite3.connect(spec.db) as db:
        return [(r[0], r[1]) for r in db.execute("SELECT op_id, state FROM effect_operations")]


def base(tmp_path: Path, **kw: Any) -> TurnSpec:
    return TurnSpec(db=str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"), **kw)


# The old identity collapsed each of these into one operation: the same AIMessage id
# and call id every turn (plain list), or a trimmed history whose earlier call was
# taken for a re-plan.
SHAPES = [
    pytest.param({"schema": "list", "ids": "repeat"}, id="list-repeated-ids"),
    pytest.param(
        {"schema": "list", "ids": "repeat", "durability": None}, id="list-repeated-ids-default-durability"
    ),
    pytest.param({"schema": "add_messages", "ids": "repeat", "trim": True}, id="trimmed-repeated-ids"),
    pytest.param({"schema": "add_messages", "ids": "unique", "trim": True}, id="trimmed-unique-ids"),
    pytest.param({"schema": "custom_key", "ids": "repeat", "trim": True}, id="custom-key-repeated-ids"),
    pytest.param({"kind": "agent", "ids": "repeat", "trim": True}, id="create-agent-repeated-ids"),
    pytest.param({"kind": "agent", "ids": "unique", "trim": True}, id="create-agent-trimmed"),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_two_turns_asking_the_same_call_send_twice(tmp_path: Path, shape: dict[str, Any]) -> None:
    spec = base(tmp_path, **shape)
    first = run_turn(spec)
    assert effects(spec) == 1
    second = run_turn(spec)
    assert effects(spec) == 2, "the second turn was answered from the first turn's operation"
    assert len(operations(spec)) == 2
    for out in (first, second):
        assert out["messages"][-1]["content"] == "done"
        assert out["interrupts"] == []


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param({"schema": "list", "ids": "repeat"}, id="list-repeated-ids"),
        pytest.param({"schema": "custom_key", "ids": "repeat", "trim": True}, id="custom-key"),
        pytest.param({"kind": "agent", "ids": "repeat", "trim": True}, id="create-agent"),
    ],
)
def test_a_crash_in_each_turn_is_resumed_into_that_turns_operation(
    tmp_path: Path, shape: dict[str, Any]
) -> None:
    """Killed after the provider applied the effect, each turn resumes into its own
    operation: the provider dedups the re-send on that operation's key."""
    spec = base(tmp_path, **shape)
    for turn in (1, 2):
        run_turn(replace(spec, crash="before_outcome"), expect_kill=True)
        assert effects(spec) == turn
        out = run_turn(replace(spec, resume=True))
        assert out["messages"][-1]["content"] == "done"
        assert effects(spec) == turn
        assert len(operations(spec)) == turn
    assert sorted(state for _, state in operations(spec)) == ["confirmed", "confirmed"]


# -- the durability barrier in the Functional API ---------------------------------------

FUNCTIONAL_RUNS = 30  # a 1-in-6 window is missed 30 times in a row with p < 0.005


@pytest.mark.parametrize("run", range(FUNCTIONAL_RUNS))
def test_functional_crash_always_leaves_the_checkpoint_a_resume_needs(tmp_path: Path, run: int) -> None:
    """``@entrypoint`` at LangGraph's default durability, a blind ``@task`` killed after
    the provider applied the effect: every time, the resume finds the call (one
    effect, the call waits for an operator), never an empty thread that sends again."""
    from tests.test_integrations import run_functional

    spec = {
        "db": str(tmp_path / "wf.sqlite"),
        "provider": str(tmp_path / "p.sqlite"),
        "provider_mode": "blind",
        "contract": "blind",
        "calls": 1,
    }
    run_functional({**spec, "crash": "before_outcome"}, expect_kill=True)
    provider = Provider(spec["provider"], "blind")
    assert provider.count_effects() == {"wf:0": 1}
    with sqlite3.connect(spec["db"]) as db:
        saved = db.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'wf-1'").fetchone()[0]
    assert saved >= 1, "the effect was sent before the checkpoint holding the call was saved"
    out = run_functional({**spec, "resume": True})
    [pending] = out["interrupts"]
    assert pending["value"]["type"] == "effect_review"
    assert provider.count_effects() == {"wf:0": 1}


# -- time travel, re-plans and dangling calls (in process, counted at the provider) ------


async def _node_graph(spec: TurnSpec, saver: Any) -> tuple[Any, Provider]:
    from tests.helpers.turns_agent import build

    provider = Provider(spec.provider, "dedup" if spec.contract == "dedup" else "blind")
    return build(spec, saver, provider), provider


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["node", "agent"])
async def test_time_travel_to_the_call_replays_and_to_the_model_rebinds(tmp_path: Path, kind: str) -> None:
    from langchain_core.messages import HumanMessage

    from langgraph_effects import AsyncEffectSqliteSaver

    spec = base(tmp_path, kind=kind, ids="unique", contract="blind")
    config: Any = {"configurable": {"thread_id": spec.thread}}
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        graph, provider = await _node_graph(spec, saver)
        await graph.ainvoke({"messages": [HumanMessage("remind me")]}, config, durability="sync")
        assert provider.count_effects() == {"water the plants": 1}
        history = [s async for s in graph.aget_state_history(config)]

        # To the checkpoint that holds the call: a fork with new task ids, same operation.
        holding = next(s for s in history if s.next and s.next[0] == "tools")
        out = await graph.ainvoke(None, holding.config, durability="sync")
        assert provider.count_effects() == {"water the plants": 1}
        assert out["messages"][-1].content == "done"

        # To the checkpoint before the model call: the model asks again with fresh ids,
        # from the very state it answered before, so it never saw the outcome: a re-plan.
        before_model = next(
            s
            for s in history
            if s.next and s.next[0] == "model" and isinstance(s.values["messages"][-1], HumanMessage)
        )
        out = await graph.ainvoke(None, before_model.config, durability="sync")
        assert provider.count_effects() == {"water the plants": 1}
        [tool_message] = [m for m in out["messages"] if m.type == "tool"]
        assert tool_message.artifact["state"] == "confirmed"

        # A new turn asking the same thing is a new intent.
        await graph.ainvoke({"messages": [HumanMessage("remind me")]}, config, durability="sync")
        assert provider.count_effects() == {"water the plants": 2}


@pytest.mark.asyncio
async def test_dangling_answers_find_the_sessions_operation_without_message_ids(tmp_path: Path) -> None:
    """Plain-list state (no message ids), the model repeating ``msg-1``/``call_0``: turn 1
    completes, turn 2 is killed after its intent. The dangling call of turn 2 is
    answered from turn 2's operation, not from turn 1's."""
    from langgraph_effects import AsyncEffectSqliteSaver
    from langgraph_effects._runtime.calls import Settings
    from langgraph_effects._runtime.dangling import find_answers, insert_answers
    from langgraph_effects.ledger.attach import ledger_of

    spec = base(tmp_path, schema="list", ids="repeat", contract="blind")
    run_turn(spec)
    run_turn(replace(spec, crash="after_intent"), expect_kill=True)
    assert effects(spec) == 1
    ops = dict(operations(spec))
    [second] = [op_id for op_id, state in ops.items() if state == "pending"]
    [first] = [op_id for op_id, state in ops.items() if state == "confirmed"]

    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        config: Any = {"configurable": {"thread_id": spec.thread}}
        history = (await saver.aget_tuple(config)).checkpoint["channel_values"]["messages"]
        assert all(m.id is None for m in history if m.type != "ai")
        ledger = ledger_of(saver)
        assert ledger is not None
        answers = await find_answers(
            history,
            ledger=ledger,
            settings=Settings.build({}, hash_key=None, lease_seconds=30),
            config=config,
            checkpointer=saver,
        )
        patched = insert_answers(history, answers)
    assert len(answers) == 1 and len(patched) == len(history) + 1
    answer = patched[-1]
    assert answer.type == "tool" and answer.artifact["operation_id"] == second != first
    assert "not known yet" in answer.content


class _SlowSaver:
    """An in-memory saver whose checkpoint writes take 0.3 s: under ``"async"``
    durability (LangGraph's default) the tasks of the next step start meanwhile."""

    @staticmethod
    def make() -> Any:
        import asyncio

        from langgraph.checkpoint.memory import InMemorySaver

        class Slow(InMemorySaver):
            async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
                await asyncio.sleep(0.3)
                return await super().aput(config, checkpoint, metadata, new_versions)

        return Slow()


@pytest.mark.asyncio
@pytest.mark.parametrize("durability", [None, "async"])
async def test_no_send_before_the_checkpoint_is_saved_functional(
    tmp_path: Path, durability: str | None
) -> None:
    """The barrier holds for a Functional API task whatever the mode: the task sees no
    durability key by default, and its checkpoint map names the entrypoint's task."""
    from langgraph.func import entrypoint, task

    from langgraph_effects import attach_ledger, effectful
    from langgraph_effects.ledger.memory import InMemoryLedger

    saver = attach_ledger(_SlowSaver.make(), InMemoryLedger())
    provider = Provider(str(tmp_path / "p.sqlite"), "blind")
    saved_at_send: list[int] = []

    @task
    @effectful()
    async def send(what: str) -> str:
        saved_at_send.append(len([c async for c in saver.alist({"configurable": {"thread_id": "f"}})]))
        return provider.apply({"operation": what}).effect_id

    @entrypoint(checkpointer=saver)
    async def flow(n: int) -> list[str]:
        return [await send(f"wf:{i}") for i in range(n)]

    kwargs: dict[str, Any] = {"durability": durability} if durability else {}
    await flow.ainvoke(2, {"configurable": {"thread_id": "f"}}, **kwargs)
    assert provider.count_effects() == {"wf:0": 1, "wf:1": 1}
    assert saved_at_send and all(n >= 1 for n in saved_at_send), saved_at_send


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["node", "agent"])
async def test_no_send_before_the_checkpoint_is_saved_default_durability(tmp_path: Path, kind: str) -> None:
    """Graph API at LangGraph's default durability (no ``durability=``, so the node
    cannot see the mode): the checkpoint holding the call is saved before the send."""
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    from langgraph_effects import attach_ledger
    from langgraph_effects.ledger.memory import InMemoryLedger
    from tests.helpers import turns_agent

    saver = attach_ledger(_SlowSaver.make(), InMemoryLedger())
    provider = Provider(str(tmp_path / "p.sqlite"), "blind")
    holding: list[bool] = []

    @tool
    def remind(what: str) -> str:
        """Set a reminder."""
        latest = saver.get_tuple({"configurable": {"thread_id": "t"}})
        last = latest.checkpoint["channel_values"]["messages"][-1] if latest else None
        holding.append(bool(getattr(last, "tool_calls", None)))
        return provider.apply({"operation": what}).effect_id

    spec = base(tmp_path, kind=kind, contract="blind", ids="unique")
    graph = turns_agent.build(spec, saver, provider, remind)
    await graph.ainvoke({"messages": [HumanMessage("remind me")]}, {"configurable": {"thread_id": "t"}})
    assert provider.count_effects() == {"water the plants": 1}
    assert holding == [True]
