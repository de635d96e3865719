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
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from . import _faults, _pregel, identity, lease, messages, protocol
from .context import OperationInfo, running
from .contract import BLIND, Effect
from .errors import (
    DecisionConflictError,
    DurabilityError,
    IllegalTransitionError,
    MalformedToolCallError,
    ReviewError,
    StaleVersionError,
    TransitionError,
)
from .ledger.base import Ledger
from .operation import DECIDABLE, Change, Event, Operation, Owner, State
from .reconcile import Scope, reconcile
from .review import (
    APPROVAL_TYPE,
    ApprovalAnswer,
    ApproveAction,
    DecisionsAnswer,
    EffectAnswer,
    RejectAction,
    ReviewAnswer,
    approval_answer,
    decision_change,
    parse_decision,
    review_decisions,
    review_request,
)

log = logging.getLogger("langgraph_effects")

_MAX_STEPS = 64  # bound on state-machine steps per call per round (races, not retries)


@dataclass(frozen=True)
class Settings:
    """Node-level options shared by every session."""

    effects: Mapping[str, Effect]
    hash_key: bytes | None = None
    lease_seconds: float = lease.DEFAULT_LEASE_SECONDS
    durable_wait_seconds: float = 30.0
    detect_replans: bool = True

    def effect_for(self, tool: str) -> Effect:
        return self.effects.get(tool, BLIND)

    @classmethod
    def build(
        cls,
        effects: Mapping[str, Effect] | None,
        *,
        hash_key: bytes | None,
        lease_seconds: float,
        detect_replans: bool = True,
    ) -> Settings:
        """Settings from a node's or middleware's keyword arguments (env for the hash key)."""
        return cls(
            effects=dict(effects or {}),
            hash_key=hash_key if hash_key is not None else identity.hash_key_from_env(),
            lease_seconds=lease_seconds,
            detect_replans=detect_replans,
        )


# -- what a call should do next ------------------------------------------------------


@dataclass(frozen=True)
class Replay:
    """Answer the call with this output; nothing is sent."""

    output: Any


@dataclass(frozen=True)
class Execute:
    """Run the tool now, under this operation's lease."""

    info: OperationInfo


@dataclass(frozen=True)
class NeedsReview:
    """Evidence cannot settle the call: the node must ask an operator."""

    placeholder: ToolMessage


@dataclass(frozen=True)
class Raise:
    """Propagate the tool's exception (ToolNode semantics), after recording it."""

    error: BaseException


Action = Replay | Execute | NeedsReview | Raise


@dataclass
class _Call:
    call_id: str
    tool: str
    args: dict[str, Any]
    effect: Effect
    op: Operation
    owner: Owner | None = None
    heartbeat: lease.Heartbeat | asyncio.Task[None] | None = None
    running: bool = False
    """Between :meth:`Session.begin` answering ``Execute`` and the outcome being
    recorded: the tool may be on the wire, so its lease is kept until then."""
    conflict: str | None = None
    batch_token: str | None = None
    edited: bool = False


# -- coordinates -----------------------------------------------------------------------


def history_of(state: Any, messages_key: str = "messages") -> list[BaseMessage]:
    """The message history in a node's input, when there is one."""
    if isinstance(state, dict):
        if state.get("__type") == "tool_call_with_context":
            return history_of(state.get("state"), messages_key)
        found = state.get(messages_key)
    elif isinstance(state, list):
        found = state
    else:
        found = getattr(state, messages_key, None)
    return [m for m in found or [] if isinstance(m, BaseMessage)]


def _anchors(history: Iterable[BaseMessage]) -> dict[str, str]:
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

    ``turn`` is its coordinate in operation ids (:func:`identity.turn_of`);
    ``origin`` names the state the model answered (:func:`identity.origin_of`), which
    re-plan detection compares (DESIGN: never bind across a turn).
    """

    namespace: str
    checkpoint_id: str
    turn: str
    origin: str | None


async def read_checkpoint(saver: Any, ns: str, checkpoint_id: str, thread_id: str, sync: bool) -> Any:
    target = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    }
    if sync:
        return await asyncio.to_thread(saver.get_tuple, target)
    return await saver.aget_tuple(target)


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


async def durable_source(
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
    parent = _pregel.parent_checkpoint(config)
    saver = _pregel.checkpointer(config)
    thread_id = _pregel.thread_id(config)
    if parent is None or saver is None or thread_id is None:
        return None
    ns, checkpoint_id = parent
    mode = _pregel.durability(config)
    deadline = time.monotonic() + wait_seconds
    delay = 0.002
    while True:
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
    """The turn coordinate of a saved checkpoint tuple (see :func:`identity.turn_of`)."""
    versions = saved.checkpoint.get("channel_versions") or {}
    checkpoint_id = str(saved.config["configurable"]["checkpoint_id"])
    if not identity.versions_unique(versions):
        checkpoint_id = await _unfork(saver, saved, thread_id, namespace, sync)
    return identity.turn_of(versions, checkpoint_id)


def scope_from(config: Mapping[str, Any], context: Any = None) -> Scope:
    """The tenant and policy version a call runs under.

    Read from ``config["configurable"]`` (``tenant_id``, ``policy_version``), or from
    the graph's runtime ``context`` (a mapping or object with those names).
    """
    conf = config.get("configurable") or {}

    def pick(name: str) -> Any:
        if conf.get(name) is not None:
            return conf[name]
        if isinstance(context, Mapping):
            return context.get(name)
        return getattr(context, name, None)

    tenant = pick("tenant_id")
    policy = pick("policy_version")
    return Scope(
        tenant="" if tenant is None else str(tenant),
        policy_version=None if policy is None else str(policy),
    )


def identify(
    tool_call: Mapping[str, Any],
    *,
    effect: Effect,
    settings: Settings,
    scope: Scope,
    thread_id: str,
    namespace: str,
    turn: str,
    config: Mapping[str, Any],
    call_key: str | None = None,
) -> tuple[str, str, str]:
    """(operation id, provider key, args hash) of one call.

    The one place an operation id is derived (node, middleware, ``@effectful``,
    dangling-call answers; an approver's edit derives from the id it edits). Pure:
    anyone holding the same coordinates finds the same row. ``turn`` is the
    :class:`Source` turn of the checkpoint the call's task was prepared from;
    ``call_key`` tells the calls of that turn apart (default: the ``tool_call_id``).
    """
    args = dict(tool_call.get("args") or {})
    digest = identity.args_hash(args, key=settings.hash_key)
    if effect.key is not None:
        provider_key = str(effect.key(args, config))
        return (
            identity.logical_operation_id(tenant=scope.tenant, provider_key=provider_key),
            provider_key,
            digest,
        )
    # The tenant is recorded on the operation but is not part of a graph-derived id:
    # the thread already names the conversation, and a resume that forgot its tenant
    # must find the same operation (then refuse to re-send under the changed scope),
    # not mint a new one and send again.
    op_id = identity.operation_id(
        thread_id=thread_id,
        namespace=namespace,
        turn=turn,
        call_key=call_key if call_key is not None else str(tool_call["id"]),
        args_hash=digest,
    )
    return op_id, identity.default_provider_key(op_id), digest


class Session:
    """The ledger side of one node execution. Create with :meth:`open`."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        settings: Settings,
        config: Mapping[str, Any],
        scope: Scope,
        calls: dict[str, _Call],
    ) -> None:
        self.ledger = ledger
        self.settings = settings
        self.config = config
        self.scope = scope
        self.calls = calls
        self._batch_refs: dict[str, int] = {}
        self._batch_owners: dict[str, Owner] = {}
        self._review: dict[str, _Call] = {}
        self._approval: dict[str, _Call] = {}
        self._fresh: list[_Call] = []
        self._source: Source | None = None
        self._closed = False
        self._reading: asyncio.Future[dict[str, Operation]] | None = None

    # -- opening ---------------------------------------------------------------------

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
        thread_id = _pregel.thread_id(config)
        if thread_id is None:
            raise DurabilityError(
                "effectful tool calls need a checkpointer and a thread_id: compile the graph "
                "with a checkpointer (e.g. EffectSqliteSaver) and pass "
                "config={'configurable': {'thread_id': ...}}"
            )
        scope = scope_from(config, context)
        ns_full = _pregel.checkpoint_ns(config)
        namespace = identity.namespace_path(_pregel.parent_namespace(ns_full))
        history = history_of(state, messages_key)
        anchors = _anchors(history)
        task_id = _pregel.task_id(config) or ""
        # One read of the checkpoint holding the calls: it is the durability barrier
        # (nothing leaves before it is saved) and the turn every id is anchored on.
        source = await durable_source(
            config,
            wait_seconds=settings.durable_wait_seconds,
            sync_checkpointer=sync_checkpointer,
        )
        # Without a checkpointer nothing is durable to anchor on; the task id is the
        # best there is (stable across a RetryPolicy retry only).
        turn = source.turn if source is not None else "t:" + task_id
        keys = call_keys or {}

        calls: dict[str, _Call] = {}
        for tool_call in tool_calls:
            call_id = str(tool_call["id"])
            tool = str(tool_call["name"])
            effect = settings.effect_for(tool)
            args = dict(tool_call.get("args") or {})
            op_id, provider_key, digest = identify(
                tool_call,
                effect=effect,
                settings=settings,
                scope=scope,
                thread_id=thread_id,
                namespace=namespace,
                turn=turn,
                config=config,
                call_key=keys.get(call_id),
            )
            extra: dict[str, Any] = {"turn": turn}
            if source is not None and source.origin is not None:
                extra["origin"] = source.origin
            if effect.approval == "always":
                extra["approval"] = "required"
            op = Operation(
                op_id=op_id,
                thread_id=thread_id,
                tool=tool,
                tool_call_id=call_id,
                args=identity.redact(args, effect.secret_fields),
                args_hash=digest,
                provider_key=provider_key,
                contract=effect.kind,
                checkpoint_ns=namespace,
                tenant=scope.tenant,
                policy_version=scope.policy_version,
                message_id=anchors.get(call_id),
                task_id=task_id or None,
                checkpoint_id=source.checkpoint_id if source else None,
                extra=extra,
            )
            calls[call_id] = _Call(call_id=call_id, tool=tool, args=args, effect=effect, op=op)

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
        if _pregel.durability(self.config) == "exit":
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
                owner = lease.new_owner()
                change = Change(
                    Event.DISPATCH,
                    owner=owner,
                    lease_expires_at=time.time() + self.settings.lease_seconds,
                    evidence={"kind": "intent"},
                )
                stored = _by_id(await self.ledger.record_intents([c.op for c in direct], change=change))
                self._batch_owners[owner.token] = owner
                for c in direct:
                    op = self._stored_or_conflict(c, stored)
                    if op.owner is not None and op.owner.token == owner.token:
                        c.owner = owner
                        c.batch_token = owner.token
                        self._batch_refs[owner.token] = self._batch_refs.get(owner.token, 0) + 1
                if not self._batch_refs.get(owner.token):
                    lease.release(owner)
            if staged:
                stored = _by_id(await self.ledger.record_intents([c.op for c in staged]))
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
                lease.release(owner)
            raise
        self._fresh = []

    def _stored_or_conflict(self, c: _Call, stored: Mapping[str, Operation]) -> Operation:
        """The row the ledger kept for ``c``; a missing row means its provider key is taken."""
        op = stored.get(c.op.op_id)
        if op is None:
            c.conflict = (
                f"the provider key {c.op.provider_key!r} already belongs to another operation in "
                "this tenant; the call was not sent. Use a new key for a new effect."
            )
            return c.op
        c.op = op
        return op

    # -- per call --------------------------------------------------------------------

    def manages(self, call_id: str | None) -> bool:
        return call_id is not None and call_id in self.calls

    async def begin(self, call_id: str) -> Action:
        """What the call should do now, moving its operation as evidence allows."""
        c = self.calls[call_id]
        if c.conflict is not None:
            return Replay(
                ToolMessage(
                    content=c.conflict,
                    name=c.tool,
                    tool_call_id=call_id,
                    status="error",
                    artifact=messages.effect_artifact(c.op),
                )
            )
        for _ in range(_MAX_STEPS):
            if self._closed:
                return await self._stand_down(c)
            op = c.op
            step = protocol.next_step(
                op, token=self._token(c), alive=self._alive(c), now=time.time()
            )
            if isinstance(step, protocol.Replay):
                self._review.pop(call_id, None)
                self._approval.pop(call_id, None)
                return Replay(messages.replay(op, tool_call_id=call_id, tool=c.tool))
            if isinstance(step, protocol.Review):
                self._review[call_id] = c
                return NeedsReview(
                    messages.review_placeholder(op, tool_call_id=call_id, tool=c.tool)
                )
            if isinstance(step, protocol.Approve):
                self._approval[call_id] = c
                return NeedsReview(
                    messages.review_placeholder(op, tool_call_id=call_id, tool=c.tool)
                )
            if isinstance(step, protocol.Dispatch):
                _faults.fire("after_intent", op)
                await self._send(c, Event.DISPATCH, {"kind": "intent"})
                continue
            if isinstance(step, protocol.Run):
                if c.batch_token is not None:
                    _faults.fire("after_intent", op)
                if await self._still_ours(c):
                    if self._closed:  # checked with no await before ``running`` is set
                        return await self._stand_down(c)
                    c.running = True
                    return Execute(self._info(c))
                continue
            if isinstance(step, protocol.Wait):
                await self._wait_for_other(c)
                continue
            if isinstance(step, protocol.TakeOver):
                await self._move(c, step.change)
                continue
            if isinstance(step, protocol.Reconcile):
                outcome = await reconcile(op, c.effect, args=c.args, scope=self.scope)
                # Keep what made it unknown (a crash, a timeout) beside what settled it.
                evidence = self._scrub_evidence(c, {**outcome.evidence, "cause": dict(op.evidence or {})})
                if outcome.action == "resend":
                    await self._send(c, Event.RESEND, evidence)
                else:
                    await self._move(c, Change(outcome.event, evidence=evidence))
                continue
        raise TransitionError(
            f"operation {c.op.op_id} kept changing under concurrent workers; giving up after "
            f"{_MAX_STEPS} steps. Resume the thread again to settle it."
        )

    async def finish(
        self, call_id: str, output: Any, error: BaseException | None
    ) -> Action:
        """Record what the dispatched call did, then settle or reconcile it."""
        c = self.calls[call_id]
        self._stop_heartbeat(c)
        op = c.op
        token = self._token(c) or ""
        shown: Any = output
        try:
            _faults.fire("before_outcome", op)
            outcome: protocol.Outcome
            if error is None and not _is_error_message(output):
                kind, blob = messages.dump(output)
                outcome = protocol.Succeeded(kind, blob)
            elif error is not None and c.effect.is_definite(error):
                shown = self._scrub_output(c, output if output is not None else _error_message(c, error))
                kind, blob = messages.dump(shown)
                outcome = protocol.Failed(kind, blob, self._scrub(c, _describe(error)))
            else:
                what = _describe(error) if error is not None else _message_text(output)
                outcome = protocol.Ambiguous(
                    {
                        "kind": "timeout" if isinstance(error, TimeoutError) else "error",
                        "error": self._scrub(c, what),
                    }
                )
            # Compare-and-set on the version we dispatched: it fails exactly when another
            # worker took the operation over while the tool ran.
            sender = {"host": c.owner.host, "pid": c.owner.pid} if c.owner else None
            moved = await self._move(c, protocol.settle(outcome, sender=sender), expected=op.version)
            if not moved:
                await self._record_late(c, outcome, token)
        finally:
            c.running = False
            self._release(c)
        if protocol.after_record(moved, outcome) == "reconcile":
            return await self.begin(call_id)
        if isinstance(outcome, protocol.Succeeded):
            return Replay(messages.decorate(output, c.op))
        if isinstance(outcome, protocol.Failed):
            return Raise(error) if output is None and error is not None else Replay(
                messages.decorate(shown, c.op)
            )
        # Ambiguous, and another worker owns the operation now: the tool's own answer.
        return Raise(error) if output is None and error is not None else Replay(output)

    async def _record_late(self, c: _Call, outcome: protocol.Outcome, token: str) -> None:
        """Another worker took the operation over while our tool ran: what it did is
        evidence (never a reason to send again); the call answers with it as is."""
        change = protocol.late(c.op, outcome, token=token)
        log.warning(
            "operation %s was taken over while its tool ran (now %s); the late %s is kept "
            "as evidence and nothing is sent again",
            c.op.op_id,
            c.op.state,
            type(outcome).__name__.lower(),
        )
        if change is not None:
            await self._move(c, change)

    async def withdraw(self, call_id: str) -> None:
        """The tool paused itself with ``interrupt()``; it will run again on resume."""
        c = self.calls[call_id]
        self._stop_heartbeat(c)
        try:
            await self._move(
                c, Change(Event.WITHDRAW, evidence={"kind": "interrupt"}), expected=c.op.version
            )
        finally:
            c.running = False
            self._release(c)

    def abort(self, call_id: str) -> None:
        """The call was cancelled or crashed in-process: leave it ``dispatched``.

        Its lease owner is released, so a resumer in this process sees it dead at
        once, marks it ``unknown`` and reconciles it.
        """
        c = self.calls[call_id]
        c.running = False
        self._stop_heartbeat(c)
        self._release(c)

    # -- asking a human ------------------------------------------------------------------

    def pending_interrupt(self) -> dict[str, Any] | None:
        """The value for the node's one ``interrupt()``, or ``None`` if nobody needs asking.

        Approvals come first (nothing was sent for those calls yet); reviews next.
        """
        if self._approval:
            return self.approval_payload()
        if self._review:
            return self.review_payload()
        return None

    async def apply_answer(self, answer: Any, *, round_no: int) -> int:
        """Record the answer to the ``round_no``-th interrupt of this node execution.

        A ``{"decisions": [...]}`` answer (LangChain's HITL shape) answers the question
        :meth:`pending_interrupt` asked: the approval while calls await one, else the
        review (mapped onto verdicts by :func:`~langgraph_effects.review.review_decisions`).
        An answer that does not fit it is ignored with a warning and asked again.
        """
        if isinstance(answer, EffectAnswer):
            answer = answer.root
        if isinstance(answer, DecisionsAnswer):
            if self._answered_before(round_no):
                # Positional answers name no operation: on a re-run LangGraph hands the
                # ``round_no``-th answer back to whatever question comes ``round_no``-th,
                # which may list other operations. One that was already applied here is
                # stale; the operations still open are asked again.
                log.info("HITL answer %d was applied in an earlier run; not re-applied", round_no)
                return 0
            if self._approval:
                approval = approval_answer(answer)
                if approval is None:
                    log.warning("a review answer arrived for an approval question; ignored")
                    return 0
                return await self.approve(approval, round_no=round_no)
            try:
                verdicts = review_decisions(answer, self.reviews())
            except ReviewError as error:
                log.warning("review answer not applied: %s", error)
                return 0
            return await self.decide(verdicts, round_no=round_no)
        if isinstance(answer, ApprovalAnswer):
            return await self.approve(answer, round_no=round_no)
        root = answer.root if isinstance(answer, ReviewAnswer) else answer
        return await self.decide(root, round_no=round_no)

    def _answered_before(self, round_no: int) -> bool:
        """Whether a verdict or approval of round ``round_no`` is already recorded on one of
        this node's operations (decision ids carry the round)."""
        prefixes = (f"review:{round_no}:", f"approval:{round_no}:")
        return any(
            decision_id.startswith(prefixes)
            for c in self.calls.values()
            for decision_id, _ in c.op.decisions
        )

    def approvals(self) -> list[Operation]:
        """Operations waiting for an approval before their first dispatch, in call order."""
        return [c.op for c in self.calls.values() if c.call_id in self._approval]

    def approval_payload(self) -> dict[str, Any]:
        """The approval ``interrupt()`` value, in LangChain's HITL request shape."""
        gated = [c for c in self.calls.values() if c.call_id in self._approval]
        return {
            "type": APPROVAL_TYPE,
            "action_requests": [
                {
                    "name": c.tool,
                    "args": dict(c.op.args),
                    "description": (
                        f"{c.tool} changes the outside world and needs approval before it is "
                        f"sent (operation {c.op.op_id}, args hash {c.op.args_hash})."
                    ),
                }
                for c in gated
            ],
            "review_configs": [
                {"action_name": c.tool, "allowed_decisions": ["approve", "edit", "reject"]}
                for c in gated
            ],
            "operations": [
                {
                    "operation_id": c.op.op_id,
                    "tool_call_id": c.call_id,
                    "args_hash": c.op.args_hash,
                    "version": c.op.version,
                }
                for c in gated
            ],
        }

    async def approve(self, answer: ApprovalAnswer, *, round_no: int) -> int:
        """Apply approval decisions (positional, as in LangChain's HITL response).

        The approval is consumed in the dispatch commit, bound to the args hash. An
        answer whose length does not match the calls awaiting approval is ignored
        (it answered an earlier question); they are asked about again.
        """
        gated = [c for c in self.calls.values() if c.call_id in self._approval]
        if len(answer.decisions) != len(gated):
            log.warning(
                "approval answer has %d decisions for %d calls awaiting approval; ignored",
                len(answer.decisions),
                len(gated),
            )
            return 0
        applied = 0
        for c, decision in zip(gated, answer.decisions, strict=True):
            approval_id = f"approval:{round_no}:{c.op.op_id}"
            content = decision.model_dump(mode="json")
            if isinstance(decision, ApproveAction):
                await self._send(
                    c,
                    Event.DISPATCH,
                    {"kind": "approval", "decision": "approve", "args_hash": c.op.args_hash},
                    decision_id=approval_id,
                    decision=content,
                )
            elif isinstance(decision, RejectAction):
                evidence = {"kind": "approval", "decision": "reject", "message": decision.message}
                change = Change(
                    Event.ABANDON, evidence=evidence, decision_id=approval_id, decision=content
                )
                await self._move(c, change)
            else:
                if decision.edited_action.name != c.tool:
                    log.warning(
                        "an edit may not switch %s to %s; ignored", c.tool, decision.edited_action.name
                    )
                    continue
                await self._edit(c, dict(decision.edited_action.args), approval_id, content)
            self._approval.pop(c.call_id, None)
            applied += 1
        return applied

    async def _edit(
        self, c: _Call, args: dict[str, Any], approval_id: str, content: Mapping[str, Any]
    ) -> None:
        """An approver changed the payload: a new payload is a new operation."""
        digest = identity.args_hash(args, key=self.settings.hash_key)
        new_id = identity.edited_operation_id(c.op.op_id, digest)
        provider_key = (
            str(c.effect.key(args, self.config))
            if c.effect.key is not None
            else identity.default_provider_key(new_id)
        )
        edited = dataclasses.replace(
            c.op,
            op_id=new_id,
            args=identity.redact(args, c.effect.secret_fields),
            args_hash=digest,
            provider_key=provider_key,
            extra={**c.op.extra, "edited_from": c.op.op_id},
        )
        stored = _by_id(await self.ledger.record_intents([edited]))
        old = c.op
        superseded = Change(
            Event.ABANDON,
            evidence={"kind": "approval", "decision": "edit", "superseded_by": new_id},
            decision_id=approval_id,
            decision=content,
        )
        await self.ledger.transition(old.op_id, superseded, expected_version=old.version)
        c.op = edited
        self._stored_or_conflict(c, stored)
        c.args, c.edited = args, True
        if c.conflict is None and c.op.state is State.PENDING:
            await self._send(
                c,
                Event.DISPATCH,
                {"kind": "approval", "decision": "edit", "args_hash": digest},
                decision_id=approval_id + ":edited",
                decision=content,
            )

    async def _follow_edits(self) -> None:
        """A call whose payload an approver edited now stands for the edited operation."""
        for c in self.calls.values():
            successor = (c.op.evidence or {}).get("superseded_by")
            if c.op.state is State.ABANDONED and successor:
                found = await self.ledger.get(str(successor))
                if found is not None:
                    c.op, c.args, c.edited = found, dict(found.args), True

    def edited_args(self, call_id: str) -> dict[str, Any] | None:
        """The arguments to send instead of the model's, when an approver edited them."""
        c = self.calls[call_id]
        return c.args if c.edited else None

    def reviews(self) -> list[Operation]:
        """Operations awaiting a verdict, in tool-call order."""
        return [c.op for c in self.calls.values() if c.call_id in self._review]

    def review_payload(self) -> dict[str, Any]:
        """The ``interrupt()`` value: everything an operator needs to decide."""
        return review_request(self.reviews())

    async def decide(self, answer: Mapping[str, Any], *, round_no: int) -> int:
        """Write the verdicts of an interrupt answer to the ledger, as soon as read.

        Returns how many were applied. Answers for operations that are not awaiting
        review here (stale, or unknown ids) are ignored with a warning; those
        operations, if still unresolved, are asked about again.
        """
        by_op = {c.op.op_id: c for c in self.calls.values()}
        applied = 0
        for op_id, raw in answer.items():
            c = by_op.get(op_id)
            if c is None:
                log.warning("review answer names operation %s, which is not in this node", op_id)
                continue
            decision = parse_decision(raw)
            change = decision_change(
                decision,
                decision_id=f"review:{round_no}:{op_id}",
                actor="operator (interrupt)",
                channel="interrupt",
            )
            if c.op.decisions and any(d == change.decision_id for d, _ in c.op.decisions):
                continue
            if c.op.state not in DECIDABLE:
                log.warning("operation %s is %s, not under review; answer ignored", op_id, c.op.state)
                continue
            try:
                await self._move(c, change, expected=c.op.version)
            except (StaleVersionError, DecisionConflictError, IllegalTransitionError) as error:
                log.warning("verdict for %s not applied: %s", op_id, error)
                c.op = await self._reload(c)
                continue
            self._review.pop(c.call_id, None)
            applied += 1
        return applied

    async def close(self) -> None:
        """Release the leases of calls that are not running (leaving the rows as they are).

        A call still executing (a sibling interrupted the node, or failed, while its
        request is on the wire) keeps its lease and heartbeat until it finishes and
        records its outcome: a resumer waits for it and replays, never re-sends it.
        """
        self._closed = True  # set before any await: see begin()
        for c in self.calls.values():
            if c.running:
                continue
            await self._stand_down(c)

    async def _stand_down(self, c: _Call) -> Replay:
        """The node is over (an interrupt, an error) and this call's tool never ran:
        hand a lease it holds back (``withdraw``: provably nothing was sent), so a
        resume sends it afresh without reconciling or waiting. Its answer is never
        seen: the node's result is discarded."""
        self._stop_heartbeat(c)
        try:
            if protocol.ours(c.op, self._token(c)):
                await self._move(
                    c, Change(Event.WITHDRAW, evidence={"kind": "not_run"}), expected=c.op.version
                )
        finally:
            self._release(c)
        return Replay(
            ToolMessage(
                content=f"{c.tool} was not run: the node stopped first; it runs on resume.",
                name=c.tool,
                tool_call_id=c.call_id,
                status="error",
            )
        )

    # -- plumbing ------------------------------------------------------------------------

    def _scrub(self, c: _Call, text: str) -> str:
        return identity.scrub(text, c.args, c.effect.secret_fields)

    def _scrub_output(self, c: _Call, output: Any) -> Any:
        """An error message echoing a secret argument is stored and shown without it."""
        if isinstance(output, ToolMessage) and isinstance(output.content, str):
            return output.model_copy(update={"content": self._scrub(c, output.content)})
        return output

    def _scrub_evidence(self, c: _Call, evidence: Mapping[str, Any]) -> dict[str, Any]:
        """Lookups see the full arguments; what they report back is scrubbed before storing."""
        if not c.effect.secret_fields:
            return dict(evidence)
        return json.loads(self._scrub(c, json.dumps(evidence, default=str)))  # type: ignore[no-any-return]

    def _info(self, c: _Call) -> OperationInfo:
        return OperationInfo(
            operation_id=c.op.op_id,
            provider_key=c.op.provider_key,
            attempt=c.op.attempts,
            tool=c.tool,
            args_hash=c.op.args_hash,
            thread_id=c.op.thread_id,
            tenant=c.op.tenant,
        )

    async def _send(
        self,
        c: _Call,
        event: Event,
        evidence: dict[str, Any],
        *,
        decision_id: str | None = None,
        decision: Mapping[str, Any] | None = None,
    ) -> None:
        owner = lease.new_owner()
        try:
            moved = await self._move(
                c,
                Change(
                    event,
                    owner=owner,
                    lease_expires_at=time.time() + self.settings.lease_seconds,
                    evidence=evidence,
                    decision_id=decision_id,
                    decision=decision,
                ),
                expected=c.op.version,
            )
        except BaseException:
            lease.release(owner)
            raise
        if moved:
            c.owner = owner
            c.batch_token = None
        else:
            lease.release(owner)

    async def _move(self, c: _Call, change: Change, *, expected: int | None = None) -> bool:
        """Apply one transition; on a lost race, reload and let the caller look again."""
        try:
            c.op = await self.ledger.transition(
                c.op.op_id, change, expected_version=c.op.version if expected is None else expected
            )
            return True
        except (StaleVersionError, IllegalTransitionError):
            c.op = await self._reload(c)
            return False

    async def _reload(self, c: _Call) -> Operation:
        found = await self.ledger.get(c.op.op_id)
        return found if found is not None else c.op

    async def _wait_for_other(self, c: _Call) -> None:
        """Someone else holds a live lease: wait for them, never send or ask a human."""
        delay = 0.02
        start_version = c.op.version
        holder = c.op.owner
        log.info(
            "waiting for operation %s: its dispatch by %s (pid %s) is still running",
            c.op.op_id,
            holder.host if holder else "?",
            holder.pid if holder else "?",
        )
        while True:
            await asyncio.sleep(delay)
            c.op = await self._reload(c)
            if c.op.version != start_version or protocol.holder_gone(
                c.op, alive=self._alive(c), now=time.time()
            ):
                return
            delay = min(delay * 2, 1.0)

    def _token(self, c: _Call) -> str | None:
        return c.owner.token if c.owner is not None else None

    def _alive(self, c: _Call) -> bool | None:
        """Same-host liveness of the lease holder, when the protocol needs it (I/O)."""
        op = c.op
        if op.owner is None or not protocol.needs_liveness(op, self._token(c)):
            return None
        return lease.owner_alive(op.owner)

    async def _still_ours(self, c: _Call) -> bool:
        """The last check before the tool runs: the ledger must still name this dispatch
        as the lease holder (a compare on the owner token), with at least half a lease
        left; otherwise the lease is renewed first (a compare-and-set on the token).
        Nobody can take a lease over before it expires (or its owner dies), so the
        request leaves with that much time to spare. ``False`` (and our lease
        dropped) if it was taken over."""
        assert c.owner is not None
        found = (await self._shared_read()).get(c.op.op_id)
        if found is None or not protocol.ours(found, c.owner.token):
            found = await self._reload(c)  # the shared read may predate our own dispatch
        ok = protocol.ours(found, c.owner.token)
        if ok:
            c.op = found
            now = time.time()
            if not protocol.lease_to_spare(found, now=now, lease_seconds=self.settings.lease_seconds):
                ok = await self.ledger.renew_lease(
                    c.op.op_id, c.owner.token, now + self.settings.lease_seconds
                )
        if not ok:
            log.warning("operation %s was taken over before its tool ran; not sending", c.op.op_id)
            self._release(c)
            c.op = await self._reload(c)
        return ok

    async def _shared_read(self) -> dict[str, Operation]:
        """The leased rows of this session, read once for every call that reaches its
        last check while the read is in flight: parallel calls leave together instead
        of queueing one ledger round trip each. A snapshot taken a moment earlier is
        as good: a lease can only be extended by its holder, so "ours, with half a
        lease to spare" still holds."""
        pending = self._reading
        if pending is None:
            ids = sorted(c.op.op_id for c in self.calls.values() if c.owner is not None)
            pending = asyncio.ensure_future(self.ledger.get_many(ids))
            self._reading = pending

            def done(_: object, mine: asyncio.Future[dict[str, Operation]] = pending) -> None:
                if self._reading is mine:
                    self._reading = None

            pending.add_done_callback(done)
        return await asyncio.shield(pending)

    def start_heartbeat(self, call_id: str) -> None:
        """Keep the lease of a running call alive (call on the session's event loop)."""
        c = self.calls[call_id]
        owner = c.owner
        if owner is None or c.heartbeat is not None:
            return
        interval = self.settings.lease_seconds / 3
        renew = self.ledger.lease_renewer()
        if renew is not None:
            op_id, seconds = c.op.op_id, self.settings.lease_seconds
            c.heartbeat = lease.Heartbeat(
                lambda: renew(op_id, owner.token, time.time() + seconds),
                interval=interval,
                name=op_id[:12],
            ).start()
            return

        async def beat() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.ledger.renew_lease(
                        c.op.op_id, owner.token, time.time() + self.settings.lease_seconds
                    )
                except Exception as error:  # a missed heartbeat only shortens the lease
                    log.warning("lease heartbeat for %s failed: %s", c.op.op_id, error)

        c.heartbeat = asyncio.ensure_future(beat())

    def _stop_heartbeat(self, c: _Call) -> None:
        beat, c.heartbeat = c.heartbeat, None
        if isinstance(beat, lease.Heartbeat):
            beat.stop()
        elif beat is not None:
            beat.cancel()

    def _release(self, c: _Call) -> None:
        owner, c.owner = c.owner, None
        if owner is None:
            return
        if c.batch_token is not None:
            token, c.batch_token = c.batch_token, None
            left = self._batch_refs.get(token, 1) - 1
            self._batch_refs[token] = left
            if left <= 0:
                lease.release(self._batch_owners.pop(token, owner))
            return
        lease.release(owner)


def _staged(effect: Effect) -> bool:
    """Calls whose intent is committed ``pending`` first (a false ``unknown`` would cost
    a human): blind ones, and ones that need an approval before dispatch."""
    return effect.kind == "blind" or effect.approval == "always"


def _by_id(ops: Iterable[Operation]) -> dict[str, Operation]:
    return {op.op_id: op for op in ops}


# -- driving one call: shared by the node's hooks and the middleware ------------------

AsyncExecutor = Callable[[], Awaitable[tuple[Any, BaseException | None]]]
SyncExecutor = Callable[[], tuple[Any, BaseException | None]]
PortalRun = Callable[[Coroutine[Any, Any, Any]], Any]


def answer(action: Action) -> Any:
    """The value a call returns for a final action (raising for ``Raise``)."""
    if isinstance(action, Replay):
        return action.output
    if isinstance(action, NeedsReview):
        return action.placeholder
    if isinstance(action, Raise):
        raise action.error
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


def _is_error_message(output: Any) -> bool:
    return isinstance(output, ToolMessage) and output.status == "error"


def _message_text(output: Any) -> str:
    if isinstance(output, ToolMessage):
        return str(output.content)[:500]
    return repr(output)[:500]


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def _error_message(c: _Call, error: BaseException) -> ToolMessage:
    return ToolMessage(
        content=f"Error: {_describe(error)}",
        name=c.tool,
        tool_call_id=c.call_id,
        status="error",
    )


def effectful_calls(
    tool_calls: Sequence[Mapping[str, Any]],
    settings: Settings,
    known_tools: Callable[[str], bool],
) -> tuple[list[Mapping[str, Any]], set[str]]:
    """Split effectful calls (registered tools not declared read-only) into those the
    ledger tracks and the ids of those refused: a call with no id, whose id another
    call of the same message shares, or whose id cannot be stored as it is (an unpaired
    surrogate, which the checkpoint turns into ``?``), has no identity to bind, so it is
    never sent."""
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
    refused = {key for key, n in counts.items() if not key or n > 1 or not _encodable(key)}
    tracked = [call for call in effectful if str(call.get("id") or "") not in refused]
    return tracked, refused


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def refusal_error(tool_call: Mapping[str, Any]) -> MalformedToolCallError:
    """Why an effectful call has no usable identity (see :func:`effectful_calls`)."""
    call_id = str(tool_call.get("id") or "")
    if not call_id:
        why = "has no id"
    elif not _encodable(call_id):
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
