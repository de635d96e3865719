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
The per-call decisions themselves are pure code in :mod:`langgraph_effects.core.protocol`;
the session does the I/O they name (ledger reads and writes, liveness probes,
heartbeats, reconciliation).

The session is split by reason to change: this module opens it (binding and the
intent commit); :mod:`~langgraph_effects._runtime.binding` derives coordinates and ids;
:mod:`~langgraph_effects._runtime.dispatch` drives each call; :mod:`~langgraph_effects._runtime.asking`
asks a human; :mod:`~langgraph_effects._runtime.loops` holds the loops callers share;
:mod:`~langgraph_effects._runtime.actions` the types they exchange. The names callers use are
re-exported here. See ``docs/architecture.md``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _private
from ..core import identity
from ..core.contract import Effect
from ..core.operation import Change, Event, EvidenceKind, Operation, Owner, State
from ..errors import DurabilityError
from ..ledger.base import (
    DEFAULT_ACTOR,
    FindOrInsert,
    InsertWithAudit,
    Ledger,
    Load,
    Plan,
    find_step,
    insert_step,
    recorded_plan,
    split_found,
)
from . import lease
from .actions import (
    Action,
    Answer,
    Execute,
    Settings,
    _Call,
    by_id,
)
from .asking import ArgsCheck, HumanQuestions
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
        check_args: ArgsCheck | None = None,
    ) -> Session:
        """Bind each effectful call to its operation; record new intents in one commit.

        ``call_keys`` maps a call id to the key that tells it apart within its turn,
        when the call id itself is not stable (a Functional API task's id is not).
        ``check_args`` checks an approver's edit against the tool's schema (see asking).
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
        # A dispatch owner for the calls the open itself may dispatch (released at once
        # if none is): one made ahead, or one made on a worker thread (a locked file)
        # while the checkpoint is read.
        direct = any(not _staged(settings.effect_for(str(c["name"]))) for c in tool_calls)
        owner: Owner | None = lease.ready_owner() if direct else None
        made = asyncio.ensure_future(lease.new_owner_async()) if direct and owner is None else None
        try:
            # One read of the checkpoint holding the calls: it is the durability barrier
            # (nothing leaves before it is saved) and the turn every id is anchored on.
            source = await durable_source(
                config,
                wait_seconds=settings.durable_wait_seconds,
                sync_checkpointer=sync_checkpointer,
            )
            at = Coordinates(settings, scope, thread_id, namespace, config)
            keys = call_keys or {}
            calls = {
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
            session = cls(ledger=ledger, settings=settings, config=config, scope=scope, calls=calls)
            session._source = source
            session.check_args = check_args
            if made is not None:
                owner = await made
            derived = {c.call_id: (c.op, c.args) for c in calls.values()}
            await ledger.transact(
                lambda: session._open_plan(derived, history_known=bool(history), owner=owner)
            )
        except BaseException:
            # No session comes out of a failed open, so nobody would release what this
            # transaction may have reserved: a resume would wait for a dispatch that
            # never runs.
            if owner is not None:
                lease.release_soon(owner)
            elif made is not None:
                made.cancel()  # new_owner_async releases the owner once it exists
            raise
        session._adopt(owner)
        return session

    def _open_plan(
        self,
        derived: Mapping[str, tuple[Operation, dict[str, Any]]],
        *,
        history_known: bool,
        owner: Owner | None,
    ) -> Plan[None]:
        """Bind every call and record the new intents: one ledger plan, one durable
        commit whatever the fan-out.

        One step reads the stored rows and the re-plan candidates and, when it finds
        none (calls never seen before, the usual case), inserts every intent as well:
        one round trip on Postgres. Otherwise a second step inserts what is new (after
        a read of an approver's edits, if any). SQLite runs the plan as one
        transaction; Postgres as lone statements, which is safe without a transaction
        around them: an insert only adds rows that are absent and the plan then uses
        the rows as stored, so a concurrent open of the same calls loses nothing.
        Starts from the ``derived`` operations each time: the ledger may run it again
        (a rolled-back group, a deadlock).
        """
        for c in self.calls.values():
            c.op, c.args = derived[c.call_id][0], dict(derived[c.call_id][1])
            c.conflict = c.owner = c.batch_token = None
            c.edited = False
        calls = list(self.calls.values())
        if not calls:
            return
        source = self._source
        replans = (
            history_known
            and self.settings.detect_replans
            and source is not None
            and source.origin is not None
        )
        find = find_step(
            [c.op.op_id for c in calls],
            calls[0].op.thread_id,
            [(c.tool, c.op.args_hash) for c in calls] if replans else [],
            # Only candidates asked from this very state: an earlier turn's same call
            # asked from another state is no re-plan, and must not cost a second trip.
            source.origin if replans and source is not None else None,
        )
        exiting = _private.durability(self.config) == "exit"
        if exiting:
            found = yield find  # a new intent is refused below
        else:
            every = self._intents_step(calls, owner)
            found, inserted = yield FindOrInsert(find, every)
            if not found:  # nothing stored, no candidate: all new, and inserted just now
                yield from self._bind_intents(calls, owner, every, inserted)
                return
        stored, candidates = split_found(find, found)
        fresh = [c for c in calls if not self._adopt_stored(c, stored.get(c.op.op_id))]
        edited = {
            c.call_id: str(successor)
            for c in calls
            if c.op.state is State.ABANDONED
            and (successor := (c.op.evidence or {}).get("superseded_by"))
        }
        if edited:
            # A call whose payload an approver edited stands for the edited operation.
            successors = yield Load(tuple(sorted(set(edited.values()))))
            for call_id, successor in edited.items():
                if (found_edit := successors.get(successor)) is not None:
                    c = self.calls[call_id]
                    c.op, c.args, c.edited = found_edit, dict(found_edit.args), True
        if fresh and replans and source is not None:
            fresh = _bind_replans(fresh, candidates, source)
        if not fresh:
            return
        if exiting:
            raise DurabilityError(
                "durability='exit' saves the checkpoint only when the run ends, so a crash "
                "would lose the tool call that was already dispatched; nothing was sent. "
                "Run the graph with durability='sync' (recommended) or 'async'."
            )
        insert = self._intents_step(fresh, owner)
        yield from self._bind_intents(fresh, owner, insert, (yield insert))

    def _intents_step(self, fresh: list[_Call], owner: Owner | None) -> InsertWithAudit:
        """The one insert of the new intents (part of :meth:`_open_plan`)."""
        # The checkpoint holding the calls is durable: ``open`` made sure of it.
        # Calls that can be reconciled without a human get intent and dispatch marker in
        # one write; blind and approval-gated calls are written ``pending`` first, so a
        # crash before the send is provably harmless and needs no operator.
        direct = [c for c in fresh if not _staged(c.effect)]
        dispatch: Change | None = None
        if direct:
            assert owner is not None  # made whenever a call may be direct
            dispatch = Change(
                Event.DISPATCH,
                owner=owner,
                lease_expires_at=time.time() + self.settings.lease_seconds,
                evidence={"kind": EvidenceKind.INTENT},
            )
        changes = {c.op.op_id: dispatch for c in direct}
        return insert_step([c.op for c in fresh], None, DEFAULT_ACTOR, changes)

    def _bind_intents(
        self, fresh: list[_Call], owner: Owner | None, insert: InsertWithAudit, inserted: list[str]
    ) -> Plan[None]:
        """Bind the new calls to their rows as stored, once ``insert`` inserted ``inserted``."""
        rows = by_id((yield from recorded_plan([c.op for c in fresh], insert, inserted)))
        for c in fresh:
            op = self._stored_or_conflict(c, rows)
            if owner is not None and op.owner is not None and op.owner.token == owner.token:
                c.owner = owner
                c.batch_token = owner.token

    def _adopt_stored(self, c: _Call, found: Operation | None) -> bool:
        """Bind ``c`` to its stored row; ``False`` if there is none (a new intent)."""
        if found is None:
            return False
        if found.args_hash != c.op.args_hash:
            c.conflict = (
                f"the provider key {found.provider_key!r} already belongs to a {found.tool} "
                "call with different arguments; the call was not sent. Use a new key for a "
                "new effect."
            )
        c.op = found
        return True

    def _adopt(self, owner: Owner | None) -> None:
        """Count the calls the open's dispatch owner stands for; release it if none."""
        if owner is None:
            return
        refs = sum(1 for c in self.calls.values() if c.batch_token == owner.token)
        if refs:
            self._batch_owners[owner.token] = owner
            self._batch_refs[owner.token] = refs
        else:
            lease.release_soon(owner)


def _bind_replans(fresh: list[_Call], candidates: Sequence[Operation], source: Source) -> list[_Call]:
    """Bind each new call that re-plans an earlier operation to it; the calls left new.

    A re-plan: the model answered the very state it answered before (same origin),
    in another turn, with the same tool and arguments, and the earlier operation
    neither failed nor was abandoned (``candidates`` come in listing order).
    """
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
            continue
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
    return still_fresh


def _staged(effect: Effect) -> bool:
    """Calls whose intent is committed ``pending`` first (a false ``unknown`` would cost
    a human): blind ones, and ones that need an approval before dispatch."""
    return effect.kind == "blind" or effect.approval == "always"


