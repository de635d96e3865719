"""The dispatch protocol shared by ``EffectToolNode``, ``EffectMiddleware`` and ``@effectful``.

One `Session` serves one node execution (one LangGraph task). It

1. binds every effectful call to its operation: derived from durable graph
   coordinates, or found again in the ledger (resume, retry, second worker,
   re-planned duplicate), and records the new ones in one commit before anything
   is sent (after the checkpoint holding the call is durable);
2. answers each call by its state (`Session.call_steps`, through
   `Dispatcher.begin`): replay a recorded
   outcome, execute under a dispatch lease, wait for a live lease held by
   someone else, reconcile ``unknown``, or report that it needs review;
3. records each outcome (`Dispatcher.finish`): a result confirms, a definite
   error fails, anything else is ``unknown`` and goes straight to reconciliation;
   the undos a settled call orders (`Due`: its own, or its saga's) are run before it
   answers, each as the one call of a session of its own (`run_undo`);
4. asks a human at most once per round (`Session.pending_interrupt`) and applies
   the answer (`Session.apply_answer`).

The session owns its state (its calls, who waits for a human, whether it is closed)
and is composed of collaborators that each have one reason to change and keep none
of it: `open_plan` binds the calls before the
session exists, a `Dispatcher` moves one
call's operation and answers a `Directive`,
an `Asker` builds questions and applies answers;
the session files what they return.

The caller (node, middleware, ``@effectful``) runs the tool itself, so sync and async
tools, ``wrap_tool_call`` wrappers and ToolNode's error handling behave exactly as
without us. The loops callers share (`run_call`, `run_rounds`, `run_call_rounds` and
their sync twins) are written once, as generators of the session's work, and driven
by one async and one sync driver. The per-call decisions themselves are pure code in
`langgraph_effects.core.protocol`. See ``docs/architecture.md``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import interrupt
from pydantic import BaseModel, ValidationError

from .. import _private
from ..core import identity
from ..core.contract import Undo
from ..core.keys import with_key
from ..core.operation import Operation, Owner, Scope
from ..errors import CompensationError, DurabilityError, MalformedToolCallError
from ..ledger.base import Ledger
from . import lease, telemetry
from .asker import Applied, ArgsCheck, Asker, Waiting
from .binding import (
    Coordinates,
    Source,
    durable_source,
    history_of,
    message_anchors,
    new_call,
    open_plan,
    scope_from,
    staged,
)
from .calls import CallRecord, Settings
from .context import CURRENT_OPERATION, running
from .decisions import EffectAnswer
from .dispatch import Directive, Dispatcher, Leases, Reply, RunTool, replayed
from .messages import encodable
from .question import Asked, last_asked
from .undo import finish_ordered, run_saga, undo_arguments

log = logging.getLogger("langgraph_effects")

R = TypeVar("R")
AsyncExecutor = Callable[[], Awaitable[tuple[Any, BaseException | None]]]
SyncExecutor = Callable[[], tuple[Any, BaseException | None]]
PortalRun = Callable[[Coroutine[Any, Any, Any]], Any]


class Session:
    """The ledger side of one node execution. Create with `open`."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        settings: Settings,
        config: Mapping[str, Any],
        calls: dict[str, CallRecord],
        scope: Scope,
        check_args: ArgsCheck | None = None,
        sync_checkpointer: bool = False,
    ) -> None:
        self.ledger = ledger
        self.settings = settings
        self.config = config
        self.scope = scope
        self._calls = calls
        self._waits_for: dict[str, str] = {}  # call id -> "approval" | "review"
        self._notice: str | None = None
        self._closed = False
        self._leases = Leases(ledger, settings.lease_seconds)
        self._dispatcher = Dispatcher(
            ledger=ledger,
            settings=settings,
            scope=self.scope,
            leases=self._leases,
            closed=lambda: self._closed,
            run_id=_run_id(config),
        )
        self._check_args = check_args
        self._asker: Asker | None = None  # made when somebody needs asking
        self._sync_checkpointer = sync_checkpointer
        self._asked: Asked | None = None  # the question the task asked last, once read
        self._asked_read = False

    @classmethod
    async def open(
        cls,
        *,
        ledger: Ledger,
        settings: Settings,
        tool_calls: Sequence[Mapping[str, Any]],
        state: Any,
        config: Mapping[str, Any],
        context: Any = None,
        messages_key: str = "messages",
        sync_checkpointer: bool = False,
        call_keys: Mapping[str, str] | None = None,
        check_args: ArgsCheck | None = None,
    ) -> Session:
        """Bind each effectful call to its operation; record new intents in one commit.

        ``call_keys`` maps a call id to the key that tells it apart within its turn,
        when the call id itself is not stable (a Functional API task's id is not).
        ``check_args`` checks an approver's edit against the tool's schema (see `ArgsCheck`).
        """
        thread_id = _private.thread_id(config)
        if thread_id is None:
            raise DurabilityError(
                "effectful tool calls need a checkpointer and a thread_id: compile the graph "
                "with a checkpointer (e.g. AsyncEffectSqliteSaver) and pass "
                "config={'configurable': {'thread_id': ...}}"
            )
        # Before anything waits, reads or writes: ids that cannot be stored are refused.
        scope = scope_from(config, context)
        history = history_of(state, messages_key)
        # A dispatch owner for the calls the open itself may dispatch (released at once
        # if none is): one made ahead, or one made on a worker thread (a locked file)
        # while the checkpoint is read.
        direct = any(not staged(settings.effect_for(str(c["name"]))) for c in tool_calls)
        owner: Owner | None = lease.ready_owner() if direct else None
        made = asyncio.ensure_future(lease.new_owner_async()) if direct and owner is None else None
        calls: dict[str, CallRecord] = {}
        try:
            # One read of the checkpoint holding the calls: it is the durability barrier
            # (nothing leaves before it is saved) and the turn every id is anchored on.
            source = await durable_source(
                config, wait_seconds=settings.durable_wait_seconds, sync_checkpointer=sync_checkpointer
            )
            namespace = identity.namespace_path(_private.parent_namespace(_private.checkpoint_ns(config)))
            at = Coordinates(settings, scope, thread_id, namespace, config)
            calls = _new_calls(tool_calls, at, source, history, call_keys or {})
            telemetry.opening(calls.values())  # each intent records its first span
            if made is not None:
                owner = await made
            derived = {c.call_id: (c.op, c.args) for c in calls.values()}
            records = list(calls.values())
            durability = _private.durability(config)
            await ledger.transact(
                partial(
                    open_plan,
                    records,
                    derived,
                    source=source,
                    settings=settings,
                    durability=durability,
                    history_known=bool(history),
                    owner=owner,
                )
            )
        except BaseException as error:
            telemetry.not_opened(calls.values(), error)
            # No session comes out of a failed open, so nobody would release what this
            # transaction may have reserved: a resume would wait for a dispatch that
            # never runs.
            if owner is not None:
                lease.release_soon(owner)
            elif made is not None:
                made.cancel()  # new_owner_async releases the owner once it exists
            raise
        session = cls(
            ledger=ledger, settings=settings, config=config, calls=calls, scope=scope,
            check_args=check_args, sync_checkpointer=sync_checkpointer,
        )
        session._leases.adopt(owner, calls.values())
        return session

    # -- what callers ask --------------------------------------------------------------

    def manages(self, call_id: str | None) -> bool:
        """Whether ``call_id`` is one of this session's calls."""
        return call_id is not None and call_id in self._calls

    def operation(self, call_id: str) -> Operation:
        """The operation ``call_id`` is bound to now."""
        return self._calls[call_id].op

    def edited_args(self, call_id: str) -> dict[str, Any] | None:
        """The arguments to send instead of the model's, when an approver edited them."""
        c = self._calls[call_id]
        return c.args if c.edited else None

    # -- per call ----------------------------------------------------------------------

    def _filed(self, call_id: str, directive: Directive) -> Directive:
        """Note who waits for a human after ``directive``: a replay waits for nobody."""
        if isinstance(directive, Reply) and self._calls[call_id].conflict is None and not self._closed:
            if directive.waits_for is None:
                self._waits_for.pop(call_id, None)
            else:
                self._waits_for[call_id] = directive.waits_for
        return directive

    async def close(self) -> None:
        """Release the leases of calls that are not running (leaving the rows as they are).

        A call still executing (a sibling interrupted the node, or failed, while its
        request is on the wire) keeps its lease and heartbeat until it finishes and
        records its outcome: a resumer waits for it and replays, never re-sends it.
        """
        self._closed = True  # set before any await: see Dispatcher.begin
        for c in self._calls.values():
            if not c.running:
                await self._dispatcher.stand_down(c)

    def call_steps(self, call_id: str) -> _Steps[Any]:
        """One call through the protocol: begin, execute under a lease, finish, repeat
        while reconciliation allows a re-send. Yields the session's work (awaitables,
        `_OnLoop`) and `_CALLER` for the tool, which answers
        ``(output, exception)``; runs the undos its outcome orders; returns what the
        call returns. Driven by `run_call` / `run_call_sync`, and round by round by
        `run_call_rounds` / `run_call_rounds_sync`."""
        c = self._calls[call_id]
        telemetry.call_started(c, self.config)
        try:
            directive = self._filed(call_id, (yield self._dispatcher.begin(c)))
            while isinstance(directive, RunTool):
                try:
                    yield _OnLoop(lambda: self._leases.start_heartbeat(c))
                    with running(directive.op), telemetry.dispatching(c):
                        output, error = yield _CALLER
                except GraphBubbleUp:
                    yield self._dispatcher.withdraw(c)
                    raise
                except BaseException:
                    self._dispatcher.abort(c)
                    raise
                directive = self._filed(call_id, (yield self._dispatcher.finish(c, output, error)))
            assert isinstance(directive, Reply)
            if directive.due is not None:
                directive = yield self._compensate(c, directive)
        except GraphBubbleUp:  # the tool paused itself with interrupt(): not a failure
            telemetry.call_ended(c, waits_for="interrupt")
            raise
        except BaseException as error:
            telemetry.call_ended(c, waits_for=None, error=error)
            raise
        telemetry.call_ended(c, waits_for=directive.waits_for, error=directive.error)
        return directive.value()

    # -- the undos a settled call orders ---------------------------------------------------

    async def _compensate(self, c: CallRecord, reply: Reply) -> Reply:
        """Run the undos ``c``'s settled outcome orders (``reply.due``), each exactly once
        and each as the one call of a session of its own (`run_undo`), before ``c``
        answers: the first time, or on the replay after a crash interrupted them. The
        answer to ``c`` after them: its own undo's row is what the model is told of."""
        run = partial(
            run_undo, self.ledger, hash_key=self.settings.hash_key, lease_seconds=self.settings.lease_seconds
        )
        effects, key = self.settings.effects, self.settings.hash_key
        if reply.due == "saga":
            try:
                with telemetry.compensating(c, "saga"):
                    await run_saga(run, self.ledger, c.op, effects, hash_key=key)
            except Exception as error:  # the failure is recorded; recover finishes the undos
                log.warning("saga compensation after %s did not finish: %s", c.op.op_id, error)
            return replace(reply, due=None)
        try:
            with telemetry.compensating(c, "undo"):
                report = await finish_ordered(run, self.ledger, c.op, effects, hash_key=key)
        except CompensationError as error:  # nothing was written: the effect stands
            log.warning("compensation of %s not run: %s", c.op.op_id, error)
            return replace(reply, due=None)
        if report is None:
            return replace(reply, due=None)
        log.info("compensation of %s: %s", c.op.op_id, report.state)
        c.op = report.operation
        return replace(reply, output=replayed(c, undo=report.undo), due=None)

    # -- asking a human ------------------------------------------------------------------

    def _asking(self) -> Asker:
        if self._asker is None:
            self._asker = Asker(
                dispatcher=self._dispatcher,
                settings=self.settings,
                config=self.config,
                check_args=self._check_args,
            )
        return self._asker

    def _waiting(self) -> Waiting:
        calls = list(self._calls.values())
        return Waiting(
            calls=calls,
            approval=[c for c in calls if self._waits_for.get(c.call_id) == "approval"],
            review=[c for c in calls if self._waits_for.get(c.call_id) == "review"],
            notice=self._notice,
        )

    def pending_interrupt(self, round_no: int) -> dict[str, Any] | None:
        """The value for the node's ``round_no``-th ``interrupt()``, or ``None`` if nobody
        needs asking (approvals first, then reviews; see `Asker.question`)."""
        if not self._waits_for:
            return None
        return self._asking().question(self._waiting(), round_no=round_no)

    async def apply_answer(self, answer: Any, *, question: Mapping[str, Any], round_no: int) -> int:
        """Record the answer to the ``round_no``-th interrupt, asked as ``question`` in
        this run (see `Asker.apply_answer`); how many decisions were applied."""
        if not self._asked_read:
            # What the task asked last is read once: nothing this run asks is saved
            # before the run stops.
            self._asked = await last_asked(self.config, sync=self._sync_checkpointer)
            self._asked_read = True
        waiting = self._waiting()
        asked_at = {c.call_id: c.op.updated_at for c in waiting.approval + waiting.review}
        applied: Applied = await self._asking().apply_answer(
            answer, waiting, round_no=round_no, question=question, asked=self._asked
        )
        for call_id in applied.settled:
            self._waits_for.pop(call_id, None)
        if applied.settled:
            telemetry.answered(
                [(self._calls[i].op, asked_at.get(i)) for i in applied.settled], count=applied.count
            )
        self._notice = applied.notice
        return applied.count


def _run_id(config: Mapping[str, Any]) -> str | None:
    """The run a budget counted per run is counted in: ``configurable.run_id``, or the
    config's own ``run_id``."""
    found = (config.get("configurable") or {}).get("run_id") or config.get("run_id")
    return None if found is None else str(found)


def _new_calls(
    tool_calls: Sequence[Mapping[str, Any]],
    at: Coordinates,
    source: Source | None,
    history: Sequence[BaseMessage],
    keys: Mapping[str, str],
) -> dict[str, CallRecord]:
    """Each call bound to the operation its coordinates derive (not yet in the ledger)."""
    anchors, task_id = message_anchors(history), _private.task_id(at.config) or ""
    return {
        str(c["id"]): new_call(
            c,
            at=at,
            source=source,
            task_id=task_id,
            message_id=anchors.get(str(c["id"])),
            call_key=keys.get(str(c["id"])),
        )
        for c in tool_calls
    }


# -- the loops callers share: written once, driven sync or async -----------------------


@dataclass(frozen=True)
class _OnLoop:
    """Call ``fn`` on the session's event loop (directly when already there)."""

    fn: Callable[[], Any]


#: Yielded for "run the caller's own work now" (the tool, or one round of calls).
_CALLER = object()
_Steps = Generator[Any, Any, R]


def _round_steps(session: Session, call_id: str | None = None) -> _Steps[Any]:
    """Rounds until nobody needs asking: after each, at most one ``interrupt()``
    (approvals first, then reviews), whose answer is written to the ledger at once.
    A round is the caller's work (`_CALLER`) or, given ``call_id``, that one call
    through the protocol (`Session.call_steps`). Closes the session."""
    try:
        round_no = 0
        while True:
            output = (yield _CALLER) if call_id is None else (yield from session.call_steps(call_id))
            question = session.pending_interrupt(round_no)
            if question is None:
                return output
            answer = interrupt(question, response_schema=EffectAnswer)
            yield session.apply_answer(answer, question=question, round_no=round_no)
            round_no += 1
    finally:
        yield session.close()


@dataclass(frozen=True)
class _Done:
    """What steps returned, once they are done."""

    value: Any


def _resumed(resume: Callable[[Any], Any], given: Any) -> Any:
    """What the steps ask next once ``resume`` hands them ``given`` (``steps.send`` the
    result of their last request, ``steps.throw`` the error it raised); `_Done` with
    what they returned, when they return."""
    try:
        return resume(given)
    except StopIteration as done:
        return _Done(done.value)


async def _steps_async(steps: _Steps[R], caller: Callable[[], Awaitable[Any]]) -> R:
    """Run ``steps`` on the event loop: awaits the session's work in place."""
    request = _resumed(steps.send, None)
    while not isinstance(request, _Done):
        try:
            if request is _CALLER:
                result = await caller()
            elif isinstance(request, _OnLoop):
                result = request.fn()
            else:
                result = await request
        except BaseException as error:
            request = _resumed(steps.throw, error)
        else:
            request = _resumed(steps.send, result)
    return request.value  # type: ignore[no-any-return]


def _steps_sync(steps: _Steps[R], caller: Callable[[], Any], run: PortalRun) -> R:
    """Run ``steps`` in sync code: the session's work through ``run`` (the portal), the
    caller's own work in the calling thread."""
    request = _resumed(steps.send, None)
    while not isinstance(request, _Done):
        try:
            if request is _CALLER:
                result = caller()
            elif isinstance(request, _OnLoop):
                result = run(_call(request.fn))
            else:
                result = run(request)
        except BaseException as error:
            request = _resumed(steps.throw, error)
        else:
            request = _resumed(steps.send, result)
    return request.value  # type: ignore[no-any-return]


async def _call(fn: Callable[[], Any]) -> Any:
    return fn()


async def run_call(session: Session, call_id: str, execute: AsyncExecutor) -> Any:
    """Run one call through the protocol; ``execute`` runs the tool once and returns
    ``(output, exception)`` (see `capture`)."""
    return await _steps_async(session.call_steps(call_id), execute)


def run_call_sync(session: Session, call_id: str, execute: SyncExecutor, run: PortalRun) -> Any:
    """`run_call` for sync code: ledger work goes through ``run`` (the portal), the
    tool runs in the calling thread."""
    return _steps_sync(session.call_steps(call_id), execute, run)


async def run_rounds(session: Session, one_round: Callable[[], Awaitable[Any]]) -> Any:
    """Run rounds until nobody needs asking, one ``interrupt()`` per round; closes the session."""
    return await _steps_async(_round_steps(session), one_round)


def run_rounds_sync(session: Session, one_round: Callable[[], Any], run: PortalRun) -> Any:
    """`run_rounds` for sync code."""
    return _steps_sync(_round_steps(session), one_round, run)


async def run_call_rounds(session: Session, call_id: str, tool: Callable[[], Awaitable[Any]]) -> Any:
    """`run_rounds` of a session whose one call is ``call_id``: each round runs it through
    the protocol (`run_call`), ``tool`` running the tool once; closes the session."""
    return await _steps_async(_round_steps(session, call_id), lambda: capture(tool))


def run_call_rounds_sync(session: Session, call_id: str, tool: Callable[[], Any], run: PortalRun) -> Any:
    """`run_call_rounds` for sync code."""
    return _steps_sync(_round_steps(session, call_id), lambda: capture_sync(tool), run)


async def capture(run: Callable[[], Awaitable[Any]]) -> tuple[Any, BaseException | None]:
    """Run the tool once: ``(output, None)``, or ``(None, exception)`` for the session to
    classify. LangGraph's own control flow (interrupts) passes through."""
    try:
        return await run(), None
    except GraphBubbleUp:
        raise
    except Exception as error:
        return None, error


def capture_sync(run: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """`capture` for sync tools."""
    try:
        return run(), None
    except GraphBubbleUp:
        raise
    except Exception as error:
        return None, error


# -- an undo: the one call of a session of its own ----------------------------------------


async def run_undo(
    ledger: Ledger,
    undo_op: Operation,
    effect_op: Operation,
    undo: Undo,
    *,
    hash_key: bytes | None = None,
    lease_seconds: float = lease.DEFAULT_LEASE_SECONDS,
) -> tuple[Operation, str | None]:
    """Drive undo ``undo_op`` of ``effect_op`` through the per-call protocol, as the one
    call of a session of its own (under the scope it was recorded with), until it is
    settled or waits for a human: its row as stored afterwards, and what it raised (if
    it did). See `RunUndo`."""
    effect = undo.contract
    args = undo_arguments(effect_op, undo)
    settings = Settings(effects={undo_op.tool: effect}, hash_key=hash_key, lease_seconds=lease_seconds)
    call_id = undo_op.tool_call_id
    record = CallRecord(call_id=call_id, tool=undo_op.tool, args=args, effect=effect, op=undo_op)
    session = Session(
        ledger=ledger,
        settings=settings,
        config={},
        calls={call_id: record},
        scope=Scope(undo_op.tenant, undo_op.policy_version),
    )

    async def execute() -> tuple[Any, BaseException | None]:
        info = CURRENT_OPERATION.get()
        sent = with_key(effect, args, info.provider_key) if info is not None else args
        return await capture(lambda: _invoke(undo.action, dict(sent)))

    error: str | None = None
    try:
        await run_call(session, call_id, execute)
    except Exception as raised:  # recorded by the protocol (a definite failure): reported
        error = f"{type(raised).__name__}: {raised}"[:500]
    finally:
        await session.close()
    stored = await ledger.get(undo_op.op_id)
    return (stored if stored is not None else record.op), error


async def _invoke(action: Any, args: dict[str, Any]) -> Any:
    """Run an undo's action (a tool, a coroutine function or a sync function)."""
    if hasattr(action, "ainvoke"):
        return await action.ainvoke(args)
    if inspect.iscoroutinefunction(action):
        return await action(**args)
    return await asyncio.to_thread(action, **args)  # copies the context: current_operation()


# -- which calls a session takes: shared by the integrations ---------------------------


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
    (see `stored_text`), so this does not depend on
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
    """Why an effectful call has no usable identity (see `effectful_calls`)."""
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

    The artifact names the error (`MalformedToolCallError`).
    """
    error = refusal_error(tool_call)
    return ToolMessage(
        content=str(error),
        name=str(tool_call.get("name")),
        tool_call_id=error.tool_call_id,
        status="error",
        artifact={"error": type(error).__name__, "sent": False},
    )


def args_problem(tool: BaseTool | None, args: Any) -> str | None:
    """Why ``args`` do not pass the tool's schema (one short line), or ``None`` if they do."""
    if tool is None:
        return "no such tool"
    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(args)
        except ValidationError as error:
            return "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in error.errors(include_url=False)[:5]
            )
    return None


def args_valid(tool: BaseTool | None, args: Any) -> bool:
    """Whether the model's arguments pass the tool's schema (invalid ones never dispatch)."""
    return args_problem(tool, args) is None


def approved_request(request: ToolCallRequest, session: Session) -> ToolCallRequest:
    """The request to send: an approver's edited arguments, if they edited them, and the
    running operation's provider key in the contract's ``key_argument``, if it names one."""
    call_id = str(request.tool_call["id"])
    edited = session.edited_args(call_id)
    if edited is not None:
        request = request.override(tool_call={**request.tool_call, "args": edited})
    effect, op = session._calls[call_id].effect, CURRENT_OPERATION.get()
    if effect.key_argument is None or op is None:
        return request
    args = with_key(effect, request.tool_call.get("args") or {}, op.provider_key)
    return request.override(tool_call={**request.tool_call, "args": args})
