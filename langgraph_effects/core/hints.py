"""MCP tool annotations read as hints: a suggested contract, never a declared one.

An MCP server may annotate its tools (``readOnlyHint``, ``idempotentHint``,
``destructiveHint``, ``openWorldHint``). The protocol calls them hints: a client must
not rely on them for safety. The runtime never reads them; only the console's
``langgraph-effects mcp-tools`` listing does, to suggest an
[`Effect`][langgraph_effects.Effect] a user may then declare. A tool without a declared
contract stays blind (see ``docs/mcp.md``), whatever its hints say.

Pure: no I/O, no MCP imports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The hints, as MCP spells them.
HINTS = ("readOnlyHint", "idempotentHint", "destructiveHint", "openWorldHint")
#: Argument names that usually carry an idempotency key.
KEY_ARGUMENTS = (
    "idempotency_key",
    "idempotencyKey",
    "request_id",
    "requestId",
    "client_token",
    "clientToken",
    "dedup_key",
)
_SNAKE = {
    "read_only_hint": "readOnlyHint",
    "idempotent_hint": "idempotentHint",
    "destructive_hint": "destructiveHint",
    "open_world_hint": "openWorldHint",
}


def read_hints(metadata: Mapping[str, Any] | None) -> dict[str, bool]:
    """The hints a LangChain tool's ``metadata`` carries: flat, as ``langchain-mcp-adapters``
    puts them, or under ``mcp.tool.annotations`` (snake case), as ``langchain.mcp`` does.
    Hints the server did not give are left out."""
    if not metadata:
        return {}
    nested = ((metadata.get("mcp") or {}).get("tool") or {}).get("annotations") or {}
    found: dict[str, bool] = {}
    for source in (nested, metadata):
        for name, value in source.items():
            hint = _SNAKE.get(name, name)
            if hint in HINTS and isinstance(value, bool):
                found[hint] = value
    return found


@dataclass(frozen=True)
class Suggestion:
    """What the listing suggests for one tool, and why (never applied by itself)."""

    tool: str
    hints: Mapping[str, bool]
    contract: str | None
    """Python for the suggested ``Effect``; ``None``: leave it undeclared (blind)."""
    why: str


def key_argument(arguments: Sequence[str]) -> str | None:
    """The first argument whose name says it carries an idempotency key."""
    return next((name for name in KEY_ARGUMENTS if name in arguments), None)


def suggest(
    tool: str,
    hints: Mapping[str, bool],
    arguments: Sequence[str],
    lookups: Sequence[str] = (),
) -> Suggestion:
    """A contract to consider for ``tool``, from its hints and its argument names.

    ``lookups``: the server's tools that could find an effect by key (read-only,
    taking a key argument; see `lookup_candidates`); one whose name ends in the
    same word (``find_ticket`` for ``open_ticket``) is suggested as the lookup.
    """
    key = key_argument(arguments)
    if hints.get("readOnlyHint"):
        return Suggestion(
            tool, hints, "Effect.read_only()", "the server says it changes nothing: declare it if you checked"
        )
    if key is not None:
        return Suggestion(
            tool,
            hints,
            f'Effect(dedup_window=<the server\'s key retention>, key_argument="{key}")',
            f"its input takes {key!r}: declare dedup only if the server deduplicates on it",
        )
    if hints.get("idempotentHint"):
        return Suggestion(
            tool,
            hints,
            "Effect(dedup_window=<how long a repeat stays harmless>)",
            "the server says a repeat with the same arguments adds nothing: declare it if you checked",
        )
    others = [name for name in lookups if name != tool and _noun(name) == _noun(tool)]
    if others:
        return Suggestion(
            tool,
            hints,
            f'Effect(lookup=mcp_lookup(connection, "{others[0]}"))',
            f"{others[0]!r} may find its effect by key, if the server records the key it is sent "
            "(_meta or header): check, else leave it blind",
        )
    return Suggestion(
        tool, hints, None, "no key, no lookup: blind; a lost answer goes to review, never re-sent"
    )


def _noun(name: str) -> str:
    """The last word of a tool name (``open_ticket``, ``openTicket`` -> ``ticket``)."""
    return re.split(r"[_\-.]|(?<=[a-z])(?=[A-Z])", name)[-1].lower()


def lookup_candidates(tools: Mapping[str, tuple[Mapping[str, bool], Sequence[str]]]) -> list[str]:
    """Tools (name -> (hints, argument names)) that read by key: read-only, with a key argument."""
    return [
        name
        for name, (hints, arguments) in tools.items()
        if hints.get("readOnlyHint") and key_argument(arguments) is not None
    ]
