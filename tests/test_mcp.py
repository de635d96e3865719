"""MCP tools under ``EffectMiddleware``, against the real example MCP server
(``examples/mcp_server.py``) started by the tests, over stdio and streamable HTTP:
the operation's key reaches the server by each route, a worker SIGKILLed after the
server applied a call resumes to exactly one ticket in the server's own records, and
a blind MCP tool goes to review instead of being sent again."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_mcp_adapters", reason='needs the mcp extra: pip install -e ".[mcp]"')

from langgraph_effects._runtime import faults as _faults
from langgraph_effects.lab.mcpdrop import DroppingProxy
from tests.helpers import run_python
from tests.helpers.mcp_agent import CALLS, SERVER, McpSpec, connection, spec_json

pytestmark = [pytest.mark.slow, pytest.mark.crash]


def run_worker(spec: McpSpec, *, expect_kill: bool = False) -> dict[str, Any]:
    return run_python("-m", "tests.helpers.mcp_agent", spec_json(spec), expect_kill=expect_kill)


def server_rows(spec: McpSpec, sql: str) -> list[tuple[Any, ...]]:
    """Rows of the server's own records (its SQLite file)."""
    with sqlite3.connect(spec.tickets) as db:
        return db.execute(sql).fetchall()


def ledger_keys(spec: McpSpec) -> list[str]:
    with sqlite3.connect(spec.db) as db:
        return [row[0] for row in db.execute("SELECT provider_key FROM effect_operations")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The example server over streamable HTTP on a free loopback port: (url, records)."""
    tickets, port = str(tmp_path / "tickets.sqlite"), free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "--db", tickets, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "the MCP server did not start listening"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", tickets
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def stdio_spec(tmp_path: Path, route: str) -> McpSpec:
    return McpSpec(db=str(tmp_path / "agent.sqlite"), tickets=str(tmp_path / "tickets.sqlite"), route=route)


def check_one_ticket(spec: McpSpec, route: str) -> None:
    """Killed after the server applied the call, then resumed: one ticket, under our key."""
    run_worker(replace(spec, crash=True), expect_kill=True)
    assert server_rows(spec, "SELECT COUNT(*) FROM tickets") == [(1,)]
    out = run_worker(replace(spec, resume=True))
    assert out["interrupts"] == []
    [message] = out["messages"]
    assert message["artifact"]["state"] == "confirmed"
    [key] = ledger_keys(spec)
    via = {"argument": "argument", "meta": "meta", "lookup": "meta", "header": "header"}[route]
    assert server_rows(spec, "SELECT idempotency_key, via FROM tickets") == [(key, via)]
    # Dedup routes re-send under the same key (the server answers with the first
    # ticket); a lookup finds the ticket and sends nothing again.
    sends = server_rows(spec, "SELECT idempotency_key FROM requests")
    assert sends == ([(key,)] if route == "lookup" else [(key,), (key,)])


@pytest.mark.parametrize("route", ["argument", "meta", "lookup"])
def test_stdio_kill_after_the_server_applied_then_resume(tmp_path: Path, route: str) -> None:
    check_one_ticket(stdio_spec(tmp_path, route), route)


@pytest.mark.parametrize("route", ["header", "meta", "argument", "lookup"])
def test_http_kill_after_the_server_applied_then_resume(
    tmp_path: Path, http_server: tuple[str, str], route: str
) -> None:
    url, tickets = http_server
    spec = McpSpec(db=str(tmp_path / "agent.sqlite"), tickets=tickets, route=route, url=url)
    check_one_ticket(spec, route)


def review_then_answer_landed(spec: McpSpec, out: dict[str, Any]) -> None:
    """The blind note's call went to review with one note at the server (never re-sent);
    answered "landed", the model reads it confirmed with the receipt, still one note."""
    [pending] = out["interrupts"]
    [entry] = pending["value"]["operations"]
    assert entry["tool"] == "post_note"
    assert server_rows(spec, "SELECT COUNT(*) FROM notes") == [(1,)]
    out = run_worker(replace(spec, answer={entry["operation_id"]: {"type": "landed", "receipt": "N-1"}}))
    assert out["interrupts"] == []
    [message] = out["messages"]
    assert message["artifact"]["state"] == "confirmed" and message["artifact"]["receipt"] == "N-1"
    assert server_rows(spec, "SELECT COUNT(*) FROM notes") == [(1,)]


def test_blind_mcp_tool_goes_to_review_never_resent(tmp_path: Path) -> None:
    spec = stdio_spec(tmp_path, "blind")
    run_worker(replace(spec, crash=True), expect_kill=True)
    review_then_answer_landed(spec, run_worker(replace(spec, resume=True)))
    assert server_rows(spec, "SELECT COUNT(*) FROM requests") == [(1,)]


def test_a_call_carries_the_key_and_is_answered(tmp_path: Path) -> None:
    spec = stdio_spec(tmp_path, "argument")
    out = run_worker(spec)
    [message] = out["messages"]
    assert message["artifact"]["state"] == "confirmed" and "T-1" in str(message["content"])
    [key] = ledger_keys(spec)
    # The model's own "from-the-model" never reached the server: the operation's key did.
    assert server_rows(spec, "SELECT idempotency_key FROM tickets") == [(key,)]


@pytest.mark.parametrize("route", ["argument", "meta", "lookup"])
def test_stdio_response_lost_on_a_live_worker(tmp_path: Path, route: str) -> None:
    """The server applies the call and dies before answering; the worker, alive, settles
    the call in the same run: one ticket, never a second one."""
    spec = replace(stdio_spec(tmp_path, route), drop_once=True)
    out = run_worker(spec)
    assert Path(spec.tickets + ".dropped").exists(), "the fault did not fire"
    assert out["interrupts"] == []
    [message] = out["messages"]
    assert message["artifact"]["state"] == "confirmed"
    [key] = ledger_keys(spec)
    assert server_rows(spec, "SELECT COUNT(*), MIN(idempotency_key) FROM tickets") == [(1, key)]
    sends = server_rows(spec, "SELECT idempotency_key FROM requests")
    assert sends == ([(key,)] if route == "lookup" else [(key,), (key,)])


async def test_effect_tool_node_with_mcp_tools_rerun_after_a_lost_outcome(tmp_path: Path) -> None:
    """EffectToolNode over the adapter's tools, in this process: the outcome of an
    applied call is lost (the run fails before recording it), the node runs again on
    the same checkpoint, and the server's records hold one ticket under one key."""
    from langchain_core.messages import HumanMessage
    from langchain_mcp_adapters.client import MultiServerMCPClient

    from langgraph_effects import AsyncEffectSqliteSaver, Effect, EffectKeyInterceptor, hide_key_arguments
    from tests.helpers.one_call import call, one_call_graph
    from tests.test_key_argument import LostOutcome, lose_first_outcome

    spec = stdio_spec(tmp_path, "argument")
    conns: Any = {"tickets": connection(spec)}
    effects = {"create_ticket": Effect(dedup_window=3600, key_argument="idempotency_key")}
    client = MultiServerMCPClient(conns, tool_interceptors=[EffectKeyInterceptor(conns)])
    tools = hide_key_arguments(await client.get_tools(), effects)
    # What the model reads no longer asks for a key; the server's schema still requires one.
    [shown] = [t for t in tools if t.name == "create_ticket"]
    assert "idempotency_key" not in shown.tool_call_schema["properties"]  # type: ignore[index]
    assert "idempotency_key" not in shown.tool_call_schema["required"]  # type: ignore[index]
    config: Any = {"configurable": {"thread_id": "t1"}}
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        graph = one_call_graph(tools, effects, saver, [call("create_ticket", title="T")])
        lose_first_outcome()
        try:
            with pytest.raises(LostOutcome):
                await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
        finally:
            _faults.clear()
        assert server_rows(spec, "SELECT COUNT(*) FROM tickets") == [(1,)]
        await graph.ainvoke(None, config)
    [key] = ledger_keys(spec)
    assert server_rows(spec, "SELECT idempotency_key, via FROM tickets") == [(key, "argument")]
    assert server_rows(spec, "SELECT idempotency_key FROM requests") == [(key,), (key,)]


@pytest.fixture
def dropping(http_server: tuple[str, str]) -> Iterator[tuple[str, str, DroppingProxy]]:
    """The HTTP server behind a loopback proxy that can lose one answer: (url, records, proxy)."""
    url, tickets = http_server
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with DroppingProxy(port) as proxy:
        yield f"http://127.0.0.1:{proxy.port}/mcp", tickets, proxy


@pytest.mark.parametrize("route", ["header", "meta", "argument", "lookup"])
def test_http_response_lost_on_a_live_worker(
    tmp_path: Path, dropping: tuple[str, str, DroppingProxy], route: str
) -> None:
    """Streamable HTTP, no crash: the server applies the call, the proxy closes the
    client's connection before any of the answer; the live worker settles the call in
    the same run (dedup re-send under the same key, or lookup): one ticket."""
    url, tickets, proxy = dropping
    spec = McpSpec(db=str(tmp_path / "agent.sqlite"), tickets=tickets, route=route, url=url)
    proxy.arm(CALLS[route][0])
    out = run_worker(spec)
    assert proxy.dropped == 1, "the fault did not fire"
    assert out["interrupts"] == []
    [message] = out["messages"]
    assert message["artifact"]["state"] == "confirmed"
    [key] = ledger_keys(spec)
    via = {"argument": "argument", "meta": "meta", "lookup": "meta", "header": "header"}[route]
    tickets_rows = server_rows(spec, "SELECT COUNT(*), MIN(idempotency_key), MIN(via) FROM tickets")
    assert tickets_rows == [(1, key, via)]
    sends = server_rows(spec, "SELECT idempotency_key FROM requests")
    assert sends == ([(key,)] if route == "lookup" else [(key,), (key,)])


def test_http_response_lost_blind_tool_goes_to_review(
    tmp_path: Path, dropping: tuple[str, str, DroppingProxy]
) -> None:
    """A blind MCP tool (no key route, no lookup) whose answer was lost on a live worker
    goes to review (interrupt) and is never sent again."""
    url, tickets, proxy = dropping
    spec = McpSpec(db=str(tmp_path / "agent.sqlite"), tickets=tickets, route="blind", url=url)
    proxy.arm("post_note")
    out = run_worker(spec)
    assert proxy.dropped == 1, "the fault did not fire"
    review_then_answer_landed(spec, out)
    assert server_rows(spec, "SELECT COUNT(*) FROM requests") == [(1,)]


@pytest.mark.parametrize(("factory", "effects"), [("plain", 2), ("safe", 1)])
async def test_crashtest_mcp_lost(
    tmp_path: Path, http_server: tuple[str, str], monkeypatch: pytest.MonkeyPatch, factory: str, effects: int
) -> None:
    """``crashtest`` point ``mcp-lost``: the server applies the call, the agent gets the
    SDK's "connection closed" instead. A plain agent re-sends on resume (2 tickets);
    under EffectMiddleware the re-send carries the same key and the server opens
    nothing new (1 ticket)."""
    from langgraph_effects.crashtest import crashtest

    url, tickets = http_server
    monkeypatch.setenv("MCP_URL", url)
    monkeypatch.setenv("TICKETS_DB", tickets)
    agent = "tests.helpers.mcp_crashtest_agent"
    report = await crashtest(
        f"{agent}:{factory}", f"{agent}:probe", points=["mcp-lost"], workdir=tmp_path / "w"
    )
    assert report.expected == 1
    [run] = report.runs
    assert (run.point, run.tool, run.fault_reached, run.kills) == ("mcp-lost", "open_ticket", True, 0)
    assert run.effects == effects and run.finished
    if factory == "safe":
        assert run.errors == []  # settled in the same run: dedup re-send under the same key
    else:
        assert run.errors and "Connection closed" in run.errors[0]  # the agent raised, the resume re-sent
    # The probe's counts are the server's records: the control run's ticket and this run's.
    assert server_rows(McpSpec(db="", tickets=tickets, route=""), "SELECT COUNT(*) FROM tickets") == [
        (1 + effects,)
    ]


def test_mcp_tools_lists_hints_and_suggests_never_declares(tmp_path: Path) -> None:
    """``langgraph-effects mcp-tools``: each tool with its annotations and a suggested
    contract; with ``--effects`` the declared ones beside them; ``--require`` refuses
    (exit 2) while a tool has none."""
    import json

    from tests.helpers import run_console

    stdio = f"{sys.executable} {SERVER} --db {tmp_path / 'tickets.sqlite'}"
    done = run_console("mcp-tools", "--stdio", stdio, "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["tool"]: row for row in json.loads(done.stdout)["tools"]}
    assert set(rows) == {"create_ticket", "open_ticket", "find_ticket", "post_note"}
    assert rows["find_ticket"]["hints"] == {"readOnlyHint": True}
    assert rows["find_ticket"]["suggested"] == "Effect.read_only()"
    assert 'key_argument="idempotency_key"' in rows["create_ticket"]["suggested"]
    assert rows["open_ticket"]["suggested"] == 'Effect(lookup=mcp_lookup(connection, "find_ticket"))'
    assert rows["post_note"]["suggested"] is None

    effects = "tests.helpers.mcp_crashtest_agent:DECLARED"
    done = run_console("mcp-tools", "--stdio", stdio, "--effects", effects, "--json", "--require")
    assert done.returncode == 2, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert "2 tool(s) without a declared contract: open_ticket, post_note" in error["message"]

    done = run_console("mcp-tools", "--stdio", stdio, "--effects", effects)
    assert done.returncode == 0, done.stderr
    assert "(none: blind)" in done.stdout and "never applied" in done.stderr
