"""Subgraphs and the Functional API under real crashes (SIGKILL), one effect each."""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.lab.providers import Provider
from tests.helpers.forked import run_module
from tests.test_node_crash import ROOT, effects, requests, run_worker, spec, tool_messages

pytestmark = [pytest.mark.crash, pytest.mark.slow]


def test_subgraph_crash_resumed_from_the_parent(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="dedup", provider_mode="dedup", kind="subgraph", calls=2)
    run_worker(replace(s, crash="before_outcome"), expect_kill=True)
    out = run_worker(replace(s, resume=True))
    assert out["interrupts"] == []
    assert effects(s) == 2
    assert {m["artifact"]["state"] for m in tool_messages(out)} == {"confirmed"}


def test_subgraph_review_surfaces_in_the_parent(tmp_path: Path) -> None:
    s = spec(tmp_path, contract="blind", provider_mode="blind", kind="subgraph")
    run_worker(replace(s, crash="before_outcome"), expect_kill=True)
    out = run_worker(replace(s, resume=True))
    [pending] = out["interrupts"]
    op_id = pending["value"]["operations"][0]["operation_id"]
    out = run_worker(replace(s, answer={op_id: {"type": "landed"}}))
    assert out["interrupts"] == []
    assert effects(s) == 1 and requests(s) == 1
    [message] = tool_messages(out)
    assert message["artifact"]["evidence"] == "verdict"


def run_functional(spec: dict[str, Any], *, expect_kill: bool = False) -> dict[str, Any]:
    # A forked worker: test_identity.py runs thirty crash-and-resume pairs of these.
    proc = run_module("tests.helpers.functional_agent", json.dumps(spec), cwd=ROOT)
    if expect_kill:
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
        return {}
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", ["dedup", "blind"])
def test_task_crash_has_one_effect(tmp_path: Path, mode: str) -> None:
    base = {
        "db": str(tmp_path / "wf.sqlite"),
        "provider": str(tmp_path / "p.sqlite"),
        "provider_mode": mode,
        "contract": "dedup" if mode == "dedup" else "blind",
        "calls": 2,
    }
    run_functional({**base, "crash": "before_outcome"}, expect_kill=True)
    provider = Provider(base["provider"], mode)  # type: ignore[arg-type]
    assert sum(provider.count_effects().values()) == 1
    out = run_functional({**base, "resume": True})
    if mode == "blind":
        [pending] = out["interrupts"]  # blind: the crashed call waits for an operator
        assert pending["value"]["type"] == "effect_review"
        assert provider.count_effects() == {"wf:0": 1}
        op_id = pending["value"]["operations"][0]["operation_id"]
        out = run_functional({**base, "answer": {op_id: {"type": "landed"}}})
    assert out["interrupts"] == []
    assert len(out["result"]) == 2
    assert provider.count_effects() == {"wf:0": 1, "wf:1": 1}
