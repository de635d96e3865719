"""Ids, keys and verdicts that cannot be stored as they are: our error, nothing sent or written.

A lone surrogate (``"t\\ud800"``) has no UTF-8 form. Measured before
:class:`~langgraph_effects.errors.UnencodableValueError`: a thread id holding one ended a run
in a raw ``UnicodeEncodeError`` (sqlite3, psycopg, or the id digest under another
saver); a tenant id or policy version made Postgres refuse the checkpoint's metadata
(LangGraph copies them there), so under ``durability="async"`` the tool waited 30 s for
a checkpoint that never came and raised a ``DurabilityError``; an ``Effect(key=...)`` key
raised ``UnicodeEncodeError`` from the id digest; an operator's receipt with such a key
raised ``UnicodeEncodeError`` and one holding an object a pydantic serialization error.
Each entry point now refuses with our error naming the value, on every backend alike;
effects are counted at a provider that keeps its own records.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langgraph_effects import Effect, OperationQuery
from langgraph_effects._runtime.operator import resolve
from langgraph_effects._runtime.undo import request_compensation
from langgraph_effects.core.text import require_config_text, require_metadata_text
from langgraph_effects.errors import UnencodableValueError
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.attach import attach_ledger
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.postgres import PostgresLedger
from langgraph_effects.ledger.sqlite import SqliteLedger
from tests.helpers.one_call import call, make_sender, one_call_graph

from .ledger.conftest import created_schema
from .test_model_strings_backends import backend as saver_and_ledger  # (checkpointer, ledger), set up
from .test_operator import make_op, seed

BAD = "x\ud800"
BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ("thread_id", "config['configurable']['thread_id']"),
        ("tenant_id", "config['configurable']['tenant_id']"),
        ("policy_version", "config['configurable']['policy_version']"),
        ("key", "the key Effect(key=...) made for a send call"),
    ],
)
@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_a_run_with_an_unencodable_id_is_refused_at_once(
    tmp_path: Path, name: str, entry: str, field: str, durability: str
) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    effect = Effect(dedup_window=3600)
    if entry == "key":
        effect = Effect(dedup_window=3600, key=lambda args, config: "key-" + BAD)
    config: Any = {"configurable": {"thread_id": BAD if entry == "thread_id" else "t1"}}
    if entry in ("tenant_id", "policy_version"):
        config["configurable"][entry] = BAD
    async with saver_and_ledger(name, tmp_path) as (saver, ledger):
        graph = one_call_graph([make_sender(provider)], {"send": effect}, saver, [call("send", label="L")])
        if name == "memory":
            attach_ledger(saver, ledger)
        started = time.monotonic()
        with pytest.raises(UnencodableValueError) as raised:
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config, durability=durability)
        took = time.monotonic() - started
        ops = await ledger.list_operations(OperationQuery(states=None))
    assert raised.value.field == field
    assert "\\ud800" in str(raised.value) and "nothing was sent or written" in str(raised.value)
    assert took < 10  # not the 30 s wait for a checkpoint that is never saved
    assert provider.count_requests() == 0 and ops == []


def test_config_ids_are_checked_by_the_savers_before_any_sql() -> None:
    """The saver refuses before the database sees the text (sqlite3 and psycopg would
    raise UnicodeEncodeError; Postgres's jsonb refuses the metadata)."""
    require_config_text({"configurable": {"thread_id": "t\x00", "tenant_id": "é"}})  # storable
    with pytest.raises(UnencodableValueError, match=r"checkpoint_ns"):
        require_config_text({"configurable": {"thread_id": "t", "checkpoint_ns": "n\udc00"}})
    with pytest.raises(UnencodableValueError, match=r"'user'.*metadata"):
        require_metadata_text({"source": "input", "step": -1, "user": BAD})


@asynccontextmanager
async def ledger_of(name: str, tmp_path: Path) -> AsyncIterator[Ledger]:
    if name == "memory":
        async with InMemoryLedger() as ledger:
            yield ledger
    elif name == "sqlite":
        async with SqliteLedger.from_conn_string(tmp_path / "ledger.sqlite") as ledger:
            await ledger.setup()
            yield ledger
    else:
        with created_schema("lge_unenc") as (_, dsn):
            async with PostgresLedger.from_conn_string(dsn) as ledger:
                await ledger.setup()
                yield ledger


VERDICTS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    # (case, verdict, keywords, field's printed place)
    ("decision_id", {"type": "not_landed"}, {"decision_id": "dec-" + BAD}, "decision_id ("),
    ("actor", {"type": "not_landed"}, {"actor": "al" + BAD}, "actor ("),
    ("tenant", {"type": "not_landed"}, {"tenant": BAD}, "tenant ("),
    ("note", {"type": "landed", "receipt": {"id": "r"}, "note": BAD}, {}, "the verdict['note']"),
    ("reason", {"type": "abandon", "reason": BAD}, {}, "the verdict['reason']"),
    ("receipt", {"type": "landed", "receipt": {"id": BAD}}, {}, "the verdict['receipt']['id']"),
    ("receipt key", {"type": "landed", "receipt": {BAD: 1}}, {}, "a key of the verdict['receipt']"),
    (
        "receipt object",
        {"type": "landed", "receipt": {"id": object()}},
        {},
        "the verdict['receipt']['id'] (object)",
    ),
]


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize(("case", "verdict", "keywords", "where"), VERDICTS, ids=[v[0] for v in VERDICTS])
async def test_a_verdict_that_cannot_be_stored_is_refused_before_anything_is_written(
    tmp_path: Path, name: str, case: str, verdict: dict[str, Any], keywords: dict[str, Any], where: str
) -> None:
    async with ledger_of(name, tmp_path) as ledger:
        op = await seed(ledger, make_op(), "review")
        trail = await ledger.audit(op.op_id)
        with pytest.raises(UnencodableValueError) as raised:
            await resolve(
                ledger, op.op_id, verdict, expected_version=op.version, **{"actor": "alice", **keywords}
            )
        after, trail_after = await ledger.get(op.op_id), await ledger.audit(op.op_id)
    assert str(raised.value).startswith(where), str(raised.value)
    assert after == op and trail_after == trail  # nothing written


@pytest.mark.parametrize("name", BACKENDS)
async def test_a_compensation_request_with_an_unstorable_reason_is_refused(tmp_path: Path, name: str) -> None:
    async with ledger_of(name, tmp_path) as ledger:
        op = await seed(ledger, make_op(), "confirmed")
        with pytest.raises(UnencodableValueError, match=r"^reason \('whyx\\\\ud800'\)"):
            await request_compensation(ledger, op.op_id, effects={}, actor="alice", reason="why" + BAD)
        assert await ledger.get(op.op_id) == op


@pytest.mark.slow
def test_the_console_refuses_a_receipt_that_cannot_be_stored(tmp_path: Path) -> None:
    """A receipt's JSON may escape a lone surrogate; the console answers with exit 2."""
    from .test_cli import run
    from .test_operator import seeded_ledger_file

    db = tmp_path / "agent.sqlite"
    [op] = seeded_ledger_file(db, (make_op("op_" + "6" * 32), "review"))
    done = run(
        "resolve", op.op_id, "--landed", "--receipt", '{"id": "r\\ud800"}',
        "--expected-version", str(op.version), "--actor", "alice", "--db", str(db),
    )
    assert done.returncode == 2, done.stderr
    assert "the verdict['receipt']['id'] ('r\\\\ud800') is not valid text" in done.stderr
    assert "Traceback" not in done.stderr
