"""Fault-injection points for the crash lab and the crash tests.

The dispatcher (`_runtime/dispatch.py`) calls `fire` at the two instants a crash hurts most: right after
the intent is durable but before the request leaves (``after_intent``), and right
after the tool returned but before its outcome is committed (``before_outcome``).
Nothing is installed in production, and a lookup in an empty dict is all it costs.
A test installs a hook that SIGKILLs its own worker process there.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.operation import Operation

Hook = Callable[[str, Operation], None]
POINTS = ("after_intent", "before_outcome")

#: point -> hook; empty in production, so the dispatcher checks it before calling `fire`.
installed: dict[str, Hook] = {}


def install(point: str, hook: Hook) -> None:
    """Call ``hook(point, operation)`` whenever the dispatcher reaches ``point``."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; choose one of {POINTS}")
    installed[point] = hook


def clear() -> None:
    installed.clear()


def fire(point: str, op: Operation) -> None:
    hook = installed.get(point)
    if hook is not None:
        hook(point, op)
