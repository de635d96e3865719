"""Bounded sizes: what the model sees of a receipt is a preview; a receipt over the
documented limit is refused with a clear error and nothing is written.

* ``MAX_RECEIPT_BYTES``: the whole receipt is kept (ledger and artifact) up to it.
* ``PREVIEW_CHARS``: what the ToolMessage content shows of it.
* ``MAX_EVIDENCE_CHARS``: an operator's reason; text the package records is cut to it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    Effect,
    Landed,
    LookupRequest,
    OperationQuery,
    State,
    current_operation,
    resume_command,
)
from langgraph_effects._runtime.messages import MAX_EVIDENCE_CHARS, MAX_RECEIPT_BYTES, PREVIEW_CHARS
from langgraph_effects._runtime.operator import resolve
from langgraph_effects.errors import ReviewError
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.sqlite import SqliteLedger
from tests.helpers.one_call import call, one_call_graph

from .test_cli import REVIEW, run
from .test_operator import make_op, new_ledger_file, seed, seeded_ledger_file

CONFIG: Any = {"configurable": {"thread_id": "t1"}}


def timing_out_sender(provider: Provider, *, keyed: bool) -> Any:
    @tool
    def send(label: str) -> str:
        """Send; the first attempt times out after the provider applied it."""
        op = current_operation()
        provider.apply({"operation": label}, key=op.provider_key if keyed else None)
        if op.attempt == 1:
            raise TimeoutError("the provider did not answer in time")
        return "sent"

    return send


async def paused_at_review(tmp_path: Path, saver: AsyncEffectSqliteSaver, provider: Provider) -> Any:
    graph = one_call_graph([timing_out_sender(provider, keyed=False)], {}, saver, [call("send", label="L")])
    await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
    state = await graph.aget_state(CONFIG)
    [op] = await saver.ledger.unresolved()
    assert state.interrupts and op.state is State.REVIEW
    return graph, state, op


async def test_model_sees_a_preview_the_artifact_and_ledger_keep_the_whole(tmp_path: Path) -> None:
    receipt = {"id": "r1", "body": "b" * 50_000}  # within the limit, far over the preview
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
        await saver.setup()
        graph, state, op = await paused_at_review(tmp_path, saver, provider)
        await graph.ainvoke(
            resume_command(state.interrupts, {op.op_id: {"type": "landed", "receipt": receipt}}),
            CONFIG,
            durability="sync",
        )
        final = await graph.aget_state(CONFIG)
        stored = await saver.ledger.get(op.op_id)
    [message] = [m for m in final.values["messages"] if isinstance(m, ToolMessage)]
    assert "landed" in str(message.content)
    assert len(str(message.content)) < PREVIEW_CHARS + 400  # a preview, not 50 KB
    assert "characters in all" in str(message.content)
    assert message.artifact["receipt"] == receipt  # the whole receipt, for a UI
    assert stored is not None and stored.evidence is not None
    assert stored.evidence["receipt"] == receipt
    assert provider.count_requests("apply") == 1


async def test_an_oversized_verdict_receipt_is_refused_through_the_interrupt(tmp_path: Path) -> None:
    huge = "r" * 20_000_000  # the 20 MB receipt of the issue
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
        await saver.setup()
        graph, state, op = await paused_at_review(tmp_path, saver, provider)
        try:
            await graph.ainvoke(
                resume_command(state.interrupts, {op.op_id: {"type": "landed", "receipt": huge}}),
                CONFIG,
                durability="sync",
            )
        except ReviewError as error:  # refused with a clear error ...
            assert f"{MAX_RECEIPT_BYTES:,}-byte limit" in str(error)
        after = await saver.ledger.get(op.op_id)
        still = await graph.aget_state(CONFIG)
        # ... nothing written, and the review still waits: a proper answer settles it.
        assert after is not None and (after.state, after.version) == (op.state, op.version)
        assert still.interrupts
        await graph.ainvoke(
            resume_command(still.interrupts, {op.op_id: {"type": "landed", "receipt": {"id": "r1"}}}),
            CONFIG,
            durability="sync",
        )
        final = await graph.aget_state(CONFIG)
    messages = [m for m in final.values["messages"] if isinstance(m, ToolMessage)]
    assert len(messages) == 1 and '"r1"' in str(messages[0].content)
    assert max(len(str(m.content)) for m in final.values["messages"]) < 2_000
    assert provider.count_requests("apply") == 1


async def test_an_oversized_lookup_receipt_goes_to_review_not_to_the_model(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "lookup")

    async def lookup(request: LookupRequest) -> Any:
        return Landed(receipt={"id": "r1", "raw": "x" * 20_000_000})

    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as saver:
        await saver.setup()
        graph = one_call_graph(
            [timing_out_sender(provider, keyed=True)],
            {"send": Effect(lookup=lookup, lookup_attempts=1)},
            saver,
            [call("send", label="L")],
        )
        await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
        [op] = await saver.ledger.list_operations(OperationQuery(thread_id="t1"))
        state = await graph.aget_state(CONFIG)
    assert op.state is State.REVIEW  # not confirmed with a 20 MB receipt, not re-sent
    assert "byte limit" in json.dumps(op.evidence)
    assert len(json.dumps(op.evidence)) < 10_000
    assert state.interrupts
    assert provider.count_requests("apply") == 1


async def test_operator_api_refuses_oversized_receipt_and_reason(tmp_path: Path) -> None:
    db = await new_ledger_file(tmp_path / "ledger.sqlite")
    async with SqliteLedger.from_conn_string(db) as ledger:
        await ledger.setup()
        op = await seed(ledger, make_op(), "review")
        with pytest.raises(ReviewError, match="byte limit"):
            await resolve(
                ledger, op.op_id, {"type": "landed", "receipt": "r" * 20_000_000},
                expected_version=op.version, actor="alice",
            )
        with pytest.raises(ReviewError, match="character limit"):
            await resolve(
                ledger, op.op_id, {"type": "abandon", "reason": "why " * MAX_EVIDENCE_CHARS},
                expected_version=op.version, actor="alice",
            )
        after = await ledger.get(op.op_id)
        assert after == op and len(await ledger.audit(op.op_id)) == op.version


@pytest.mark.slow
def test_console_refuses_an_oversized_receipt_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite"
    [op] = seeded_ledger_file(db, (make_op(REVIEW), "review"))
    receipt = json.dumps({"raw": "x" * (MAX_RECEIPT_BYTES + 1)})
    done = run(
        "--db", str(db), "resolve", REVIEW, "--landed", "--receipt", receipt,
        "--expected-version", str(op.version), "--json",
    )
    assert done.returncode == 2, done.stderr
    assert "byte limit" in json.loads(done.stdout)["error"]["message"]

    async def read() -> Any:
        async with SqliteLedger.from_conn_string(db, read_only=True) as ledger:
            return await ledger.get(REVIEW), len(await ledger.audit(REVIEW))

    assert asyncio.run(read()) == (op, op.version)
