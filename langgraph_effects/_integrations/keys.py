"""``Effect(key_argument=...)`` for ``EffectToolNode`` and ``EffectMiddleware``: the
schema check before any send, and the provider key written into the tool call that is
dispatched (the rules live in `langgraph_effects.core.keys`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..core.contract import Effect
from ..core.keys import check_key_argument
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool
    from langgraph.prebuilt.tool_node import ToolCallRequest


HIDDEN = "langgraph_effects.key_argument"
"""Tool metadata naming a key argument removed from the schema the model sees
(see `langgraph_effects.hide_key_arguments`)."""


def tool_arguments(tool: BaseTool) -> list[str]:
    """The arguments the key may go into: the tool's model-visible input schema.
    ``InjectedToolArg`` parameters are not among them: ``ToolNode`` strips them from
    every tool call before running the tool, so a key written there would be lost."""
    hidden = (tool.metadata or {}).get(HIDDEN)
    return [*tool.args, *([hidden] if isinstance(hidden, str) else [])]


def check_tools(tools: Mapping[str, BaseTool], effects: Mapping[str, Effect]) -> None:
    """Check every declared ``key_argument`` against its tool (``EffectToolNode``)."""
    for name, effect in effects.items():
        found = tools.get(name)
        if found is not None and effect.key_argument is not None:
            check_key_argument(name, effect, tool_arguments(found))


def check_request(request: ToolCallRequest, effect: Effect) -> None:
    """Check a call's ``key_argument`` against the tool it is about to run
    (``EffectMiddleware`` sees its tools only through their calls)."""
    if effect.key_argument is not None and request.tool is not None:
        check_key_argument(request.tool.name, effect, tool_arguments(request.tool))


def refuse_for_tasks(effect: Effect, task: str) -> None:
    """``@effectful`` calls the function itself, with the caller's arguments: there is
    no tool call to write a key into, so a ``key_argument`` there is refused."""
    if effect.key_argument is not None:
        raise ConfigurationError(
            f"@effectful task {task!r}: Effect(key_argument={effect.key_argument!r}) applies to "
            f"tool calls (EffectToolNode, EffectMiddleware), not to Functional API tasks. Inside "
            f"the task, send current_operation().provider_key to the provider instead."
        )
