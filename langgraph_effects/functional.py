"""The Functional API: ``@effectful`` gives a ``@task`` the same protection.

LangGraph re-runs an unfinished ``@task`` on resume, exactly like an unfinished
tool call. Put ``@effectful(...)`` under ``@task`` and the call is bound to a
durable operation (anchored on the entrypoint's checkpoint and the task's place
among the entrypoint's calls, which resume and time travel reproduce), replayed
once recorded, reconciled after a crash, and sent to review through
``interrupt()`` when evidence cannot settle it::

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

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

from langgraph.config import get_config

from . import _portal, _private
from .actions import Settings
from .checkpoint import ledger_of
from .contract import Effect
from .engine import Session
from .errors import ConfigurationError, NoLedgerError
from .lease import DEFAULT_LEASE_SECONDS
from .ledger.base import Ledger
from .loops import capture, capture_sync, drive, drive_sync, with_reviews, with_reviews_sync

P = ParamSpec("P")
R = TypeVar("R")


def _task_call(
    tool: str, signature: inspect.Signature, ledger: Ledger | None, args: Any, kwargs: Any
) -> tuple[dict[str, Any], dict[str, Any], Ledger, str]:
    """The running ``@task`` as a tool call: (call, config, ledger, the key that tells it
    apart within its turn)."""
    config = get_config()
    task_id = _private.task_id(config)
    if task_id is None:
        raise ConfigurationError(f"@effectful {tool} must run inside a LangGraph @task")
    found = ledger or ledger_of(_private.checkpointer(config))
    if found is None:
        raise NoLedgerError(
            f"@effectful {tool} has no ledger: give the entrypoint a checkpointer that "
            "carries one (EffectSqliteSaver, attach_ledger) or pass ledger=. Nothing was sent."
        )
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    call = {"id": task_id, "name": tool, "args": dict(bound.arguments)}
    # The task id is derived from the checkpoint id, which time travel changes;
    # the call path is not (see _private.call_path).
    return call, dict(config), found, _private.call_path(config) or task_id


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
    contract = effect or Effect()

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        tool = name or fn.__name__
        # No message history, so no re-planning: a call is its place in the entrypoint.
        settings = Settings.build(
            {tool: contract}, hash_key=hash_key, lease_seconds=lease_seconds, detect_replans=False
        )
        signature = inspect.signature(fn)

        def open_session(
            call: dict[str, Any], config: dict[str, Any], found: Ledger, key: str, sync: bool
        ) -> Any:
            return Session.open(
                ledger=found,
                settings=settings,
                tool_calls=[call],
                state=None,
                config=config,
                sync_checkpointer=sync,
                call_keys={call["id"]: key},
            )

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                call, config, found, key = _task_call(tool, signature, ledger, args, kwargs)
                session: Session = await open_session(call, config, found, key, False)

                async def one_round() -> Any:
                    return await drive(session, call["id"], lambda: capture(lambda: fn(*args, **kwargs)))

                return await with_reviews(session, one_round)

            return cast(Callable[P, R], run_async)

        @functools.wraps(fn)
        def run_sync(*args: Any, **kwargs: Any) -> Any:
            call, config, found, key = _task_call(tool, signature, ledger, args, kwargs)
            session: Session = _portal.run(open_session(call, config, found, key, True))

            def one_round() -> Any:
                execute = lambda: capture_sync(lambda: fn(*args, **kwargs))  # noqa: E731
                return drive_sync(session, call["id"], execute, _portal.run)

            return with_reviews_sync(session, one_round, _portal.run)

        return cast(Callable[P, R], run_sync)

    return decorate
