"""Dangling tool calls: answered from the ledger, not guessed.

When a turn is abandoned mid-tools (the user sends a new message instead of
resuming, an operator edits the thread), the history holds an AIMessage whose
calls have no ToolMessage. Chat models refuse such a history, and the usual patch
tells the model the call "was cancelled", which may be false: the effect may have
landed. Here each dangling call is answered with what the ledger knows: the
recorded outcome, "not known yet" for an unresolved operation (so the model does
not repeat it), or "not executed" when no intent was ever recorded (nothing can
have been sent: intents are durable before dispatch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from . import _pregel, identity, messages
from .engine import Settings, identify, scope_from
from .ledger.base import Ledger


def _unknown_message(op: Any, *, tool_call_id: str, tool: str) -> ToolMessage:
    return ToolMessage(
        content=(
            f"The {tool} call was interrupted and its outcome is not known yet (operation "
            f"{op.op_id} is {op.state.value}): it may have happened. Do not repeat it; it will "
            "be settled from the provider's evidence or by an operator."
        ),
        name=tool,
        tool_call_id=tool_call_id,
        status="error",
        artifact=messages.effect_artifact(op),
    )


def _not_executed(tool_call_id: str, tool: str) -> ToolMessage:
    return ToolMessage(
        content=f"The {tool} call was not executed: the turn was interrupted before it started.",
        name=tool,
        tool_call_id=tool_call_id,
        status="error",
    )


async def answer_dangling(
    history: Sequence[BaseMessage],
    *,
    ledger: Ledger,
    settings: Settings,
    config: Mapping[str, Any],
    context: Any = None,
) -> list[BaseMessage] | None:
    """``history`` with a truthful ToolMessage after every unanswered tool call, or
    ``None`` when every call is answered."""
    answered = {m.tool_call_id for m in history if isinstance(m, ToolMessage)}
    dangling = [
        (message, call)
        for message in history
        if isinstance(message, AIMessage)
        for call in message.tool_calls
        if call.get("id") and call["id"] not in answered
    ]
    if not dangling:
        return None
    thread_id = _pregel.thread_id(config) or ""
    scope = scope_from(config, context)
    namespace = identity.namespace_path(_pregel.parent_namespace(_pregel.checkpoint_ns(config)))
    op_ids: dict[str, str] = {}
    for asked, call in dangling:
        effect = settings.effect_for(call["name"])
        if effect.read_only_tool:
            continue
        op_id, _, _ = identify(
            call,
            effect=effect,
            settings=settings,
            scope=scope,
            thread_id=thread_id,
            namespace=namespace,
            anchor=asked.id or "",
            config=config,
        )
        op_ids[str(call["id"])] = op_id
    stored = await ledger.get_many(sorted(set(op_ids.values())))

    patched: list[BaseMessage] = []
    for message in history:
        patched.append(message)
        if not isinstance(message, AIMessage):
            continue
        for call in message.tool_calls:
            call_id = str(call.get("id") or "")
            if not call_id or call_id in answered:
                continue
            op = stored.get(op_ids.get(call_id, ""))
            if op is None:
                patched.append(_not_executed(call_id, call["name"]))
            elif op.terminal:
                patched.append(messages.replay(op, tool_call_id=call_id, tool=call["name"]))
            else:
                patched.append(_unknown_message(op, tool_call_id=call_id, tool=call["name"]))
    return patched
