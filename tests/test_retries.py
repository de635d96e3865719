"""Definite errors reach the user's retry configuration (issue 28, item 4).

The provider (dedup mode, its own records) answers the first request with a 429,
which the contract declares definite, then serves. Each test runs the same graph
twice, once as plain LangGraph and once with this package, and compares what the
provider recorded; the ledger must show one operation, one provider key and every
attempt, and nobody is asked anything. The crash tests SIGKILL a real worker after
the failure was recorded and resume it in a fresh process.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy

from langgraph_effects import InMemoryLedger, OperationQuery, attach_ledger
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime import portal as _portal
from langgraph_effects.lab.providers import Provider, RateLimited
from tests.helpers import run_python
from tests.helpers.retry_agent import (
    CHARGE,
    RetrySpec,
    charge_tool,
    ledger_rows,
    provider_effects,
    provider_requests,
    run,
    spec_json,
)

ROOT = Path(__file__).resolve().parents[1]
KINDS = ["node", "agent", "task"]
RETRIED = ["intent", "fail", "retry", "succeed"]


def specs(tmp_path: Path, **kw: Any) -> tuple[RetrySpec, RetrySpec]:
    """(plain LangGraph, ours): the same graph, each with its own files."""
    made = []
    for name in ("plain", "ours"):
        (tmp_path / name).mkdir()
        made.append(
            RetrySpec(
                db=str(tmp_path / name / "agent.sqlite"),
                provider=str(tmp_path / name / "provider.sqlite"),
                plain=name == "plain",
                **kw,
            )
        )
    return made[0], made[1]


def outcomes(spec: RetrySpec) -> list[str]:
    return [outcome for _key, outcome in provider_requests(spec)]


def seen(out: dict[str, Any], field: str) -> list[Any]:
    """``field`` of every ToolMessage the model saw."""
    return [m[field] for m in out["tool_messages"]]


def the_operation(spec: RetrySpec) -> dict[str, Any]:
    """The ledger's one operation; every request the provider saw carried its key."""
    [op] = ledger_rows(spec)
    assert {key for key, _ in provider_requests(spec)} == {op["provider_key"]}
    return op


# -- without a crash: the same count as plain LangGraph ------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_429_is_retried_as_plain_langgraph_retries_it(tmp_path: Path, kind: str) -> None:
    """RetryPolicy on the node / ToolRetryMiddleware above EffectMiddleware / the task's
    retry_policy: the 429 is raised to them, they retry, the retry is sent."""
    plain, ours = specs(tmp_path, kind=kind)
    plain_out, ours_out = await run(plain), await run(ours)
    assert outcomes(plain) == ["rate_limited", "applied"] and provider_effects(plain) == 1
    assert outcomes(ours) == outcomes(plain) and provider_effects(ours) == 1
    op = the_operation(ours)
    assert (op["state"], op["attempts"], op["events"]) == ("confirmed", 2, RETRIED)
    assert ours_out["interrupts"] == [] and ours_out["error"] is None
    # What the caller got back: the charge, as without us.
    assert seen(ours_out, "content") == seen(plain_out, "content")
    assert ours_out["result"] == plain_out["result"]
    for message in ours_out["tool_messages"]:
        assert message["status"] == "success" and message["artifact"]["attempts"] == 2


async def test_an_error_the_node_answers_as_a_message_is_not_retried(tmp_path: Path) -> None:
    """handle_tool_errors=True turns the 429 into an error ToolMessage: RetryPolicy sees
    no exception, so neither graph retries; the model sees the error once."""
    plain, ours = specs(tmp_path, kind="node", handle_errors=True)
    plain_out, ours_out = await run(plain), await run(ours)
    assert outcomes(plain) == outcomes(ours) == ["rate_limited"]
    assert provider_effects(ours) == 0
    op = the_operation(ours)
    assert (op["state"], op["attempts"], op["events"]) == ("failed", 1, ["intent", "fail"])
    assert [m["status"] for m in plain_out["tool_messages"]] == ["error"]
    [message] = ours_out["tool_messages"]
    assert message["status"] == "error" and "429" in message["content"]
    assert message["artifact"]["state"] == "failed"


@pytest.mark.parametrize("kind", KINDS)
async def test_without_a_retry_the_run_raises_and_a_resume_tries_again(tmp_path: Path, kind: str) -> None:
    """No retry configured: the run ends with the 429, as plain LangGraph's does; a
    resume runs the call again, under the same key, as a new attempt."""
    plain, ours = specs(tmp_path, kind=kind, retry=False)
    for spec in (plain, ours):
        out = await run(spec)
        assert out["error"] is not None and "429" in out["error"]
    assert outcomes(plain) == outcomes(ours) == ["rate_limited"]
    op = the_operation(ours)
    assert (op["state"], op["attempts"]) == ("failed", 1)
    plain_out, ours_out = await run(replace(plain, resume=True)), await run(replace(ours, resume=True))
    assert outcomes(plain) == outcomes(ours) == ["rate_limited", "applied"]
    assert provider_effects(plain) == provider_effects(ours) == 1
    op = the_operation(ours)
    assert (op["state"], op["attempts"], op["events"]) == ("confirmed", 2, RETRIED)
    assert ours_out["interrupts"] == [] and ours_out["result"] == plain_out["result"]


@pytest.mark.parametrize("kind", KINDS)
async def test_retries_run_out_as_they_do_without_us(tmp_path: Path, kind: str) -> None:
    """Five 429s in a row: three attempts each (the retry configuration's bound), then
    what the retry configuration does at the end (raise, or ToolRetryMiddleware's
    error message)."""
    plain, ours = specs(tmp_path, kind=kind, limited=5)
    plain_out, ours_out = await run(plain), await run(ours)
    assert outcomes(plain) == outcomes(ours) == ["rate_limited"] * 3
    assert ours_out["error"] == plain_out["error"]
    assert seen(ours_out, "status") == seen(plain_out, "status")
    op = the_operation(ours)
    trail = ["intent", "fail", "retry", "fail", "retry", "fail"]
    assert (op["state"], op["attempts"], op["events"]) == ("failed", 3, trail)
    assert ours_out["interrupts"] == []


async def test_a_changed_policy_stops_the_retry(tmp_path: Path) -> None:
    """A retry is an automatic send: under another policy version than the intent's it
    is refused, and the recorded failure is what the model sees (nothing sent)."""
    _plain, ours = specs(tmp_path, kind="node", retry=False, policy_version="v1")
    assert (await run(ours))["error"] is not None
    out = await run(replace(ours, resume=True, policy_version="v2"))
    assert outcomes(ours) == ["rate_limited"]
    op = the_operation(ours)
    assert (op["state"], op["attempts"]) == ("failed", 1)
    [message] = out["tool_messages"]
    assert message["status"] == "error" and "429" in message["content"]


def test_sync_node_retries_under_the_same_key(tmp_path: Path) -> None:
    """The sync path (``graph.invoke``) of EffectToolNode, with its RetryPolicy."""
    provider = Provider(tmp_path / "provider.sqlite", "dedup").setup()
    provider.rate_limit(1)
    ledger = InMemoryLedger()

    def model(state: Any) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage("done")]}
        call = {"name": "charge", "args": {"operation": "t1:0"}, "id": "call-0", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    from tests.helpers.retry_agent import _Messages

    builder = StateGraph(_Messages)
    builder.add_node("model", model)
    builder.add_node(
        "tools",
        EffectToolNode([charge_tool(provider)], effects={"charge": CHARGE}, handle_tool_errors=False),
        retry_policy=RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=RateLimited),
    )
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    builder.add_edge("tools", "model")
    graph = builder.compile(checkpointer=attach_ledger(InMemorySaver(), ledger))
    graph.invoke({"messages": [HumanMessage("charge it")]}, {"configurable": {"thread_id": "t1"}})
    [op] = _portal.run(ledger.list_operations(OperationQuery()))
    assert (op.state.value, op.attempts) == ("confirmed", 2)
    trail = [a.event for a in _portal.run(ledger.audit(op.op_id))]
    assert trail == RETRIED
    assert provider.count_requests("apply") == 2 and sum(provider.count_effects().values()) == 1
    assert {e.key for e in provider.effects()} == {op.provider_key}


# -- a real crash after the failure was recorded ---------------------------------------


def run_worker(spec: RetrySpec, *, expect_kill: bool = False) -> dict[str, Any]:
    return run_python("-m", "tests.helpers.retry_agent", spec_json(spec), expect_kill=expect_kill)


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("kind", KINDS)
def test_killed_as_the_retry_is_decided_resumes_as_a_retry(tmp_path: Path, kind: str) -> None:
    """SIGKILL the moment the retry mechanism decides to retry the 429 (the failure is
    recorded by then). The resume runs the call again: a new attempt under the same
    key, as plain LangGraph's resume runs it again; one effect, no review."""
    plain, ours = specs(tmp_path, kind=kind, kill_on_retry=True)
    for spec in (plain, ours):
        run_worker(spec, expect_kill=True)
    op = the_operation(ours)
    assert (op["state"], op["attempts"], op["events"]) == ("failed", 1, ["intent", "fail"])
    plain_out = run_worker(replace(plain, kill_on_retry=False, resume=True))
    ours_out = run_worker(replace(ours, kill_on_retry=False, resume=True))
    assert outcomes(plain) == outcomes(ours) == ["rate_limited", "applied"]
    assert provider_effects(plain) == provider_effects(ours) == 1
    op = the_operation(ours)
    assert (op["state"], op["attempts"], op["events"]) == ("confirmed", 2, RETRIED)
    assert ours_out["interrupts"] == [] and ours_out["error"] is None
    assert ours_out["result"] == plain_out["result"]
    assert seen(ours_out, "content") == seen(plain_out, "content")
    # A second resume finds it settled: replayed, nothing sent.
    run_worker(replace(ours, kill_on_retry=False, resume=True))
    assert len(outcomes(ours)) == 2


@pytest.mark.slow
@pytest.mark.crash
def test_killed_after_the_failure_was_answered_replays_it(tmp_path: Path) -> None:
    """handle_tool_errors=True answered the 429 as an error message, then the worker died
    before the checkpoint kept it. The call is over: the resume replays the message
    (the model sees it once) and sends nothing."""
    _plain, ours = specs(tmp_path, kind="node", handle_errors=True, kill_after_answer=True)
    run_worker(ours, expect_kill=True)
    assert outcomes(ours) == ["rate_limited"]
    out = run_worker(replace(ours, kill_after_answer=False, resume=True))
    assert outcomes(ours) == ["rate_limited"] and provider_effects(ours) == 0
    op = the_operation(ours)
    assert (op["state"], op["attempts"], op["events"]) == ("failed", 1, ["intent", "fail"])
    [message] = out["tool_messages"]
    assert message["status"] == "error" and "429" in message["content"]
    assert out["interrupts"] == []
