"""Which threads a crash left with unfinished input, read from LangGraph's own tables.

The ledger knows a thread only once a tool call was recorded. A worker that died
between saving the ``__start__`` task's writes (the user's input) and the first
checkpoint after them leaves a thread with no operation at all, and LangGraph's
``get_state`` reports ``next == ()`` for it (measured on 1.2.24): nothing but the
checkpoint tables show that the input was never processed.

A thread is listed when its newest root checkpoint is an ``input`` checkpoint (no
step ran after the input) or has task writes saved against it (a step started, no
checkpoint applied its writes), unless those writes record an interrupt or an error
(the run ended there and its caller was told). Recovery then reads each one's state
and decides (`langgraph_effects.recovery.classify`).
"""

from __future__ import annotations

#: Channels whose write means the run stopped there on purpose (an interrupt) or
#: raised to its caller (an error): not a crash.
_ENDED = ("__interrupt__", "__error__")


def unfinished_sql(writes_table: str, source: str, mark: str, barrier: str = "") -> str:
    """The thread ids (one column) of threads whose newest root checkpoint is unfinished.

    ``source``: the backend's expression for ``c.metadata``'s ``source``; ``mark``: its
    parameter placeholder (the statement takes the two channels of `_ENDED`);
    ``barrier``: what keeps the backend's planner from merging the newest-checkpoint
    subquery into the filter (Postgres: ``OFFSET 0``; without it Postgres tests every
    checkpoint's metadata, not only each thread's newest).
    """
    writes = (
        f"SELECT 1 FROM {writes_table} w WHERE w.thread_id = x.thread_id AND w.checkpoint_ns = '' "
        "AND w.checkpoint_id = x.checkpoint_id"
    )
    newest = (
        f"SELECT c.thread_id, c.checkpoint_id, {source} AS source FROM checkpoints c JOIN ("
        "SELECT thread_id, max(checkpoint_id) AS checkpoint_id FROM checkpoints "
        "WHERE checkpoint_ns = '' GROUP BY thread_id) latest "
        "ON c.thread_id = latest.thread_id AND c.checkpoint_ns = '' "
        f"AND c.checkpoint_id = latest.checkpoint_id {barrier}"
    )
    return (
        f"SELECT x.thread_id FROM ({newest}) x "
        f"WHERE (x.source = 'input' OR EXISTS ({writes})) "
        f"AND NOT EXISTS ({writes} AND w.channel IN ({mark}, {mark})) "
        "ORDER BY x.checkpoint_id"
    )


PARAMS: tuple[str, ...] = _ENDED
