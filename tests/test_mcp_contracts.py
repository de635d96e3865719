"""``require_contracts``: MCP tool annotations are hints, never a contract; a user who
asks for declared contracts gets nothing built while a tool has none."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_mcp_adapters", reason='needs the mcp extra: pip install -e ".[mcp]"')

from langchain_core.tools import StructuredTool

from langgraph_effects import ConfigurationError, Effect, require_contracts


def mcp_tool(name: str, properties: list[str], **hints: Any) -> StructuredTool:
    """A tool shaped as langchain-mcp-adapters loads one: a JSON schema, hints in metadata."""

    async def call(**kwargs: Any) -> str:
        raise AssertionError("never called")

    schema = {"type": "object", "properties": {p: {"type": "string"} for p in properties}}
    return StructuredTool(name=name, description=name, args_schema=schema, coroutine=call, metadata=hints)


TOOLS = [
    mcp_tool("create_ticket", ["title", "idempotency_key"], idempotentHint=True),
    mcp_tool("find_ticket", ["idempotency_key"], readOnlyHint=True),
    mcp_tool("post_note", ["text"], readOnlyHint=False, idempotentHint=True),
]


def test_every_tool_declared_passes_the_tools_through() -> None:
    effects = {
        "create_ticket": Effect(dedup_window=60, key_argument="idempotency_key"),
        "find_ticket": Effect.read_only(),
        "post_note": Effect(),
    }
    assert require_contracts(TOOLS, effects) == TOOLS


def test_a_tool_without_a_contract_is_refused_whatever_its_hints() -> None:
    with pytest.raises(ConfigurationError) as raised:
        require_contracts(TOOLS, {"create_ticket": Effect(dedup_window=60, key_argument="idempotency_key")})
    message = str(raised.value)
    assert "2 tool(s) without a declared contract" in message
    # Named with its hints and a suggestion, even a read-only-hinted one: hints are not contracts.
    assert "find_ticket (readOnlyHint=True): consider Effect.read_only()" in message
    assert "post_note (readOnlyHint=False, idempotentHint=True)" in message
    assert "create_ticket (" not in message
