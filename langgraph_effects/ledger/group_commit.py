"""Group commit: write plans that arrive together share one transaction.

While one write transaction of a ledger is in flight, further write plans queue;
when it ends, everything queued runs as the next single transaction (one durable
commit for all of them). Each caller still gets its own result or its own
exception, as if its plan had run alone, and no caller's await returns before the
commit that holds its writes has returned.

Isolation inside a group relies on the plans' own contract: a plan that raises has
written nothing (its steps up to then were reads, or writes that matched no row),
so its neighbours' writes can still commit. A plan that raises *after* writing, or
a database error in the middle of a group, rolls the group back and every plan is
run again in a transaction of its own (`Regroup`). That is why the queue holds plan
*makers*: a generator half-driven cannot be run a second time. How a backend runs
a group as one plan: `grouped.group_plan`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class PlanResult(Generic[T]):
    """What one plan of a group came to: its result, or the exception it raised."""

    value: T | None = None
    error: BaseException | None = None

    def unwrap(self) -> T:
        """The plan's result, or its exception raised here (in its caller's task)."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class Regroup(Exception):
    """A plan raised after it had written: the group must be rolled back and each
    plan run on its own (never seen by callers)."""


#: Runs plan makers as one transaction, one result per maker, in order.
RunGroup = Callable[[Sequence[Callable[[], Any]]], Awaitable[list[PlanResult[Any]]]]


class GroupCommit:
    """The queue of one ledger's write plans, drained one transaction at a time."""

    def __init__(self, run: RunGroup) -> None:
        self._run = run
        self._queue: list[tuple[Callable[[], Any], asyncio.Future[PlanResult[Any]]]] = []
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def submit(self, make: Callable[[], Any]) -> Any:
        """Run the plan ``make()`` builds in the next transaction; its result."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a ledger reused under a new event loop
            self._loop, self._queue, self._task = loop, [], None
        future: asyncio.Future[PlanResult[Any]] = loop.create_future()
        self._queue.append((make, future))
        if self._task is None:
            # Started on the next turn of the loop: callers arriving in this one
            # (parallel tool calls gathered together) join the first transaction.
            self._task = loop.create_task(self._drain())
        return (await future).unwrap()

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                # A caller cancelled before its turn: its plan never runs.
                batch = [(make, fut) for make, fut in batch if not fut.done()]
                if not batch:
                    continue
                try:
                    results = await self._run([make for make, _ in batch])
                except BaseException as error:  # e.g. the ledger is closed: all of them hear it
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_result(PlanResult(error=error))
                    if not isinstance(error, Exception):
                        raise
                    continue
                for (_, fut), result in zip(batch, results, strict=True):
                    if not fut.done():
                        fut.set_result(result)
        finally:
            self._task = None
            for _, fut in self._queue:  # only left behind if the loop is going away
                if not fut.done():
                    fut.cancel()
            self._queue = []
