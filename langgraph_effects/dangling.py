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

from . import _private, identity, messages
from .engine import Settings, history_of, identify, read_checkpoint, scope_from, turn_of_saved
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


def _fingerprint(message: BaseMessage) -> str:
    """What a message says, in a form a checkpoint round trip keeps (tuples come back
    as lists, so the messages themselves may not compare equal)."""
    return identity.canonical_json(
        {
            "type": message.type,
            "id": message.id,
            "content": message.content,
            "calls": [
                [c.get("id"), c.get("name"), c.get("args")]
                for c in getattr(message, "tool_calls", None) or []
            ],
            "answers": getattr(message, "tool_call_id", None),
        }
    )


def unanswered(history: Sequence[BaseMessage]) -> list[tuple[int, Mapping[str, Any]]]:
    """(index of the AIMessage, call) of every tool call no ToolMessage answers.

    A ToolMessage answers the latest still-open call with its id before it: model
    servers repeat tool call ids across turns (``call_0`` every turn), so an
    id answered in one turn says nothing about the same id in another.
    """
    open_calls: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for index, message in enumerate(history):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id"):
                    open_calls.setdefault(str(call["id"]), []).append((index, call))
        elif isinstance(message, ToolMessage):
            waiting = open_calls.get(message.tool_call_id)
            if waiting:
                waiting.pop()
    return sorted((item for items in open_calls.values() for item in items), key=lambda x: x[0])


async def answer_dangling(
    history: Sequence[BaseMessage],
    *,
    ledger: Ledger,
    settings: Settings,
    config: Mapping[str, Any],
    context: Any = None,
    messages_key: str = "messages",
    checkpointer: Any = None,
    sync_checkpointer: bool = False,
) -> list[BaseMessage] | None:
    """``history`` with a truthful ToolMessage after every unanswered tool call, or
    ``None`` when every call is answered.

    An operation id is anchored on the checkpoint its tool task was prepared from,
    which the history does not name. So the ledger's candidates (same thread, tool,
    arguments and call id) are checked against the checkpoints they were recorded
    from: the one whose history is this history up to the dangling AIMessage is the
    call's, and its id is derived again with the same rule the session used.
    """
    dangling = unanswered(history)
    if not dangling:
        return None
    thread_id = _private.thread_id(config) or ""
    scope = scope_from(config, context)
    namespace = identity.namespace_path(_private.parent_namespace(_private.checkpoint_ns(config)))
    loop = _private.parent_checkpoint(config)
    saver = checkpointer if checkpointer is not None else _private.checkpointer(config)
    effectful = [
        (index, call) for index, call in dangling if not settings.effect_for(call["name"]).read_only_tool
    ]
    hashes = {
        id(call): identity.args_hash(dict(call.get("args") or {}), key=settings.hash_key)
        for _, call in effectful
    }
    candidates = (
        await ledger.find_by_payload(
            thread_id, sorted({(str(call["name"]), hashes[id(call)]) for _, call in effectful})
        )
        if effectful and thread_id
        else []
    )
    loop_ns = loop[0] if loop else ""
    saved_by_id: dict[str, Any] = {}

    async def saved(checkpoint_id: str) -> Any:
        if checkpoint_id not in saved_by_id:
            saved_by_id[checkpoint_id] = (
                await read_checkpoint(saver, loop_ns, checkpoint_id, thread_id, sync_checkpointer)
                if saver is not None
                else None
            )
        return saved_by_id[checkpoint_id]

    fingerprints: list[str] = []

    def prefix(index: int) -> list[str]:
        while len(fingerprints) <= index:
            fingerprints.append(_fingerprint(history[len(fingerprints)]))
        return fingerprints[: index + 1]

    answers: dict[tuple[int, str], Any] = {}
    for index, call in effectful:
        effect = settings.effect_for(call["name"])
        mine = [
            o
            for o in candidates
            if o.tool == call["name"]
            and o.args_hash == hashes[id(call)]
            and o.tool_call_id == call["id"]
            and o.checkpoint_id
        ]
        found = None
        for o in sorted(mine, key=lambda o: o.created_at, reverse=True):
            x = await saved(str(o.checkpoint_id))
            if x is None:
                continue
            before = history_of(x.checkpoint.get("channel_values") or {}, messages_key)
            if len(before) <= index or [_fingerprint(m) for m in before[: index + 1]] != prefix(index):
                continue  # recorded from another turn (or branch) than this AIMessage's
            turn = await turn_of_saved(
                saver, x, thread_id=thread_id, namespace=loop_ns, sync=sync_checkpointer
            )
            op_id, _, _ = identify(
                call,
                effect=effect,
                settings=settings,
                scope=scope,
                thread_id=thread_id,
                namespace=namespace,
                turn=turn,
                config=config,
            )
            if op_id == o.op_id:
                found = o
                break
        if found is None and effect.key is not None:
            # A logical key names the operation whatever the turn.
            op_id, _, _ = identify(
                call, effect=effect, settings=settings, scope=scope, thread_id=thread_id,
                namespace=namespace, turn="", config=config,
            )
            found = (await ledger.get_many([op_id])).get(op_id)
        answers[(index, str(call["id"]))] = found

    patched: list[BaseMessage] = []
    pending = {(index, str(call["id"])) for index, call in dangling}
    for index, message in enumerate(history):
        patched.append(message)
        if not isinstance(message, AIMessage):
            continue
        for call in message.tool_calls:
            call_id = str(call.get("id") or "")
            if (index, call_id) not in pending:
                continue
            op = answers.get((index, call_id))
            if op is None:
                patched.append(_not_executed(call_id, call["name"]))
            elif op.terminal:
                patched.append(messages.replay(op, tool_call_id=call_id, tool=call["name"]))
            else:
                patched.append(_unknown_message(op, tool_call_id=call_id, tool=call["name"]))
    return patched
