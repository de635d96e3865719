"""The one helper the JSON views of the report classes share."""

from __future__ import annotations

from typing import Any


def pick(obj: object, *names: str) -> dict[str, Any]:
    """``{name: obj.<name>}`` for each of ``names``, in that order (JSON key order)."""
    return {name: getattr(obj, name) for name in names}
