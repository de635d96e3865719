"""Double texting on LangGraph's server with ``AsyncEffectSqliteSaver`` as its checkpointer.

``langgraph dev`` serves ``tests/helpers/texting_graph.py`` (its tool's effect lands at
a provider that keeps its own records, then the tool answers slowly). A first message
starts a run; once its effect has landed, a second message arrives with each of the
server's ``multitask_strategy`` values, through ``langgraph-sdk``. Each must behave as
the server documents, with exactly the intended effects at the provider, and the
fence must not mistake the server's own sequencing for a second runner.

Needs the ``server`` extra; skipped without it, except under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from langgraph_effects.testing import Provider
from tests.test_fencing import forks
from tests.test_langgraph_server import EXAMPLE, Server

# slow (a `langgraph dev` server); one group: the module-scoped server starts once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("server_double_texting")]

GRAPH = Path(__file__).resolve().parent / "helpers" / "texting_graph.py"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    import os

    workdir = tmp_path_factory.mktemp("texting") / "server"
    shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns(".langgraph_api", "*.sqlite*"))
    config = {"dependencies": ["."], "graphs": {"texting": f"{GRAPH}:graph"},
              "checkpointer": {"path": "./checkpointer.py:make_saver"}}
    (workdir / "langgraph.texting.json").write_text(json.dumps(config))
    os.environ["TEXTING_PROVIDER"] = str(workdir / "provider.sqlite")
    running = Server(workdir, "langgraph.texting.json")
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


async def landed(provider: Provider, label: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not provider.count_effects().get(label):
        assert time.monotonic() < deadline, f"{label} never landed at the provider"
        await asyncio.sleep(0.1)


async def double_text(server: Server, strategy: str) -> dict[str, Any]:
    from langgraph_sdk import get_client  # here: tests.test_langgraph_server skips without the extra

    client = get_client(url=server.url)
    provider = Provider(server.workdir / "provider.sqlite", "dedup")
    thread_id = (await client.threads.create())["thread_id"]
    first = await client.runs.create(thread_id, "texting", input=human(f"{strategy}-1"))
    await landed(provider, f"{strategy}-1")
    out: dict[str, Any] = {}
    try:
        second = await client.runs.create(
            thread_id, "texting", input=human(f"{strategy}-2"), multitask_strategy=cast(Any, strategy)
        )
    except Exception as error:  # the SDK raises the server's HTTP error
        out["second_error"] = getattr(getattr(error, "response", None), "status_code", repr(error))
        second = None
    for name, run in (("first", first), ("second", second)):
        if run is None:
            continue
        try:
            await asyncio.wait_for(client.runs.join(thread_id, run["run_id"]), 120)
        except Exception as error:
            out[f"{name}_join"] = repr(error)[:300]
        try:
            out[name] = (await client.runs.get(thread_id, run["run_id"]))["status"]
        except Exception as error:
            out[name] = f"gone ({getattr(getattr(error, 'response', None), 'status_code', repr(error))})"
    await asyncio.sleep(1.0)
    state = await client.threads.get_state(thread_id)
    values: Any = state["values"]
    out["messages"] = [(m["type"], m["content"]) for m in values.get("messages", [])]
    out["effects"] = {k: v for k, v in provider.count_effects().items() if k.startswith(strategy)}
    out["thread"] = (await client.threads.get(thread_id))["status"]
    out["thread_id"] = thread_id
    return out


#: What the server documents for a second message while a run is in its tool, as seen
#: through the API: the second create's HTTP error, each run's status, the human
#: messages the thread keeps, and the effects at the provider.
EXPECTED: dict[str, dict[str, Any]] = {
    # The second message is refused; the first run finishes.
    "reject": {"second_error": 409, "first": "success", "kept": ["reject-1"]},
    # The second run waits for the first, then runs on its result.
    "enqueue": {"first": "success", "second": "success", "kept": ["enqueue-1", "enqueue-2"]},
    # The first run is stopped, its progress kept; the second runs on it.
    "interrupt": {"first": "interrupted", "second": "success", "kept": ["interrupt-1", "interrupt-2"]},
    # The first run is stopped and deleted with its checkpoints; the second runs alone.
    "rollback": {"first": "gone (404)", "second": "success", "kept": ["rollback-2"]},
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", list(EXPECTED))
async def test_double_texting_behaves_as_the_server_documents(server: Server, strategy: str) -> None:
    out = await double_text(server, strategy)
    seen: dict[str, Any] = {k: out[k] for k in ("second_error", "first", "second") if k in out}
    seen["kept"] = [content for kind, content in out["messages"] if kind == "human"]
    assert seen == EXPECTED[strategy], out
    # The last message kept is the last run's answer.
    assert out["messages"][-1] == ("ai", f"done {seen['kept'][-1]}"), out
    # Every message's effect landed once, the stopped or deleted run's too (it had
    # landed before the second message came), and nothing was sent twice.
    sent = 1 if strategy == "reject" else 2
    assert out["effects"] == {f"{strategy}-{i}": 1 for i in range(1, sent + 1)}, out
    assert out["thread"] == "idle", out
    # The server's own sequencing is not mistaken for a second runner: no refusal, no fork.
    assert "ThreadConflictError" not in server.log.read_text(errors="replace")
    assert await forks(str(server.workdir / "agent.sqlite"), [out["thread_id"]]) == []
