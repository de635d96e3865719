"""``EffectToolNode``: ``ToolNode`` that never sends an effect twice or silently drops one.

A drop-in subclass of `langgraph.prebuilt.ToolNode` (same constructor, plus
keyword-only ``effects=`` and ``ledger=``). Around ToolNode's own machinery it adds
the dispatch protocol of `langgraph_effects._runtime.session`:

* at the node level (``_func``/``_afunc``): open a session that binds every call to
  its durable operation and records the intents in one commit; run ToolNode as
  usual; if any call needs an operator, raise **one** ``interrupt()`` listing them,
  write the verdicts to the ledger and run again (settled calls then replay);
* at the innermost per-call level (``_execute_tool_sync``/``_execute_tool_async``,
  below any ``wrap_tool_call`` wrapper, so each attempt a wrapper makes is seen):
  replay, execute under a lease, reconcile, or stand aside for review.

Those two ToolNode methods are private; the supported langgraph range is pinned
and ``tests/test_langgraph_contract.py`` fails loudly if their shape changes.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime

from .. import _private
from .._runtime import portal as _portal
from .._runtime.calls import Settings, check_ledger
from .._runtime.lease import DEFAULT_LEASE_SECONDS
from .._runtime.session import (
    Session,
    approved_request,
    args_problem,
    args_valid,
    capture,
    capture_sync,
    effectful_calls,
    refusal,
    run_call,
    run_call_sync,
    run_rounds,
    run_rounds_sync,
)
from ..checkpoint._sides import refuse_async_only_tool
from ..core.contract import Effect
from ..core.options import check_tool_names
from ..errors import NoLedgerError
from ..ledger.attach import ledger_of
from ..ledger.base import Ledger
from . import keys

_SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "langgraph_effects_session", default=None
)
#: Ids of effectful calls of this node execution that have no usable identity.
_REFUSED: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "langgraph_effects_refused", default=frozenset()
)


class _ErrorCatcher(BaseCallbackHandler):
    """Sees the exception a tool raised, even when ``handle_tool_errors`` turns it into
    a message: only the exception tells a definite failure from an ambiguous one."""

    run_inline = True
    raise_error = False

    def __init__(self) -> None:
        self.root: UUID | None = None
        self.error: BaseException | None = None

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, **kw: Any) -> None:
        if self.root is None:
            self.root = run_id

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        if run_id == self.root:
            self.error = error


def _with_catcher(config: RunnableConfig, catcher: _ErrorCatcher) -> RunnableConfig:
    callbacks = config.get("callbacks")
    if callbacks is None:
        patched: Any = [catcher]
    elif isinstance(callbacks, list):
        patched = [*callbacks, catcher]
    elif isinstance(callbacks, BaseCallbackManager):
        patched = callbacks.copy()
        patched.add_handler(catcher, inherit=True)
    else:  # pragma: no cover - unknown callback container: run without the catcher
        return config
    return {**config, "callbacks": patched}


class EffectToolNode(ToolNode):
    """A ``ToolNode`` whose effectful calls are recorded, reconciled and never duplicated.

    Args:
        tools: as for ``ToolNode``.
        effects: tool name -> [`Effect`][langgraph_effects.Effect], what each tool's
            provider can prove after a crash. A tool not listed is a *blind* effect
            (ambiguity goes to an operator); ``Effect.read_only()`` opts a tool out.
        ledger: where operations are recorded. Default: the ledger of the graph's
            checkpointer (``AsyncEffectSqliteSaver``, ``AsyncEffectPostgresSaver``, or one
            attached with [`attach_ledger`][langgraph_effects.attach_ledger]).
        lease_seconds: how long a dispatch lease lasts without a heartbeat; a live
            lease makes a second worker wait instead of sending.
        hash_key: secret for the keyed args hash (default: env
            ``LANGGRAPH_EFFECTS_HASH_KEY``; unkeyed SHA-256 if unset).
        detect_replans: bind a call minted again after its AIMessage was lost to
            the operation it re-plans, instead of sending it twice.

    Every other argument behaves exactly as in ``ToolNode``. Graphs must run with a
    checkpointer, a ``thread_id``, and ``durability="sync"`` (recommended) or
    ``"async"``; ``"exit"`` is refused before anything is sent.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Any],
        *,
        effects: Mapping[str, Effect] | None = None,
        ledger: Ledger | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        hash_key: bytes | None = None,
        detect_replans: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(tools, **kwargs)
        self._settings = Settings.build(
            effects, hash_key=hash_key, lease_seconds=lease_seconds, detect_replans=detect_replans,
            owner="EffectToolNode",
        )
        check_ledger("EffectToolNode", ledger)
        check_tool_names(
            "EffectToolNode", self._settings.effects, list(self.tools_by_name), where="this node"
        )
        self.effects = dict(self._settings.effects)
        keys.check_tools(self.tools_by_name, self.effects)
        self.ledger = ledger

    # -- node level ------------------------------------------------------------------------

    def _ledger_for(self, config: RunnableConfig) -> Ledger:
        found = self.ledger or ledger_of(_private.checkpointer(config))
        if found is None:
            raise NoLedgerError(
                "EffectToolNode has no ledger to record effectful calls in: compile the graph "
                "with AsyncEffectSqliteSaver (or AsyncEffectPostgresSaver), attach one with "
                "attach_ledger(checkpointer, ledger), or pass EffectToolNode(..., ledger=...). "
                "Nothing was sent."
            )
        return found

    def _effectful(self, input: Any) -> tuple[list[Mapping[str, Any]], set[str]]:
        tool_calls = _private.tool_calls_in(self, input)
        tracked, refused = effectful_calls(
            tool_calls, self._settings, lambda name: name in self.tools_by_name
        )
        # Invalid arguments never dispatch (ToolNode answers them); ids are counted over
        # every call first, so an id shared with an invalid sibling is still refused.
        valid = [c for c in tracked if args_valid(self.tools_by_name.get(c["name"]), c.get("args"))]
        return valid, refused

    def _refused(self, request: ToolCallRequest) -> bool:
        call_id = str(request.tool_call.get("id") or "")
        return (
            call_id in _REFUSED.get()
            and request.tool is not None
            and not self._settings.effect_for(request.tool.name).read_only_tool
        )

    def _open(self, calls: Sequence[Mapping[str, Any]], input: Any, config: RunnableConfig,
              runtime: Runtime[Any], *, sync: bool) -> Any:
        return Session.open(
            ledger=self._ledger_for(config),
            settings=self._settings,
            tool_calls=calls,
            state=input,
            config=config,
            context=runtime.context,
            messages_key=_private.messages_key(self),
            sync_checkpointer=sync,
            check_args=lambda name, args: args_problem(self.tools_by_name.get(name), args),
        )

    def _func(self, input: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
        calls, refused = self._effectful(input)
        refusals = _REFUSED.set(frozenset(refused))
        try:
            if not calls:
                return super()._func(input, config, runtime)
            for call in calls:
                refuse_async_only_tool(self.tools_by_name.get(call["name"]), "EffectToolNode")
            session: Session = _portal.run(self._open(calls, input, config, runtime, sync=True))
            token = _SESSION.set(session)
            try:
                one_round = lambda: super(EffectToolNode, self)._func(input, config, runtime)  # noqa: E731
                return run_rounds_sync(session, one_round, _portal.run)
            finally:
                _SESSION.reset(token)
        finally:
            _REFUSED.reset(refusals)

    async def _afunc(self, input: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
        calls, refused = self._effectful(input)
        refusals = _REFUSED.set(frozenset(refused))
        try:
            if not calls:
                return await self._round(input, config, runtime)
            session: Session = await self._open(calls, input, config, runtime, sync=False)
            token = _SESSION.set(session)
            try:
                return await run_rounds(session, lambda: self._round(input, config, runtime))
            finally:
                _SESSION.reset(token)
        finally:
            _REFUSED.reset(refusals)

    async def _round(self, input: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
        if _private.sync_only_wrapper(self):
            # ToolNode runs a sync-only wrapper (and the tools under it) on the event
            # loop's thread. Blocking the loop there can stall a checkpointer's half-done
            # transaction on the same database file while we wait for its write lock, so
            # run the round on a worker thread instead; it behaves the same otherwise.
            return await asyncio.to_thread(super()._func, input, config, runtime)
        return await super()._afunc(input, config, runtime)

    # -- per call (below any wrap_tool_call wrapper) ------------------------------------

    def _managed(self, request: ToolCallRequest) -> ToolMessage | tuple[Session, str] | None:
        """The refusal of a call with no usable identity; else the session and call id
        when this call is ours to drive; else ``None`` (ToolNode runs it as usual)."""
        if self._refused(request):
            return refusal(request.tool_call)
        session = _SESSION.get()
        call_id = request.tool_call.get("id")
        if session is None or request.tool is None or call_id is None or not session.manages(call_id):
            return None
        return session, call_id

    def _execute_tool_sync(
        self, request: ToolCallRequest, input_type: Any, config: RunnableConfig
    ) -> Any:
        managed = self._managed(request)
        if isinstance(managed, ToolMessage):
            return managed
        if managed is None:
            return super()._execute_tool_sync(request, input_type, config)
        session, call_id = managed

        def execute() -> tuple[Any, BaseException | None]:
            catcher = _ErrorCatcher()
            output, error = capture_sync(
                lambda: super(EffectToolNode, self)._execute_tool_sync(
                    approved_request(request, session), input_type, _with_catcher(config, catcher)
                )
            )
            return output, error or catcher.error

        return run_call_sync(session, call_id, execute, _portal.run)

    async def _execute_tool_async(
        self, request: ToolCallRequest, input_type: Any, config: RunnableConfig
    ) -> Any:
        managed = self._managed(request)
        if isinstance(managed, ToolMessage):
            return managed
        if managed is None:
            return await super()._execute_tool_async(request, input_type, config)
        session, call_id = managed

        async def execute() -> tuple[Any, BaseException | None]:
            catcher = _ErrorCatcher()
            output, error = await capture(
                lambda: super(EffectToolNode, self)._execute_tool_async(
                    approved_request(request, session), input_type, _with_catcher(config, catcher)
                )
            )
            return output, error or catcher.error

        return await run_call(session, call_id, execute)


__all__ = ["EffectToolNode"]
