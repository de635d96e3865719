"""Sync and async sides: an object of one side used from the other fails at once.

An async saver driven by a sync graph run fails, naming the sync saver
(`AsyncOnly`); a sync saver in an async run names the async one
(`sync`); a tool with only an async
implementation in a sync run is refused before its call is recorded
(`refuse_async_only_tool`).

LangGraph's async savers accept sync calls from a thread other than their event
loop's, and run them on that loop (``asyncio.run_coroutine_threadsafe``); from the
loop's own thread they raise ``InvalidStateError`` (the call would block the loop it
waits for). Ours do the same for what an async run starts: a plain ``def`` node of an
async run (``ainvoke``/``astream``) runs on a worker thread, and a compiled subgraph
it calls with ``invoke`` loads and saves its checkpoints through the saver's loop,
fenced as the parent's, while its effectful calls drive the ledger on that same loop
(`run_loop`). A top-level sync run
(``graph.invoke``/``graph.stream``) on an async saver is refused at its first call,
the loop's ``get_tuple``, before anything is read, saved or sent, naming the sync
twin; so is a sync subgraph run on the saver's own event-loop thread, naming
``ainvoke``. Sync calls that are not a graph run's (``graph.get_state`` from another
thread) behave as LangGraph's saver does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import TracebackType
from typing import Any, ClassVar, Generic, NoReturn, TypeVar

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple

from .. import _private
from ..errors import SyncMismatchError

T = TypeVar("T")


class AsyncOpener(Generic[T]):
    """What an async saver's ``from_conn_string`` returns: ``async with`` opens the
    saver; a sync ``with`` is refused at once, naming the sync saver to use, before
    anything is opened."""

    def __init__(self, opening: AbstractAsyncContextManager[T], saver: str, use: str) -> None:
        self._opening = opening
        self._saver = saver
        self._use = use

    async def __aenter__(self) -> T:
        return await self._opening.__aenter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._opening.__aexit__(kind, error, tb)

    def __enter__(self) -> NoReturn:
        raise SyncMismatchError(
            f"{self._saver}.from_conn_string(...) opens an async saver: use it with `async with` "
            f"in async code (ainvoke/astream). For sync code (a plain `with`, invoke/stream), open "
            f"{self._use}.from_conn_string(...) instead: the same database, ledger and setup(). "
            "Nothing was opened.",
            used=self._saver, use=self._use,
        )

    def __exit__(self, *exc: object) -> None:  # pragma: no cover - __enter__ always raises
        return None


class SyncOpener(Generic[T]):
    """What a sync saver's ``from_conn_string`` returns: a plain ``with`` opens the
    saver; ``async with`` is refused at once, naming the async saver to use, before
    anything is opened."""

    def __init__(self, opening: AbstractContextManager[T], saver: str, use: str) -> None:
        self._opening = opening
        self._saver = saver
        self._use = use

    def __enter__(self) -> T:
        return self._opening.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return self._opening.__exit__(kind, error, tb)

    async def __aenter__(self) -> NoReturn:
        raise SyncMismatchError(
            f"{self._saver}.from_conn_string(...) opens a sync saver: use it with a plain `with` "
            f"in sync code (invoke/stream). For async code (`async with`, ainvoke/astream), open "
            f"{self._use}.from_conn_string(...) instead: the same database, ledger and setup(). "
            "Nothing was opened.",
            used=self._saver, use=self._use,
        )

    async def __aexit__(self, *exc: object) -> None:  # pragma: no cover - __aenter__ always raises
        return None


class AsyncOnly:
    """Listed first among an async Effect saver's bases (see the module)."""

    sync_name: ClassVar[str] = "EffectSqliteSaver"
    """The sync twin's class name: what ``invoke``/``stream`` should use instead."""

    loop: asyncio.AbstractEventLoop
    """The event loop the saver was opened on (LangGraph's saver sets it)."""

    def _refuse_sync_run(self, method: str, config: RunnableConfig) -> None:
        if not _private.from_graph_loop(config):
            return
        on_loop_thread = _running_loop() is self.loop
        if _private.checkpoint_ns(config) and self.loop.is_running() and not on_loop_thread:
            return  # a sync subgraph of an async run, on a worker thread: run on the loop
        if _private.checkpoint_ns(config) and on_loop_thread:
            raise subgraph_on_loop(type(self).__name__, method)
        raise saver_mismatch(type(self).__name__, method, self.sync_name, sync_run=True)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """LangGraph's ``get_tuple``; refused for a sync graph run."""
        self._refuse_sync_run("get_tuple", config)
        found: CheckpointTuple | None = super().get_tuple(config)  # type: ignore[misc]
        return found

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """LangGraph's ``put``; refused for a sync graph run."""
        self._refuse_sync_run("put", config)
        saved: RunnableConfig = super().put(config, checkpoint, metadata, new_versions)  # type: ignore[misc]
        return saved

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """LangGraph's ``put_writes``; refused for a sync graph run."""
        self._refuse_sync_run("put_writes", config)
        super().put_writes(config, writes, task_id, task_path)  # type: ignore[misc]


def saver_mismatch(saver: str, method: str, use: str, *, sync_run: bool) -> SyncMismatchError:
    """The error for ``saver.method`` called by a run of the other side."""
    run, calls, other = ("a sync", "invoke/stream", "ainvoke/astream") if sync_run else (
        "an async", "ainvoke/astream", "invoke/stream")
    return SyncMismatchError(
        f"{saver}.{method}: {saver} is for {other} only, and this is {run} run ({calls}); "
        f"nothing was read, saved or sent. Open {use} instead (same database, same ledger, "
        f"same from_conn_string and setup()), or call {other}.",
        used=saver, use=use,
    )


def subgraph_on_loop(saver: str, method: str) -> SyncMismatchError:
    """The error for a sync subgraph run on the thread of its async saver's event loop."""
    return SyncMismatchError(
        f"{saver}.{method}: a subgraph ran with invoke/stream on the thread of the event loop "
        f"{saver} runs on (the async run's own thread), where it would block the loop it "
        "waits for; nothing was read, saved or sent. Call the subgraph with "
        "`await subgraph.ainvoke(...)` from an async node, or call invoke from a plain `def` "
        "node (LangGraph runs it on a worker thread).",
        used=saver, use="ainvoke/astream",
    )


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def refuse_async_only_tool(tool: BaseTool | None, integration: str) -> None:
    """Refuse, before its call is recorded, a tool a sync run cannot call: one made from
    an ``async def`` only (LangChain's sync ``invoke`` of it raises ``NotImplementedError``
    after the call would have been dispatched, and the ledger could not know it was
    never sent)."""
    if isinstance(tool, StructuredTool) and tool.func is None and tool.coroutine is not None:
        raise SyncMismatchError(
            f"tool {tool.name!r} has only an async implementation (async def), and this "
            f"{integration} runs in a sync run (invoke/stream); nothing was recorded or sent. "
            "Give the tool a sync implementation (a def, or StructuredTool.from_function("
            "func=..., coroutine=...)), or run the graph with ainvoke/astream.",
            used=tool.name, use="a tool with a sync implementation",
        )
