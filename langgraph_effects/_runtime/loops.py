"""Driving calls: the loops shared by ``EffectToolNode``, ``EffectMiddleware`` and
``@effectful`` (begin, execute under a lease, finish; one ``interrupt()`` per round),
and the refusal of calls that have no usable identity."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ToolMessage
from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from ..errors import (
    MalformedToolCallError,
)
from .actions import Action, Answer, Execute, Settings
from .context import running
from .messages import encodable
from .review import (
    EffectAnswer,
)

if TYPE_CHECKING:
    from .engine import Session

AsyncExecutor = Callable[[], Awaitable[tuple[Any, BaseException | None]]]
SyncExecutor = Callable[[], tuple[Any, BaseException | None]]
PortalRun = Callable[[Coroutine[Any, Any, Any]], Any]


def answer(action: Action) -> Any:
    """The value a call returns for a final action (raising its ``error``, if any)."""
    if isinstance(action, Answer):
        if action.error is not None:
            raise action.error
        return action.output
    raise AssertionError(f"not a final action: {action!r}")  # pragma: no cover


async def drive(session: Session, call_id: str, execute: AsyncExecutor) -> Any:
    """Run one call through the protocol: begin, execute under a lease, finish, repeat
    while reconciliation allows a re-send. ``execute`` runs the tool once and returns
    ``(output, exception)``."""
    action = await session.begin(call_id)
    while isinstance(action, Execute):
        try:
            session.start_heartbeat(call_id)
            with running(action.info):
                output, error = await execute()
        except GraphBubbleUp:
            await session.withdraw(call_id)
            raise
        except BaseException:
            session.abort(call_id)
            raise
        action = await session.finish(call_id, output, error)
    return answer(action)


def drive_sync(session: Session, call_id: str, execute: SyncExecutor, run: PortalRun) -> Any:
    """:func:`drive` for sync code: ledger work goes through ``run`` (the portal), the
    tool runs in the calling thread."""
    action = run(session.begin(call_id))
    while isinstance(action, Execute):
        try:
            run(_start_heartbeat(session, call_id))
            with running(action.info):
                output, error = execute()
        except GraphBubbleUp:
            run(session.withdraw(call_id))
            raise
        except BaseException:
            session.abort(call_id)
            raise
        action = run(session.finish(call_id, output, error))
    return answer(action)


async def _start_heartbeat(session: Session, call_id: str) -> None:
    session.start_heartbeat(call_id)


async def capture(run: Callable[[], Awaitable[Any]]) -> tuple[Any, BaseException | None]:
    """Run the tool once: ``(output, None)``, or ``(None, exception)`` for the engine to
    classify. LangGraph's own control flow (interrupts) passes through."""
    try:
        return await run(), None
    except GraphBubbleUp:
        raise
    except Exception as error:
        return None, error


def capture_sync(run: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """:func:`capture` for sync tools."""
    try:
        return run(), None
    except GraphBubbleUp:
        raise
    except Exception as error:
        return None, error


async def with_reviews(session: Session, one_round: Callable[[], Awaitable[Any]]) -> Any:
    """Run rounds until nobody needs asking: after each, at most one ``interrupt()``
    (approvals first, then reviews), whose answer is written to the ledger at once.
    Closes the session."""
    try:
        round_no = 0
        while True:
            output = await one_round()
            question = session.pending_interrupt()
            if question is None:
                return output
            answer = interrupt(question, response_schema=EffectAnswer)
            await session.apply_answer(answer, round_no=round_no)
            round_no += 1
    finally:
        await session.close()


def with_reviews_sync(session: Session, one_round: Callable[[], Any], run: PortalRun) -> Any:
    """:func:`with_reviews` for sync code."""
    try:
        round_no = 0
        while True:
            output = one_round()
            question = session.pending_interrupt()
            if question is None:
                return output
            answer = interrupt(question, response_schema=EffectAnswer)
            run(session.apply_answer(answer, round_no=round_no))
            round_no += 1
    finally:
        run(session.close())


def effectful_calls(
    tool_calls: Sequence[Mapping[str, Any]],
    settings: Settings,
    known_tools: Callable[[str], bool],
) -> tuple[list[Mapping[str, Any]], set[str]]:
    """Split effectful calls (registered tools not declared read-only) into those the
    ledger tracks and the ids of those refused: a call with no id, whose id another
    call of the same message shares, or whose id the checkpoint cannot keep (an unpaired
    surrogate, which LangGraph's serializer turns into ``?``: a resume would read another
    id), has no identity to bind, so it is never sent. The ledger itself stores any text
    (see :func:`~langgraph_effects.ledger.codec.stored_text`), so this does not depend on
    the backend; a NUL in an id is kept and the call runs."""
    effectful = [
        call
        for call in tool_calls
        if known_tools(str(call.get("name")))
        and not settings.effect_for(str(call.get("name"))).read_only_tool
    ]
    counts: dict[str, int] = {}
    for call in tool_calls:
        key = str(call.get("id") or "")
        counts[key] = counts.get(key, 0) + 1
    refused = {key for key, n in counts.items() if not key or n > 1 or not encodable(key)}
    tracked = [call for call in effectful if str(call.get("id") or "") not in refused]
    return tracked, refused


def refusal_error(tool_call: Mapping[str, Any]) -> MalformedToolCallError:
    """Why an effectful call has no usable identity (see :func:`effectful_calls`)."""
    call_id = str(tool_call.get("id") or "")
    if not call_id:
        why = "has no id"
    elif not encodable(call_id):
        why = (
            f"has an id that is not valid text ({call_id.encode('utf-8', 'backslashreplace').decode()!r}"
            ": an unpaired surrogate)"
        )
    else:
        why = f"shares its id {call_id!r} with another call"
    return MalformedToolCallError(str(tool_call.get("name")), call_id, why)


def refusal(tool_call: Mapping[str, Any]) -> ToolMessage:
    """The answer to an effectful call that has no usable identity: not sent.

    The artifact names the error (:class:`~langgraph_effects.errors.MalformedToolCallError`).
    """
    error = refusal_error(tool_call)
    return ToolMessage(
        content=str(error),
        name=str(tool_call.get("name")),
        tool_call_id=error.tool_call_id,
        status="error",
        artifact={"error": type(error).__name__, "sent": False},
    )
