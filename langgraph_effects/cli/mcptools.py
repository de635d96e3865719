"""``langgraph-effects mcp-tools``: an MCP server's tools, their annotations, and a
suggested contract for each (hints read, never trusted; see ``docs/mcp.md``)."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Mapping
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from .._runtime.targets import load_target
from ..core.contract import Effect
from ..core.hints import HINTS, Suggestion, lookup_candidates, read_hints, suggest
from ..errors import TargetNotFoundError
from .app import JsonOption, app
from .failures import EXIT_OK, BadInput, fail
from .render import print_json, stderr, stdout

_SHORT = {
    "readOnlyHint": "read-only",
    "idempotentHint": "idempotent",
    "destructiveHint": "destructive",
    "openWorldHint": "open-world",
}


def describe(effect: Effect) -> str:
    """A declared contract, in a few words."""
    if effect.read_only_tool:
        return "Effect.read_only()"
    parts = []
    if effect.dedup_window is not None:
        parts.append(f"dedup_window={effect.dedup_window}")
    if effect.key_argument is not None:
        parts.append(f"key_argument={effect.key_argument!r}")
    if effect.lookup is not None:
        parts.append("lookup=...")
    return f"Effect({', '.join(parts)})" if parts else "Effect() (blind)"


def connection_for(url: str | None, stdio: str | None) -> dict[str, Any]:
    """The ``langchain-mcp-adapters`` connection that ``--url`` or ``--stdio`` names."""
    if (url is None) == (stdio is None):
        raise BadInput(
            "give the server as exactly one of --url URL (streamable HTTP) or --stdio 'COMMAND ARGS'."
        )
    if url is not None:
        return {"transport": "streamable_http", "url": url}
    argv = shlex.split(stdio or "")
    if not argv:
        raise BadInput("--stdio takes the server's command line, e.g. --stdio 'python server.py'.")
    return {"transport": "stdio", "command": argv[0], "args": argv[1:]}


def load_effects(target: str | None) -> dict[str, Effect] | None:
    """The mapping ``--effects MODULE:ATTR`` names (tool name -> Effect)."""
    if target is None:
        return None
    try:
        found: Any = load_target(target)
    except TargetNotFoundError as error:
        raise BadInput(f"--effects {target}: {error.reason}") from error
    if not isinstance(found, Mapping) or not all(isinstance(v, Effect) for v in found.values()):
        raise BadInput(
            f"--effects {target} must name a mapping of tool name -> Effect, not {type(found).__name__}."
        )
    return dict(found)


async def list_tools(connection: Mapping[str, Any]) -> list[Any]:
    """The server's tools as ``langchain-mcp-adapters`` loads them."""
    try:
        from langchain_mcp_adapters.client import MultiServerMCPClient
    except ModuleNotFoundError as error:
        raise BadInput('mcp-tools needs the mcp extra: pip install "langgraph-effects[mcp]".') from error
    try:
        return await MultiServerMCPClient({"server": dict(connection)}).get_tools()  # type: ignore[dict-item]
    except Exception as error:  # the server named is wrong or down: the user's input
        cause: BaseException = error
        while len(getattr(cause, "exceptions", ())) == 1:  # an exception group of one
            cause = cause.exceptions[0]  # type: ignore[attr-defined]
        raise BadInput(
            f"could not list the tools of the MCP server ({type(cause).__name__}: {cause}); "
            "check --url / --stdio."
        ) from error


def suggestions(tools: list[Any]) -> list[Suggestion]:
    """One suggestion per tool, in the server's order."""
    from .._integrations.mcp import _arguments

    seen = {tool.name: (read_hints(tool.metadata), _arguments(tool)) for tool in tools}
    lookups = lookup_candidates(seen)
    return [suggest(name, hints, arguments, lookups) for name, (hints, arguments) in seen.items()]


@app.command("mcp-tools")
def mcp_tools_command(
    url: Annotated[str | None, typer.Option("--url", help="The server's streamable HTTP endpoint.")] = None,
    stdio: Annotated[
        str | None,
        typer.Option(
            "--stdio", metavar="COMMAND", help="Start the server over stdio with this command line."
        ),
    ] = None,
    effects: Annotated[
        str | None,
        typer.Option(
            "--effects",
            metavar="MODULE:ATTR",
            help="Your declared contracts (tool name -> Effect), shown beside the suggestions.",
        ),
    ] = None,
    require: Annotated[
        bool,
        typer.Option("--require", help="Exit 2 when a tool has no declared contract in --effects."),
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """List an MCP server's tools with their annotations and a suggested Effect for each.

    Annotations (readOnlyHint, idempotentHint, ...) are the server's hints: they are
    read here to suggest, never applied. A tool you do not declare stays blind.
    """
    try:
        connection = connection_for(url, stdio)
        declared = load_effects(effects)
        if require and declared is None:
            raise BadInput("--require checks your contracts: give them with --effects MODULE:ATTR.")
        tools = asyncio.run(list_tools(connection))
        rows = suggestions(tools)
        missing = [row.tool for row in rows if declared is not None and row.tool not in declared]
        if require and missing:
            raise BadInput(
                f"{len(missing)} tool(s) without a declared contract: {', '.join(missing)}. Declare an "
                "Effect for each (Effect.read_only() for one that changes nothing), or leave it out of "
                "the agent's tools; hints are never a contract."
            )
    except Exception as error:  # mapped to a documented exit code
        fail(error, json_output)
    if json_output:
        print_json({"tools": [_json_row(row, declared) for row in rows]})
    else:
        stdout().print(_table(rows, declared))
        stderr().print(
            Text(
                "Hints are the server's word, never applied: an undeclared tool is blind (sent once, "
                "a lost answer goes to review). See docs/mcp.md.",
                style="dim",
            )
        )
    raise typer.Exit(EXIT_OK)


def _json_row(row: Suggestion, declared: Mapping[str, Effect] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tool": row.tool,
        "hints": dict(row.hints),
        "suggested": row.contract,
        "why": row.why,
    }
    if declared is not None:
        out["declared"] = describe(declared[row.tool]) if row.tool in declared else None
    return out


def _table(rows: list[Suggestion], declared: Mapping[str, Effect] | None) -> Table:
    table = Table(box=None, pad_edge=False)
    for column in ("tool", "hints", *(["declared"] if declared is not None else []), "suggested", "why"):
        table.add_column(column, overflow="fold")
    for row in rows:
        hints = ", ".join(f"{_SHORT[h]}={'yes' if row.hints[h] else 'no'}" for h in HINTS if h in row.hints)
        cells = [row.tool, hints or "-"]
        if declared is not None:
            cells.append(describe(declared[row.tool]) if row.tool in declared else "(none: blind)")
        cells += [row.contract or "(none: blind)", row.why]
        table.add_row(*cells)
    return table
