"""Tenants at the operator: a verdict for another tenant's operation is refused (operator
API and console ``--tenant``) and changes nothing. The operation comes from a real graph
run; the provider keeps its own records in its own file."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from langgraph_effects import AsyncEffectSqliteSaver, OperationNotFoundError, SqliteLedger, State
from langgraph_effects._runtime.operator import list_operations, resolve, show
from langgraph_effects.lab.providers import Provider
from tests.helpers import run_console
from tests.helpers.one_call import audit_rows, call, ledger_rows, one_call_graph


@dataclass(frozen=True)
class TenantReview:
    db: Path
    op_id: str
    version: int


@pytest.fixture
def tenant_review(tmp_path: Path) -> TenantReview:
    """A real graph run under tenant ``acme`` left one blind operation in review."""
    db = tmp_path / "agent.sqlite"
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    @tool
    def notify(label: str) -> str:
        """Notify through a provider that can neither dedup nor be queried."""
        provider.apply({"operation": label})
        raise TimeoutError("the provider did not answer in time")

    async def go() -> TenantReview:
        async with AsyncEffectSqliteSaver.from_conn_string(db) as saver:
            await saver.setup()
            graph = one_call_graph([notify], {}, saver, [call("notify", label="acme:1")])
            config: Any = {"configurable": {"thread_id": "t-acme", "tenant_id": "acme"}}
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
            [pending] = (await graph.aget_state(config)).interrupts
            [entry] = pending.value["operations"]
            assert entry["tenant"] == "acme" and entry["state"] == "review"
            return TenantReview(db, entry["operation_id"], entry["version"])

    review = asyncio.run(go())
    assert provider.count_effects() == {"acme:1": 1}
    return review


async def test_cross_tenant_resolve_is_refused_by_the_operator_api(tenant_review: TenantReview) -> None:
    before_rows, before_audit = ledger_rows(tenant_review.db), audit_rows(tenant_review.db)
    async with SqliteLedger.from_conn_string(tenant_review.db) as ledger:
        await ledger.setup()
        for decision in ({"type": "landed"}, {"type": "not_landed"}, {"type": "abandon", "reason": "x"}):
            with pytest.raises(OperationNotFoundError):
                await resolve(
                    ledger,
                    tenant_review.op_id,
                    decision,
                    expected_version=tenant_review.version,
                    actor="mallory",
                    tenant="globex",
                )
        with pytest.raises(OperationNotFoundError):
            await show(ledger, tenant_review.op_id, tenant="globex")
        assert await list_operations(ledger, tenant="globex") == []
    # Nothing changed: not the row, not the audit trail.
    assert ledger_rows(tenant_review.db) == before_rows
    assert audit_rows(tenant_review.db) == before_audit

    async with SqliteLedger.from_conn_string(tenant_review.db) as ledger:
        await ledger.setup()
        after = await resolve(
            ledger,
            tenant_review.op_id,
            {"type": "landed"},
            expected_version=tenant_review.version,
            actor="alice",
            tenant="acme",
        )
        assert after.state is State.CONFIRMED


@pytest.mark.slow
def test_cross_tenant_resolve_is_refused_by_the_console(tenant_review: TenantReview) -> None:
    db = str(tenant_review.db)
    before_rows, before_audit = ledger_rows(tenant_review.db), audit_rows(tenant_review.db)
    version = str(tenant_review.version)
    # (every decision type is tried through the API above; here the one that would re-send)
    for flags in (["--not-landed"], ["--abandon", "--reason", "not ours"]):
        done = run_console(
            "resolve", tenant_review.op_id, *flags, "--expected-version", version,
            "--tenant", "globex", "--actor", "mallory", "--db", db,
        )
        assert done.returncode == 8, (done.returncode, done.stderr)
        assert tenant_review.op_id in done.stderr
    shown = run_console("show", tenant_review.op_id, "--tenant", "globex", "--json", "--db", db)
    assert shown.returncode == 8
    listed = run_console("list", "--tenant", "globex", "--json", "--db", db)
    assert listed.returncode == 0 and json.loads(listed.stdout)["count"] == 0
    assert ledger_rows(tenant_review.db) == before_rows
    assert audit_rows(tenant_review.db) == before_audit

    done = run_console(
        "resolve", tenant_review.op_id, "--landed", "--expected-version", version,
        "--tenant", "acme", "--actor", "alice", "--db", db,
    )
    assert done.returncode == 0, done.stderr
    [(_, state, *_)] = ledger_rows(tenant_review.db)
    assert state == "confirmed"
