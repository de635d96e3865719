"""On LangGraph's own server: ``langgraph dev`` (``langgraph-cli[inmem]``) serving
``examples/server``, driven through the real ``langgraph-sdk`` client on loopback.

A blind tool's call times out after the helpdesk opened the ticket, so the run stops
at a review. The test sees it through the API (the run's result, the thread's state
and status), answers it in LangChain's HITL shape with ``Command(resume=...)`` through
the SDK, and finds the "effect landed" message and exactly one ticket in the helpdesk's
own records. Two deployments: the server's own checkpointer with the ledger from
``LANGGRAPH_EFFECTS_DB`` (``langgraph.json``), and ``AsyncEffectSqliteSaver`` as the server's
custom checkpointer (``langgraph.checkpointer.json``).

Needs the ``server`` extra; skipped without it, except under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from langgraph_effects import AsyncEffectSqliteSaver, State
from langgraph_effects.testing import Provider

pytestmark = pytest.mark.slow  # `langgraph dev` servers

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "server"
START_DEADLINE = 240.0  # the server imports a lot; this machine is shared and slow
MISSING = [
    m for m in ("langgraph_cli", "langgraph_api", "langgraph_sdk") if importlib.util.find_spec(m) is None
]

if MISSING:
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"CI=true but the server extra is missing ({MISSING}): pip install -e '.[server]'")
    pytest.skip(
        f"needs the server extra (pip install -e '.[server]'): {MISSING} missing", allow_module_level=True
    )

from langgraph_sdk import get_client  # noqa: E402  (after the skip above)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def langgraph_cli() -> str:
    beside = Path(sys.executable).parent / "langgraph"
    found = str(beside) if beside.exists() else shutil.which("langgraph")
    assert found, "the langgraph CLI is not installed (pip install -e '.[server]')"
    return found


class Server:
    """A ``langgraph dev`` process in its own process group, killed whole at the end."""

    def __init__(self, workdir: Path, config: str) -> None:
        self.workdir = workdir
        self.config = config
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "server.log"
        env = {
            **os.environ,
            "HELPDESK_DB": str(workdir / "helpdesk.sqlite"),
            "LANGGRAPH_EFFECTS_DB": str(workdir / "agent.sqlite"),
            "HELPDESK_TIMEOUT": "1",
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
        }
        command = [
            langgraph_cli(), "dev", "--no-browser", "--no-reload",
            "--host", "127.0.0.1", "--port", str(self.port), "--config", config,
        ]  # fmt: skip
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"langgraph dev exited with {self.process.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        pytest.fail(f"langgraph dev did not answer /ok within {START_DEADLINE:.0f} s:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=20)


@pytest.fixture(params=["langgraph.json", "langgraph.checkpointer.json"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    workdir = tmp_path / "server"
    shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns(".langgraph_api", "*.sqlite*"))
    running = Server(workdir, request.param)
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()


@pytest.mark.timeout(600)
async def test_review_through_the_server_and_the_sdk(server: Server) -> None:
    client = get_client(url=server.url)
    helpdesk = Provider(server.workdir / "helpdesk.sqlite", "blind")
    thread = await client.threads.create()
    thread_id = thread["thread_id"]
    request = {"messages": [{"role": "user", "content": "Acme wants a refund for order 1042."}]}

    result = await client.runs.wait(thread_id, "support", input=request)
    assert isinstance(result, dict) and result.get("__interrupt__"), server.tail()

    # The review, as the API shows it (what Agent Inbox and Studio read).
    assert (await client.threads.get(thread_id))["status"] == "interrupted"
    state = await client.threads.get_state(thread_id)
    [pending] = state["interrupts"]
    value = pending["value"]
    assert value["type"] == "effect_review"
    [entry] = value["operations"]
    [action] = value["action_requests"]
    assert action["name"] == "open_ticket"
    assert action["args"] == {"customer": "acme", "subject": "Refund order 1042"}
    # A blind provider never received our key: the review names what an operator can check instead.
    assert "timeout" in action["description"] and entry["provider_key"] not in action["description"]
    assert "open_ticket's own records" in action["description"]
    assert value["review_configs"] == [
        {"action_name": "open_ticket", "allowed_decisions": ["respond", "approve", "reject"]}
    ]
    assert len(helpdesk.effects()) == 1  # it landed, though the call timed out

    # The operator checked the helpdesk and answers in LangChain's HITL shape.
    answer = {"decisions": [{"type": "respond", "message": '{"ticket": "HD-1042"}'}]}
    await client.runs.wait(thread_id, "support", command={"resume": {pending["id"]: answer}})

    state = await client.threads.get_state(thread_id)
    assert not state["interrupts"]
    assert (await client.threads.get(thread_id))["status"] == "idle"
    messages = state["values"]["messages"]
    [tool_message] = [m for m in messages if m["type"] == "tool"]
    assert tool_message["content"].startswith("The open_ticket effect landed")
    assert 'Receipt: {"ticket": "HD-1042"}' in tool_message["content"]
    assert tool_message["status"] == "success"
    assert messages[-1]["content"] == "The ticket is open."
    assert len(helpdesk.effects()) == 1 and helpdesk.count_requests("apply") == 1

    # The verdict is in the ledger the configuration named, beside or inside the checkpoints.
    async with AsyncEffectSqliteSaver.from_conn_string(server.workdir / "agent.sqlite") as saver:
        await saver.setup()
        op = await saver.ledger.get(entry["operation_id"])
    assert op is not None and op.state is State.CONFIRMED
    assert op.evidence is not None and op.evidence["receipt"] == {"ticket": "HD-1042"}
    with sqlite3.connect(server.workdir / "agent.sqlite") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        checkpoints = (
            db.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] if "checkpoints" in tables else 0
        )
    if server.config == "langgraph.checkpointer.json":
        assert "Using custom checkpointer: AsyncEffectSqliteSaver" in server.log.read_text(errors="replace")
        assert checkpoints > 0  # the server kept the thread's checkpoints in our file
    else:
        assert checkpoints == 0  # the server's own checkpointer; only the ledger is ours


@pytest.mark.timeout(600)
@pytest.mark.parametrize("server", ["langgraph.json"], indirect=True)
def test_the_example_client_runs_stops_at_the_review_and_answers_it(server: Server) -> None:
    """``examples/server/client.py`` as its README runs it: a run that stops at the review
    (exit 6, the answer command printed), then that command (exit 0, the effect landed)."""
    import re

    client = [sys.executable, str(EXAMPLE / "client.py"), "--url", server.url]
    helpdesk = Provider(server.workdir / "helpdesk.sqlite", "blind")
    first = subprocess.run(client, capture_output=True, text=True, timeout=300)
    assert first.returncode == 6, first.stdout + first.stderr + server.tail()
    assert "the run stopped at a review of open_ticket" in first.stdout
    found = re.search(r"answer it: python client.py --thread (\S+) --landed ", first.stdout)
    assert found, first.stdout
    assert len(helpdesk.effects()) == 1  # the ticket exists; the client was not told

    receipt = '{"ticket": "HD-1042"}'
    answer = [*client, "--thread", found.group(1), "--landed", receipt]
    second = subprocess.run(answer, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr + server.tail()
    lines = second.stdout.splitlines()
    assert any(line.startswith(" tool: The open_ticket effect landed") for line in lines), second.stdout
    assert lines[-1] == "   ai: The ticket is open."
    assert len(helpdesk.effects()) == 1 and helpdesk.count_requests("apply") == 1  # never re-sent
