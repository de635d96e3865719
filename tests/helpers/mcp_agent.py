"""A worker process: one run of a ``create_agent`` + ``EffectMiddleware`` agent whose
tools come from the example MCP server (``examples/mcp_server.py``) through
``MultiServerMCPClient``. Prints the thread's tool messages and pending interrupts as
one JSON line. With ``crash`` it SIGKILLs itself after the server answered a call and
before the outcome is recorded (the server applied it; the client never kept the answer);
with ``drop_once`` the server applies the first ticket call and dies before answering.

Routes (``route``):
* ``argument``: ``create_ticket`` with ``Effect(key_argument="idempotency_key")``;
* ``meta``: ``open_ticket``, the key in ``_meta`` (EffectKeyInterceptor);
* ``header``: ``open_ticket``, the key in an ``Idempotency-Key`` header only (HTTP);
* ``lookup``: ``open_ticket`` with ``mcp_lookup(..., "find_ticket")``, key in ``_meta``;
* ``blind``: ``post_note``, no contract declared.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient

from langgraph_effects import AsyncEffectSqliteSaver, Effect, resume_command
from langgraph_effects._integrations.mcp import EffectKeyInterceptor, mcp_lookup
from langgraph_effects._integrations.middleware import EffectMiddleware
from langgraph_effects._runtime import faults as _faults
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

SERVER = str(Path(__file__).resolve().parents[2] / "examples" / "mcp_server.py")
CALLS = {
    "argument": ("create_ticket", {"title": "printer on fire", "idempotency_key": "from-the-model"}),
    "meta": ("open_ticket", {"title": "printer on fire"}),
    "header": ("open_ticket", {"title": "printer on fire"}),
    "lookup": ("open_ticket", {"title": "printer on fire"}),
    "blind": ("post_note", {"text": "called the customer"}),
}


@dataclass
class McpSpec:
    db: str
    tickets: str
    route: str
    url: str | None = None
    """Streamable HTTP endpoint of a running server; ``None``: spawn it over stdio."""
    crash: bool = False
    drop_once: bool = False
    """Start the server with ``--drop-once``: its first ticket call is applied, then the
    server dies before answering (a lost response on a live worker; stdio only)."""
    resume: bool = False
    answer: dict[str, Any] = field(default_factory=dict)


def connection(spec: McpSpec) -> dict[str, Any]:
    if spec.url is not None:
        return {"transport": "streamable_http", "url": spec.url}
    args = [SERVER, "--db", spec.tickets]
    if spec.drop_once:
        args += ["--drop-once", spec.tickets + ".dropped"]
    return {"transport": "stdio", "command": sys.executable, "args": args}


def effects(spec: McpSpec, conn: Any) -> dict[str, Effect]:
    if spec.route == "argument":
        return {"create_ticket": Effect(dedup_window=3600, key_argument="idempotency_key")}
    if spec.route in ("meta", "header"):
        return {"open_ticket": Effect(dedup_window=3600)}
    if spec.route == "lookup":
        return {"open_ticket": Effect(lookup=mcp_lookup(conn, "find_ticket"))}
    return {}


async def run(spec: McpSpec) -> dict[str, Any]:
    conns: Any = {"tickets": connection(spec)}
    interceptor = EffectKeyInterceptor(conns, meta=spec.route != "header")
    client = MultiServerMCPClient(conns, tool_interceptors=[interceptor])
    tools = await client.get_tools()
    if spec.crash:
        _faults.install("before_outcome", lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
    config: Any = {"configurable": {"thread_id": "t1"}}
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        agent = create_agent(
            ScriptedChatModel(script=call_each_then_finish([CALLS[spec.route]])),
            tools=tools,
            middleware=[EffectMiddleware(effects(spec, conns["tickets"]))],
            checkpointer=saver,
        )
        if spec.answer:
            payload: Any = resume_command((await agent.aget_state(config)).interrupts, spec.answer)
        else:
            payload = None if spec.resume else {"messages": [HumanMessage("go")]}
        await agent.ainvoke(payload, config)
        state = await agent.aget_state(config)
    return {
        "messages": [
            {"content": m.content, "status": m.status, "artifact": m.artifact}
            for m in state.values.get("messages", [])
            if isinstance(m, ToolMessage)
        ],
        "interrupts": [{"id": i.id, "value": i.value} for i in state.interrupts],
    }


def spec_json(spec: McpSpec) -> str:
    return json.dumps(asdict(spec))


def main() -> None:
    out = asyncio.run(run(McpSpec(**json.loads(sys.argv[1]))))
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
