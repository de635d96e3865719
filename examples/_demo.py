"""Plumbing shared by the example scripts: the agent graph, the worker process, the crash.

Nothing here is specific to langgraph-effects; each example script holds the part
that is (its tool, its ``Effect``, its ``EffectToolNode``). A script runs in two
roles:

* the **demo** (``python examples/dedup_agent.py``): starts the notification
  service, runs the agent in a child process, SIGKILLs that process while its call
  is in flight, resumes the thread in a fresh process and checks the service's own
  count;
* the **worker** (``... --worker start|resume|answer``): one run of the agent
  graph against the SQLite checkpoint file; prints the thread's messages and any
  pending interrupts as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import tools_condition

from langgraph_effects import AsyncEffectSqliteSaver, resume_command
from langgraph_effects.operator import open_ledger, show
from langgraph_effects.testing import ScriptedChatModel

PROVIDER_URL = os.environ.get("PROVIDER_URL", "http://127.0.0.1:8765")


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def scripted_model(tool: str, args: dict[str, Any]) -> BaseChatModel:
    """A stand-in for an LLM: asks for one ``tool`` call, then reports what the tool said.

    It decides from the conversation, not from a position in a list, so a resumed
    process continues the script. To use a real model instead, return e.g.
    ``ChatOpenAI(model="gpt-4o-mini")`` or ``ChatAnthropic(model=...)`` here: the
    graph binds the tools to it.
    """

    def script(messages: Sequence[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(f"Done. The {tool} tool reported: {last.content}")
        call = {"name": tool, "args": args, "id": "call-1", "type": "tool_call"}
        return AIMessage("", tool_calls=[call])

    return ScriptedChatModel(script=script)


def build_graph(model: BaseChatModel, tool_node: Any, checkpointer: Any) -> Any:
    """The classic agent loop: ``agent`` -> ``tools`` -> ``agent`` until no tool call is left."""
    bound = model.bind_tools(list(tool_node.tools_by_name.values()))

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tool_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


# -- the worker: one run of the graph in this process --------------------------------------


def describe(state: Any) -> dict[str, Any]:
    messages = [
        {
            "type": m.type,
            "content": m.content,
            "status": getattr(m, "status", None),
            "artifact": getattr(m, "artifact", None),
        }
        for m in state.values.get("messages", [])
    ]
    return {"messages": messages, "interrupts": [{"id": i.id, "value": i.value} for i in state.interrupts]}


async def run_worker(
    make_graph: Callable[[Any], Any], *, db: str, thread: str, mode: str, prompt: str, answer: str | None
) -> dict[str, Any]:
    config: Any = {"configurable": {"thread_id": thread}}
    async with AsyncEffectSqliteSaver.from_conn_string(db) as saver:
        await saver.setup()  # checkpoints and the effect ledger, in the same file
        graph = make_graph(saver)
        if mode == "start":
            inputs: Any = {"messages": [HumanMessage(prompt)]}
        elif mode == "resume":
            inputs = None  # LangGraph re-runs the unfinished `tools` task
        else:  # answer a pending effect review, as an operator would
            pending = (await graph.aget_state(config)).interrupts
            inputs = resume_command(pending, json.loads(answer or "{}"))
        await graph.ainvoke(inputs, config, durability="sync")
        return describe(await graph.aget_state(config))


def worker_main(make_graph: Callable[[Any], Any], prompt: str, argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=["start", "resume", "answer"], required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--answer")
    args, _ = parser.parse_known_args(argv)
    out = asyncio.run(
        run_worker(
            make_graph, db=args.db, thread=args.thread, mode=args.worker, prompt=prompt, answer=args.answer
        )
    )
    print(json.dumps(out, default=str))
    return 0


# -- the demo: drive workers in child processes -----------------------------------------------


class Workers:
    """Runs ``script --worker ...`` in child processes against one checkpoint file."""

    def __init__(self, script: str, *, db: str, provider_url: str, extra: Sequence[str] = ()) -> None:
        self.script, self.db, self.extra = script, db, list(extra)
        self.env = {**os.environ, "PROVIDER_URL": provider_url}

    def spawn(self, mode: str, thread: str, *args: str) -> subprocess.Popen[str]:
        command = [sys.executable, self.script, "--worker", mode, "--db", self.db, "--thread", thread]
        return subprocess.Popen(
            [*command, *self.extra, *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, mode: str, thread: str, *args: str, timeout: float = 120) -> dict[str, Any]:
        proc = self.spawn(mode, thread, *args)
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"worker {mode} failed with exit code {proc.returncode}:\n{err[-3000:]}")
        return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]

    def kill_mid_call(self, thread: str, committed: Callable[[], bool], timeout: float = 60) -> None:
        """Start the agent and SIGKILL it once the provider has committed its request,
        while the worker still waits for the answer."""
        proc = self.spawn("start", thread)
        deadline = time.monotonic() + timeout
        while not committed():
            if proc.poll() is not None:
                _, err = proc.communicate()
                raise RuntimeError(f"the worker ended before it could be killed:\n{err[-3000:]}")
            if time.monotonic() > deadline:
                proc.kill()
                raise TimeoutError("the provider never saw the worker's request")
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        assert proc.returncode == -signal.SIGKILL, proc.returncode
        print(f"  worker pid {proc.pid} killed with SIGKILL while waiting for the provider's answer")


def tool_messages(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in out["messages"] if m["type"] == "tool"]


def show_messages(out: dict[str, Any]) -> None:
    for m in out["messages"]:
        if m["type"] == "tool":
            artifact = m["artifact"] or {}
            print(f"  tool  [{m['status']}] {m['content']}")
            print(
                f"        state={artifact.get('state')} evidence={artifact.get('evidence')} "
                f"attempts={artifact.get('attempts')} receipt={artifact.get('receipt')}"
            )
        elif m["content"]:
            print(f"  {m['type']:<5} {m['content']}")


def show_audit(db: str, out: dict[str, Any]) -> None:
    """Print the ledger's audit trail of the thread's effectful call: who moved it where, on what evidence."""
    [message] = tool_messages(out)
    op_id = message["artifact"]["operation_id"]

    async def read() -> Any:
        async with open_ledger(db) as ledger:
            return (await show(ledger, op_id)).audit

    print(f"  the ledger's audit trail of {op_id}:")
    for entry in asyncio.run(read()):
        evidence = dict(entry.evidence or {})
        cause = evidence.pop("cause", None)
        kind = evidence.pop("kind", None)
        details = ", ".join(f"{k}={v}" for k, v in evidence.items() if k not in ("owner", "error"))
        summary = f"{kind}: {details}" if details else str(kind)
        if isinstance(cause, dict):
            summary += f" (after {cause.get('kind')})"
        start = entry.from_state.value if entry.from_state else "(new)"
        print(f"    {start:>10} -> {entry.to_state.value:<10} {entry.event:<16} {summary[:90]}")


def heading(text: str) -> None:
    print(f"\n== {text}")


def show_json(value: Any) -> None:
    print(textwrap.indent(json.dumps(value, indent=2, default=str), "  "))


def exit_status(failures: list[str]) -> int:
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print("\nOK")
    return 0
