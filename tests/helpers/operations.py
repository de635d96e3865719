"""One builder of in-memory :class:`Operation` values for the table tests (core rules,
protocol, reconciliation): a plain call to ``send`` with a lookup; each test file
passes what its cases need different."""

from __future__ import annotations

from typing import Any

from langgraph_effects.core.operation import Operation

DEFAULTS: dict[str, Any] = {
    "op_id": "op-1",
    "thread_id": "t",
    "tool": "send",
    "tool_call_id": "c1",
    "args": {},
    "args_hash": "h",
    "provider_key": "key-1",
    "contract": "lookup",
}


def build_op(defaults: dict[str, Any] | None = None, /, **overrides: Any) -> Operation:
    """An operation from :data:`DEFAULTS`, then ``defaults`` (a test file's own), then
    ``overrides`` (one case's)."""
    return Operation(**{**DEFAULTS, **(defaults or {}), **overrides})
