"""MCP tool annotations read as hints: what the listing suggests (table tests)."""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_effects.core.hints import lookup_candidates, read_hints, suggest


@pytest.mark.parametrize(
    ("metadata", "hints"),
    [
        (None, {}),
        ({"title": "x", "readOnlyHint": True, "idempotentHint": None}, {"readOnlyHint": True}),
        (
            {"mcp": {"tool": {"annotations": {"read_only_hint": False, "idempotent_hint": True}}}},
            {"readOnlyHint": False, "idempotentHint": True},
        ),
        ({"destructiveHint": "yes"}, {}),  # not a boolean: not a hint
    ],
)
def test_hints_are_read_from_both_metadata_shapes(metadata: Any, hints: dict[str, bool]) -> None:
    assert read_hints(metadata) == hints


TOOLS = {
    "create_ticket": ({"idempotentHint": True}, ["title", "idempotency_key"]),
    "open_ticket": ({"destructiveHint": False}, ["title"]),
    "find_ticket": ({"readOnlyHint": True}, ["idempotency_key"]),
    "post_note": ({"idempotentHint": False}, ["text"]),
    "refresh_cache": ({"idempotentHint": True}, []),
}


@pytest.mark.parametrize(
    ("tool", "contract"),
    [
        ("find_ticket", "Effect.read_only()"),
        (
            "create_ticket",
            'Effect(dedup_window=<the server\'s key retention>, key_argument="idempotency_key")',
        ),
        ("refresh_cache", "Effect(dedup_window=<how long a repeat stays harmless>)"),
        ("open_ticket", 'Effect(lookup=mcp_lookup(connection, "find_ticket"))'),
        ("post_note", None),  # find_ticket finds tickets, not notes: blind
    ],
)
def test_suggestions(tool: str, contract: str | None) -> None:
    hints, arguments = TOOLS[tool]
    found = suggest(tool, hints, arguments, lookup_candidates(TOOLS))
    assert found.contract == contract
    assert found.hints == hints and found.why


def test_a_read_only_hint_false_is_no_suggestion_of_its_own() -> None:
    found = suggest("charge", {"readOnlyHint": False, "destructiveHint": True}, ["amount"])
    assert found.contract is None and "review" in found.why
