"""``current_operation()``: the operation a tool is running under, from inside the tool.

Like Temporal's ``activity.info()``: the tool reads its operation id, provider key
and attempt number without threading them through its arguments. The value is a
``ContextVar`` set around the call; langchain-core copies the context into the
executor threads that run sync tools, so it reaches those too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from ..core.operation import Operation


@dataclass(frozen=True)
class OperationInfo:
    """What a tool may know about the operation it is executing."""

    operation_id: str
    provider_key: str
    """Send this to the provider as its idempotency key / client reference."""
    attempt: int
    """1 for the first send; higher when reconciliation re-sends under the same key, or
    when the caller retries a definite failure (also under the same key)."""
    tool: str
    args_hash: str
    thread_id: str
    tenant: str

    @classmethod
    def of(cls, op: Operation) -> OperationInfo:
        """What a tool may know of ``op``."""
        return cls(
            operation_id=op.op_id,
            provider_key=op.provider_key,
            attempt=op.attempts,
            tool=op.tool,
            args_hash=op.args_hash,
            thread_id=op.thread_id,
            tenant=op.tenant,
        )


#: The operation of the call running now (set around the tool by the session's call loop);
#: [`current_operation`][langgraph_effects.current_operation] makes the
#: [`OperationInfo`][langgraph_effects.OperationInfo] a tool asks for.
CURRENT_OPERATION: ContextVar[Operation | None] = ContextVar("langgraph_effects_operation", default=None)


def current_operation() -> OperationInfo:
    """The operation of the effectful tool call running now.

    Raises ``RuntimeError`` outside one (a read-only tool, or code not run by
    ``EffectToolNode`` / ``EffectMiddleware``).
    """
    op = CURRENT_OPERATION.get()
    if op is None:
        raise RuntimeError(
            "current_operation() is only available inside an effectful tool call run by "
            "EffectToolNode or EffectMiddleware"
        )
    return OperationInfo.of(op)


def maybe_current_operation() -> OperationInfo | None:
    """The operation of the effectful tool call running now, or ``None`` outside one.

    For one tool that runs both in a protected graph (``EffectToolNode`` /
    ``EffectMiddleware``) and in a plain one (LangGraph's ``ToolNode``, a test calling
    the tool directly): send the provider key when there is one, nothing otherwise:

        op = maybe_current_operation()
        headers = {"Idempotency-Key": op.provider_key} if op is not None else {}

    Without an operation nothing makes the call safe to repeat, so a crash may send it
    twice; [`current_operation`][langgraph_effects.current_operation] raises instead, for tools that must
    never run
    unprotected.
    """
    op = CURRENT_OPERATION.get()
    return None if op is None else OperationInfo.of(op)


@contextmanager
def running(op: Operation) -> Iterator[None]:
    """``op`` is the operation of the call running now, inside the block."""
    token = CURRENT_OPERATION.set(op)
    try:
        yield
    finally:
        CURRENT_OPERATION.reset(token)
