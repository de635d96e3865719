"""``--graph MODULE:ATTR``: importing the user's graph factory and checking what it builds."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, cast

from .._runtime.targets import load_target
from ..errors import TargetNotFoundError
from .failures import BadInput


def load_graph_factory(target: str) -> Callable[[Any], Any]:
    """The factory named by ``--graph MODULE:ATTR`` (the current directory is importable)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise BadInput(
            f"--graph takes MODULE:ATTR naming a factory `def make_graph(checkpointer)` that returns "
            f"the compiled graph, e.g. --graph myapp.agent:make_graph (got {target!r})."
        )
    try:
        found: Any = load_target(target)
    except TargetNotFoundError as error:
        raise BadInput(f"--graph {target}: {error.reason}") from error
    if not callable(found):
        raise BadInput(
            f"--graph {target} is not callable: it must name a factory `def make_graph(checkpointer)` "
            "that compiles and returns the graph with that checkpointer."
        )
    return cast(Callable[[Any], Any], found)


def parse_configurable(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(
                f"--configurable takes KEY=VALUE, e.g. --configurable policy_version=v7 (got {pair!r})."
            )
        if key.strip() in ("thread_id", "tenant_id"):
            raise BadInput(
                f"--configurable {key.strip()}=...: recovery sets it per thread (use --thread / --tenant)."
            )
        out[key.strip()] = value
    return out


async def build_graph(factory: Callable[[Any], Any], saver: Any, graph: str) -> Any:
    """The compiled graph ``factory(saver)`` returns (awaited if async), checked for use.

    ``graph`` is the ``--graph`` value, for the messages.
    """
    try:
        built = factory(saver)
        if inspect.isawaitable(built):
            built = await built
    except Exception as error:
        raise BadInput(f"--graph {graph}: the factory raised {type(error).__name__}: {error}") from error
    if not (hasattr(built, "ainvoke") and hasattr(built, "aget_state")):
        raise BadInput(
            f"--graph {graph} returned {type(built).__name__}, not a compiled graph "
            "(builder.compile(checkpointer=checkpointer))."
        )
    if getattr(built, "checkpointer", None) is not saver:
        raise BadInput(
            f"--graph {graph}: the factory must compile the graph with the checkpointer it "
            "is given (builder.compile(checkpointer=checkpointer)), so the resumes read and "
            "write the threads in --db."
        )
    return built
