"""Public helpers to try the package, and test agents built with it, with no LLM key.

* [`ScriptedChatModel`][langgraph_effects.testing.ScriptedChatModel]: a chat model
  driven by the conversation. LangChain's fake chat models keep their position per
  instance (and lack ``bind_tools``), so a resumed process (a fresh instance) would
  replay their script from the start; here a function of the messages so far
  decides the next AIMessage, so a crashed and resumed thread continues where it
  was. [`call_each_then_finish`][langgraph_effects.testing.call_each_then_finish] is
  the usual script.
* [`Provider`][langgraph_effects.testing.Provider]: a stand-in for the outside system
  (a payment API, a mail service) that keeps its own records in a SQLite file, with
  the contract you pick (``"dedup"`` Stripe-like idempotency keys, ``"lookup"``,
  ``"lagging"``, ``"withdrawn"``, ``"blind"``). Count effects from its records
  (``provider.effects()``, ``provider.count_requests("apply")``), never from the
  worker's logs: they survive a SIGKILL of the worker the instant after.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

from ..lab.providers import Provider, ProviderMode, Receipt

__all__ = [
    "Provider",
    "ProviderMode",
    "Receipt",
    "Script",
    "ScriptedChatModel",
    "call_each_then_finish",
]

Script = Callable[[Sequence[BaseMessage]], AIMessage]
"""What a [`ScriptedChatModel`][langgraph_effects.testing.ScriptedChatModel] runs: the
conversation so far -> the next AIMessage."""


class ScriptedChatModel(BaseChatModel):
    """A chat model whose every answer is ``script(messages)``.

    ``bind_tools`` returns the model itself, so it works with ``create_agent`` (and
    the deprecated ``create_react_agent``). To swap in a real model, pass e.g.
    ``ChatOpenAI(...)`` wherever this one is used. An AIMessage without an id gets a
    fresh one.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    script: Script

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self.script(messages)
        if message.id is None:
            message = message.model_copy(update={"id": f"scripted-{uuid.uuid4().hex}"})
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self


def call_each_then_finish(
    calls: Sequence[tuple[str, dict[str, Any]]], *, final: str = "done", call_prefix: str = "call"
) -> Script:
    """A script that asks for all ``calls`` in one AIMessage, then answers ``final``.

    Tool call ids are fixed (``call_prefix-0``, ``-1`` …) so a run is reproducible.
    """

    def script(messages: Sequence[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage(content=final)
        return AIMessage(
            content="",
            tool_calls=[
                {"name": name, "args": args, "id": f"{call_prefix}-{i}", "type": "tool_call"}
                for i, (name, args) in enumerate(calls)
            ],
        )

    return script


from ..crashtest import CrashReport, crashtest  # noqa: E402,F401  (re-exported for users' test suites)
