"""A planted secret must appear nowhere the package writes or shows.

An effectful tool takes an API key in a ``secret_fields`` argument; its call times out
(ambiguous, blind: review) and its exception message even echoes the key. The key
must then be absent from the ledger file (and its -wal/-shm), the interrupt values,
the ToolMessages the model sees, the package's log output, and the console's
``list`` / ``show`` / ``show --json`` output. The stored args hash is keyed (HMAC)
when ``LANGGRAPH_EFFECTS_HASH_KEY`` is set.

The checkpoints are kept apart from the ledger file here on purpose: LangGraph stores
the conversation itself, including the model's own tool-call arguments, in its
checkpoints. The ledger's own tables are checked inside a shared file as well.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    DefiniteFailure,
    Effect,
    Inconclusive,
    LookupRequest,
    SqliteLedger,
    attach_ledger,
    resume_command,
)
from langgraph_effects.core.identity import REDACTED, args_hash
from langgraph_effects.lab.providers import Provider
from tests.helpers.one_call import one_call_graph

SECRET = "sk_live_PLANTED_9f3a"
HASH_KEY = "hash-key-held-outside-the-ledger"
ARGS = {"customer": "cus_42", "amount": 1200, "api_key": SECRET}


def leaks(blob: bytes | str) -> bool:
    data = blob if isinstance(blob, bytes) else blob.encode()
    return SECRET.encode() in data


def file_bytes(path: Path) -> bytes:
    """The database file and whatever SQLite keeps beside it."""
    return b"".join(
        Path(str(path) + suffix).read_bytes()
        for suffix in ("", "-wal", "-shm", "-journal")
        if Path(str(path) + suffix).exists()
    )


def console(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in {"LANGGRAPH_EFFECTS_DB", "COLUMNS"}}
    environ["COLUMNS"] = "200"
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def graph_over(tools: list[BaseTool], effects: dict[str, Effect], saver: Any, **node_kw: Any) -> Any:
    """model -> tools -> END; the model asks for one charge with ``ARGS``."""
    charge = {"name": "charge", "args": dict(ARGS), "id": "call-charge", "type": "tool_call"}
    return one_call_graph(tools, effects, saver, [charge], **node_kw)


def charge_tool(provider: Provider, failure: str) -> BaseTool:
    @tool
    def charge(customer: str, amount: int, api_key: str) -> str:
        """Charge ``customer``, authenticating with ``api_key``."""
        if failure == "definite":
            raise DefiniteFailure(f"card declined (request authenticated with {api_key})")
        receipt = provider.apply({"operation": customer, "amount": amount})
        if failure == "timeout":
            raise TimeoutError(f"POST /v1/charges timed out (Authorization: Bearer {api_key})")
        return receipt.effect_id

    return charge


CHARGE = Effect(secret_fields=["api_key"])  # blind: an ambiguous call goes to review


@pytest.fixture
def hash_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("LANGGRAPH_EFFECTS_HASH_KEY", HASH_KEY)
    yield HASH_KEY


@dataclass
class Seen:
    """Everything the flow produced that someone could read."""

    interrupts: list[Any]
    tool_messages: list[ToolMessage]
    op_id: str
    args_hash: str
    stored_args: dict[str, Any]


async def timeout_flow(db: Path, provider: Provider) -> Seen:
    """The call times out, goes to review, and an operator abandons it."""
    config: Any = {"configurable": {"thread_id": "t-secret", "tenant_id": "acme"}}
    async with SqliteLedger.from_conn_string(db) as ledger:
        await ledger.setup()
        graph = graph_over([charge_tool(provider, "timeout")], {"charge": CHARGE},
                           attach_ledger(InMemorySaver(), ledger))
        out = await graph.ainvoke({"messages": [HumanMessage("charge cus_42")]}, config)
        state = await graph.aget_state(config)
        [pending] = state.interrupts
        [entry] = pending.value["operations"]
        interrupts = [out["__interrupt__"][0].value, pending.value]

        # An answer naming an operation that is not under review is logged, then ignored.
        await graph.ainvoke(Command(resume={pending.id: {"op_not_here": {"type": "landed"}}}), config)
        state = await graph.aget_state(config)
        interrupts.append(state.interrupts[0].value)
        out = await graph.ainvoke(
            resume_command(
                state.interrupts,
                {entry["operation_id"]: {"type": "abandon", "reason": "customer disputes it"}},
            ),
            config,
        )
        final = await graph.aget_state(config)
        stored = await ledger.get(entry["operation_id"])
        assert stored is not None
        messages = [m for m in [*out["messages"], *final.values["messages"]] if isinstance(m, ToolMessage)]
        return Seen(interrupts, messages, stored.op_id, stored.args_hash, dict(stored.args))


@pytest.mark.slow
def test_planted_secret_appears_nowhere(
    tmp_path: Path, hash_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="langgraph_effects")
    db = tmp_path / "ledger.sqlite"
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    seen = asyncio.run(timeout_flow(db, provider))
    assert provider.count_effects() == {"cus_42": 1}

    # The review showed the operator what they need, with the key blanked out.
    first = seen.interrupts[0]
    [entry] = first["operations"]
    assert entry["args"] == {"customer": "cus_42", "amount": 1200, "api_key": REDACTED}
    assert entry["evidence"]["cause"]["kind"] == "timeout"
    assert REDACTED in entry["evidence"]["cause"]["error"]  # the echo was scrubbed, not dropped
    assert not leaks(json.dumps(seen.interrupts, default=str))

    # The model is told the truth without the key.
    assert seen.tool_messages and all(m.tool_call_id == "call-charge" for m in seen.tool_messages)
    assert "NOT confirmed" in str(seen.tool_messages[-1].content)
    for message in seen.tool_messages:
        assert not leaks(message.model_dump_json())

    # The ledger file (and its WAL) never held it.
    blob = file_bytes(db)
    assert seen.op_id.encode() in blob and REDACTED.encode() in blob
    assert not leaks(blob)
    assert seen.stored_args["api_key"] == REDACTED

    # The args hash is keyed: it cannot be recomputed from guessed arguments without the key.
    assert seen.args_hash.startswith("h1k:")
    assert seen.args_hash == args_hash(ARGS, key=hash_key.encode())
    assert seen.args_hash != args_hash(ARGS)
    assert args_hash(ARGS).startswith("h1:")

    # Nothing in the package's logs (which did log, e.g. the misaddressed answer).
    assert any("op_not_here" in r.getMessage() for r in caplog.records)
    for record in caplog.records:
        if record.name.startswith("langgraph_effects"):
            assert not leaks(record.getMessage()), record.getMessage()
    assert not leaks(caplog.text)

    # Nor in the console.
    listed = console("list", "--db", str(db), "--state", "abandoned")
    assert seen.op_id in listed.stdout
    shown = console("show", seen.op_id, "--db", str(db))
    assert "charge" in shown.stdout and REDACTED in shown.stdout
    shown_json = console("show", seen.op_id, "--json", "--db", str(db))
    view = json.loads(shown_json.stdout)
    assert view["operation"]["args"]["api_key"] == REDACTED
    for done in (listed, shown, shown_json):
        assert not leaks(done.stdout) and not leaks(done.stderr)


@pytest.mark.slow
def test_console_while_under_review_shows_no_secret(tmp_path: Path, hash_key: str) -> None:
    """The operator's view before deciding: ``list`` of unresolved work, ``show``."""
    db = tmp_path / "ledger.sqlite"
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    async def go() -> str:
        async with SqliteLedger.from_conn_string(db) as ledger:
            await ledger.setup()
            graph = graph_over([charge_tool(provider, "timeout")], {"charge": CHARGE},
                               attach_ledger(InMemorySaver(), ledger))
            config: Any = {"configurable": {"thread_id": "t1"}}
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
            [pending] = (await graph.aget_state(config)).interrupts
            return str(pending.value["operations"][0]["operation_id"])

    op_id = asyncio.run(go())
    listed = console("list", "--db", str(db))
    listed_json = console("list", "--json", "--db", str(db))
    shown_json = console("show", op_id, "--json", "--db", str(db))
    assert op_id in listed.stdout and op_id in listed_json.stdout
    assert json.loads(shown_json.stdout)["operation"]["state"] == "review"
    for done in (listed, listed_json, shown_json):
        assert not leaks(done.stdout) and not leaks(done.stderr)
    assert not leaks(file_bytes(db))


def test_ledger_tables_in_a_shared_file_hold_no_secret(tmp_path: Path, hash_key: str) -> None:
    """With AsyncEffectSqliteSaver the ledger shares the file with LangGraph's checkpoints
    (which hold the conversation); the ledger's own tables must still be clean."""
    db = tmp_path / "agent.sqlite"
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    async def go() -> None:
        async with AsyncEffectSqliteSaver.from_conn_string(db) as saver:
            await saver.setup()
            graph = graph_over([charge_tool(provider, "timeout")], {"charge": CHARGE}, saver)
            config: Any = {"configurable": {"thread_id": "t1"}}
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
            state = await graph.aget_state(config)
            [entry] = state.interrupts[0].value["operations"]
            await graph.ainvoke(
                resume_command(state.interrupts, {entry["operation_id"]: {"type": "landed"}}), config
            )

    asyncio.run(go())
    with sqlite3.connect(db) as conn:
        for table in ("effect_operations", "effect_audit"):
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            assert rows
            assert not leaks(repr(rows)), table


@pytest.mark.parametrize("handle_tool_errors", [True, False])
def test_definite_failure_echoing_the_secret_is_scrubbed(
    tmp_path: Path, hash_key: str, handle_tool_errors: bool
) -> None:
    db = tmp_path / "ledger.sqlite"
    provider = Provider(tmp_path / "provider.sqlite", "blind")
    messages: list[ToolMessage] = []

    async def go() -> None:
        async with SqliteLedger.from_conn_string(db) as ledger:
            await ledger.setup()
            graph = graph_over([charge_tool(provider, "definite")], {"charge": CHARGE},
                               attach_ledger(InMemorySaver(), ledger), handle_tool_errors=handle_tool_errors)
            config: Any = {"configurable": {"thread_id": "t1"}}
            try:
                out = await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
            except DefiniteFailure:
                return  # ToolNode semantics: re-raised to the caller (the tool's own exception)
            messages.extend(m for m in out["messages"] if isinstance(m, ToolMessage))

    asyncio.run(go())
    assert provider.count_requests() == 0
    for message in messages:
        assert not leaks(message.model_dump_json())
    assert not leaks(file_bytes(db))


def test_lookup_error_echoing_the_secret_is_scrubbed(tmp_path: Path, hash_key: str) -> None:
    db = tmp_path / "ledger.sqlite"
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    async def lookup(request: LookupRequest) -> Any:
        raise PermissionError(f"403 for GET /v1/charges?key={request.args['api_key']}")

    effect = Effect(secret_fields=["api_key"], lookup=lookup, lookup_attempts=1)
    interrupts: list[Any] = []

    async def go() -> None:
        async with SqliteLedger.from_conn_string(db) as ledger:
            await ledger.setup()
            graph = graph_over([charge_tool(provider, "timeout")], {"charge": effect},
                               attach_ledger(InMemorySaver(), ledger))
            config: Any = {"configurable": {"thread_id": "t1"}}
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
            interrupts.extend(i.value for i in (await graph.aget_state(config)).interrupts)

    asyncio.run(go())
    [review] = interrupts
    assert "lookup raised PermissionError" in review["operations"][0]["evidence"]["reason"]
    assert not leaks(json.dumps(interrupts, default=str))
    assert not leaks(file_bytes(db))


def test_inconclusive_reason_is_kept_when_it_holds_no_secret(tmp_path: Path) -> None:
    """The control for the test above: the lookup's reason reaches the operator."""
    provider = Provider(tmp_path / "provider.sqlite", "blind")

    async def lookup(request: LookupRequest) -> Any:
        return Inconclusive("provider search is down (503)")

    async def go() -> dict[str, Any]:
        async with SqliteLedger.from_conn_string(tmp_path / "ledger.sqlite") as ledger:
            await ledger.setup()
            graph = graph_over(
                [charge_tool(provider, "timeout")],
                {"charge": Effect(secret_fields=["api_key"], lookup=lookup, lookup_attempts=1)},
                attach_ledger(InMemorySaver(), ledger),
            )
            config: Any = {"configurable": {"thread_id": "t1"}}
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
            return dict((await graph.aget_state(config)).interrupts[0].value)

    review = asyncio.run(go())
    assert review["operations"][0]["evidence"]["reason"] == "provider search is down (503)"
