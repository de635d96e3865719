"""``recover_sync``: [`recover`][langgraph_effects.recover] for graphs run with ``invoke``/``stream``.

Recovery is written once, async. A sync graph (on ``EffectSqliteSaver`` or
``EffectPostgresSaver``) is recovered by running that same coroutine on the
package's background event loop (the portal, where the sync savers keep their
async savers), with the graph's own sync calls (``invoke``, ``get_state``) made from
a thread of their own (never the loop's executor, which those calls would wait on):
every resume is the sync run the application itself would make.
"""

from __future__ import annotations

from typing import Any

from .._runtime import portal as _portal
from .report import RecoveryReport
from .resume import recover


class _SyncGraph:
    """A compiled sync graph as [`recover`][langgraph_effects.recover] reads and resumes it."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        saver = getattr(graph, "checkpointer", None)
        # The async saver the sync one runs (it lists unfinished threads), else as given.
        self.checkpointer = getattr(saver, "saver", saver)

    async def ainvoke(self, input: Any, config: Any, **kwargs: Any) -> Any:
        return await _portal.in_thread(self.graph.invoke, input, config, **kwargs)

    async def aget_state(self, config: Any) -> Any:
        return await _portal.in_thread(self.graph.get_state, config)


def recover_sync(graph: Any, **options: Any) -> RecoveryReport:
    """Find threads a crash left mid-effect, resume each once with ``graph.invoke``, and
    report what happened: [`recover`][langgraph_effects.recover] for a sync application.

    ``graph`` is the compiled graph the threads ran with (its checkpointer a
    ``EffectSqliteSaver``/``EffectPostgresSaver``, or a sync saver with a
    ledger attached); ``options`` are [`recover`][langgraph_effects.recover]'s keyword
    arguments (``thread_ids``, ``min_idle``, ``dry_run``...). Call it from sync code,
    not from a running event loop's thread.
    """
    report: RecoveryReport = _portal.run(recover(_SyncGraph(graph), **options))
    return report


__all__ = ["recover_sync"]
