"""The ``reordered-entrypoint`` column: a Functional API entrypoint whose call order
changes between processes.

Two rows of their own (the column is not a tools node): ``plain-entrypoint``, a
``@task`` as LangGraph users write it, and ``effectful-entrypoint``, the same task
under [`effectful`][langgraph_effects.effectful]. The entrypoint sends one notification
per recipient, iterating a set::

    for recipient in set(recipients): await send(recipient, body)

A set's order is its hash order, and a new interpreter (another
``PYTHONHASHSEED``) orders it differently. The lab's workers are forks of one fork
server and share its hash seed, so the recipients' hash depends on the worker's
generation instead (a replacement worker is the next one): every new process
iterates the set rotated by one, as a new seed reorders it, only deterministically
(the cell's counts do not depend on the lab run's own seed). Killed at B on the
second send, the thread is resumed by the next worker, in the new order.

Meant: every recipient notified once. Refusing to go on (this package's error,
raised before anything wrong was sent) also holds: that thread is counted as
*stopped*, its missing sends excused, its duplicates not.
"""

from __future__ import annotations

from typing import Any, cast

from langchain_core.messages import AIMessage
from langgraph.func import entrypoint, task

from .._integrations.functional import effectful
from .._runtime.context import current_operation
from ..core.contract import Effect
from .ours import answer_from_provider, audit_ledger, check_cell
from .providers import KEYED_MODES
from .strategies import RECIPIENTS, BuildContext, Strategy, WholeGraph, register

COLUMN = "reordered-entrypoint"


class Recipient(str):
    """A recipient whose hash, so its place in a set, depends on the process: the
    recipients of `RECIPIENTS` hash to small distinct integers, which a set
    iterates in ascending order, rotated by the worker's generation."""

    generation = 0

    def __hash__(self) -> int:
        name = self.rsplit("/", 1)[-1]
        place = RECIPIENTS.index(name) if name in RECIPIENTS else len(RECIPIENTS)
        return (place - Recipient.generation) % len(RECIPIENTS)

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other)


def _notifier(ctx: BuildContext, *, ours: bool) -> WholeGraph:
    client = ctx.client
    keyed = ours and ctx.provider_mode in KEYED_MODES
    Recipient.generation = ctx.generation

    async def send(recipient: str, body: str) -> str:
        key = current_operation().provider_key if keyed else None
        receipt = await client.asend({"operation": recipient, "body": body}, key=key)
        return receipt.effect_id

    if ours:
        effect = Effect(dedup_window=client.provider.retention) if ctx.provider_mode == "dedup" else None
        send = effectful(effect, name="send_notification")(send)
    send_task: Any = task(name="send_notification")(cast("Any", send))

    def compile(checkpointer: Any) -> Any:
        @entrypoint(checkpointer=checkpointer)
        async def notify(inputs: dict[str, Any]) -> dict[str, Any]:
            operation, body = inputs["operation"], inputs["body"]
            recipients = {Recipient(f"{operation}/{name}") for name in RECIPIENTS}
            sent = [await send_task(str(recipient), body) for recipient in recipients]
            return {"messages": [AIMessage(content="done: " + ", ".join(sent))]}

        return notify

    return WholeGraph(compile)


def build_plain(ctx: BuildContext) -> WholeGraph:
    """``@task`` as LangGraph users write it: a resume replays finished tasks by place."""
    return _notifier(ctx, ours=False)


def build_effectful(ctx: BuildContext) -> WholeGraph:
    """The same task under ``@effectful`` (dedup: its key; blind: undeclared)."""
    return _notifier(ctx, ours=True)


PLAIN = register(
    Strategy(
        "plain-entrypoint",
        build_plain,
        providers=("blind",),
        crash_points=(COLUMN,),
        summary="Functional API: one @task send per recipient of a set",
    )
)
OURS = register(
    Strategy(
        "effectful-entrypoint",
        build_effectful,
        providers=("dedup",),
        ours=True,
        crash_points=(COLUMN,),
        answer_review=answer_from_provider,
        audit=audit_ledger,
        check=check_cell,
        summary="Functional API: the same task under @effectful",
        effect_saver=True,
    )
)
