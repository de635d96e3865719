"""Durable savers for synchronous graphs (``graph.invoke`` / ``graph.stream``).

``EffectSqliteSaver`` and ``EffectPostgresSaver`` are LangGraph's sync
checkpointer interface over the async savers (`AsyncEffectSqliteSaver`,
`AsyncEffectPostgresSaver`), not a second copy of them: every sync call runs the
async saver's method on the package's one background event loop (the portal,
`langgraph_effects._runtime.portal`), where the sync integrations already run their
ledger work. So the checkpoints, the one-runner fence, the ledger beside them and
its SQL are the async savers' own, and the sync path and the async path cannot drift.

Each sync saver opens its async saver on the portal's loop and keeps it there (a
Postgres connection and pool belong to the loop that opened them). It is for sync
code only: its async methods raise `SyncMismatchError`
naming the async saver, and a sync graph run on an async saver raises it naming these
(`AsyncOnly`).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Collection, Coroutine, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from .._runtime import portal as _portal
from ..ledger.base import DEFAULT_ACTOR
from . import _fence
from ._sides import SyncOpener, saver_mismatch
from .sqlite import AsyncEffectSqliteSaver

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from ..ledger.base import Ledger
    from .postgres import AsyncEffectPostgresSaver

T = TypeVar("T")
S = TypeVar("S", bound="SyncEffectSaver")


class SyncEffectSaver(BaseCheckpointSaver[Any]):
    """A sync checkpointer whose every call is its async Effect saver's, run on the portal.

    Build it with a subclass's ``from_conn_string`` (a sync context manager), which
    opens the async saver on the portal's loop; ``.ledger`` is that saver's ledger,
    so ``EffectToolNode``, ``EffectMiddleware`` and ``@effectful`` find it as they
    find the async saver's.
    """

    async_name: ClassVar[str] = "AsyncEffectSqliteSaver"
    """The async saver's class name: what ``ainvoke``/``astream`` should use instead."""

    def __init__(self, saver: Any) -> None:
        super().__init__(serde=saver.serde)
        self.saver = saver
        """The async saver, open on the portal's event loop."""
        saver.opened_as = type(self).__name__
        self.ledger: Ledger = saver.ledger

    # -- the sync interface: the async saver's methods, run on the portal ---------------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return _portal.run(coro)

    def setup(self) -> None:
        """Create or migrate the checkpoint tables, the ledger tables and the fence
        (the async saver's ``setup``). Call once, before the first run."""
        self._run(self.saver.setup())

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """LangGraph's ``get_tuple``, fenced as the async saver's ``aget_tuple``."""
        # The run's mark is started here, in the run's own context (the portal runs a
        # copy of it): the run's tasks and its later saves must see the same mark.
        _fence.on_load(config)
        found: CheckpointTuple | None = self._run(self.saver.aget_tuple(config))
        return found

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """LangGraph's ``list`` (read to the end on the portal, then yielded)."""

        async def collect() -> builtins.list[CheckpointTuple]:
            listed = self.saver.alist(config, filter=filter, before=before, limit=limit)
            return [item async for item in listed]

        return iter(self._run(collect()))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint unless it would be a second child of its parent."""
        saved: RunnableConfig = self._run(self.saver.aput(config, checkpoint, metadata, new_versions))
        return saved

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes, unless another runner already moved past their checkpoint."""
        self._run(self.saver.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str, *, force: bool = False, actor: str = DEFAULT_ACTOR) -> None:
        """Delete a thread: its checkpoints and writes (LangGraph's ``delete_thread``),
        then its operations (the async saver's ``adelete_thread``: refused while some
        are unresolved, unless ``force``)."""
        self._run(self.saver.adelete_thread(thread_id, force=force, actor=actor))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints the given runs saved (the async saver's ``adelete_for_runs``)."""
        self._run(self.saver.adelete_for_runs(run_ids))

    def unfinished_threads(self) -> builtins.list[str]:
        """Threads whose newest checkpoint has input or an unfinished step, oldest first."""
        found: builtins.list[str] = self._run(self.saver.unfinished_threads())
        return found

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.saver.get_next_version(current, channel)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> BaseCheckpointSaver[Any]:
        """LangGraph's strict-msgpack allowlist (``LANGGRAPH_STRICT_MSGPACK``), applied to
        the async saver, which is the one that serializes."""
        saver = self.saver.with_allowlist(extra_allowlist)
        return self if saver is self.saver else type(self)(saver)

    def saved_header(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointTuple | None:
        """The header of a checkpoint this saver committed (see ``FencedSaver.saved_header``)."""
        found: CheckpointTuple | None = self.saver.saved_header(thread_id, ns, checkpoint_id)
        return found

    # -- the async interface: refused, whatever the arguments --------------------------

    def _refuse(self, method: str) -> NoReturn:
        raise saver_mismatch(type(self).__name__, method, self.async_name, sync_run=False)

    async def aget_tuple(self, *args: Any, **kwargs: Any) -> CheckpointTuple | None:
        self._refuse("aget_tuple")

    def alist(self, *args: Any, **kwargs: Any) -> AsyncIterator[CheckpointTuple]:
        self._refuse("alist")

    async def aput(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        self._refuse("aput")

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        self._refuse("aput_writes")

    async def adelete_thread(self, *args: Any, **kwargs: Any) -> None:
        self._refuse("adelete_thread")

    @classmethod
    @contextmanager
    def _opened(cls: type[S], manager: AbstractAsyncContextManager[Any]) -> Iterator[S]:
        """Enter the async saver's ``from_conn_string`` on the portal, and leave it there."""
        saver = _portal.run(manager.__aenter__())
        try:
            yield cls(saver)
        except BaseException as error:
            if not _portal.run(manager.__aexit__(type(error), error, error.__traceback__)):
                raise
        else:
            _portal.run(manager.__aexit__(None, None, None))


class EffectSqliteSaver(SyncEffectSaver):
    """The sync SQLite saver, a drop-in for LangGraph's ``SqliteSaver``: the checkpoints
    and the ledger in one SQLite file, one runner per thread, for ``graph.invoke`` and
    ``graph.stream``; its async twin is
    [`AsyncEffectSqliteSaver`][langgraph_effects.AsyncEffectSqliteSaver]:

        with EffectSqliteSaver.from_conn_string("agent.sqlite") as saver:
            saver.setup()
            graph = builder.compile(checkpointer=saver)
            graph.invoke(inputs, config)
    """

    async_name = "AsyncEffectSqliteSaver"
    saver: AsyncEffectSqliteSaver

    @classmethod
    def from_conn_string(cls, conn_string: str | Path, **kwargs: Any) -> SyncOpener[EffectSqliteSaver]:
        """Open the checkpoints and the ledger in the SQLite file ``conn_string``
        (a plain ``with``; ``kwargs`` go to
        [`AsyncEffectSqliteSaver.from_conn_string`][langgraph_effects.AsyncEffectSqliteSaver.from_conn_string])."""
        opening = cls._opened(AsyncEffectSqliteSaver.from_conn_string(conn_string, **kwargs))
        return SyncOpener(opening, cls.__name__, cls.async_name)


class EffectPostgresSaver(SyncEffectSaver):
    """The sync Postgres saver, a drop-in for LangGraph's ``PostgresSaver``, for
    ``graph.invoke`` and ``graph.stream``; its async twin is
    [`AsyncEffectPostgresSaver`][langgraph_effects.AsyncEffectPostgresSaver]:

        with EffectPostgresSaver.from_conn_string("postgresql://...") as saver:
            saver.setup()
            graph = builder.compile(checkpointer=saver)
    """

    async_name = "AsyncEffectPostgresSaver"
    saver: AsyncEffectPostgresSaver

    @classmethod
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        serde: SerializerProtocol | None = None,
        ledger_schema: str | None = None,
        ledger_max_size: int = 10,
        connect_timeout: float | None = None,
    ) -> SyncOpener[EffectPostgresSaver]:
        """Open the checkpoints and the ledger in the Postgres database ``conn_string``
        (a plain ``with``; the arguments of `AsyncEffectPostgresSaver.from_conn_string`)."""
        from .postgres import AsyncEffectPostgresSaver

        manager = AsyncEffectPostgresSaver.from_conn_string(
            conn_string, pipeline=pipeline, serde=serde, ledger_schema=ledger_schema,
            ledger_max_size=ledger_max_size, connect_timeout=connect_timeout,
        )
        return SyncOpener(cls._opened(manager), cls.__name__, cls.async_name)

    def setup_fencing(self) -> None:
        """The async saver's ``setup_fencing`` (run by `setup`)."""
        self._run(self.saver.setup_fencing())

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune the threads' checkpoints as LangGraph's ``PostgresSaver.prune`` does
        (the async saver's `aprune`): ``"keep_latest"`` keeps
        each namespace's latest checkpoint with its pending writes, ``"delete"`` removes
        every checkpoint. The ledger is not touched: the threads' operations stay, an
        unresolved one is still listed and reported by recovery."""
        self._run(self.saver.aprune(thread_ids, strategy=strategy))

    async def aprune(self, *args: Any, **kwargs: Any) -> None:
        self._refuse("aprune")


__all__ = ["EffectPostgresSaver", "SyncEffectSaver", "EffectSqliteSaver"]
