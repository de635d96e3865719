"""EffectToolNode under real crashes: a worker process is SIGKILLed at a fault point,
then the thread is resumed in a fresh process. Effects are counted at a provider
that keeps its own records in its own SQLite file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.lab.providers import Provider
from tests.helpers import run_python
from tests.helpers.agent import Spec, spec_json

pytestmark = [pytest.mark.crash, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


def run_worker(spec: Spec, *, expect_kill: bool = False) -> dict[str, Any]:
    return run_python("-m", "tests.helpers.agent", spec_json(spec), expect_kill=expect_kill)


def tool_messages(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in out["messages"] if m["type"] == "tool"]


def spec(tmp_path: Path, **kw: Any) -> Spec:
    return Spec(db=str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"), **kw)


def ledger_evidence(s: Spec) -> list[dict[str, Any]]:
    with sqlite3.connect(s.db) as db:
        return [json.loads(row[0]) for row in db.execute("SELECT evidence FROM effect_operations")]


def effects(s: Spec) -> int:
    return sum(Provider(s.provider, s.provider_mode).count_effects().values())  # type: ignore[arg-type]


def requests(s: Spec) -> int:
    return Provider(s.provider, s.provider_mode).count_requests("apply")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("contract", "mode", "evidence"),
    [("dedup", "dedup", "result"), ("lookup", "lookup", "lookup"), ("eventual", "lagging", "lookup")],
)
def test_kill_after_effect_settles_without_a_human(
    tmp_path: Path, contract: str, mode: str, evidence: str
) -> None:
    s = spec(tmp_path, contract=contract, provider_mode=mode, lag=4.0 if mode == "lagging" else 0.0)
    run_worker(replace(s, crash="before_outcome"), expect_kill=True)
    assert effects(s) == 1  # the effect landed; the worker died before recording it

    out = run_worker(replace(s, resume=True))
    assert out["interrupts"] == []
    assert effects(s) == 1
    [message] = tool_messages(out)
    assert message["status"] == "success"
    assert message["artifact"]["state"] == "confirmed"
    assert message["artifact"]["evidence"] == evidence
    if contract == "dedup":
        assert requests(s) == 2  # re-sent under the same key; the provider replayed it
    else:
        assert requests(s) == 1  # looked up, never re-sent
        assert message["artifact"]["receipt"]["effect_id"].startswith("eff_")
        assert "landed" in message["content"]
    if contract == "eventual":
        # The listing lagged: the first polls saw nothing, and absence was not taken as proof.
        [evidence_row] = ledger_evidence(s)
        assert evidence_row["kind"] == "lookup" and evidence_row["polls"] > 1


def test_blind_kill_goes_to_review_then_landed(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="blind", provider_mode="blind")
    run_worker(replace(s, crash="before_outcome"), expect_kill=True)
    out = run_worker(replace(s, resume=True))
    [pending] = out["interrupts"]
    review = pending["value"]
    assert review["type"] == "effect_review"
    [entry] = review["operations"]
    assert entry["tool"] == "send" and entry["state"] == "review"
    assert entry["args"] == {"operation": "t1:0"} and entry["args_hash"].startswith("h1")
    assert entry["evidence"]["kind"] == "blind"
    assert effects(s) == 1

    answer = {entry["operation_id"]: {"type": "landed", "receipt": {"ticket": "T-1"}}}
    out = run_worker(replace(s, answer=answer))
    assert out["interrupts"] == []
    assert effects(s) == 1 and requests(s) == 1
    [message] = tool_messages(out)
    assert "landed" in message["content"] and "operator" in message["content"]
    assert message["artifact"]["evidence"] == "verdict"
    assert message["artifact"]["receipt"] == {"ticket": "T-1"}
    assert out["messages"][-1]["content"] == "done"


def test_blind_not_landed_resends_under_the_same_key(tmp_path: Path) -> None:
    # The tool is declared blind, but its provider happens to dedup on our key.
    s = spec(tmp_path, contract="blind", provider_mode="dedup")
    run_worker(replace(s, crash="before_outcome"), expect_kill=True)
    out = run_worker(replace(s, resume=True))
    op_id = out["interrupts"][0]["value"]["operations"][0]["operation_id"]
    out = run_worker(replace(s, answer={op_id: {"type": "not_landed"}}))
    assert out["interrupts"] == []
    assert requests(s) == 2
    assert effects(s) == 1
    [message] = tool_messages(out)
    assert message["artifact"]["attempts"] == 2


def test_blind_abandon_tells_the_model(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="blind", provider_mode="blind")
    run_worker(replace(s, crash="before_outcome"), expect_kill=True)
    out = run_worker(replace(s, resume=True))
    op_id = out["interrupts"][0]["value"]["operations"][0]["operation_id"]
    out = run_worker(replace(s, answer={op_id: {"type": "abandon", "reason": "customer cancelled"}}))
    [message] = tool_messages(out)
    assert message["status"] == "error"
    assert "NOT confirmed" in message["content"] and "customer cancelled" in message["content"]
    assert message["artifact"]["state"] == "abandoned"
    assert requests(s) == 1


@pytest.mark.parametrize(("contract", "mode"), [("dedup", "dedup"), ("blind", "blind"), ("lookup", "lookup")])
def test_kill_before_the_effect_loses_nothing(tmp_path: Path, contract: str, mode: str) -> None:
    s = spec(tmp_path, contract=contract, provider_mode=mode)
    run_worker(replace(s, crash="after_intent"), expect_kill=True)
    assert effects(s) == 0
    out = run_worker(replace(s, resume=True))
    assert out["interrupts"] == []  # a pending intent (blind) is proof nothing was sent
    assert effects(s) == 1
    [message] = tool_messages(out)
    assert message["artifact"]["state"] == "confirmed"


def test_two_workers_resuming_at_once_dispatch_once(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="dedup", provider_mode="blind", calls=3)
    run_worker(replace(s, crash="after_intent"), expect_kill=True)
    # Both resume the same thread concurrently; a blind provider would count a double send.
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.agent", spec_json(replace(s, resume=True))],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in procs:
        proc.wait(timeout=120)
    assert effects(s) == 3
    assert requests(s) == 3
