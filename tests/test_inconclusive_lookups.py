"""A provider lookup that raises or hangs is inconclusive: review with the reason in the
evidence, never a re-send without a dedup contract. Effects are counted at a provider
that keeps its own records."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_effects import (
    Effect,
    Inconclusive,
    InMemoryLedger,
    LookupRequest,
    OperationQuery,
    State,
    attach_ledger,
    current_operation,
    resume_command,
)
from langgraph_effects.lab.providers import Provider
from tests.helpers.one_call import call, one_call_graph

ALL_STATES = frozenset(State)


# -- a provider lookup that raises or hangs ----------------------------------------------


@pytest.mark.parametrize("failure", ["raises", "hangs"])
@pytest.mark.parametrize("dedup", [False, True])
async def test_inconclusive_lookup(tmp_path: Path, failure: str, dedup: bool) -> None:
    """Inconclusive evidence: review (blind-like) with the reason; a re-send only where
    the provider dedups on our key."""
    provider = Provider(tmp_path / "provider.sqlite", "dedup" if dedup else "lookup")
    calls_made: list[int] = []

    @tool
    def send(label: str) -> str:
        """Send, then lose the answer on the first attempt."""
        op = current_operation()
        receipt = provider.apply({"operation": label}, key=op.provider_key)
        if op.attempt == 1:
            raise TimeoutError("the provider did not answer in time")
        return receipt.effect_id

    async def lookup(request: LookupRequest) -> Any:
        calls_made.append(request.attempt)
        if failure == "raises":
            raise RuntimeError("lookup API answered 500")
        await asyncio.sleep(30)
        return Inconclusive("unreachable")

    effect = Effect(
        lookup=lookup, lookup_timeout=0.2, lookup_attempts=2, dedup_window=3600 if dedup else None
    )
    config: Any = {"configurable": {"thread_id": "t1"}}
    ledger = InMemoryLedger()
    graph = one_call_graph([send], {"send": effect}, attach_ledger(InMemorySaver(), ledger),
                           [call("send", label="L")])
    started = time.monotonic()
    await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert time.monotonic() - started < 10  # a hung lookup is cut off at its timeout
    assert len(calls_made) == 2  # polled lookup_attempts times
    state = await graph.aget_state(config)
    reason = "lookup raised RuntimeError: lookup API answered 500" if failure == "raises" else (
        "lookup timed out after 0.2s"
    )
    if dedup:
        # The provider dedups on our key: re-sent under it, one effect.
        assert state.interrupts == ()
        assert provider.count_requests("apply") == 2 and provider.count_effects() == {"L": 1}
        [op] = await ledger.list_operations(OperationQuery(states=ALL_STATES))
        assert op.state is State.CONFIRMED
        return
    assert provider.count_requests("apply") == 1  # never re-sent without a dedup contract
    [pending] = state.interrupts
    [entry] = pending.value["operations"]
    assert entry["state"] == "review" and entry["contract"] == "lookup"
    evidence = entry["evidence"]
    assert evidence["kind"] == "lookup" and evidence["found"] is None
    assert reason in evidence["reason"]
    assert evidence["cause"]["kind"] == "timeout"

    # The operator checks and confirms: settled without sending again.
    await graph.ainvoke(resume_command(state.interrupts, {entry["operation_id"]: {"type": "landed"}}), config)
    assert provider.count_requests("apply") == 1
    assert (await graph.aget_state(config)).interrupts == ()
