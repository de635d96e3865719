"""The one place that reads LangGraph's private runtime config keys.

A node reaches the graph's checkpointer and durability mode only through
``__pregel_*`` keys of its config. They are private; keeping every read here means
one file to fix when they move, and ``tests/test_langgraph_contract.py`` fails
loudly if they do (pinned range: see pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CHECKPOINTER = "__pregel_checkpointer"
DURABILITY = "__pregel_durability"
TASK_ID = "__pregel_task_id"


def _configurable(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return config.get("configurable") or {}


def checkpointer(config: Mapping[str, Any]) -> Any | None:
    """The graph's checkpointer as the running node sees it."""
    return _configurable(config).get(CHECKPOINTER)


def durability(config: Mapping[str, Any]) -> str | None:
    """``"sync"``, ``"async"`` or ``"exit"`` (``None`` outside a graph run)."""
    value = _configurable(config).get(DURABILITY)
    return str(value) if value is not None else None


def task_id(config: Mapping[str, Any]) -> str | None:
    value = _configurable(config).get(TASK_ID)
    return str(value) if value is not None else None


def thread_id(config: Mapping[str, Any]) -> str | None:
    value = _configurable(config).get("thread_id")
    return str(value) if value is not None else None


def checkpoint_ns(config: Mapping[str, Any]) -> str:
    return str(_configurable(config).get("checkpoint_ns") or "")


def parent_namespace(ns: str) -> str:
    """``"agent:<t1>|tools:<t2>"`` -> ``"agent:<t1>"``: the namespace the task runs in."""
    return ns.rsplit("|", 1)[0] if "|" in ns else ""


def parent_checkpoint(config: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, checkpoint id) of the checkpoint this task was prepared from.

    That checkpoint holds the AIMessage whose calls the task runs; it must be
    durable before anything is dispatched.
    """
    conf = _configurable(config)
    ns = parent_namespace(checkpoint_ns(config))
    mapping = conf.get("checkpoint_map") or {}
    checkpoint_id = mapping.get(ns)
    if checkpoint_id is None:
        return None
    return ns, str(checkpoint_id)
