"""A Functional API entrypoint whose call order changes between a crash and its resume.

Real processes: the first run is SIGKILLed right after its 2nd send reached the
provider, the resume runs in a new process (another ``PYTHONHASHSEED`` for
``set()``, a recipient added to a list read inside the entrypoint). Effects are
counted at the provider, which keeps its own records. LangGraph hands the saved
result of call *i* to whatever is called *i*-th; the package must stop such a run
before anything is sent (and let a replay finish it exactly once), never send twice,
lose a send silently or leave an operation dispatched that recovery does not name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects import OperationQuery, SqliteLedger
from langgraph_effects.lab.providers import Provider
from tests.test_node_crash import ROOT

pytestmark = [pytest.mark.crash, pytest.mark.slow]

RECIPIENTS = ["ann", "bob", "cy", "dee", "eve"]


def run(spec: dict[str, Any], *, seed: int = 0, expect_kill: bool = False) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.reorder_agent", json.dumps(spec)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if expect_kill:
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
        return {}
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def set_order(seed: int) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"import json; print(json.dumps(list(set({RECIPIENTS!r}))))"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": str(seed)},
        check=True,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def two_seeds() -> tuple[int, int, list[str], list[str]]:
    """Two hash seeds whose set() orders differ in their first place."""
    first = set_order(0)
    for seed in range(1, 40):
        other = set_order(seed)
        if other[0] != first[0]:
            return 0, seed, first, other
    raise AssertionError("no two seeds order the set differently")


def effects(tmp_path: Path) -> dict[str, int]:
    with Provider(str(tmp_path / "provider.sqlite"), "dedup") as provider:
        return provider.count_effects()


async def operations(tmp_path: Path) -> dict[str, str]:
    """recipient -> state of its operation (one operation per recipient)."""
    async with SqliteLedger.from_conn_string(str(tmp_path / "wf.sqlite")) as ledger:
        ops = await ledger.list_operations(OperationQuery(limit=1000))
    states: dict[str, str] = {}
    for op in ops:
        recipient = str(op.args["recipient"])
        assert recipient not in states, f"two operations for {recipient}"
        states[recipient] = op.state.value
    return states


def base(tmp_path: Path, shape: str, **kw: Any) -> dict[str, Any]:
    return {
        "db": str(tmp_path / "wf.sqlite"),
        "provider": str(tmp_path / "provider.sqlite"),
        "shape": shape,
        "recipients": RECIPIENTS,
        "list_file": str(tmp_path / "recipients.json"),
        **kw,
    }


def assert_refused_before_sending(
    out: dict[str, Any], recorded: str, called: str, sent: dict[str, int]
) -> None:
    error = out["error"]
    assert error["type"] == "NondeterminismError", error
    assert (error["recorded_tool"], error["called_tool"]) == ("notify", "notify")
    assert error["recorded_args"] == {"recipient": recorded}
    assert error["called_args"] == {"recipient": called}
    assert error["recorded_op_id"].startswith("op_") and error["checkpoint_id"]
    assert f"recipient={recorded!r}" in error["message"] and f"recipient={called!r}" in error["message"]
    assert all(n == 1 for n in sent.values()), sent


async def test_set_order_changed_by_the_hash_seed_is_stopped_then_replayed_exactly_once(
    tmp_path: Path,
) -> None:
    first_seed, second_seed, first, second = two_seeds()
    spec = base(tmp_path, "set")
    run({**spec, "kill_after": 2, "wait_saved": True}, seed=first_seed, expect_kill=True)
    assert effects(tmp_path) == {first[0]: 1, first[1]: 1}

    out = run({**spec, "resume": True}, seed=second_seed)
    # LangGraph answered the new first call with the old first call's saved result: the
    # next effectful call stops the run, naming both, and nothing else is sent.
    assert out["order"] == second
    assert_refused_before_sending(out, first[0], second[0], effects(tmp_path))
    assert effects(tmp_path) == {first[0]: 1, first[1]: 1}
    assert (await operations(tmp_path))[first[1]] == "dispatched"

    # Recovery names the operation the crash left dispatched, and says why it stays so.
    report = run({**spec, "recover": True}, seed=second_seed)["report"]
    [thread] = report["threads"]
    assert "NondeterminismError" in thread["error"] and "replay the thread" in thread["error"]
    [op] = thread["operations"]
    assert op["before"]["state"] == "dispatched" and op["how"] == "unsettled"

    # The documented way out: replay from the checkpoint the error names. Every call runs
    # and finds its own operation wherever it now sits; the crashed one is settled by the
    # provider's dedup; each recipient gets exactly one notification, and its own result.
    out = run({**spec, "replay_from": out["error"]["checkpoint_id"]}, seed=second_seed)
    assert effects(tmp_path) == {r: 1 for r in RECIPIENTS}
    assert [r.split(":")[0] for r in out["result"]] == second
    assert set((await operations(tmp_path)).values()) == {"confirmed"}


async def test_a_recipient_added_to_a_list_read_inside_is_stopped_then_replayed_exactly_once(
    tmp_path: Path,
) -> None:
    spec = base(tmp_path, "list")
    Path(spec["list_file"]).write_text(json.dumps(RECIPIENTS))
    run({**spec, "kill_after": 2, "wait_saved": True}, expect_kill=True)
    assert effects(tmp_path) == {"ann": 1, "bob": 1}

    Path(spec["list_file"]).write_text(json.dumps(["al", *RECIPIENTS]))  # a new subscriber, first
    out = run({**spec, "resume": True})
    assert_refused_before_sending(out, "ann", "al", effects(tmp_path))
    assert effects(tmp_path) == {"ann": 1, "bob": 1}

    out = run({**spec, "replay_from": out["error"]["checkpoint_id"]})
    assert effects(tmp_path) == {r: 1 for r in ["al", *RECIPIENTS]}
    assert [r.split(":")[0] for r in out["result"]] == ["al", *RECIPIENTS]
    assert set((await operations(tmp_path)).values()) == {"confirmed"}


async def test_set_order_changed_at_any_saving_time_never_sends_twice_nor_loses(tmp_path: Path) -> None:
    """Killed without waiting for LangGraph to save the first result: whether it did
    decides between the two honest outcomes, never a third."""
    first_seed, second_seed, first, second = two_seeds()
    spec = base(tmp_path, "set")
    run({**spec, "kill_after": 2}, seed=first_seed, expect_kill=True)
    out = run({**spec, "resume": True}, seed=second_seed)
    if "error" in out:  # the first result was saved: refused before sending anything
        assert_refused_before_sending(out, first[0], second[0], effects(tmp_path))
        assert effects(tmp_path) == {first[0]: 1, first[1]: 1}
        out = run({**spec, "replay_from": out["error"]["checkpoint_id"]}, seed=second_seed)
    # Every call ran and found its own operation: exactly once, each with its own result.
    assert effects(tmp_path) == {r: 1 for r in RECIPIENTS}
    assert [r.split(":")[0] for r in out["result"]] == second
    assert set((await operations(tmp_path)).values()) == {"confirmed"}


async def test_sorted_set_resumes_in_another_process_exactly_once(tmp_path: Path) -> None:
    first_seed, second_seed, _, _ = two_seeds()
    spec = base(tmp_path, "sorted")
    run({**spec, "kill_after": 2, "wait_saved": True}, seed=first_seed, expect_kill=True)
    out = run({**spec, "resume": True}, seed=second_seed)
    assert "error" not in out, out
    assert effects(tmp_path) == {r: 1 for r in RECIPIENTS}
    assert out["result"] == [f"{r}:eff_{i + 1}" for i, r in enumerate(sorted(RECIPIENTS))]
    assert set((await operations(tmp_path)).values()) == {"confirmed"}


async def test_a_crashed_call_dropped_from_the_list_is_named_by_recover(tmp_path: Path) -> None:
    spec = base(tmp_path, "list")
    Path(spec["list_file"]).write_text(json.dumps(RECIPIENTS))
    run({**spec, "kill_after": 2, "wait_saved": True}, expect_kill=True)
    Path(spec["list_file"]).write_text(json.dumps([r for r in RECIPIENTS if r != "bob"]))
    out = run({**spec, "resume": True})
    # Nothing moved into a place answered from the checkpoint: the run finishes, each
    # recipient still listed is notified once, and nobody is notified twice.
    assert "error" not in out, out
    assert effects(tmp_path) == {r: 1 for r in RECIPIENTS}
    states = await operations(tmp_path)
    assert states.pop("bob") == "dispatched"
    assert set(states.values()) == {"confirmed"}
    # bob's send may have landed (it did): recovery names it and says what to do.
    report = run({**spec, "recover": True})["report"]
    [thread] = report["threads"]
    assert thread["action"] == "not_resumable"
    assert "entrypoint" in thread["reason"] and "langgraph-effects resolve" in thread["reason"]
    [op] = thread["operations"]
    assert op["tool"] == "notify" and op["before"]["state"] == "dispatched"


# -- in one process: the entrypoint fails after some calls (its tasks' results saved) --


class Stop(Exception):
    """The entrypoint fails here on its first run (its finished calls stay saved)."""


def _flow(provider: Provider, order: list[str], stop_after: list[int], parallel: bool = False) -> Any:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint, task

    from langgraph_effects import Effect, attach_ledger, current_operation, effectful
    from langgraph_effects.ledger.memory import InMemoryLedger

    @task
    @effectful(Effect(dedup_window=3600))
    async def notify(recipient: str) -> str:
        receipt = provider.apply({"operation": recipient}, key=current_operation().provider_key)
        return f"{recipient}:{receipt.effect_id}"

    @entrypoint(checkpointer=attach_ledger(InMemorySaver(), InMemoryLedger()))
    async def notify_all(n: int) -> list[str]:
        if parallel:
            futures = [notify(r) for r in order]
            return [await f for f in futures]
        out = []
        for i, r in enumerate(order):
            if stop_after and i == stop_after[0]:
                stop_after.clear()
                raise Stop
            out.append(await notify(r))
        return out

    return notify_all


CONFIG: Any = {"configurable": {"thread_id": "t"}}


@pytest.mark.parametrize("order", [["x", "x", "y", "x"], ["a", "b", "c", "d"]])
async def test_equal_calls_resumed_in_the_same_order_are_each_sent_once(
    tmp_path: Path, order: list[str]
) -> None:
    provider = Provider(str(tmp_path / "p.sqlite"), "dedup")
    flow = _flow(provider, order, [2])
    with pytest.raises(Stop):
        await flow.ainvoke(1, CONFIG, durability="sync")
    assert await flow.ainvoke(None, CONFIG, durability="sync") == [
        f"{r}:eff_{i + 1}" for i, r in enumerate(order)
    ]
    assert provider.count_effects() == {r: order.count(r) for r in order}


async def test_an_equal_call_moved_into_a_saved_place_stops_the_run(tmp_path: Path) -> None:
    from langgraph_effects import NondeterminismError

    provider = Provider(str(tmp_path / "p.sqlite"), "dedup")
    order = ["x", "x", "y", "z"]
    flow = _flow(provider, order, [2])
    with pytest.raises(Stop):
        await flow.ainvoke(1, CONFIG, durability="sync")
    order[:] = ["x", "y", "x", "z"]  # place 1 was "x", is "y" now
    with pytest.raises(NondeterminismError) as raised:
        await flow.ainvoke(None, CONFIG, durability="sync")
    error = raised.value
    assert error.position == 1
    assert (error.recorded_args, error.called_args) == ({"recipient": "x"}, {"recipient": "y"})
    assert provider.count_effects() == {"x": 2}  # nothing sent after the first run


async def test_parallel_calls_are_bound_by_what_they_are(tmp_path: Path) -> None:
    provider = Provider(str(tmp_path / "p.sqlite"), "dedup")
    order = ["x", "y", "x"]
    flow = _flow(provider, order, [], parallel=True)
    assert [r.split(":")[0] for r in await flow.ainvoke(1, CONFIG, durability="sync")] == order
    assert provider.count_effects() == {"x": 2, "y": 1}


def test_callorder_decisions() -> None:
    from langgraph_effects.core.callorder import Placed, call_key, crossed, mark, occurrence

    a, b = mark("notify", "h:a", "op_a"), mark("notify", "h:b", "op_b")
    same = [Placed(0, "notify", "h:a", a), Placed(1, "notify", "h:b", b)]
    assert crossed(same) is None
    assert crossed([Placed(0, None, None, None), Placed(1, "notify", "h:b", None)]) is None  # nothing saved
    swapped = [Placed(1, "notify", "h:a", b), Placed(0, "notify", "h:b", a, {"recipient": "b"})]
    found = crossed(swapped)
    assert found is not None and found.index == 0  # the first place, whatever the listing order
    assert (found.recorded_op_id, found.called_args) == ("op_a", {"recipient": "b"})
    not_ours = crossed([Placed(0, None, None, a)])  # a plain @task answered with our result
    assert not_ours is not None and not_ours.called_tool is None
    placed = [Placed(0, "notify", "h:a"), Placed(1, "notify", "h:b"), Placed(2, "notify", "h:a")]
    assert [occurrence(3, "notify", h, placed) for h in ("h:a", "h:b", "h:c")] == [2, 1, 0]
    assert occurrence(1, "notify", "h:a", placed) == 1
    assert call_key("flow", "notify", 2) == "flow:notify#2"


def test_a_sync_entrypoint_is_stopped_the_same_way(tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint, task

    from langgraph_effects import Effect, NondeterminismError, attach_ledger, current_operation, effectful
    from langgraph_effects.ledger.memory import InMemoryLedger

    provider = Provider(str(tmp_path / "p.sqlite"), "dedup")
    order, stop = ["a", "b", "c"], [2]

    @task
    @effectful(Effect(dedup_window=3600))
    def notify(recipient: str) -> str:
        return provider.apply({"operation": recipient}, key=current_operation().provider_key).effect_id

    @entrypoint(checkpointer=attach_ledger(InMemorySaver(), InMemoryLedger()))
    def notify_all(n: int) -> list[str]:
        out = []
        for i, r in enumerate(order):
            if stop and i == stop[0]:
                stop.clear()
                raise Stop
            out.append(notify(r).result())
        return out

    with pytest.raises(Stop):
        notify_all.invoke(1, CONFIG, durability="sync")
    order[:] = ["b", "a", "c"]
    with pytest.raises(NondeterminismError) as raised:
        notify_all.invoke(None, CONFIG, durability="sync")
    assert (raised.value.position, raised.value.called_args) == (0, {"recipient": "b"})
    assert provider.count_effects() == {"a": 1, "b": 1}
