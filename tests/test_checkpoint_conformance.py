"""LangGraph's own checkpointer suite (``langgraph-checkpoint-conformance``) on our four
savers, beside LangGraph's savers of the same backend.

The suite is async and finds a capability by the async method a saver overrides
(``aprune`` for ``prune``). The async savers run in it as they are; the sync ones
(ours and LangGraph's alike) through :class:`AsyncOverSync`, which offers a sync
saver's methods as the async ones, and only those the sync saver has. Every
capability LangGraph's saver passes, ours must pass. Each test prints its table
(capability by saver, tests passed / run): ``pytest -s tests/test_checkpoint_conformance.py``.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance import validate
from langgraph.checkpoint.conformance.capabilities import Capability
from langgraph.checkpoint.conformance.initializer import RegisteredCheckpointer
from langgraph.checkpoint.conformance.report import CapabilityReport
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects.checkpoint.sync import EffectPostgresSaver, EffectSqliteSaver
from tests.ledger.conftest import created_schema


class AsyncOverSync(BaseCheckpointSaver[Any]):
    """A sync saver's methods offered as the async ones, each run in a worker thread."""

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        super().__init__(serde=saver.serde)
        self.saver = saver

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.saver.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        def listed() -> builtins.list[CheckpointTuple]:
            return builtins.list(self.saver.list(config, filter=filter, before=before, limit=limit))

        for item in await asyncio.to_thread(listed):
            yield item

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.saver.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.saver.put_writes, config, writes, task_id, task_path)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.saver.get_next_version(current, channel)


async def _adelete_thread(self: AsyncOverSync, thread_id: str) -> None:
    await asyncio.to_thread(self.saver.delete_thread, thread_id)


async def _adelete_for_runs(self: AsyncOverSync, run_ids: Sequence[str]) -> None:
    await asyncio.to_thread(self.saver.delete_for_runs, run_ids)


async def _acopy_thread(self: AsyncOverSync, source: str, target: str) -> None:
    await asyncio.to_thread(self.saver.copy_thread, source, target)


async def _aprune(self: AsyncOverSync, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
    await asyncio.to_thread(self.saver.prune, thread_ids, strategy=strategy)


_OPTIONAL = {
    "delete_thread": _adelete_thread,
    "delete_for_runs": _adelete_for_runs,
    "copy_thread": _acopy_thread,
    "prune": _aprune,
}


def async_over(kind: type[BaseCheckpointSaver[Any]]) -> type[AsyncOverSync]:
    """:class:`AsyncOverSync` with the optional async methods whose sync ones ``kind`` has."""
    has = {
        f"a{name}": method
        for name, method in _OPTIONAL.items()
        if getattr(kind, name) is not getattr(BaseCheckpointSaver, name)
    }
    return type(f"AsyncOver{kind.__name__}", (AsyncOverSync,), has)


Opener = Callable[[int], AbstractAsyncContextManager[BaseCheckpointSaver[Any]]]


def async_saver(open_saver: Callable[[int], Any]) -> Opener:
    """An async saver's ``from_conn_string``, set up."""

    @asynccontextmanager
    async def opened(n: int) -> AsyncIterator[BaseCheckpointSaver[Any]]:
        async with open_saver(n) as saver:
            await saver.setup()
            yield saver

    return opened


def sync_saver(open_saver: Callable[[int], AbstractContextManager[Any]]) -> Opener:
    """A sync saver's ``from_conn_string``, set up, behind :func:`async_over`; opened and
    closed in a worker thread (ours open on the portal's loop, and wait for it)."""

    @asynccontextmanager
    async def opened(n: int) -> AsyncIterator[BaseCheckpointSaver[Any]]:
        manager = open_saver(n)
        saver = await asyncio.to_thread(manager.__enter__)
        try:
            await asyncio.to_thread(saver.setup)
            yield async_over(type(saver))(saver)
        finally:
            await asyncio.to_thread(manager.__exit__, None, None, None)

    return opened


async def run_suite(name: str, opener: Opener) -> CapabilityReport:
    """The whole suite on fresh savers from ``opener`` (a new one per capability)."""
    count = iter(range(1_000))

    async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        async with opener(next(count)) as saver:
            yield saver

    return await validate(RegisteredCheckpointer(name=name, factory=factory))


def table(reports: Sequence[CapabilityReport]) -> str:
    """Capability by saver: ``passed/run``, or ``-`` where the saver lacks the capability."""
    head = ["capability", *(r.checkpointer_name for r in reports)]
    rows = [head]
    for cap in Capability:
        cells = [cap.value]
        for report in reports:
            result = report.results[cap.value]
            run = result.tests_passed + result.tests_failed
            cells.append(f"{result.tests_passed}/{run}" if result.detected else "-")
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    return "\n".join(lines)


def assert_ours_pass_theirs(pairs: Sequence[tuple[CapabilityReport, CapabilityReport]]) -> None:
    """Every capability LangGraph's saver passes (all its tests), ours passes too."""
    short = []
    for ours, theirs in pairs:
        for cap, result in theirs.results.items():
            if result.passed and not ours.results[cap].passed:
                failures = "; ".join(ours.results[cap].failures) or "not implemented"
                where = f"{ours.checkpointer_name} {cap} (passes on {theirs.checkpointer_name})"
                short.append(f"{where}: {failures}")
    assert not short, "\n".join(short)


async def test_sqlite_savers_pass_what_langgraphs_pass(tmp_path: Path) -> None:
    def file(kind: str) -> Callable[[int], str]:
        return lambda n: str(tmp_path / f"{kind}-{n}.sqlite")

    ours_async = await run_suite(
        "AsyncEffectSqliteSaver",
        async_saver(lambda n: AsyncEffectSqliteSaver.from_conn_string(file("ea")(n))),
    )
    theirs_async = await run_suite(
        "AsyncSqliteSaver", async_saver(lambda n: AsyncSqliteSaver.from_conn_string(file("la")(n)))
    )
    ours_sync = await run_suite(
        "EffectSqliteSaver", sync_saver(lambda n: EffectSqliteSaver.from_conn_string(file("es")(n)))
    )
    theirs_sync = await run_suite(
        "SqliteSaver",
        sync_saver(lambda n: SqliteSaver.from_conn_string(file("ls")(n))),
    )
    print("\n" + table([ours_async, theirs_async, ours_sync, theirs_sync]))
    assert_ours_pass_theirs([(ours_async, theirs_async), (ours_sync, theirs_sync)])
    # What the suite finds LangGraph's SQLite savers lack (prune), ours lack too: no promise beyond.
    assert not theirs_async.results["prune"].detected and not ours_async.results["prune"].detected


@pytest.fixture
def schemas() -> Iterator[dict[str, str]]:
    """A schema of its own per saver (the test DSN with that schema on its search_path)."""
    with ExitStack() as stack:
        yield {
            name: stack.enter_context(created_schema(f"lge_conf_{name}"))[1]
            for name in ("ours_async", "theirs_async", "ours_sync", "theirs_sync")
        }


@pytest.mark.postgres
@pytest.mark.slow  # four savers, each through the whole suite on a fresh schema
async def test_postgres_savers_pass_what_langgraphs_pass(schemas: dict[str, str]) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from langgraph_effects import AsyncEffectPostgresSaver

    ours_async = await run_suite(
        "AsyncEffectPostgresSaver",
        async_saver(lambda n: AsyncEffectPostgresSaver.from_conn_string(schemas["ours_async"])),
    )
    theirs_async = await run_suite(
        "AsyncPostgresSaver",
        async_saver(lambda n: AsyncPostgresSaver.from_conn_string(schemas["theirs_async"])),
    )
    ours_sync = await run_suite(
        "EffectPostgresSaver",
        sync_saver(lambda n: EffectPostgresSaver.from_conn_string(schemas["ours_sync"])),
    )
    theirs_sync = await run_suite(
        "PostgresSaver", sync_saver(lambda n: PostgresSaver.from_conn_string(schemas["theirs_sync"]))
    )
    print("\n" + table([ours_async, theirs_async, ours_sync, theirs_sync]))
    assert_ours_pass_theirs([(ours_async, theirs_async), (ours_sync, theirs_sync)])
    # LangGraph's Postgres savers prune (checkpoint-postgres 3.2): all 8 of the suite's tests.
    assert theirs_sync.results["prune"].tests_passed == 8
