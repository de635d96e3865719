"""A ledger attached to any LangGraph checkpointer, and found again from it."""

from __future__ import annotations

import weakref
from typing import Any

from .base import Ledger

_ATTACHED: weakref.WeakKeyDictionary[Any, Ledger] = weakref.WeakKeyDictionary()


def attach_ledger(checkpointer: Any, ledger: Ledger) -> Any:
    """Make ``ledger`` the ledger of ``checkpointer`` (any LangGraph saver); returns it.

    ``EffectToolNode`` and ``EffectMiddleware`` without ``ledger=`` use the ledger of
    the graph's checkpointer. Keep the ledger in the same database as the
    checkpoints, on its own connection.
    """
    _ATTACHED[checkpointer] = ledger
    return checkpointer


def ledger_of(checkpointer: Any) -> Ledger | None:
    """The ledger a checkpointer carries, or ``None``."""
    if checkpointer is None:
        return None
    own = getattr(checkpointer, "ledger", None)
    if isinstance(own, Ledger):
        return own
    try:
        return _ATTACHED.get(checkpointer)
    except TypeError:  # not weak-referenceable
        return None
