"""Which question an answer answers: an answer is bound to the question it was given for.

LangGraph stores an interrupt's answer and hands it back, by position within the task,
on every later run of the node; it does not say which question the answer was given
for. A question lists operations, and what it lists can change after it is asked: an
operator settles one with the console or ``resolve()``, a late result lands, a lookup
finds it, or an earlier answer sends one again. An answer read against the question
the node would ask now could then settle an operation it was never given for.

So a question names itself: its value carries ``round`` (the node's n-th question in
this task) and, in ``operations``, each operation's id and version in the order asked
(`question_key`). LangGraph keeps, among the checkpoint's pending writes, the
value of the question the task asked last (`last_asked`): that is the question
the next answer answers. When the node reads an answer at round ``n``
(`binding`):

* the question asked last is this round's and is the same question now: the answer
  is read (applied, or refused for what it says);
* it is this round's but the question changed since it was asked: the answer is
  refused whole, nothing written, and the new question is asked;
* it is a later round's, or another interrupt's (a tool's own): this answer was read
  by an earlier run of the node (applied or refused then) and is not read again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _private
from .binding import read_checkpoint
from .calls import CallRecord
from .decisions import APPROVAL_TYPE, REVIEW_TYPE
from .messages import bounded

QuestionKey = tuple[str, tuple[tuple[str, int], ...]]
"""A question's identity: its type, and the (operation id, version) it lists, in order."""

_KINDS = {REVIEW_TYPE: "a review", APPROVAL_TYPE: "an approval"}


def question_key(value: Any) -> QuestionKey | None:
    """The identity of an interrupt value this package raised (a review or an approval),
    or ``None`` if ``value`` is not one (a tool's own interrupt)."""
    if not isinstance(value, Mapping) or value.get("type") not in _KINDS:
        return None
    entries = value.get("operations")
    if not isinstance(entries, list | tuple):
        return None
    try:
        listed = tuple((str(e["operation_id"]), int(e["version"])) for e in entries)
    except (KeyError, TypeError, ValueError):
        return None
    return str(value["type"]), listed


@dataclass(frozen=True)
class Asked:
    """The question the running task asked last, as the checkpoint holds it."""

    key: QuestionKey | None
    """``None``: the task's last interrupt was not one of ours (a tool asked)."""
    round: int | None = None
    """The node's round it was asked in; ``None`` if an older version asked it."""
    notice: str | None = None
    """Why the answer before it was refused, as it opened that question."""


async def last_asked(config: Mapping[str, Any], *, sync: bool) -> Asked | None:
    """The question the running task asked last, from the pending writes of the
    checkpoint it runs from; ``None`` if that checkpoint holds no interrupt of the task."""
    parent = _private.parent_checkpoint(config)
    saver = _private.checkpointer(config)
    thread_id = _private.thread_id(config)
    task_id = _private.task_id(config)
    if parent is None or saver is None or thread_id is None or task_id is None:
        return None
    saved = await read_checkpoint(saver, parent[0], parent[1], thread_id, sync)
    values = _private.pending_interrupt_values(saved, task_id) if saved is not None else None
    if not values:
        return None
    ours = [v for v in values if question_key(v) is not None]
    if not ours:
        return Asked(key=None)
    value = ours[-1]
    round_no = value.get("round")
    notice = value.get("refused_answer")
    return Asked(
        key=question_key(value),
        round=round_no if isinstance(round_no, int) and not isinstance(round_no, bool) else None,
        notice=notice if isinstance(notice, str) else None,
    )


@dataclass(frozen=True)
class Binding:
    """How an answer read at a round stands to the question it was given for."""

    read_before: bool = False
    """An earlier run of the node read it (applied or refused it): not read again."""
    changed: str | None = None
    """Why the question it was given for is not the one asked now (refused whole)."""
    notice: str | None = None
    """For an answer read before: the notice the question asked after it carried."""


def binding(
    asked: Asked | None, now: Mapping[str, Any], round_no: int, calls: Sequence[CallRecord]
) -> Binding:
    """How the answer read at ``round_no`` stands to ``asked`` (the question the task
    asked last), when the node would ask ``now`` at that round."""
    if asked is None:
        return Binding(
            changed="the question it answers cannot be found in the checkpoint. Answer the "
            "question below"
        )
    if asked.key is None or (asked.round is not None and asked.round > round_no):
        return Binding(read_before=True, notice=asked.notice)
    current = question_key(now)
    if asked.round is not None and asked.round < round_no:
        return Binding(changed="it does not answer this question. Answer the question below")
    if current == asked.key:
        return Binding()
    assert current is not None  # ``now`` is a question this package built
    return Binding(changed=_what_changed(asked.key, current, calls))


def _what_changed(asked: QuestionKey, now: QuestionKey, calls: Sequence[CallRecord]) -> str:
    """Why the question ``asked`` is not the one asked now, operation by operation."""
    ops = {c.op.op_id: c.op for c in calls}
    versions = dict(now[1])
    listed = dict(asked[1])
    why: list[str] = []
    if asked[0] != now[0]:
        why.append(f"it was {_KINDS[asked[0]]} and the question now is {_KINDS[now[0]]}")
    for op_id, version in asked[1]:
        op = ops.get(op_id)
        shown = f"{op.tool} (operation {op_id})" if op is not None else f"operation {op_id}"
        if op_id not in versions:
            state = f"it is {op.state.value} now" if op is not None else "it is no longer asked about"
            why.append(f"{shown} was settled since, {state}")
        elif versions[op_id] != version:
            why.append(f"{shown} changed since, version {version} then and {versions[op_id]} now")
    for op_id, _ in now[1]:
        if op_id not in listed:
            op = ops.get(op_id)
            why.append(f"{op.tool if op else 'an operation'} (operation {op_id}) was not in it")
    detail = "; ".join(why) or "the operations are asked in another order"
    return bounded(f"the question changed since it was given: {detail}. Answer the question below", 1000)
