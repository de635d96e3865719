"""The four strategies of the seed experiment, written as a LangGraph user would.

Each is the prebuilt ``ToolNode`` around one async tool, with
``handle_tool_errors=True`` so that a failed call becomes an error
``ToolMessage`` the model can react to (except a 429 where the node carries a
``RetryPolicy`` for it: ``definite-retry``). The identity a user has at hand inside a
tool, and which survives a resume, is the thread id plus the ``tool_call_id``;
the markers and the provider key are built from it. (A re-planned call gets a
new ``tool_call_id``, so that identity does not survive a re-plan: the
``timeout`` column shows what that costs.)

The ``faults.reach("C")`` lines are the lab's, not the strategy's: crash point
C sits between the provider's answer and the local record. ``A`` (where two
duplicate deliveries also meet) and ``B`` are inside ``client.send``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.prebuilt import ToolNode

from .providers import ProviderMode
from .strategies import (
    TOOL_NAME,
    BuildContext,
    Strategy,
    ToolsBuilder,
    register,
    scenario_tools,
)


class LocalMarkers:
    """A completion table in the application's own SQLite database.

    Opened per call with plain ``sqlite3``, each write its own durable commit,
    as a careful user would do it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE IF NOT EXISTS sent (marker TEXT PRIMARY KEY, receipt TEXT)")
        return db

    def get(self, marker: str) -> str | None:
        db = self._connect()
        try:
            row = db.execute("SELECT receipt FROM sent WHERE marker = ?", (marker,)).fetchone()
        finally:
            db.close()
        return None if row is None else str(row[0])

    def put(self, marker: str, receipt: str) -> None:
        db = self._connect()
        try:
            db.execute("INSERT OR REPLACE INTO sent VALUES (?, ?)", (marker, receipt))
        finally:
            db.close()


def call_identity(config: RunnableConfig, tool_call_id: str) -> str:
    """Thread id + tool_call_id: stable across a resume of the same call."""
    thread_id = config.get("configurable", {}).get("thread_id", "")
    return f"{thread_id}:{tool_call_id}"


def build_retry_only(ctx: BuildContext) -> ToolNode:
    """Send without a key and keep no record: a resume simply runs the tool again."""
    client, faults = ctx.client, ctx.faults

    @tool(TOOL_NAME)
    async def send_notification(operation: str, body: str) -> str:
        """Send one notification."""
        receipt = await client.asend({"operation": operation, "body": body})
        faults.reach("C")
        return f"sent {receipt.effect_id}"

    return ToolNode([send_notification, *scenario_tools(ctx)], handle_tool_errors=ctx.handled_errors)


def build_record_after(ctx: BuildContext) -> ToolNode:
    """Send, then record completion; a re-run skips a call already recorded."""
    return _with_marker(ctx, claim_first=False)


def build_record_before(ctx: BuildContext) -> ToolNode:
    """Record first, then send; a re-run treats the record as completion."""
    return _with_marker(ctx, claim_first=True)


def _with_marker(ctx: BuildContext, *, claim_first: bool) -> ToolNode:
    """A tool that keeps a local completion marker per call (written before the send too,
    as ``claimed``, when ``claim_first``) and skips a call already marked."""
    client, faults, markers = ctx.client, ctx.faults, LocalMarkers(ctx.files.local)

    async def send(request: dict[str, Any], marker: str) -> str:
        done = markers.get(marker)
        if done is not None:
            return f"already sent {done}"
        if claim_first:
            markers.put(marker, "claimed")
        receipt = await client.asend(request)
        faults.reach("C")
        markers.put(marker, receipt.effect_id)
        return f"sent {receipt.effect_id}"

    return _per_call(ctx, send)


def build_provider_key(ctx: BuildContext) -> ToolNode:
    """Send under a stable idempotency key to a provider that deduplicates."""
    client, faults = ctx.client, ctx.faults

    async def send(request: dict[str, Any], key: str) -> str:
        receipt = await client.asend(request, key=key)
        faults.reach("C")
        return f"sent {receipt.effect_id}"

    return _per_call(ctx, send)


def _per_call(ctx: BuildContext, send: Callable[[dict[str, Any], str], Awaitable[str]]) -> ToolNode:
    """A ToolNode whose tool hands ``send`` the request and the call's identity
    (`call_identity`, stable across a resume of the same call)."""

    @tool(TOOL_NAME)
    async def send_notification(
        operation: str,
        body: str,
        tool_call_id: Annotated[str, InjectedToolCallId],
        config: RunnableConfig,
    ) -> str:
        """Send one notification."""
        return await send({"operation": operation, "body": body}, call_identity(config, tool_call_id))

    return ToolNode([send_notification, *scenario_tools(ctx)], handle_tool_errors=ctx.handled_errors)


# The four seed rows: (name, tools builder, provider mode, one line for ``--list``).
_SEED_ROWS: tuple[tuple[str, ToolsBuilder, ProviderMode, str], ...] = (
    ("retry-only", build_retry_only, "blind",
     "plain ToolNode; resume re-runs the call, no key, no record"),
    ("record-after", build_record_after, "blind",
     "send, then write a local completion marker; skip if marked"),
    ("record-before", build_record_before, "blind",
     "write the marker, then send; skip if marked"),
    ("provider-key", build_provider_key, "dedup",
     "stable key (thread:tool_call_id) to a deduplicating provider"),
)

SEED_STRATEGIES: tuple[Strategy, ...] = tuple(
    register(Strategy(name, build, providers=(mode,), summary=summary))
    for name, build, mode, summary in _SEED_ROWS
)
