"""What a thread waits for, read from LangGraph's ``StateSnapshot``: the interrupts a
resume answers, or why there is nothing to resume (no checkpoint at all for that
thread id, or no interrupt pending)."""

from __future__ import annotations

from typing import Any

from .. import _private
from ..errors import NothingToResumeError

NO_CHECKPOINT = (
    "there is nothing to resume for thread {thread!r}: the graph's checkpointer has no checkpoint "
    "for it. Check the thread_id (a typo starts an empty thread), and that the graph is compiled "
    "with the checkpointer (the same database, and schema on Postgres) the thread ran with. "
    "Nothing was sent."
)


def is_snapshot(value: Any) -> bool:
    """Whether ``value`` is a ``StateSnapshot`` (``graph.get_state(config)``'s answer)."""
    return hasattr(value, "interrupts") and hasattr(value, "created_at") and hasattr(value, "config")


def pending_interrupts(given: Any) -> Any:
    """The interrupts to answer: ``given`` itself (``state.interrupts``), or those of a
    ``StateSnapshot``, once it is known to be of a thread that has a checkpoint."""
    if not is_snapshot(given):
        return given
    thread = _private.thread_id(given.config or {})
    if given.created_at is None:
        raise NothingToResumeError(
            NO_CHECKPOINT.format(thread=thread), thread_id=thread, has_checkpoint=False
        )
    if not given.interrupts:
        raise NothingToResumeError(
            f"there is nothing to resume for thread {thread!r}: it is not paused at an interrupt "
            f"(its next step: {list(given.next) or 'none, its run ended'}). Check the thread_id, and "
            "whether an earlier answer already resumed it. Nothing was sent.",
            thread_id=thread, has_checkpoint=True,
        )
    return given.interrupts
