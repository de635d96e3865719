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
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from .. import _private
from ..core import identity
from ..core.operation import Operation, Scope
from ..ledger.base import Ledger
from . import messages
from .binding import Coordinates, history_of, identify, read_checkpoint, scope_from, turn_of_saved
from .calls import Settings
from .messages import unanswered

__all__ = ["DanglingAnswer", "find_answers", "insert_answers"]


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
    """What a message says, in a form a checkpoint keeps through its save and load (tuples come back
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


@dataclass
class _Finder:
    """Finds the operation a dangling call was bound to, checkpoint by checkpoint."""

    history: Sequence[BaseMessage]
    ledger: Ledger
    settings: Settings
    config: Mapping[str, Any]
    scope: Scope
    thread_id: str
    namespace: str
    loop_ns: str
    saver: Any
    sync: bool
    saved_by_id: dict[str, Any] = field(default_factory=dict)
    fingerprints: list[str] = field(default_factory=list)

    async def saved(self, checkpoint_id: str) -> Any:
        if checkpoint_id not in self.saved_by_id:
            self.saved_by_id[checkpoint_id] = (
                await read_checkpoint(self.saver, self.loop_ns, checkpoint_id, self.thread_id, self.sync)
                if self.saver is not None
                else None
            )
        return self.saved_by_id[checkpoint_id]

    def prefix(self, index: int) -> list[str]:
        while len(self.fingerprints) <= index:
            self.fingerprints.append(_fingerprint(self.history[len(self.fingerprints)]))
        return self.fingerprints[: index + 1]

    def op_id(self, call: Mapping[str, Any], turn: str) -> str:
        at = Coordinates(self.settings, self.scope, self.thread_id, self.namespace, self.config)
        op_id, _, _ = identify(call, at=at, turn=turn)
        return op_id

    def from_this_turn(self, index: int, saved: Any) -> bool:
        """Whether ``saved`` holds this history up to the AIMessage at ``index``."""
        before = history_of(saved.checkpoint.get("channel_values") or {})
        return len(before) > index and [_fingerprint(m) for m in before[: index + 1]] == self.prefix(
            index
        )

    async def find(self, index: int, call: Mapping[str, Any], mine: list[Operation]) -> Operation | None:
        """The operation among ``mine`` (same tool, args and call id) that this call's
        turn derives; else, for a logical key, the one the key names."""
        for o in sorted(mine, key=lambda o: o.created_at, reverse=True):
            x = await self.saved(str(o.checkpoint_id))
            if x is None or not self.from_this_turn(index, x):
                continue  # recorded from another turn (or branch) than this AIMessage's
            turn = await turn_of_saved(
                self.saver, x, thread_id=self.thread_id, namespace=self.loop_ns, sync=self.sync
            )
            if self.op_id(call, turn) == o.op_id:
                return o
        if self.settings.effect_for(call["name"]).key is not None:
            # A logical key names the operation whatever the turn.
            op_id = self.op_id(call, "")
            return (await self.ledger.get_many([op_id])).get(op_id)
        return None


#: One answer: the AIMessage holding a dangling call, the call's id, and the ToolMessage.
DanglingAnswer = tuple[AIMessage, str, ToolMessage]


async def find_answers(
    history: Sequence[BaseMessage],
    *,
    ledger: Ledger,
    settings: Settings,
    config: Mapping[str, Any],
    context: Any = None,
    checkpointer: Any = None,
    sync_checkpointer: bool = False,
) -> list[DanglingAnswer]:
    """A truthful answer for every unanswered tool call of ``history`` (none: ``[]``).

    An operation id is anchored on the checkpoint its tool task was prepared from,
    which the history does not name. So the ledger's candidates (same thread, tool,
    arguments and call id) are checked against the checkpoints they were recorded
    from: the one whose history is this history up to the dangling AIMessage is the
    call's, and its id is derived again with the same rule the session used.
    """
    dangling = unanswered(history)
    if not dangling:
        return []
    thread_id = _private.thread_id(config) or ""
    loop = _private.parent_checkpoint(config)
    finder = _Finder(
        history=history,
        ledger=ledger,
        settings=settings,
        config=config,
        scope=scope_from(config, context),
        thread_id=thread_id,
        namespace=identity.namespace_path(_private.parent_namespace(_private.checkpoint_ns(config))),
        loop_ns=loop[0] if loop else "",
        saver=checkpointer if checkpointer is not None else _private.checkpointer(config),
        sync=sync_checkpointer,
    )
    effectful = [
        (index, call) for index, call in dangling if not settings.effect_for(call["name"]).read_only_tool
    ]
    hashes = {
        id(call): identity.args_hash(
            identity.identifying_args(call.get("args") or {}, settings.effect_for(call["name"]).key_argument),
            key=settings.hash_key,
        )
        for _, call in effectful
    }
    candidates = (
        await ledger.find_by_payload(
            thread_id, sorted({(str(call["name"]), hashes[id(call)]) for _, call in effectful})
        )
        if effectful and thread_id
        else []
    )
    answers: dict[tuple[int, str], Operation | None] = {}
    for index, call in effectful:
        mine = [
            o
            for o in candidates
            if o.tool == call["name"]
            and o.args_hash == hashes[id(call)]
            and o.tool_call_id == call["id"]
            and o.checkpoint_id
        ]
        answers[(index, str(call["id"]))] = await finder.find(index, call, mine)
    # An effect marked for undoing is answered by how its undo stands.
    undo_ids = sorted({str(op.compensated_by) for op in answers.values() if op and op.compensated_by})
    undos = await ledger.get_many(undo_ids) if undo_ids else {}
    return [
        _answer(history, index, call, answers.get((index, str(call["id"]))), undos)
        for index, call in dangling
    ]


def _answer(
    history: Sequence[BaseMessage],
    index: int,
    call: Mapping[str, Any],
    op: Operation | None,
    undos: Mapping[str, Operation],
) -> DanglingAnswer:
    call_id, tool = str(call.get("id") or ""), call["name"]
    if op is None:
        message = _not_executed(call_id, tool)
    elif op.terminal:
        undo = undos.get(op.compensated_by) if op.compensated_by else None
        message = messages.replay(op, tool_call_id=call_id, tool=tool, undo=undo)
    else:
        message = _unknown_message(op, tool_call_id=call_id, tool=tool)
    return cast(AIMessage, history[index]), call_id, message


def insert_answers(messages: Sequence[BaseMessage], answers: Sequence[DanglingAnswer]) -> list[BaseMessage]:
    """``messages`` with each answer right after its AIMessage, for the calls still
    open there, in the AIMessage's call order.

    The AIMessage is matched by identity (a list another middleware or LangChain
    rebuilt still holds the same objects), else by its id (a copy).
    """
    by_object = {(id(ai), call_id): answer for ai, call_id, answer in answers}
    by_id: dict[tuple[str | None, str], ToolMessage] = {
        (ai.id, call_id): answer for ai, call_id, answer in answers if ai.id is not None
    }
    found: dict[tuple[int, str], ToolMessage] = {}
    for index, call in unanswered(messages):
        ai, call_id = messages[index], str(call.get("id") or "")
        answer = by_object.get((id(ai), call_id)) or by_id.get((ai.id, call_id))
        if answer is not None:
            found[(index, call_id)] = answer
    patched: list[BaseMessage] = []
    for index, message in enumerate(messages):
        patched.append(message)
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if (answer := found.get((index, str(call.get("id") or "")))) is not None:
                    patched.append(answer)
    return patched
