"""Which langgraph_effects modules one happy-path tool call crosses, per thread.

Standalone (``python benchmarks/trace_modules.py``): no timing, so the figures do not
depend on the machine's load. It builds a one-tool turn (the scripted model of
:mod:`langgraph_effects.testing` asks for one ``send`` call, then answers) on
``AsyncEffectSqliteSaver`` (the checkpointer plus its SQLite ledger, on a temporary file),
runs one warm-up turn on another thread id, then traces one ``ainvoke`` with
``sys.setprofile`` / ``threading.setprofile``:

* ``create_agent`` + ``EffectMiddleware`` (``--path middleware``, the default), and
* a ``StateGraph`` with ``EffectToolNode`` (``--path node``).

For each thread it prints the set of ``langgraph_effects`` modules touched and the
number of switches between modules: the module the innermost ``langgraph_effects``
frame belongs to, followed through every call and return (a coroutine resumed counts
as a call), counted each time it changes. Frames outside the package do not move it.
A second, smaller count looks at calls only (a call into another module than the
previous call's), which misses the switch back on return.
The event-loop thread is ``MainThread``; the ledger's aiosqlite connection runs on its
own thread ("ledger"), the saver's on another ("saver"). The scripted model's module
is left out (it stands in for the user's model). ``tests/test_architecture.py`` runs
:func:`trace` and checks the path in ``docs/architecture.md`` against it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

PACKAGE = "langgraph_effects"
#: The scripted model stands in for the user's model: not part of the path.
LEFT_OUT = ("langgraph_effects.testing",)
EVENT_LOOP = "MainThread"


@dataclass
class ThreadTrace:
    """What one thread did: modules touched, in first-touch order, and switches."""

    modules: dict[str, None] = field(default_factory=dict)
    switches: int = 0
    current: str | None = None
    call_switches: int = 0
    """Switches counted on calls only (a call into another module than the last call's)."""
    last_called: str | None = None

    def called(self, module: str) -> None:
        if self.last_called is not None and module != self.last_called:
            self.call_switches += 1
        self.last_called = module
        self.enter(module)

    def enter(self, module: str | None) -> None:
        if module is None or module == self.current:
            return
        if self.current is not None:
            self.switches += 1
        self.current = module
        self.modules.setdefault(module, None)


def _module_of(frame: FrameType | None) -> str | None:
    """The package module of the innermost package frame at or above ``frame``."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if (name == PACKAGE or name.startswith(PACKAGE + ".")) and name not in LEFT_OUT:
            return str(name)
        frame = frame.f_back
    return None


class Tracer:
    """``sys.setprofile`` hook recording :class:`ThreadTrace` per thread name."""

    def __init__(self) -> None:
        self.threads: dict[str, ThreadTrace] = {}
        self.active = False
        self._lock = threading.Lock()

    def _trace_of(self) -> ThreadTrace:
        name = threading.current_thread().name
        found = self.threads.get(name)
        if found is None:
            with self._lock:
                found = self.threads.setdefault(name, ThreadTrace())
        return found

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.active:
            return
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if (name == PACKAGE or name.startswith(PACKAGE + ".")) and name not in LEFT_OUT:
                self._trace_of().called(name)
        elif event == "return":
            self._trace_of().enter(_module_of(frame.f_back))

    def install(self) -> None:
        """Hook this thread and every thread started from now on (the ledger's
        connection thread starts with the saver); nothing is recorded until :meth:`start`."""
        threading.setprofile(self)
        sys.setprofile(self)

    def uninstall(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    def start(self) -> None:
        self.threads.clear()
        self.active = True

    def stop(self) -> None:
        self.active = False


async def _middleware_turn(saver: Any) -> Callable[[str], Any]:
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from langgraph_effects import Effect
    from langgraph_effects._integrations.middleware import EffectMiddleware
    from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

    @tool
    def send(to: str) -> str:
        """Send a message."""
        return f"sent to {to}"

    agent = create_agent(
        ScriptedChatModel(script=call_each_then_finish([("send", {"to": "a"})])),
        tools=[send],
        middleware=[EffectMiddleware({"send": Effect(dedup_window=3600)})],
        checkpointer=saver,
    )
    return lambda thread: agent.ainvoke(
        {"messages": [("user", "go")]}, {"configurable": {"thread_id": thread}}, durability="sync"
    )


async def _node_turn(saver: Any) -> Callable[[str], Any]:
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from langgraph_effects import Effect
    from langgraph_effects._integrations.node import EffectToolNode
    from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

    @tool
    def send(to: str) -> str:
        """Send a message."""
        return f"sent to {to}"

    model = ScriptedChatModel(script=call_each_then_finish([("send", {"to": "a"})]))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", EffectToolNode([send], effects={"send": Effect(dedup_window=3600)}))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile(checkpointer=saver)
    return lambda thread: app.ainvoke(
        {"messages": [("user", "go")]}, {"configurable": {"thread_id": thread}}, durability="sync"
    )


async def _trace(path: str, directory: Path) -> dict[str, ThreadTrace]:
    from langgraph_effects import AsyncEffectSqliteSaver

    build = _middleware_turn if path == "middleware" else _node_turn
    tracer = Tracer()
    tracer.install()
    try:
        async with AsyncEffectSqliteSaver.from_conn_string(directory / "trace.db") as saver:
            await saver.setup()
            turn = await build(saver)
            await turn("warm-up")  # imports, caches, the ledger's schema check
            tracer.start()
            try:
                await turn("traced")
            finally:
                tracer.stop()
    finally:
        tracer.uninstall()
    return {_role(name, t): t for name, t in tracer.threads.items() if t.modules}


def _role(name: str, t: ThreadTrace) -> str:
    """A stable label: thread names carry counters (``Thread-4``)."""
    if name == EVENT_LOOP:
        return "event loop"
    if any(m.startswith(PACKAGE + ".ledger.") for m in t.modules):
        return "ledger"
    if "_connection_worker_thread" in name:
        return "saver"
    return name.rstrip("0123456789").rstrip("_-")


def trace(path: str = "middleware") -> dict[str, ThreadTrace]:
    """Thread role (``"event loop"``, ``"ledger"``, ``"saver"``, ...) -> :class:`ThreadTrace`
    of one traced turn on ``path`` (``"middleware"`` or ``"node"``); threads that touched
    no package module left out."""
    with tempfile.TemporaryDirectory() as directory:
        return asyncio.run(_trace(path, Path(directory)))


def _short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=["middleware", "node", "both"], default="both")
    args = parser.parse_args()
    paths = ["middleware", "node"] if args.path == "both" else [args.path]
    for path in paths:
        threads = trace(path)
        every = {m for t in threads.values() for m in t.modules}
        print(f"== {path} (AsyncEffectSqliteSaver, one tool call, async): {len(every)} modules in all")
        for label, t in sorted(threads.items(), key=lambda kv: kv[0] != "event loop"):
            print(
                f"  [{label}] {len(t.modules)} modules, {t.switches} switches "
                f"({t.call_switches} counting calls only)"
            )
            print("    " + ", ".join(_short(m) for m in t.modules))


if __name__ == "__main__":
    main()
