"""Authority on recovery: a crashed call resumed under a changed policy version (or
tenant) is not re-sent; it goes to review, and the review entry says what changed.
Real worker processes are killed; effects are counted at the provider's own records."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.lab.providers import Provider
from tests.helpers import run_console, run_python
from tests.helpers.agent import Spec
from tests.helpers.one_call import ledger_rows

# -- authority on recovery: a crash, then a resume under changed config ------------------

# A worker like tests/helpers/agent.py, whose config also carries tenant_id and
# policy_version (the helper's Spec has no way to set them).
WORKER = r"""
import asyncio, json, os, signal, sys
from langchain_core.messages import HumanMessage
from langgraph_effects import AsyncEffectSqliteSaver, resume_command
from langgraph_effects._runtime import faults as _faults
from tests.helpers.agent import Spec, build, describe, provider_for

raw = json.loads(sys.argv[1])
configurable = raw.pop("configurable")
spec = Spec(**raw)

async def run():
    provider = provider_for(spec)
    if spec.crash:
        _faults.install(spec.crash, lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
    config = {"configurable": {"thread_id": spec.thread, **configurable}}
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        graph = build(spec, saver, provider)
        if spec.answer is not None:
            payload = resume_command((await graph.aget_state(config)).interrupts, spec.answer)
        elif spec.resume:
            payload = None
        else:
            payload = {"messages": [HumanMessage("go")]}
        result = await graph.ainvoke(payload, config, durability=spec.durability)
        return describe(result, await graph.aget_state(config))

print(json.dumps(asyncio.run(run()), default=str))
"""


def run_worker(spec: Spec, configurable: dict[str, str], *, expect_kill: bool = False) -> dict[str, Any]:
    payload = json.dumps({**asdict(spec), "configurable": configurable})
    return run_python("-c", WORKER, payload, expect_kill=expect_kill)


def crash_spec(tmp_path: Path) -> Spec:
    return Spec(
        db=str(tmp_path / "agent.sqlite"),
        provider=str(tmp_path / "provider.sqlite"),
        contract="dedup",
        provider_mode="dedup",
    )


def provider_counts(spec: Spec) -> tuple[int, int]:
    """(effects, apply requests) at the provider."""
    provider = Provider(spec.provider, spec.provider_mode)  # type: ignore[arg-type]
    return sum(provider.count_effects().values()), provider.count_requests("apply")


@pytest.mark.slow
@pytest.mark.crash
def test_resend_refused_after_a_policy_version_change(tmp_path: Path) -> None:
    s = crash_spec(tmp_path)
    at_intent = {"tenant_id": "acme", "policy_version": "v1"}
    run_worker(replace(s, crash="before_outcome"), at_intent, expect_kill=True)
    assert provider_counts(s) == (1, 1)  # it landed; the worker died before recording it

    # The same dedup call, resumed under policy v2: within its dedup window it would be
    # re-sent automatically, but not under a policy it was not approved under.
    now = {"tenant_id": "acme", "policy_version": "v2"}
    out = run_worker(replace(s, resume=True), now)
    assert provider_counts(s) == (1, 1)  # not re-sent
    [pending] = out["interrupts"]
    assert pending["value"]["type"] == "effect_review"
    [entry] = pending["value"]["operations"]
    assert entry["state"] == "review" and entry["contract"] == "dedup"
    assert entry["evidence"]["kind"] == "policy"
    assert entry["evidence"]["changed"] == {"policy_version": {"at_intent": "v1", "now": "v2"}}
    [(op_id, state, _, tenant, policy)] = ledger_rows(Path(s.db))
    assert (op_id, state, tenant, policy) == (entry["operation_id"], "review", "acme", "v1")

    # The console shows the operator the same reason.
    shown = run_console("show", op_id, "--json", "--db", s.db)
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["operation"]["evidence"]["changed"]["policy_version"] == {"at_intent": "v1", "now": "v2"}

    # The operator confirms it landed: settled, still one request.
    out = run_worker(replace(s, answer={op_id: {"type": "landed", "receipt": "checked"}}), now)
    assert out["interrupts"] == []
    assert provider_counts(s) == (1, 1)
    [message] = [m for m in out["messages"] if m["type"] == "tool"]
    assert message["artifact"]["state"] == "confirmed" and message["artifact"]["evidence"] == "verdict"


@pytest.mark.slow
@pytest.mark.crash
def test_unchanged_policy_resends_under_the_same_key(tmp_path: Path) -> None:
    """The control: same tenant and policy, so the dedup contract re-sends safely."""
    s = crash_spec(tmp_path)
    config = {"tenant_id": "acme", "policy_version": "v1"}
    run_worker(replace(s, crash="before_outcome"), config, expect_kill=True)
    out = run_worker(replace(s, resume=True), config)
    assert out["interrupts"] == []
    assert provider_counts(s) == (1, 2)  # re-sent under the same key, deduplicated


@pytest.mark.slow
@pytest.mark.crash
def test_resend_refused_after_a_tenant_change(tmp_path: Path) -> None:
    """A resume under another tenant finds the same operation and does not re-send it."""
    s = crash_spec(tmp_path)
    run_worker(replace(s, crash="before_outcome"), {"tenant_id": "acme"}, expect_kill=True)
    out = run_worker(replace(s, resume=True), {"tenant_id": "globex"})
    assert provider_counts(s) == (1, 1)  # not re-sent, under any key
    [pending] = out["interrupts"]
    [entry] = pending["value"]["operations"]
    assert entry["evidence"]["changed"]["tenant"] == {"at_intent": "acme", "now": "globex"}
    assert len(ledger_rows(Path(s.db))) == 1
