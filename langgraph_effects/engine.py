"""The dispatch protocol shared by ``EffectToolNode`` and ``EffectMiddleware``.

One :class:`Session` serves one node execution (one LangGraph task). It

1. binds every effectful call to its operation: derived from durable graph
   coordinates, or found again in the ledger (resume, retry, second worker,
   re-planned duplicate), and records the new ones in one commit before anything
   is sent (after the checkpoint holding the call is durable);
2. answers each call by its state (:meth:`Session.begin`): replay a recorded
   outcome, execute under a dispatch lease, wait for a live lease held by
   someone else, reconcile ``unknown``, or report that it needs review;
3. records each outcome (:meth:`Session.finish`): a result confirms, a definite
   error fails, anything else is ``unknown`` and goes straight to reconciliation;
4. applies operator verdicts from an ``interrupt()`` answer (:meth:`Session.decide`).

The caller (node or middleware) runs the tool itself, so sync and async tools,
``wrap_tool_call`` wrappers and ToolNode's error handling behave exactly as without
us; the session only decides whether a call may leave, and remembers what happened.
The per-call decisions themselves are pure code in :mod:`langgraph_effects.protocol`;
the session does the I/O they name (ledger reads and writes, liveness probes,
heartbeats, reconciliation).

The session is split by reason to change: this module opens it (binding and the
intent commit); :mod:`~langgraph_effects.binding` derives coordinates and ids;
:mod:`~langgraph_effects.dispatch` drives each call; :mod:`~langgraph_effects.asking`
asks a human; :mod:`~langgraph_effects.loops` holds the loops callers share;
:mod:`~langgraph_effects.actions` the types they exchange. The names callers use are
re-exported here. See ``docs/architecture.md``.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from . import _private, identity, lease
from .actions import (
    Action,
    Answer,
    Execute,
    Settings,
    _Call,
    by_id,
)
from .asking import HumanQuestions
from .binding import (
    Coordinates,
    Source,
    durable_source,
    history_of,
    identify,
    message_anchors,
    new_call,
    read_checkpoint,
    scope_from,
    turn_of_saved,
)
from .contract import Effect
from .errors import DurabilityError
from .ledger.base import Ledger
from .loops import (
    AsyncExecutor,
    PortalRun,
    SyncExecutor,
    answer,
    capture,
    capture_sync,
    drive,
    drive_sync,
    effectful_calls,
    refusal,
    refusal_error,
    with_reviews,
    with_reviews_sync,
)
from .operation import Change, Event, EvidenceKind, Owner, State

# Callers import these from here; they live in the modules named in the docstring.
__all__ = [
    "Action",
    "Answer",
    "AsyncExecutor",
    "Execute",
    "PortalRun",
    "Session",
    "Settings",
    "Source",
    "SyncExecutor",
    "answer",
    "capture",
    "capture_sync",
    "drive",
    "drive_sync",
    "durable_source",
    "effectful_calls",
    "history_of",
    "identify",
    "read_checkpoint",
    "refusal",
    "refusal_error",
    "scope_from",
    "turn_of_saved",
    "with_reviews",
    "with_reviews_sync",
]

log = logging.getLogger("langgraph_effects")


class Session(HumanQuestions):
    """The ledger side of one node execution. Create with :meth:`open`."""

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
    ) -> Session:
        """Bind each effectful call to its operation; record new intents in one commit.

        ``call_keys`` maps a call id to the key that tells it apart within its turn,
        when the call id itself is not stable (a Functional API task's id is not).
        """
        thread_id = _private.thread_id(config)
        if thread_id is None:
            raise DurabilityError(
                "effectful tool calls need a checkpointer and a thread_id: compile the graph "
                "with a checkpointer (e.g. EffectSqliteSaver) and pass "
                "config={'configurable': {'thread_id': ...}}"
            )
        scope = scope_from(config, context)
        ns_full = _private.checkpoint_ns(config)
        namespace = identity.namespace_path(_private.parent_namespace(ns_full))
        history = history_of(state, messages_key)
        anchors = message_anchors(history)
        task_id = _private.task_id(config) or ""
        # One read of the checkpoint holding the calls: it is the durability barrier
        # (nothing leaves before it is saved) and the turn every id is anchored on.
        source = await durable_source(
            config,
            wait_seconds=settings.durable_wait_seconds,
            sync_checkpointer=sync_checkpointer,
        )
        keys = call_keys or {}
        at = Coordinates(settings, scope, thread_id, namespace, config)

        calls: dict[str, _Call] = {}
        for tool_call in tool_calls:
            call_id = str(tool_call["id"])
            calls[call_id] = new_call(
                tool_call,
                at=at,
                source=source,
                task_id=task_id,
                message_id=anchors.get(call_id),
                call_key=keys.get(call_id),
            )

        session = cls(ledger=ledger, settings=settings, config=config, scope=scope, calls=calls)
        session._source = source
        await session._bind(history_known=bool(history))
        await session._record_new()
        return session

    async def _bind(self, *, history_known: bool) -> None:
        """Find operations already in the ledger: by id, then re-planned duplicates."""
        wanted = {c.op.op_id for c in self.calls.values()}
        stored = await self.ledger.get_many(sorted(wanted))
        fresh: list[_Call] = []
        for c in self.calls.values():
            found = stored.get(c.op.op_id)
            if found is None:
                fresh.append(c)
            elif found.args_hash != c.op.args_hash:
                c.conflict = (
                    f"the provider key {found.provider_key!r} already belongs to a {found.tool} "
                    "call with different arguments; the call was not sent. Use a new key for a "
                    "new effect."
                )
                c.op = found
            else:
                c.op = found
        await self._follow_edits()
        source = self._source
        if not (
            fresh
            and history_known
            and self.settings.detect_replans
            and source is not None
            and source.origin is not None
        ):
            self._fresh = fresh
            return
        candidates = await self.ledger.find_by_payload(
            fresh[0].op.thread_id, [(c.tool, c.op.args_hash) for c in fresh]
        )
        taken: set[str] = set()
        still_fresh: list[_Call] = []
        for c in fresh:
            match = None
            for o in sorted(candidates, key=lambda o: o.created_at):
                if (
                    o.tool == c.tool
                    and o.args_hash == c.op.args_hash
                    and o.tenant == c.op.tenant
                    and o.checkpoint_ns == c.op.checkpoint_ns
                    and o.state not in (State.FAILED, State.ABANDONED)
                    and o.op_id not in taken
                    and o.extra.get("turn") not in (None, source.turn)
                    and o.extra.get("origin") == source.origin
                ):
                    match = o
                    break
            if match is None:
                still_fresh.append(c)
            else:
                # The model answered the very state it answered before, whose AIMessage
                # was lost (never saw the outcome): the same intent, not a second one.
                log.warning(
                    "tool call %s (%s) re-plans operation %s (call %s), asked from the same "
                    "state %s; binding to it instead of sending again",
                    c.call_id,
                    c.tool,
                    match.op_id,
                    match.tool_call_id,
                    source.origin,
                )
                taken.add(match.op_id)
                c.op = match
        self._fresh = still_fresh

    async def _record_new(self) -> None:
        fresh = self._fresh
        if not fresh:
            return
        if _private.durability(self.config) == "exit":
            raise DurabilityError(
                "durability='exit' saves the checkpoint only when the run ends, so a crash "
                "would lose the tool call that was already dispatched; nothing was sent. "
                "Run the graph with durability='sync' (recommended) or 'async'."
            )
        # The checkpoint holding the calls is durable: ``open`` read it back.
        # Calls that can be reconciled without a human get intent and dispatch marker in
        # one commit; blind and approval-gated calls first commit ``pending``, so a crash
        # before the send is provably harmless and needs no operator.
        direct = [c for c in fresh if not _staged(c.effect)]
        staged = [c for c in fresh if _staged(c.effect)]
        owner: Owner | None = None
        try:
            if direct:
                owner = await lease.new_owner_async()
                change = Change(
                    Event.DISPATCH,
                    owner=owner,
                    lease_expires_at=time.time() + self.settings.lease_seconds,
                    evidence={"kind": EvidenceKind.INTENT},
                )
                stored = by_id(await self.ledger.record_intents([c.op for c in direct], change=change))
                self._batch_owners[owner.token] = owner
                for c in direct:
                    op = self._stored_or_conflict(c, stored)
                    if op.owner is not None and op.owner.token == owner.token:
                        c.owner = owner
                        c.batch_token = owner.token
                        self._batch_refs[owner.token] = self._batch_refs.get(owner.token, 0) + 1
                if not self._batch_refs.get(owner.token):
                    lease.release_soon(owner)
            if staged:
                stored = by_id(await self.ledger.record_intents([c.op for c in staged]))
                for c in staged:
                    self._stored_or_conflict(c, stored)
        except BaseException:
            # No session comes out of a failed open, so nobody would release what this
            # commit reserved: a resume would wait for a dispatch that never runs.
            for c in direct:
                c.owner = c.batch_token = None
            if owner is not None:
                self._batch_refs.pop(owner.token, None)
                self._batch_owners.pop(owner.token, None)
                lease.release_soon(owner)
            raise
        self._fresh = []


def _staged(effect: Effect) -> bool:
    """Calls whose intent is committed ``pending`` first (a false ``unknown`` would cost
    a human): blind ones, and ones that need an approval before dispatch."""
    return effect.kind == "blind" or effect.approval == "always"


