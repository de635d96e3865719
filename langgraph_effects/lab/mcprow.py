"""The MCP column's rows (issue 33): the lab's tool served by a real MCP server.

In the ``mcp-lost`` column the lab's ``send_notification`` is an MCP tool. Each
worker starts an MCP server (the official SDK's FastMCP, streamable HTTP, on a
loopback port of its own, in a thread) in front of the cell's provider, and a
`DroppingProxy` between the server and the client. The graph's
tools come from ``langchain-mcp-adapters`` (``MultiServerMCPClient.get_tools()``),
as a user gets them. On a faulted operation the proxy lets the call through, waits
until the server has applied it and answered, and closes the client's connection
before any of the answer: the worker lives on, the provider holds the effect.

The server deduplicates on the key it finds in the request's ``_meta``
(`META_KEY`) or ``Idempotency-Key`` header when its
provider is ``dedup``, tags the effect with it when the provider is ``lookup``
(and answers ``find_notification(reference)``), and ignores it when ``blind``. A
request without a key is a new request to it, as to any server.

Two rows:

``mcp-toolnode``
    The prebuilt ``ToolNode`` over the adapter's tools, ``handle_tool_errors=True``:
    what users run today. No key reaches the server, the model re-plans the failed
    call, and the dedup server applies it twice.
``mcp-effects``
    ``EffectToolNode`` over the same tools with ``EffectKeyInterceptor`` (the key in
    ``_meta`` and the header) and the contract each provider offers: dedup
    (``Effect(dedup_window=...)``), lookup (``mcp_lookup`` over
    ``find_notification``), blind (undeclared: review).

Opt-in (``langgraph-effects lab --mcp``): it needs the ``mcp`` extra, and each
cell's worker imports the MCP SDK and runs a server.
"""

# No ``from __future__ import annotations``: FastMCP reads the tools' annotations,
# and ``Context`` is imported inside `lab_server` (the mcp extra is optional).
import argparse
import socket
import threading
import time
import uuid
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode

from .._integrations.node import EffectToolNode
from ..core.contract import Effect
from .faults import CONTROL_COLUMNS, CRASH_POINTS
from .mcpdrop import DroppingProxy
from .ours import answer_from_provider, audit_ledger, check_cell
from .providers import EffectRecord, Provider, Withdrawn
from .strategies import TOOL_NAME, BuildContext, Strategy, register

COLUMN = "mcp-lost"
PLAIN = "mcp-toolnode"
OURS = "mcp-effects"
#: The server's lookup tool (``lookup`` provider): ``{"found": bool, ...}`` by reference.
LOOKUP_TOOL = "find_notification"
SERVER_NAME = "lab"


def lab_server(provider: Provider) -> Any:
    """A FastMCP server in front of ``provider`` (stateless streamable HTTP, JSON answers)."""
    from mcp.server.fastmcp import Context, FastMCP

    from .._integrations.mcp import HEADER, META_KEY

    def key_of(ctx: Any) -> str | None:
        meta = ctx.request_context.meta
        found = (meta.model_extra or {}).get(META_KEY) if meta is not None else None
        if found:
            return str(found)
        headers = getattr(ctx.request_context.request, "headers", None)
        return str(headers[HEADER]) if headers is not None and headers.get(HEADER) else None

    server = FastMCP(SERVER_NAME, stateless_http=True, json_response=True, log_level="WARNING")

    @server.tool(name=TOOL_NAME)
    def send_notification(operation: str, body: str, ctx: Context[Any, Any, Any]) -> str:
        """Send one notification."""
        key = key_of(ctx)
        if provider.mode == "blind":
            key = None
        elif not key:
            key = f"unkeyed-{uuid.uuid4().hex}"  # no key: a new request, as to any server
        receipt = provider.apply({"operation": operation, "body": body}, key=key)
        return f"sent {receipt.effect_id}"

    @server.tool(name=LOOKUP_TOOL)
    def find_notification(reference: str) -> dict[str, Any]:
        """The notification sent under ``reference``, or ``{"found": false}``."""
        found = provider.get(reference)
        record = found.record if isinstance(found, Withdrawn) else found
        if isinstance(record, EffectRecord):
            return {"found": True, "effect_id": record.effect_id}
        return {"found": False}

    return server


class ServedApp:
    """An ASGI app served by uvicorn on a loopback port of its own, in a daemon thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port: int = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, name="lab-mcp-server", daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the lab's MCP server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class LoseAnswer:
    """A ``tool_interceptors`` entry: on a faulted attempt, the proxy loses the answer
    of the lab tool's call (the lab's instrument, in both rows alike)."""

    def __init__(self, ctx: BuildContext, proxy: DroppingProxy) -> None:
        self.faults = ctx.faults
        self.proxy = proxy

    async def __call__(self, request: Any, handler: Any) -> Any:
        if request.name == TOOL_NAME and self.faults.mcp_response_lost():
            self.proxy.arm(TOOL_NAME)
        return await handler(request)


async def mcp_tools(ctx: BuildContext, *, ours: bool) -> tuple[list[BaseTool], Any]:
    """The worker's MCP server and proxy, and the lab tool as the adapter loads it
    (with the connection, for a lookup)."""
    from langchain_mcp_adapters.client import MultiServerMCPClient

    from .._integrations.mcp import EffectKeyInterceptor

    served = ServedApp(lab_server(ctx.client.provider).streamable_http_app())
    ctx.exits.callback(served.stop)
    proxy = DroppingProxy(served.port).start()
    ctx.exits.callback(proxy.stop)
    connection: dict[str, Any] = {"transport": "streamable_http", "url": f"http://127.0.0.1:{proxy.port}/mcp"}
    connections: Any = {SERVER_NAME: connection}
    interceptors: list[Any] = [LoseAnswer(ctx, proxy)]
    if ours:
        interceptors.append(EffectKeyInterceptor(connections))  # last: it makes the call itself
    client = MultiServerMCPClient(connections, tool_interceptors=interceptors)
    tools = [tool for tool in await client.get_tools() if tool.name == TOOL_NAME]
    return tools, connection


async def build_plain(ctx: BuildContext) -> ToolNode:
    """The prebuilt ``ToolNode`` over the adapter's tools: what users run today."""
    tools, _ = await mcp_tools(ctx, ours=False)
    return ToolNode(tools, handle_tool_errors=True)


async def build_ours(ctx: BuildContext) -> EffectToolNode:
    """``EffectToolNode`` over the adapter's tools, the key carried by the interceptor."""
    from .._integrations.mcp import mcp_lookup

    tools, connection = await mcp_tools(ctx, ours=True)
    effects: dict[str, Effect] = {}
    if ctx.provider_mode == "dedup":
        effects[TOOL_NAME] = Effect(dedup_window=ctx.client.provider.retention)
    elif ctx.provider_mode == "lookup":
        effects[TOOL_NAME] = Effect(lookup=mcp_lookup(connection, LOOKUP_TOOL, argument="reference"))
    return EffectToolNode(tools, effects=effects, handle_tool_errors=True)


def add_opt_in_arguments(parser: argparse.ArgumentParser) -> None:
    """The lab's flags for its opt-in columns: ``--mcp`` and ``--controls``."""
    parser.add_argument(
        "--mcp",
        action="store_true",
        help="also run the MCP column (mcp-lost: an MCP server per cell; needs the mcp extra)",
    )
    parser.add_argument(
        "--controls",
        action="store_true",
        help="also run the reliability controls' columns (" + ", ".join(CONTROL_COLUMNS) + "; our row only)",
    )


def opt_in_points(
    points: list[str], *, named: bool, mcp: bool, controls: bool = False
) -> tuple[list[str], str | None]:
    """The lab's columns: the opt-in ones only when named (``--crash-points``) or by their
    flag (``--mcp``, ``--controls``); and why they cannot run (the ``mcp`` extra missing),
    if so."""
    if not named:
        points = [p for p in points if not CRASH_POINTS[p].opt_in]
    if controls:
        points = [*points, *(c for c in CONTROL_COLUMNS if c not in points)]
    if mcp and COLUMN not in points:
        points = [*points, COLUMN]
    if COLUMN not in points:
        return points, None
    try:
        import langchain_mcp_adapters  # noqa: F401
        import uvicorn  # noqa: F401
    except ModuleNotFoundError as missing:
        return points, f'the MCP column needs the mcp extra (pip install "langgraph-effects[mcp]"): {missing}'
    return points, None


PLAIN_STRATEGY = register(
    Strategy(
        PLAIN,
        build_plain,
        providers=("dedup",),
        crash_points=(COLUMN,),
        summary="MCP tools (langchain-mcp-adapters) under the prebuilt ToolNode",
    )
)
OURS_STRATEGY = register(
    Strategy(
        OURS,
        build_ours,
        providers=("dedup", "lookup", "blind"),
        ours=True,
        crash_points=(COLUMN,),
        answer_review=answer_from_provider,
        audit=audit_ledger,
        check=check_cell,
        summary="MCP tools under EffectToolNode with EffectKeyInterceptor (blind: undeclared)",
        effect_saver=True,
    )
)
