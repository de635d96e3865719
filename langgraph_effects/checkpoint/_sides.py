"""An async saver driven by a sync graph run fails at once, naming the sync saver.

LangGraph's async savers accept sync calls from a thread other than their event
loop's; a sync graph run (``graph.invoke``/``graph.stream``) on ours would then drive
the ledger on another event loop than the saver's (a Postgres pool cannot follow).
Its first call, the loop's ``get_tuple``, is refused instead, before anything is read,
saved or sent. Sync calls that are not a graph run's (``graph.get_state`` from another
thread, a sync task's read of its checkpoint) behave as LangGraph's saver does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple

from .. import _private
from ..errors import SyncMismatchError


class AsyncOnly:
    """Listed first among an async Effect saver's bases (see the module)."""

    sync_name: ClassVar[str] = "SyncEffectSqliteSaver"
    """The sync twin's class name: what ``invoke``/``stream`` should use instead."""

    def _refuse_sync_run(self, method: str, config: RunnableConfig) -> None:
        if _private.from_graph_loop(config):
            raise SyncMismatchError(type(self).__name__, method, self.sync_name, sync_side=False)

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
