"""The Functional API: ``@effectful`` gives a ``@task`` the same protection.

LangGraph re-runs an unfinished ``@task`` on resume, exactly like an unfinished
tool call. Put ``@effectful(...)`` under ``@task`` and the call is bound to a
durable operation (anchored on the entrypoint's checkpoint and on what the call is:
its tool, its arguments and how many equal calls came before it, so resume and time
travel find it wherever it sits), replayed once recorded, reconciled after a crash,
and sent to review through ``interrupt()`` when evidence cannot settle it. A resumed
entrypoint that LangGraph answers with another call's saved result (its call order
changed) is stopped with `NondeterminismError`
before anything else is sent (see `langgraph_effects.core.callorder`)::

    @task
    @effectful(Effect(dedup_window=timedelta(hours=24)))
    async def send_invoice(customer: str, amount: int) -> str:
        key = current_operation().provider_key
        return (await billing.create(customer, amount, idempotency_key=key)).id

The task returns the function's value when it ran (or its recorded value on
replay). When the outcome was settled without a value of its own (confirmed by a
lookup or an operator's verdict, or abandoned), it returns the ToolMessage the
agent node would have shown, whose ``artifact`` says what happened.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast

from langgraph.config import get_config

from .. import _private
from .._runtime import portal as _portal
from .._runtime.calls import Settings, check_ledger
from .._runtime.lease import DEFAULT_LEASE_SECONDS
from .._runtime.session import Session, run_call_rounds, run_call_rounds_sync
from ..core import callorder, identity
from ..core import options as o
from ..core.callorder import Crossing, Placed
from ..core.contract import Effect
from ..errors import ConfigurationError, NoLedgerError, NondeterminismError
from ..ledger.attach import ledger_of
from ..ledger.base import Ledger
from . import keys

P = ParamSpec("P")
R = TypeVar("R")

#: The attribute ``@effectful`` sets on the function it returns, so a later call can
#: tell what an earlier task call of the run was (see `_placed`).
_ATTRIBUTE = "__langgraph_effects__"
_private.quiet_unknown_channel(callorder.MARK)


@dataclass(frozen=True)
class _Calls:
    """What identifies a call of one ``@effectful`` function."""

    tool: str
    signature: inspect.Signature
    settings: Settings

    def bind(self, args: Any, kwargs: Any) -> tuple[dict[str, Any], str]:
        """(the arguments by name, their hash)."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
        return named, identity.args_hash(named, key=self.settings.hash_key)

    def of_input(self, given: Any) -> tuple[dict[str, Any], str] | None:
        """`bind` for a task's ``(args, kwargs)`` input; ``None`` if it does not bind."""
        try:
            args, kwargs = given
            return self.bind(args, kwargs)
        except (TypeError, ValueError):
            return None


def _calls_of(sibling: _private.SiblingCall) -> _Calls | None:
    calls = getattr(_private.task_function(sibling.proc), _ATTRIBUTE, None)
    return calls if isinstance(calls, _Calls) else None


def _placed(sibling: _private.SiblingCall) -> Placed:
    """A task call of this run as `.callorder` compares it."""
    recorded = callorder.recorded_mark(tuple(sibling.writes))
    calls = _calls_of(sibling)
    if calls is None:
        return Placed(sibling.place, None, None, recorded)
    bound = calls.of_input(sibling.input)
    return Placed(sibling.place, calls.tool, bound[1] if bound else None, recorded)


def _called_args(sibling: _private.SiblingCall) -> dict[str, Any] | None:
    """What a task call of this run was called with, secret fields redacted (for an error)."""
    calls = _calls_of(sibling)
    bound = calls.of_input(sibling.input) if calls is not None else None
    if calls is None or bound is None:
        return None
    return identity.redact(bound[0], calls.settings.effect_for(calls.tool).secret_fields)


@dataclass(frozen=True)
class _TaskCall:
    """The running ``@task`` as a tool call."""

    call: dict[str, Any]
    config: dict[str, Any]
    ledger: Ledger
    key: str
    """What tells it apart within its turn (see `callorder.call_key`)."""
    args_hash: str
    crossing: Crossing | None
    """An earlier call of this run that LangGraph answered with another call's result."""


def _task_call(calls: _Calls, ledger: Ledger | None, args: Any, kwargs: Any) -> _TaskCall:
    config = get_config()
    tool = calls.tool
    task_id = _private.task_id(config)
    if task_id is None:
        raise ConfigurationError(f"@effectful {tool} must run inside a LangGraph @task")
    found = ledger or ledger_of(_private.checkpointer(config))
    if found is None:
        raise NoLedgerError(
            f"@effectful {tool} has no ledger: give the entrypoint a checkpointer that "
            "carries one (AsyncEffectSqliteSaver, attach_ledger) or pass ledger=. Nothing was sent."
        )
    named, digest = calls.bind(args, kwargs)
    call = {"id": task_id, "name": tool, "args": named}
    # Not the task id (derived from the checkpoint id, which time travel changes) nor
    # the call's index (which a change of order moves): what the call is, and how many
    # equal calls its parent made before it.
    path = _private.call_path(config) or task_id
    seen = _private.sibling_calls(config)
    if seen is None:  # not a pushed task call: its path is all there is
        return _TaskCall(call, dict(config), found, path, digest, None)
    index, siblings = seen
    placed = [_placed(s) for s in siblings if s.place != index]
    nth = callorder.occurrence(index, tool, digest, placed)
    key = callorder.call_key(path.rsplit("/", 1)[0], tool, nth)
    crossing = callorder.crossed(placed)
    if crossing is not None:
        moved = next(s for s in siblings if s.place == crossing.index)
        crossing = dataclasses.replace(crossing, called_args=_called_args(moved))
    return _TaskCall(call, dict(config), found, key, digest, crossing)


async def _refusal(task: _TaskCall) -> NondeterminismError:
    """The error that stops a run whose call order changed (nothing was sent)."""
    c = task.crossing
    assert c is not None
    recorded = await task.ledger.get(c.recorded_op_id) if c.recorded_op_id else None
    path = _private.call_path(task.config) or ""
    parent = _private.parent_checkpoint(task.config)
    return NondeterminismError(
        _private.thread_id(task.config) or "",
        path.rsplit("/", 1)[0],
        c.index,
        (c.recorded_tool, dict(recorded.args) if recorded else None, c.recorded_op_id),
        (c.called_tool, dict(c.called_args) if c.called_args is not None else None),
        parent[1] if parent else None,
    )


def _leave_mark(task: _TaskCall, session: Session) -> None:
    """Record beside the task's result which call made it (see `callorder.MARK`).

    Only once it has a result, right before returning it: LangGraph gives a failed
    task's writes back on a resume (all but the error), and a call whose writes came
    back is answered with ``None`` instead of being run again.
    """
    op = session.operation(task.call["id"])
    _private.write_now(task.config, callorder.MARK, callorder.mark(op.tool, task.args_hash, op.op_id))


_EFFECT = o.optional(o.instance(Effect, "an Effect"))


def effectful(
    effect: Effect | None = None,
    *,
    name: str | None = None,
    ledger: Ledger | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    hash_key: bytes | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Protect a Functional API ``@task`` (sync or async) that performs an effect.

    Args:
        effect: the provider's contract (default: blind).
        name: the operation's tool name (default: the function's name).
        ledger: default: the ledger of the entrypoint's checkpointer.
    """
    if effect is not None and not isinstance(effect, Effect):
        hint = (
            "Write @effectful() or @effectful(Effect(...)) above the function, under @task."
            if callable(effect) and effect is not Effect
            else "Give an Effect(...), or nothing for a blind one."
        )
        raise o.refuse("@effectful", "effect", effect, _EFFECT, hint)
    o.check("@effectful", "name", name, o.optional(o.name()))
    check_ledger("@effectful", ledger)
    contract = effect or Effect()

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        tool = name or fn.__name__
        keys.refuse_for_tasks(contract, tool)
        # No message history, so no re-planning: a call is what it is within its turn.
        settings = Settings.build(
            {tool: contract}, hash_key=hash_key, lease_seconds=lease_seconds, detect_replans=False,
            owner="@effectful",
        )
        calls = _Calls(tool, inspect.signature(fn), settings)

        def open_session(task: _TaskCall, sync: bool) -> Any:
            return Session.open(
                ledger=task.ledger,
                settings=settings,
                tool_calls=[task.call],
                state=None,
                config=task.config,
                sync_checkpointer=sync,
                call_keys={task.call["id"]: task.key},
            )

        wrapper: Callable[..., Any]
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                task = _task_call(calls, ledger, args, kwargs)
                if task.crossing is not None:
                    raise await _refusal(task)
                session: Session = await open_session(task, False)
                result = await run_call_rounds(session, task.call["id"], lambda: fn(*args, **kwargs))
                _leave_mark(task, session)
                return result

            wrapper = run_async
        else:

            @functools.wraps(fn)
            def run_sync(*args: Any, **kwargs: Any) -> Any:
                task = _task_call(calls, ledger, args, kwargs)
                if task.crossing is not None:
                    raise _portal.run(_refusal(task))
                session: Session = _portal.run(open_session(task, True))
                result = run_call_rounds_sync(
                    session, task.call["id"], lambda: fn(*args, **kwargs), _portal.run
                )
                _leave_mark(task, session)
                return result

            wrapper = run_sync
        setattr(wrapper, _ATTRIBUTE, calls)
        return cast(Callable[P, R], wrapper)

    return decorate
