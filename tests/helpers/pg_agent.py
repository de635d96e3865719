"""Worker processes over Postgres for ``tests/test_postgres_workers.py``.

The graph is :mod:`tests.helpers.agent`'s (its ``build`` takes the saver), run
against :class:`~langgraph_effects.AsyncEffectPostgresSaver` instead of SQLite; effects
are counted at that module's provider, which keeps its own records in its own
SQLite file. Three commands, each one process::

    python -m tests.helpers.pg_agent seed SPEC_JSON   # prepare threads (see below)
    python -m tests.helpers.pg_agent race SPEC_JSON   # resume every thread, shuffled
    python -m tests.helpers.pg_agent run  SPEC_JSON   # run or resume one thread

``seed`` prepares each thread up to the point where the tool node is next, in one
of two ways: ``paused`` threads run with ``interrupt_before=["tools"]`` (the
checkpoint holds the AIMessage, the ledger holds nothing yet), ``crashed`` threads
each run in a forked child that is SIGKILLed at the ``after_intent`` fault point
(the ledger holds both operations ``dispatched`` by a process that is dead; nothing
reached the provider).

``race`` and ``run`` (with ``wait_for_go``) connect, build their graphs, print
``{"ready": ...}`` and block until a line arrives on stdin: the test starts all
workers, waits until every one is ready, then releases them together. Every
command prints one JSON line last.

``LANGGRAPH_EFFECTS_HOST`` in a worker's environment names its host in lease
owners: a worker with another host name cannot see whether the owner's process
is alive, so for it a lease ends only by time.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage

from langgraph_effects._runtime import dispatch
from langgraph_effects._runtime import faults as _faults
from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver
from langgraph_effects.errors import ThreadConflictError
from langgraph_effects.lab.providers import Provider, Receipt
from tests.helpers import agent


@dataclass
class PgSpec:
    dsn: str
    provider: str
    provider_mode: str = "blind"
    contract: str = "dedup"
    calls: int = 2
    threads: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)  # seed: interrupt_before=["tools"]
    crashed: list[str] = field(default_factory=list)  # seed: SIGKILL at after_intent
    crash: str | None = None  # run: after_intent | before_outcome
    resume: bool = False  # run: resume instead of starting
    wait_for_go: bool = False  # run: wait for a line on stdin before starting
    lease_seconds: float | None = None  # EffectToolNode(lease_seconds=...)
    order_seed: int = 0  # race: how this worker shuffles the threads
    invoke_timeout: float = 60.0  # race: per ainvoke; a hang is reported, not waited out
    send_delay: float = 0.0  # seconds each request spends "at the provider" before applying


def spec_json(spec: PgSpec) -> str:
    return json.dumps(asdict(spec))


class CountingProvider(Provider):
    """The provider, counting in this process how many requests this worker sent.

    ``delay`` keeps each request in flight a while first (a slow provider), which
    widens the window in which a second worker finds the operation dispatched.
    """

    sent = 0
    delay = 0.0

    def apply(self, payload: Any, *, key: str | None = None) -> Receipt:
        CountingProvider.sent += 1
        if self.delay:
            time.sleep(self.delay)
        return super().apply(payload, key=key)


def agent_spec(spec: PgSpec, thread: str) -> agent.Spec:
    return agent.Spec(
        db=spec.dsn,
        provider=spec.provider,
        provider_mode=spec.provider_mode,
        contract=spec.contract,
        thread=thread,
        calls=spec.calls,
    )


@contextmanager
def _lease(seconds: float | None) -> Iterator[None]:
    """``agent.build`` constructs ``EffectToolNode`` with the default lease; swap in ours."""
    if seconds is None:
        yield
        return
    original = agent.EffectToolNode
    agent.EffectToolNode = functools.partial(original, lease_seconds=seconds)  # type: ignore[misc]
    try:
        yield
    finally:
        agent.EffectToolNode = original  # type: ignore[misc]


def build(spec: PgSpec, saver: Any, thread: str, provider: Provider) -> Any:
    with _lease(spec.lease_seconds):
        return agent.build(agent_spec(spec, thread), saver, provider)


def config_for(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def _wait_for_go(name: str) -> None:
    print(json.dumps({"ready": name, "pid": os.getpid()}), flush=True)
    sys.stdin.readline()


waits = 0


def _count_waits() -> None:
    """Count how often this worker found another worker's live lease and waited.

    Wraps the dispatcher's wait; if it is renamed, ``waits`` stays 0 and the
    lease test's ``waits >= 1`` says so.
    """
    original = dispatch.Dispatcher.wait_for_other

    async def counted(self: dispatch.Dispatcher, c: Any) -> None:
        global waits
        waits += 1
        await original(self, c)

    dispatch.Dispatcher.wait_for_other = counted  # type: ignore[method-assign]


# -- seed --------------------------------------------------------------------------------


async def _seed_paused(spec: PgSpec) -> None:
    provider = Provider(spec.provider, spec.provider_mode)  # type: ignore[arg-type]
    async with AsyncEffectPostgresSaver.from_conn_string(spec.dsn, ledger_max_size=2) as saver:
        for thread in spec.paused:
            graph = build(spec, saver, thread, provider)
            await graph.ainvoke(
                {"messages": [HumanMessage("go")]},
                config_for(thread),
                interrupt_before=["tools"],
                durability="sync",
            )
            state = await graph.aget_state(config_for(thread))
            assert state.next == ("tools",), state.next


async def _seed_crash_one(spec: PgSpec, thread: str) -> None:
    provider = Provider(spec.provider, spec.provider_mode)  # type: ignore[arg-type]
    async with AsyncEffectPostgresSaver.from_conn_string(spec.dsn, ledger_max_size=2) as saver:
        graph = build(spec, saver, thread, provider)
        await graph.ainvoke({"messages": [HumanMessage("go")]}, config_for(thread), durability="sync")


def seed(spec: PgSpec) -> dict[str, Any]:
    killed: list[str] = []
    # Fork before this process ever runs an event loop or opens a connection: each
    # child starts clean, and the SIGKILL takes down only the child.
    for thread in spec.crashed:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child dies at the fault point
            try:
                _faults.install("after_intent", lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
                asyncio.run(_seed_crash_one(spec, thread))
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(3)  # reaching here means the fault point was never hit
        _, status = os.waitpid(pid, 0)  # reaped: its pid is provably dead to a resumer
        if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
            raise SystemExit(f"seed child for {thread} was not killed at after_intent ({status})")
        killed.append(thread)
    asyncio.run(_seed_paused(spec))
    return {"killed": killed, "paused": spec.paused}


# -- race --------------------------------------------------------------------------------


async def race(spec: PgSpec) -> dict[str, Any]:
    _count_waits()
    provider = CountingProvider(spec.provider, spec.provider_mode)  # type: ignore[arg-type]
    provider.delay = spec.send_delay
    order = list(spec.threads)
    random.Random(spec.order_seed).shuffle(order)
    ran: list[str] = []
    already_done: list[str] = []
    refused: list[str] = []
    async with AsyncEffectPostgresSaver.from_conn_string(spec.dsn, ledger_max_size=4) as saver:
        graphs = {thread: build(spec, saver, thread, provider) for thread in order}
        await saver.ledger.get_many(["warm-up"])  # the pool is open and has a connection
        await asyncio.to_thread(_wait_for_go, f"race-{spec.order_seed}")
        started = time.time()
        for thread in order:
            graph = graphs[thread]
            config = config_for(thread)
            if (await graph.aget_state(config)).next:
                ran.append(thread)
            else:
                already_done.append(thread)
            try:
                await asyncio.wait_for(
                    graph.ainvoke(None, config, durability="sync"), timeout=spec.invoke_timeout
                )
            except asyncio.TimeoutError:
                raise SystemExit(
                    f"worker {spec.order_seed}: resuming {thread} took over {spec.invoke_timeout}s"
                ) from None
            except ThreadConflictError:
                # Another worker resumed the same checkpoint and saved first: one runner
                # per thread, so this run stopped before anything of it landed.
                refused.append(thread)
            # Not checked here: the thread's final state (another worker may still be
            # moving it on). The test checks every thread once all workers are done.
        finished = time.time()
    return {
        "worker": spec.order_seed,
        "pid": os.getpid(),
        "order": order,
        "ran": ran,
        "already_done": already_done,
        "refused": refused,
        "sent": CountingProvider.sent,
        "waits": waits,
        "started": started,
        "finished": finished,
    }


# -- run one thread ------------------------------------------------------------------------


async def run(spec: PgSpec) -> dict[str, Any]:
    [thread] = spec.threads
    provider = CountingProvider(spec.provider, spec.provider_mode)  # type: ignore[arg-type]
    if spec.crash:
        _faults.install(spec.crash, lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
    _count_waits()
    config = config_for(thread)
    async with AsyncEffectPostgresSaver.from_conn_string(spec.dsn, ledger_max_size=2) as saver:
        graph = build(spec, saver, thread, provider)
        await saver.ledger.get_many(["warm-up"])
        if spec.wait_for_go:
            await asyncio.to_thread(_wait_for_go, thread)
        started = time.time()
        payload = None if spec.resume else {"messages": [HumanMessage("go")]}
        await graph.ainvoke(payload, config, durability="sync")
        finished = time.time()
        out = agent.describe(None, await graph.aget_state(config))
    out.update(
        started=started, finished=finished, sent=CountingProvider.sent, waits=waits, pid=os.getpid()
    )
    return out


def main() -> None:
    command, raw = sys.argv[1], sys.argv[2]
    spec = PgSpec(**json.loads(raw))
    if command == "seed":
        out = seed(spec)
    elif command == "race":
        out = asyncio.run(race(spec))
    elif command == "run":
        out = asyncio.run(run(spec))
    else:
        raise SystemExit(f"unknown command {command!r}; use seed, race or run")
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
