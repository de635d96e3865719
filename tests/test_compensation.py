"""Compensation: an undo bound to the effect it undoes, run exactly once, never for an
effect whose outcome is in doubt. Effects are counted at a provider that keeps its own
records; the crash tests SIGKILL real worker processes mid-undo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from langgraph_effects import (
    CompensationError,
    Effect,
    InMemoryLedger,
    State,
    Undo,
    compensate,
)
from langgraph_effects.core.compensation import undo_operation_id
from langgraph_effects.core.operation import Change, Event, Operation
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.postgres import PostgresLedger
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.testing._cases import dispatch, make_op
from tests.helpers.compensation_worker import effects as worker_effects
from tests.ledger import conftest as ledger_fixtures
from tests.ledger.conftest import pg_dsn

ROOT = Path(__file__).resolve().parents[1]
pg_schema = ledger_fixtures.pg_schema


async def booked(ledger: Ledger, provider: Provider, state: State = State.CONFIRMED) -> Operation:
    """A ``book`` effect recorded in the ledger (and applied at the provider when it landed)."""
    op = make_op(tool="book", args={"room": "12"}, contract="dedup")
    await ledger.record_intents([op], change=dispatch())
    if state is State.CONFIRMED:
        provider.apply({"operation": "book"}, key=op.provider_key)
        return await ledger.transition(op.op_id, Change(Event.SUCCEED), expected_version=1)
    if state is State.UNKNOWN:
        return await ledger.transition(
            op.op_id, Change(Event.LOSE, evidence={"kind": "lease"}), expected_version=1
        )
    if state is State.FAILED:
        return await ledger.transition(op.op_id, Change(Event.FAIL), expected_version=1)
    return op


def cancels(provider: Provider) -> int:
    return sum(n for label, n in provider.count_effects().items() if label.startswith("cancel:"))


@pytest.fixture
async def memory() -> AsyncIterator[Ledger]:
    ledger = InMemoryLedger()
    await ledger.setup()
    yield ledger
    await ledger.aclose()


async def test_a_confirmed_effect_is_undone_once_even_when_asked_twice(
    memory: Ledger, tmp_path: Path
) -> None:
    path = tmp_path / "provider.sqlite"
    with Provider(path, mode="dedup") as provider:
        op = await booked(memory, provider)
        effects = worker_effects(str(path))
        first = await compensate(memory, op.op_id, effects=effects, actor="alice", reason="payment failed")
        again = await compensate(memory, op.op_id, effects=effects, actor="bob")
        assert cancels(provider) == 1
    assert first.verdict == "compensate" and first.state == "undone"
    assert again.verdict == "requested" and again.undo is not None and again.undo.op_id == first.undo.op_id  # type: ignore[union-attr]
    undo = first.undo
    assert undo is not None and undo.state is State.CONFIRMED
    assert undo.op_id == undo_operation_id(op.op_id) and undo.compensates == op.op_id
    assert undo.provider_key != op.provider_key and undo.args == {"booking": op.provider_key}
    stored = await memory.get(op.op_id)
    assert stored is not None and stored.state is State.CONFIRMED and stored.compensated_by == undo.op_id
    trail = [entry.event for entry in await memory.audit(op.op_id)]
    assert trail[-1] == "compensate"
    evidence = (await memory.audit(op.op_id))[-1].evidence or {}
    assert evidence["actor"] == "alice" and evidence["reason"] == "payment failed"


async def test_an_unknown_outcome_goes_to_review_and_nothing_is_undone(
    memory: Ledger, tmp_path: Path
) -> None:
    path = tmp_path / "provider.sqlite"
    with Provider(path, mode="dedup") as provider:
        op = await booked(memory, provider, State.UNKNOWN)
        report = await compensate(memory, op.op_id, effects=worker_effects(str(path)), actor="alice")
        assert cancels(provider) == 0
    assert report.verdict == "review_first" and report.undo is None
    assert report.state == "effect sent to review"
    stored = await memory.get(op.op_id)
    assert stored is not None and stored.state is State.REVIEW
    assert (stored.evidence or {}).get("undo_requested") is True
    assert await memory.get(undo_operation_id(op.op_id)) is None
    # Asked again while it waits for a verdict: refused, with the reason.
    with pytest.raises(CompensationError, match="waits for an operator's verdict") as raised:
        await compensate(memory, op.op_id, effects=worker_effects(str(path)))
    assert raised.value.verdict == "awaiting_review"


@pytest.mark.parametrize(
    ("state", "effects", "verdict", "message"),
    [
        (State.FAILED, None, "not_landed", "nothing to undo"),
        (State.DISPATCHED, None, "in_flight", "being sent right now"),
        (State.CONFIRMED, {"book": Effect(dedup_window=60)}, "irreversible", "declares no undo"),
    ],
)
async def test_what_cannot_be_compensated_is_refused_and_nothing_is_written(
    memory: Ledger, tmp_path: Path, state: State, effects: Any, verdict: str, message: str
) -> None:
    path = tmp_path / "provider.sqlite"
    with Provider(path, mode="dedup") as provider:
        op = await booked(memory, provider, state)
        with pytest.raises(CompensationError, match=message) as raised:
            await compensate(memory, op.op_id, effects=effects or worker_effects(str(path)))
        assert cancels(provider) == 0
    assert raised.value.verdict == verdict
    stored = await memory.get(op.op_id)
    assert stored is not None and stored.version == op.version
    assert await memory.get(undo_operation_id(op.op_id)) is None


async def test_an_undo_that_fails_definitively_is_recorded_failed(memory: Ledger, tmp_path: Path) -> None:
    class Refused(Exception):
        pass

    def cancel(provider_key: str) -> str:
        raise Refused("the booking is already checked in")

    path = tmp_path / "provider.sqlite"
    with Provider(path, mode="dedup") as provider:
        op = await booked(memory, provider)
    effects = {"book": Effect(compensate=Undo(cancel, effect=Effect(definite_errors=[Refused])))}
    report = await compensate(memory, op.op_id, effects=effects)
    assert report.undo is not None and report.undo.state is State.FAILED
    assert report.state == "undo failed" and report.error is not None and "checked in" in report.error


# -- crash tests: real processes, SIGKILL mid-undo -----------------------------------


def _worker(
    db: str, schema: str, provider: Path, action: str, op_id: str, kill_at: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.helpers.compensation_worker",
            db,
            schema,
            str(provider),
            action,
            op_id,
            kill_at,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _crash_and_resume(ledger: Ledger, db: str, schema: str, tmp_path: Path, kill_at: str) -> None:
    path = tmp_path / "provider.sqlite"
    with Provider(path, mode="dedup") as provider:
        op = await booked(ledger, provider)
        killed = _worker(db, schema, path, "compensate", op.op_id, kill_at)
        assert killed.returncode == -9, killed.stderr
        undo = await ledger.get(undo_operation_id(op.op_id))
        assert undo is not None and undo.compensates == op.op_id
        if kill_at == "after_intent":  # killed before the cancel was sent
            assert undo.state is State.PENDING and cancels(provider) == 0
        else:  # the provider applied the cancel; the ledger never heard
            assert undo.state is State.DISPATCHED and cancels(provider) == 1
        resumed = _worker(db, schema, path, "finish", op.op_id)
        assert resumed.returncode == 0, resumed.stderr
        assert json.loads(resumed.stdout.strip().splitlines()[-1]) == {"finished": ["undone"]}
        assert cancels(provider) == 1  # exactly one undo at the provider
        again = _worker(db, schema, path, "compensate", op.op_id)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout.strip().splitlines()[-1]) == {
            "verdict": "requested",
            "state": "undone",
        }
        assert cancels(provider) == 1 and provider.count_effects()["book"] == 1
    undo = await ledger.get(undo_operation_id(op.op_id))
    assert undo is not None and undo.state is State.CONFIRMED
    stored = await ledger.get(op.op_id)
    assert stored is not None and stored.state is State.CONFIRMED and stored.compensated_by == undo.op_id


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["after_intent", "before_outcome"])
async def test_sigkill_mid_undo_then_console_recover_undoes_once(tmp_path: Path, kill_at: str) -> None:
    from langgraph_effects import AsyncEffectSqliteSaver

    db = tmp_path / "agent.sqlite"
    path = tmp_path / "provider.sqlite"
    async with AsyncEffectSqliteSaver.from_conn_string(str(db)) as saver:
        await saver.setup()
        with Provider(path, mode="dedup") as provider:
            op = await booked(saver.ledger, provider)
            killed = _worker(str(db), "", path, "compensate", op.op_id, kill_at)
            assert killed.returncode == -9, killed.stderr
            assert cancels(provider) == (1 if kill_at == "before_outcome" else 0)
            env = {
                **os.environ,
                "COMPENSATION_PROVIDER": str(path),
                "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            }
            argv = [
                "--db",
                str(db),
                "--json",
                "recover",
                "--graph",
                "tests.helpers.compensation_worker:make_graph",
            ]
            done = subprocess.run(
                [sys.executable, "-m", "langgraph_effects.cli", *argv, "--min-idle", "0"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            report = json.loads(done.stdout)
            assert report["threads"] == []  # an undo is finished on its own, not by a resume
            [entry] = report["compensations"]
            assert entry["operation"]["operation_id"] == op.op_id and entry["compensation"] == "undone"
            assert entry["undo"]["operation_id"] == undo_operation_id(op.op_id)
            assert cancels(provider) == 1  # exactly one undo at the provider
        undo = await saver.ledger.get(undo_operation_id(op.op_id))
    assert undo is not None and undo.state is State.CONFIRMED


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["after_intent", "before_outcome"])
async def test_sigkill_mid_undo_then_resume_undoes_once_sqlite(tmp_path: Path, kill_at: str) -> None:
    db = tmp_path / "ledger.sqlite"
    async with SqliteLedger.from_conn_string(db) as ledger:
        await ledger.setup()
        await _crash_and_resume(ledger, str(db), "", tmp_path, kill_at)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("kill_at", ["after_intent", "before_outcome"])
async def test_sigkill_mid_undo_then_resume_undoes_once_postgres(
    tmp_path: Path, kill_at: str, pg_schema: str
) -> None:
    async with PostgresLedger.from_conn_string(
        pg_dsn(), schema=pg_schema, max_size=3, timeout=10
    ) as ledger:
        await ledger.setup()
        await _crash_and_resume(ledger, pg_dsn(), pg_schema, tmp_path, kill_at)


# -- the operator's verdict in a review answer: "landed, undo it" ---------------------


def _review_graph(tmp_path: Path, saver: Any) -> tuple[Any, Provider, Provider]:
    from langchain_core.tools import tool

    from tests.helpers.one_call import call, one_call_graph

    hotel = Provider(tmp_path / "hotel.sqlite", mode="blind")
    cancels_at = tmp_path / "cancels.sqlite"

    @tool
    def book(room: str) -> str:
        """Book a room (the hotel applies it, then the gateway times out)."""
        hotel.apply({"operation": f"book:{room}"})
        raise TimeoutError("gateway timeout")

    effects = worker_effects(str(cancels_at), book_dedup=False)
    graph = one_call_graph([book], effects, saver, [call("book", room="12")])
    return graph, hotel, Provider(cancels_at, mode="dedup")


async def test_a_review_answer_landed_with_undo_compensates_once(tmp_path: Path) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langgraph.types import Command

    from langgraph_effects import AsyncEffectSqliteSaver

    config: Any = {"configurable": {"thread_id": "t1"}}
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        graph, hotel, cancel_provider = _review_graph(tmp_path, saver)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
        [pending] = (await graph.aget_state(config)).interrupts
        [entry] = pending.value["operations"]
        op_id = entry["operation_id"]
        answer = {pending.id: {op_id: {"type": "landed", "receipt": {"id": "h1"}, "undo": True}}}
        await graph.ainvoke(Command(resume=answer), config)
        state = await graph.aget_state(config)
        assert not state.interrupts
        assert hotel.count_effects() == {"book:12": 1}
        assert cancels(cancel_provider) == 1
        stored = await saver.ledger.get(op_id)
        undo = await saver.ledger.get(undo_operation_id(op_id))
    assert (
        stored is not None
        and stored.state is State.CONFIRMED
        and stored.compensated_by == undo_operation_id(op_id)
    )
    assert undo is not None and undo.state is State.CONFIRMED and undo.compensates == op_id
    [message] = [m for m in state.values["messages"] if isinstance(m, ToolMessage)]
    assert "it has been undone" in str(message.content) and "h1" in str(message.content)
    assert message.artifact["compensated_by"] == undo.op_id
    assert message.artifact["receipt"] == {"id": "h1"}


async def test_a_review_answer_asking_to_undo_an_irreversible_effect_is_refused(tmp_path: Path) -> None:
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.types import Command

    from langgraph_effects import AsyncEffectSqliteSaver
    from tests.helpers.one_call import call, one_call_graph

    hotel = Provider(tmp_path / "hotel.sqlite", mode="blind")

    @tool
    def book(room: str) -> str:
        """Book a room (the gateway times out)."""
        hotel.apply({"operation": f"book:{room}"})
        raise TimeoutError("gateway timeout")

    config: Any = {"configurable": {"thread_id": "t1"}}
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        graph = one_call_graph([book], {"book": Effect()}, saver, [call("book", room="12")])
        await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
        [pending] = (await graph.aget_state(config)).interrupts
        op_id = pending.value["operations"][0]["operation_id"]
        await graph.ainvoke(Command(resume={pending.id: {op_id: {"type": "landed", "undo": True}}}), config)
        [again] = (await graph.aget_state(config)).interrupts  # asked again, with why
        stored = await saver.ledger.get(op_id)
    assert stored is not None and stored.state is State.REVIEW  # nothing was written
    assert "declares no undo" in json.dumps(again.value)


@pytest.mark.slow
def test_a_review_answer_with_undo_in_a_synchronous_graph(tmp_path: Path) -> None:
    from langchain_core.messages import HumanMessage
    from langgraph.types import Command

    from langgraph_effects import EffectSqliteSaver

    config: Any = {"configurable": {"thread_id": "t1"}}
    with EffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        saver.setup()
        graph, hotel, cancel_provider = _review_graph(tmp_path, saver)
        graph.invoke({"messages": [HumanMessage("go")]}, config)
        [pending] = graph.get_state(config).interrupts
        op_id = pending.value["operations"][0]["operation_id"]
        graph.invoke(Command(resume={pending.id: {op_id: {"type": "landed", "undo": True}}}), config)
        assert not graph.get_state(config).interrupts
    assert hotel.count_effects() == {"book:12": 1}
    assert cancels(cancel_provider) == 1


@pytest.mark.slow
async def test_a_review_answer_with_undo_through_create_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_core.messages import HumanMessage
    from langgraph.types import Command

    from langgraph_effects import AsyncEffectSqliteSaver
    from tests.helpers import agent as helper

    cancels_at = tmp_path / "cancels.sqlite"
    undo = worker_effects(str(cancels_at), book_dedup=False)["book"]
    monkeypatch.setattr(helper, "effect_for", lambda spec, provider: {"send": undo})
    spec = helper.Spec(
        db=str(tmp_path / "agent.sqlite"),
        provider=str(tmp_path / "provider.sqlite"),
        contract="blind",
        provider_mode="blind",
        timeout_after_effect=[0],
        kind="create_agent",
    )
    provider = helper.provider_for(spec)
    config: Any = {"configurable": {"thread_id": "t1"}}
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        agent = helper.build(spec, saver, provider)
        await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
        [pending] = (await agent.aget_state(config)).interrupts
        op_id = pending.value["operations"][0]["operation_id"]
        await agent.ainvoke(Command(resume={pending.id: {op_id: {"type": "landed", "undo": True}}}), config)
        assert not (await agent.aget_state(config)).interrupts
        stored = await saver.ledger.get(op_id)
    assert provider.count_effects() == {"t1:0": 1}
    assert cancels(Provider(cancels_at, mode="dedup")) == 1
    assert stored is not None and stored.compensated_by == undo_operation_id(op_id)


# -- an undo the verdict ordered, its worker killed inside it: the resume finishes it --


def _verdict_worker(spec: Any, **changes: Any) -> dict[str, Any]:
    from dataclasses import replace

    from tests.helpers.verdict_undo_worker import spec_json

    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.verdict_undo_worker", spec_json(replace(spec, **changes))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if changes.get("kill_at"):
        assert done.returncode == -9, done.stderr[-3000:]
        return {}
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _verdict_killed_then_resumed(
    db: str, tmp_path: Path, kill_at: str, undo_dedup: bool, backend: str = "sqlite"
) -> dict[str, Any]:
    """Start the thread (the booking goes to review), answer "landed, undo it" in a
    worker SIGKILLed inside the cancel, then resume plainly in a new process."""
    from tests.helpers.verdict_undo_worker import VerdictSpec

    spec = VerdictSpec(
        db=db,
        backend=backend,
        hotel=str(tmp_path / "hotel.sqlite"),
        cancels=str(tmp_path / "cancels.sqlite"),
        undo_dedup=undo_dedup,
    )
    started = _verdict_worker(spec, step="start")
    [pending] = started["interrupts"]
    op_id = pending["value"]["operations"][0]["operation_id"]
    answer = {pending["id"]: {op_id: {"type": "landed", "receipt": {"id": "h1"}, "undo": True}}}
    _verdict_worker(spec, step="answer", answer=answer, kill_at=kill_at)
    cancel_provider = Provider(tmp_path / "cancels.sqlite", mode="dedup")
    # Killed before the cancel was sent, or after the provider applied it.
    assert cancels(cancel_provider) == (0 if kill_at == "after_intent" else 1)
    resumed = _verdict_worker(spec, step="resume")
    assert resumed["interrupts"] == [] and resumed["next"] == []  # the thread is done
    assert Provider(tmp_path / "hotel.sqlite", mode="blind").count_effects() == {"book:12": 1}
    assert cancels(cancel_provider) == 1  # before: 0 after "after_intent" (left pending)
    [message] = resumed["messages"]
    assert message["artifact"]["compensated_by"] == undo_operation_id(op_id)
    assert message["artifact"]["receipt"] == {"id": "h1"}
    return resumed


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("kill_at", ["after_intent", "before_outcome"])
def test_an_undo_a_verdict_ordered_is_finished_by_the_resume_sqlite(tmp_path: Path, kill_at: str) -> None:
    """Issue 42 item 3: the worker running the undo the operator's answer ordered is
    SIGKILLed inside the cancel; a plain resume finishes it (before: the thread ended
    ``done`` with the undo left pending or dispatched under a dead owner, and the model
    told "being undone" with no cancel at the provider). The undo's contract deduplicates
    cancels: re-sent under its key, exactly one cancel."""
    resumed = _verdict_killed_then_resumed(str(tmp_path / "agent.sqlite"), tmp_path, kill_at, True)
    assert resumed["undo"] == "confirmed"
    assert "it has been undone" in resumed["messages"][0]["content"]


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.postgres
@pytest.mark.parametrize("kill_at", ["after_intent", "before_outcome"])
def test_an_undo_a_verdict_ordered_is_finished_by_the_resume_postgres(kill_at: str, tmp_path: Path) -> None:
    with ledger_fixtures.created_schema("lge_verdict_undo") as (_, dsn):
        resumed = _verdict_killed_then_resumed(dsn, tmp_path, kill_at, True, "postgres")
        with psycopg.connect(dsn) as conn:  # it ran on Postgres: the rows are there
            [(rows,)] = conn.execute("SELECT count(*) FROM effect_operations").fetchall()
        assert rows == 2  # the booking and its undo
    assert resumed["undo"] == "confirmed"
    assert "it has been undone" in resumed["messages"][0]["content"]


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("kill_at", ["after_intent", "before_outcome"])
def test_a_blind_undo_a_verdict_ordered_is_sent_once_or_reviewed(tmp_path: Path, kill_at: str) -> None:
    """A blind undo: never sent (killed before it left), it is sent once; left in doubt
    (killed after the provider applied it), it goes to review, never re-sent, and the
    model is told its outcome is in doubt."""
    resumed = _verdict_killed_then_resumed(str(tmp_path / "agent.sqlite"), tmp_path, kill_at, False)
    content = resumed["messages"][0]["content"]
    if kill_at == "after_intent":
        assert resumed["undo"] == "confirmed" and "it has been undone" in content
    else:
        assert resumed["undo"] == "review" and "in doubt" in content
