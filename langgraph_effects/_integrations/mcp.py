"""MCP tools loaded with ``langchain-mcp-adapters``: the provider key carried to the
server, and a lookup that is another tool of the same server (see ``docs/mcp.md``).

The tools themselves run under ``EffectMiddleware`` / ``EffectToolNode`` like any tool,
with contracts per tool name. What this module adds is the key's way to the server:

* a tool argument, when the tool's input schema has one: ``Effect(key_argument=...)``
  (no code here; every transport);
* ``_meta`` under `META_KEY` on ``tools/call``: `EffectKeyInterceptor`
  makes the call itself on a session of its own (the adapter's interceptors may only
  change a call's name, arguments and headers, so it cannot pass ``_meta``);
* an ``Idempotency-Key`` HTTP header, on HTTP transports (streamable HTTP, SSE).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from langchain_core.tools import BaseTool

from .._runtime.context import maybe_current_operation
from ..core.contract import Effect, Inconclusive, Landed, Lookup, LookupOutcome, LookupRequest, NotLanded
from ..core.hints import lookup_candidates, read_hints, suggest
from ..errors import ConfigurationError, MissingExtraError
from . import keys

try:
    from langchain_mcp_adapters.interceptors import MCPToolCallRequest, MCPToolCallResult
    from langchain_mcp_adapters.sessions import Connection, create_session
    from mcp.types import CallToolResult
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised without the extra
    raise MissingExtraError("MCP tools", "langchain-mcp-adapters", "mcp") from _missing

META_KEY = "io.langgraph-effects/idempotency-key"
"""The ``_meta`` entry of ``tools/call`` that carries the operation's provider key."""
HEADER = "Idempotency-Key"
"""The HTTP header that carries the operation's provider key on HTTP transports."""
HTTP_TRANSPORTS = frozenset({"sse", "http", "streamable_http", "streamable-http"})

Handler = Callable[[MCPToolCallRequest], Awaitable[MCPToolCallResult]]


class EffectKeyInterceptor:
    """A ``tool_interceptors=`` entry for ``MultiServerMCPClient``: every call made under
    an operation carries that operation's provider key to the server.

    Args:
        connections: the client's connections (server name -> connection), the same
            mapping given to ``MultiServerMCPClient``.
        meta: send the key in ``_meta`` under ``meta_key``. The interceptor then makes
            the ``tools/call`` itself, on a session of its own, instead of handing the
            call on; put it last in ``tool_interceptors``.
        meta_key: the ``_meta`` entry's name.
        header: on HTTP transports, also send the key in this header (``None``: no header).

    With ``meta`` the adapter's own handler is not called for calls under an operation,
    so the client's ``callbacks`` (progress, logging, elicitation) do not see them; use
    ``meta=False`` (header and argument routes only) where those matter.

    A call outside an operation (a read-only tool, a plain ``ToolNode``) passes through
    unchanged. So does a call to a server missing from ``connections``: its key then
    goes only where ``Effect(key_argument=...)`` puts it.

    Example:

        connections = {"tickets": {"transport": "stdio", "command": "python", "args": [...]}}
        client = MultiServerMCPClient(connections, tool_interceptors=[EffectKeyInterceptor(connections)])
        tools = await client.get_tools()
    """

    def __init__(
        self,
        connections: Mapping[str, Connection],
        *,
        meta: bool = True,
        meta_key: str = META_KEY,
        header: str | None = HEADER,
    ) -> None:
        self.connections = dict(connections)
        self.meta = meta
        self.meta_key = meta_key
        self.header = header

    async def __call__(self, request: MCPToolCallRequest, handler: Handler) -> MCPToolCallResult:
        op = maybe_current_operation()
        connection = self.connections.get(request.server_name)
        if op is None or connection is None:
            return await handler(request)
        http = connection.get("transport") in HTTP_TRANSPORTS
        if http and self.header is not None:
            request = request.override(headers={**(request.headers or {}), self.header: op.provider_key})
        if not self.meta:
            return await handler(request)
        if http and request.headers:
            connection = _with_headers(connection, request.headers)
        return await call_tool(connection, request.name, request.args, meta={self.meta_key: op.provider_key})


def _with_headers(connection: Connection, headers: Mapping[str, Any]) -> Connection:
    """An HTTP connection with ``headers`` added (as the adapter merges an interceptor's)."""
    merged: dict[str, Any] = dict(connection)
    merged["headers"] = {**(merged.get("headers") or {}), **headers}
    return cast("Connection", merged)


async def call_tool(
    connection: Connection,
    name: str,
    args: Mapping[str, Any],
    *,
    meta: Mapping[str, Any] | None = None,
) -> CallToolResult:
    """One ``tools/call`` on a session of its own (as the adapter does for a client's
    tools), with ``_meta`` when given."""
    raised: BaseException | None = None
    result: CallToolResult | None = None
    async with create_session(connection) as session:
        await session.initialize()
        try:
            result = await session.call_tool(name, dict(args), meta=dict(meta) if meta else None)
        except Exception as error:
            raised = error
    # Raised outside the session's context: its teardown may swallow an exception
    # raised inside (the adapter works around the same SDK behaviour).
    if raised is not None:
        raise raised
    if result is None:  # pragma: no cover - the session closed without an answer
        raise ConnectionError(f"the MCP session closed before {name!r} answered")
    return result


def hide_key_arguments(tools: Sequence[BaseTool], effects: Mapping[str, Effect]) -> list[BaseTool]:
    """The tools with each contract's ``key_argument`` removed from what the model sees.

    An MCP tool's input schema may require an idempotency-key parameter; shown to the
    model, it invites the model to invent values. The runtime fills it on every send
    (``Effect(key_argument=...)``), so the model need not see it. Applies to tools whose
    schema is a JSON schema (as MCP tools' are); other tools are returned unchanged:

        tools = hide_key_arguments(await client.get_tools(), effects)
    """
    shown: list[BaseTool] = []
    for tool in tools:
        name = effects[tool.name].key_argument if tool.name in effects else None
        schema = tool.args_schema
        if name is None or not isinstance(schema, Mapping) or name not in (schema.get("properties") or {}):
            shown.append(tool)
            continue
        trimmed = dict(schema)
        trimmed["properties"] = {k: v for k, v in schema["properties"].items() if k != name}
        if "required" in schema:
            trimmed["required"] = [r for r in schema["required"] if r != name]
        metadata = {**(tool.metadata or {}), keys.HIDDEN: name}
        shown.append(tool.model_copy(update={"args_schema": trimmed, "metadata": metadata}))
    return shown


def require_contracts(tools: Sequence[BaseTool], effects: Mapping[str, Effect]) -> list[BaseTool]:
    """The tools, once every one of them has a declared contract; else nothing is built.

    A tool without a contract runs blind (sent once; after a lost answer, review),
    whatever its MCP annotations say: hints are never read as a contract. Call this
    where a server's new tool must not reach the model undeclared:

        tools = require_contracts(await client.get_tools(), effects)

    Raises:
        ConfigurationError: naming each undeclared tool with its hints and the
            contract ``langgraph-effects mcp-tools`` would suggest for it.
    """
    missing = [tool for tool in tools if tool.name not in effects]
    if not missing:
        return list(tools)
    names = {tool.name: (read_hints(tool.metadata), _arguments(tool)) for tool in tools}
    lookups = lookup_candidates(names)
    lines = []
    for tool in missing:
        hints, arguments = names[tool.name]
        found = suggest(tool.name, hints, arguments, lookups)
        shown = ", ".join(f"{k}={v}" for k, v in hints.items()) or "no hints"
        lines.append(f"  {tool.name} ({shown}): consider {found.contract or 'leaving it out'} ({found.why})")
    raise ConfigurationError(
        f"{len(missing)} tool(s) without a declared contract:\n" + "\n".join(lines) + "\n"
        "Declare an Effect for each in effects= (Effect.read_only() for a tool that changes "
        "nothing), or leave the tool out of tools=. Tool annotations are hints, never a contract."
    )


def _arguments(tool: BaseTool) -> list[str]:
    schema = tool.args_schema
    if isinstance(schema, Mapping):
        return list((schema.get("properties") or {}).keys())
    return list(tool.args)


def _found_field(result: CallToolResult) -> LookupOutcome:
    data = result.structuredContent
    if isinstance(data, Mapping) and isinstance(data.get("found"), bool):
        return Landed(receipt=dict(data)) if data["found"] else NotLanded()
    return Inconclusive(
        "the lookup tool's structured result has no boolean 'found' field; pass found= to mcp_lookup"
    )


def mcp_lookup(
    connection: Connection,
    tool: str,
    *,
    argument: str = "idempotency_key",
    found: Callable[[CallToolResult], LookupOutcome] = _found_field,
) -> Lookup:
    """A contract's lookup that is another tool of the same MCP server, called with the
    operation's provider key in ``argument``:

        Effect(lookup=mcp_lookup(connections["tickets"], "find_ticket"))

    ``found`` reads the tool's answer (default: a structured result with a boolean
    ``found`` field). An error, an ``isError`` result or a broken connection is
    inconclusive, never "not landed": only the server's answer can prove absence.
    """

    async def lookup(request: LookupRequest) -> LookupOutcome:
        try:
            result = await call_tool(connection, tool, {argument: request.provider_key})
        except Exception as error:
            return Inconclusive(f"MCP lookup {tool!r} failed: {type(error).__name__}: {error}")
        if result.isError:
            text = " ".join(getattr(block, "text", "") for block in result.content)
            return Inconclusive(f"MCP lookup {tool!r} answered an error: {text}".strip())
        return found(result)

    return lookup


__all__ = [
    "HEADER",
    "META_KEY",
    "EffectKeyInterceptor",
    "hide_key_arguments",
    "mcp_lookup",
    "require_contracts",
]
