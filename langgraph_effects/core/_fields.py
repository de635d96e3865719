"""Small helpers the core's declarations and report classes share."""

from __future__ import annotations

from datetime import timedelta
from typing import Any


def pick(obj: object, *names: str) -> dict[str, Any]:
    """``{name: obj.<name>}`` for each of ``names``, in that order (JSON key order)."""
    return {name: getattr(obj, name) for name in names}


def seconds(value: float | timedelta | None) -> float | None:
    """A duration given as seconds or a ``timedelta``, in seconds (``None`` stays ``None``)."""
    if value is None:
        return None
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
