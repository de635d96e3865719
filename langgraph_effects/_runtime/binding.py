"""Binding a call to its operation: the durable checkpoint the call's task was
prepared from (the durability barrier and the turn ids are anchored on), the tenant
scope, the one rule that derives an operation id, and the one ledger plan that binds
a session's calls and commits their new intents (`open_plan`). See ``docs/architecture.md``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from .. import _private
from ..core import identity
from ..core.contract import Effect
from ..core.operation import Change, Event, EvidenceKind, Operation, Owner, Scope, State
from ..core.text import CONFIG_ADVICE, require_config_text, require_text
from ..errors import (
    DurabilityError,
)
from ..ledger.base import (
    DEFAULT_ACTOR,
    FindOrInsert,
    InsertWithAudit,
    Load,
    Plan,
    find_step,
    insert_step,
    recorded_plan,
    split_found,
)
from .calls import CallRecord, Settings

log = logging.getLogger("langgraph_effects")


def by_id(ops: Iterable[Operation]) -> dict[str, Operation]:
    """Operations keyed by id (what ``Ledger.record_intents`` returns, looked up)."""
    return {op.op_id: op for op in ops}


def bind_stored(c: CallRecord, stored: Mapping[str, Operation]) -> Operation:
    """Bind ``c`` to the row the ledger kept for it; a missing row means its provider
    key is taken (``c.conflict`` says so, and the call is never sent)."""
    op = stored.get(c.op.op_id)
    if op is None:
        c.conflict = (
            f"the provider key {c.op.provider_key!r} already belongs to another operation in "
            "this tenant; the call was not sent. Use a new key for a new effect."
        )
        return c.op
    c.op = op
    return op


def history_of(state: Any, messages_key: str = "messages") -> list[BaseMessage]:
    """The message history in a node's input, when there is one."""
    if isinstance(state, dict):
        if state.get("__type") == _private.TOOL_CALL_WITH_CONTEXT:
            return history_of(state.get("state"), messages_key)
        found = state.get(messages_key)
    elif isinstance(state, list):
        found = state
    else:
        found = getattr(state, messages_key, None)
    return [m for m in found or [] if isinstance(m, BaseMessage)]


def message_anchors(history: Iterable[BaseMessage]) -> dict[str, str]:
    """tool_call_id -> id of the (latest) AIMessage that asked for it: recorded on the
    operation for operators to read, never part of its identity (model servers
    repeat message ids)."""
    anchors: dict[str, str] = {}
    for message in history:
        if isinstance(message, AIMessage) and message.id:
            for call in message.tool_calls:
                if call.get("id"):
                    anchors[str(call["id"])] = message.id
    return anchors


@dataclass(frozen=True)
class Source:
    """The durable checkpoint a tool task was prepared from (the one holding its call).

    ``turn`` is its coordinate in operation ids (`identity.turn_of`);
    ``origin`` names the state the model answered (`identity.origin_of`), which
    re-plan detection compares (a re-planned call binds only to an operation asked
    from the same state, never to one asked from another).
    """

    namespace: str
    checkpoint_id: str
    turn: str
    origin: str | None


async def read_checkpoint(saver: Any, ns: str, checkpoint_id: str, thread_id: str, sync: bool) -> Any:
    """Read one checkpoint of the run's checkpointer from the running event loop.

    A sync checkpointer (``sync``) is read on a worker thread, unless it is an async
    saver, or the sync face of one, that lives on this very loop: that one is awaited
    here. Its sync ``get_tuple`` would only come back to this loop and park the worker
    thread until it answers, and a loop's executor whose threads all wait for the loop
    while the saver itself needs a thread of that executor (LangGraph's Postgres saver
    serializes there) never moves again.
    """
    target = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    }
    if not sync:
        return await saver.aget_tuple(target)
    here = async_saver_here(saver)
    if here is not None:
        return await here.aget_tuple(target)
    return await asyncio.to_thread(saver.get_tuple, target)


def async_saver_here(saver: Any) -> Any | None:
    """The async saver behind ``saver`` (itself, or the one a sync Effect saver runs, its
    ``saver``) when it lives on the running event loop (LangGraph's async savers keep
    theirs as ``loop``); ``None`` otherwise."""
    loop = asyncio.get_running_loop()
    for candidate in (saver, getattr(saver, "saver", None)):
        if isinstance(candidate, BaseCheckpointSaver) and getattr(candidate, "loop", None) is loop:
            return candidate
    return None


def _parent_id(saved: Any) -> str | None:
    parent = getattr(saved, "parent_config", None) or {}
    found = (parent.get("configurable") or {}).get("checkpoint_id")
    return str(found) if found is not None else None


async def _unfork(saver: Any, saved: Any, thread_id: str, ns: str, sync: bool) -> str:
    """The id of the checkpoint ``saved`` copies: time travel saves a ``"fork"``
    checkpoint (new id, same channel values and versions) whose parent it copies."""
    seen: set[str] = set()
    while (saved.metadata or {}).get("source") == "fork":
        parent = _parent_id(saved)
        if parent is None or parent in seen:
            break
        seen.add(parent)
        found = await read_checkpoint(saver, ns, parent, thread_id, sync)
        if found is None:
            break
        saved = found
    return str(saved.config["configurable"]["checkpoint_id"])


#: Reads of a checkpoint in flight, per event loop: the parallel tool tasks of one
#: AIMessage (``create_agent`` runs one task per call) were all prepared from the same
#: checkpoint, so they share one read of it instead of queueing eight.
_reading: dict[tuple[int, int, str, str, str, bool], asyncio.Future[Source | None]] = {}


async def durable_source(
    config: Mapping[str, Any], *, wait_seconds: float, sync_checkpointer: bool
) -> Source | None:
    """`read_durable_source`, shared by the tasks that ask for the same checkpoint
    at the same time (each gets the same `Source`; a failure reaches each)."""
    parent = _private.parent_checkpoint(config)
    saver = _private.checkpointer(config)
    thread_id = _private.thread_id(config)
    if parent is None or saver is None or thread_id is None:
        return None
    loop = asyncio.get_running_loop()
    key = (id(loop), id(saver), thread_id, parent[0], parent[1], sync_checkpointer)
    pending = _reading.get(key)
    if pending is None:
        pending = asyncio.ensure_future(
            read_durable_source(config, wait_seconds=wait_seconds, sync_checkpointer=sync_checkpointer)
        )
        _reading[key] = pending

        def done(read: asyncio.Future[Source | None]) -> None:
            _reading.pop(key, None)
            if not read.cancelled():
                read.exception()  # retrieved: every task that awaited it was cancelled

        pending.add_done_callback(done)
    # Shielded: one task cancelled (a sibling's interrupt) does not cancel the others' read.
    return await asyncio.shield(pending)


async def read_durable_source(
    config: Mapping[str, Any], *, wait_seconds: float, sync_checkpointer: bool
) -> Source | None:
    """Read the checkpoint the running task was prepared from, once it is durable.

    Nothing may be dispatched before that checkpoint is saved (otherwise a crash
    loses the call and a resume cannot find it), whatever the durability mode:
    under ``"sync"`` it already is; under ``"async"`` (LangGraph's default, and the
    mode a Functional API task cannot see) it is being saved, so poll for it; under
    ``"exit"`` it will not be saved before the run ends, so refuse. ``None`` when
    the graph has no checkpointer (nothing durable to anchor on).
    """
    parent = _private.parent_checkpoint(config)
    saver = _private.checkpointer(config)
    thread_id = _private.thread_id(config)
    if parent is None or saver is None or thread_id is None:
        return None
    ns, checkpoint_id = parent
    mode = _private.durability(config)
    deadline = time.monotonic() + wait_seconds
    delay = 0.002
    # Our savers remember what they committed: no read back (and no decoding of every
    # message in the thread) when this process saved the checkpoint itself.
    remembered = getattr(saver, "saved_header", None)
    while True:
        saved = remembered(thread_id, ns, checkpoint_id) if remembered is not None else None
        if saved is None:
            saved = await read_checkpoint(saver, ns, checkpoint_id, thread_id, sync_checkpointer)
        if saved is not None:
            break
        if mode == "exit":
            raise DurabilityError(
                "durability='exit' saves the checkpoint only when the run ends, so a crash "
                "would lose the tool call that was already dispatched; nothing was sent. "
                "Run the graph with durability='sync' (recommended) or 'async'."
            )
        if time.monotonic() > deadline:
            raise DurabilityError(
                f"the checkpoint {checkpoint_id} holding this tool call was not saved within "
                f"{wait_seconds:g}s (durability={mode or 'default'!r}); nothing was sent. "
                "Check the checkpointer, and run with durability='sync' (recommended) or "
                "'async'; 'exit' cannot protect effects."
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)
    turn = await turn_of_saved(saver, saved, thread_id=thread_id, namespace=ns, sync=sync_checkpointer)
    origin = identity.origin_of(saved.checkpoint.get("versions_seen") or {})
    parent_id = _parent_id(saved)
    if origin is None and parent_id is not None:
        # Counter versions: the parent checkpoint, followed through forks.
        parent = await read_checkpoint(saver, ns, parent_id, thread_id, sync_checkpointer)
        if parent is not None:
            origin = "c:" + await _unfork(saver, parent, thread_id, ns, sync_checkpointer)
    return Source(namespace=ns, checkpoint_id=checkpoint_id, turn=turn, origin=origin)


async def turn_of_saved(saver: Any, saved: Any, *, thread_id: str, namespace: str, sync: bool) -> str:
    """The turn coordinate of a saved checkpoint tuple (see `identity.turn_of`)."""
    versions = saved.checkpoint.get("channel_versions") or {}
    checkpoint_id = str(saved.config["configurable"]["checkpoint_id"])
    if not identity.versions_unique(versions):
        checkpoint_id = await _unfork(saver, saved, thread_id, namespace, sync)
    return identity.turn_of(versions, checkpoint_id)


def scope_from(config: Mapping[str, Any], context: Any = None) -> Scope:
    """The tenant and policy version a call runs under.

    Read from ``config["configurable"]`` (``tenant_id``, ``policy_version``), or from
    the graph's runtime ``context`` (a mapping or object with those names). Text that
    cannot be stored or hashed as it is (a lone surrogate) is refused, as are such ids
    of the run config (`require_config_text`).
    """
    require_config_text(config)
    conf = config.get("configurable") or {}

    def pick(name: str) -> Any:
        if conf.get(name) is not None:
            return conf[name]
        if isinstance(context, Mapping):
            return context.get(name)
        return getattr(context, name, None)

    tenant = pick("tenant_id")
    policy = pick("policy_version")
    scope = Scope(
        tenant="" if tenant is None else str(tenant),
        policy_version=None if policy is None else str(policy),
    )
    require_text(scope.tenant, "the tenant id (tenant_id in the config or the context)", CONFIG_ADVICE)
    require_text(
        scope.policy_version, "the policy version (policy_version in the config or the context)",
        CONFIG_ADVICE,
    )
    return scope


@dataclass(frozen=True)
class Coordinates:
    """What every operation id of a round derives from besides the call and its turn:
    the node's options, the tenant scope, the thread, the namespace and the run config."""

    settings: Settings
    scope: Scope
    thread_id: str
    namespace: str
    config: Mapping[str, Any]


def identify(
    tool_call: Mapping[str, Any], *, at: Coordinates, turn: str, call_key: str | None = None
) -> tuple[str, str, str]:
    """(operation id, provider key, args hash) of one call.

    The one place an operation id is derived (node, middleware, ``@effectful``,
    dangling-call answers; an approver's edit derives from the id it edits). Pure:
    anyone holding the same coordinates finds the same row. ``turn`` is the
    `Source` turn of the checkpoint the call's task was prepared from;
    ``call_key`` tells the calls of that turn apart (default: the ``tool_call_id``).
    """
    effect = at.settings.effect_for(str(tool_call["name"]))
    args = dict(tool_call.get("args") or {})
    identifying = identity.identifying_args(args, effect.key_argument)
    digest = identity.args_hash(identifying, key=at.settings.hash_key)
    if effect.key is not None:
        provider_key = str(effect.key(args, at.config))
        require_text(
            provider_key,
            f"the key Effect(key=...) made for a {tool_call['name']} call",
            "Make the key function return valid text (a digest of the arguments is safe).",
        )
        return (
            identity.logical_operation_id(tenant=at.scope.tenant, provider_key=provider_key),
            provider_key,
            digest,
        )
    # The tenant is recorded on the operation but is not part of a graph-derived id:
    # the thread already names the conversation, and a resume that forgot its tenant
    # must find the same operation (then refuse to re-send under the changed scope),
    # not mint a new one and send again.
    op_id = identity.operation_id(
        thread_id=at.thread_id,
        namespace=at.namespace,
        turn=turn,
        call_key=call_key if call_key is not None else str(tool_call["id"]),
        args_hash=digest,
    )
    return op_id, identity.default_provider_key(op_id), digest


def new_call(
    tool_call: Mapping[str, Any],
    *,
    at: Coordinates,
    source: Source | None,
    task_id: str,
    message_id: str | None,
    call_key: str | None,
) -> CallRecord:
    """One call bound to the operation its coordinates derive (not yet in the ledger)."""
    call_id = str(tool_call["id"])
    tool = str(tool_call["name"])
    effect = at.settings.effect_for(tool)
    args = dict(tool_call.get("args") or {})
    # Without a checkpointer nothing is durable to anchor on; the task id is the
    # best there is (stable across a RetryPolicy retry only).
    turn = source.turn if source is not None else "t:" + task_id
    op_id, provider_key, digest = identify(tool_call, at=at, turn=turn, call_key=call_key)
    extra: dict[str, Any] = {"turn": turn}
    if call_key is not None:
        extra["call"] = call_key  # a Functional API call: what it is within its entrypoint
    if source is not None and source.origin is not None:
        extra["origin"] = source.origin
    if effect.approval == "always":
        extra["approval"] = "required"
    if effect.saga is not None:
        extra["saga"] = effect.saga_of(args, at.config)
    if effect.dedup_seconds is not None:
        # What a purge must wait for: the provider honours the key that long (lifecycle).
        extra["dedup_window"] = effect.dedup_seconds
    op = Operation(
        op_id=op_id,
        thread_id=at.thread_id,
        tool=tool,
        tool_call_id=call_id,
        args=identity.redact(args, effect.secret_fields),
        args_hash=digest,
        provider_key=provider_key,
        contract=effect.kind,
        checkpoint_ns=at.namespace,
        tenant=at.scope.tenant,
        policy_version=at.scope.policy_version,
        message_id=message_id,
        task_id=task_id or None,
        checkpoint_id=source.checkpoint_id if source else None,
        extra=extra,
    )
    return CallRecord(call_id=call_id, tool=tool, args=args, effect=effect, op=op)


# -- the open: bind every call, commit the new intents ---------------------------------


def open_plan(
    calls: Sequence[CallRecord],
    derived: Mapping[str, tuple[Operation, dict[str, Any]]],
    *,
    source: Source | None,
    settings: Settings,
    durability: str | None,
    history_known: bool,
    owner: Owner | None,
) -> Plan[None]:
    """Bind every call and record the new intents: one ledger plan, one durable
    commit whatever the fan-out. It binds the records it is given (before any
    session holds them).

    One step reads the stored rows and the re-plan candidates and, when it finds
    none (calls never seen before, the usual case), inserts every intent as well.
    Otherwise a second step inserts what is new (after
    a read of an approver's edits, if any). SQLite runs the plan as one
    transaction; Postgres as lone statements, which is safe without a transaction
    around them: an insert only adds rows that are absent and the plan then uses
    the rows as stored, so a concurrent open of the same calls loses nothing.
    Starts from the ``derived`` operations each time: the ledger may run it again
    (a rolled-back group, a deadlock).
    """
    for c in calls:
        c.op, c.args = derived[c.call_id][0], dict(derived[c.call_id][1])
        c.conflict = c.owner = c.batch_token = None
        c.edited = False
    calls = list(calls)
    if not calls:
        return
    replans = history_known and settings.detect_replans and source is not None and source.origin is not None
    find = find_step(
        [c.op.op_id for c in calls],
        calls[0].op.thread_id,
        [(c.tool, c.op.args_hash) for c in calls] if replans else [],
        # Only candidates asked from this very state: an earlier turn's same call
        # asked from another state is no re-plan, and must not take the second step.
        source.origin if replans and source is not None else None,
    )
    exiting = durability == "exit"
    if exiting:
        found = yield find  # a new intent is refused below
    else:
        every = _intents_step(calls, owner, settings)
        found, inserted = yield FindOrInsert(find, every)
        if not found:  # nothing stored, no candidate: all new, and inserted just now
            yield from _bind_intents(calls, owner, every, inserted)
            return
    stored, candidates = split_found(find, found)
    fresh = [c for c in calls if not _adopt_stored(c, stored.get(c.op.op_id))]
    yield from _follow_edits(calls)
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
    insert = _intents_step(fresh, owner, settings)
    yield from _bind_intents(fresh, owner, insert, (yield insert))


def _follow_edits(calls: Sequence[CallRecord]) -> Plan[None]:
    """A call whose payload an approver edited stands for the edited operation."""
    edited = {
        c.call_id: str(successor)
        for c in calls
        if c.op.state is State.ABANDONED and (successor := (c.op.evidence or {}).get("superseded_by"))
    }
    if not edited:
        return
    successors = yield Load(tuple(sorted(set(edited.values()))))
    by_call = {c.call_id: c for c in calls}
    for call_id, successor in edited.items():
        if (found_edit := successors.get(successor)) is not None:
            c = by_call[call_id]
            c.op, c.args, c.edited = found_edit, dict(found_edit.args), True


def _intents_step(fresh: list[CallRecord], owner: Owner | None, settings: Settings) -> InsertWithAudit:
    """The one insert of the new intents (part of `open_plan`)."""
    # The checkpoint holding the calls is durable: the open made sure of it.
    # Calls that can be reconciled without a human get intent and dispatch marker in
    # one write; blind and approval-gated calls are written ``pending`` first, so a
    # crash before the send is provably harmless and needs no operator.
    direct = [c for c in fresh if not staged(c.effect)]
    dispatch: Change | None = None
    if direct:
        assert owner is not None  # made whenever a call may be direct
        dispatch = Change(
            Event.DISPATCH,
            owner=owner,
            lease_expires_at=time.time() + settings.lease_seconds,
            evidence={"kind": EvidenceKind.INTENT},
        )
    changes = {c.op.op_id: dispatch for c in direct}
    return insert_step([c.op for c in fresh], None, DEFAULT_ACTOR, changes)


def _bind_intents(
    fresh: list[CallRecord], owner: Owner | None, insert: InsertWithAudit, inserted: list[str]
) -> Plan[None]:
    """Bind the new calls to their rows as stored, once ``insert`` inserted ``inserted``."""
    rows = by_id((yield from recorded_plan([c.op for c in fresh], insert, inserted)))
    for c in fresh:
        op = bind_stored(c, rows)
        if owner is not None and op.owner is not None and op.owner.token == owner.token:
            c.owner = owner
            c.batch_token = owner.token


def _adopt_stored(c: CallRecord, found: Operation | None) -> bool:
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


def _bind_replans(
    fresh: list[CallRecord], candidates: Sequence[Operation], source: Source
) -> list[CallRecord]:
    """Bind each new call that re-plans an earlier operation to it; the calls left new.

    A re-plan: the model answered the very state it answered before (same origin),
    in another turn, with the same tool and arguments, and the earlier operation
    neither failed nor was abandoned (``candidates`` come in listing order).
    """
    taken: set[str] = set()
    still_fresh: list[CallRecord] = []
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


def staged(effect: Effect) -> bool:
    """Calls whose intent is committed ``pending`` first (a false ``unknown`` would cost
    a human): blind ones, and ones that need an approval before dispatch; and calls
    with budgets or a circuit breaker, whose send is admitted in its own commit."""
    return effect.kind == "blind" or effect.approval == "always" or effect.controls is not None
