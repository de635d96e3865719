"""The per-call dispatcher: what one call does next (``begin``), recording its outcome
(``finish``), standing down (``withdraw``/``abort``/``stand_down``), and the ledger I/O the
pure decisions of `langgraph_effects.core.protocol` name (moves, leases, heartbeats).

A `Dispatcher` keeps no state of a session's: it moves the `CallRecord` it
is handed and answers a `Directive`; the session files the answer (who waits for
a human). The dispatch owners a session's open made for several calls at once are
counted by `Leases`, which the session owns and hands in; the leases of
running calls are renewed by `langgraph_effects._runtime.heartbeat`.

The dispatcher never runs an undo: a settled call's answer names the undos its outcome
orders (`Due`), and the session runs them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import ToolMessage

from ..core import identity, protocol
from ..core.compensation import undo_ordered
from ..core.controls import Refusal
from ..core.operation import Change, Event, EvidenceKind, Operation, Owner, Scope, State
from ..core.reconcile import lost_send, scope_changes
from ..errors import (
    IllegalTransitionError,
    StaleVersionError,
    TransitionError,
)
from ..ledger.base import Ledger
from ..ledger.controls import HEARD
from . import admission, heartbeat, lease, messages, telemetry
from . import faults as _faults
from .calls import CallRecord, Settings
from .reconcile import reconcile

log = logging.getLogger("langgraph_effects")

_MAX_STEPS = 64  # bound on state-machine steps per call per round (races, not retries)


# -- what a call should do next ------------------------------------------------------


Due = Literal["undo", "saga"]
"""Undos a settled call orders: its own (``undo``: it is marked for compensation, or an
operator's verdict that confirmed it asked for its undo) or those of the earlier effects
of its saga (``saga``: it failed definitively and was answered so). The session runs
them, each as a call of its own, before the call answers; the model is told how its own
undo stands (`replayed`)."""


@dataclass(frozen=True)
class RunTool:
    """Run the tool now, under this operation's lease."""

    op: Operation


@dataclass(frozen=True)
class Reply:
    """The call is done for now: nothing is sent. It returns ``output`` (a recorded
    outcome, or the placeholder of a call that waits for a human), or raises ``error``
    (the tool's own exception, recorded, as ToolNode would propagate it).
    ``waits_for`` names the question the call waits for, if any."""

    output: Any = None
    error: BaseException | None = None
    waits_for: Literal["approval", "review"] | None = None
    due: Due | None = None
    """Undos the call's settled outcome orders, for the session to run before the call
    answers (``None``: none)."""

    def value(self) -> Any:
        """What the call returns (raising ``error``, if any)."""
        if self.error is not None:
            raise self.error
        return self.output


Directive = Reply | RunTool


def due(op: Operation) -> Due | None:
    """The undos settled ``op`` orders (see `Due`). A failure raised to the caller is
    not final (a retry may follow): it orders nothing."""
    if op.state is State.FAILED and op.extra.get("saga"):
        return None if protocol.raised(op) else "saga"
    return "undo" if undo_ordered(op) else None


def replayed(c: CallRecord, *, undo: Operation | None = None) -> Any:
    """What settled call ``c`` answers again: its recorded outcome, as the model should
    see it (``undo``: the row of the undo it ordered, as stored once run)."""
    return messages.replay(c.op, tool_call_id=c.call_id, tool=c.tool, undo=undo)


# -- dispatch owners shared by several calls -----------------------------------------


@dataclass(eq=False)
class Leases:
    """The dispatch owners of a session: one the open made for several calls is
    released when the last of them lets go; heartbeats renew a running call's lease."""

    ledger: Ledger
    lease_seconds: float
    _refs: dict[str, int] = field(default_factory=dict)
    _owners: dict[str, Owner] = field(default_factory=dict)

    def adopt(self, owner: Owner | None, calls: Iterable[CallRecord]) -> None:
        """Count the calls the open's dispatch owner stands for; release it if none."""
        if owner is None:
            return
        refs = sum(1 for c in calls if c.batch_token == owner.token)
        if refs:
            self._owners[owner.token] = owner
            self._refs[owner.token] = refs
        else:
            lease.release_soon(owner)

    def release(self, c: CallRecord) -> None:
        """``c`` lets go of its dispatch owner."""
        owner, c.owner = c.owner, None
        if owner is None:
            return
        if c.batch_token is not None:
            token, c.batch_token = c.batch_token, None
            left = self._refs.get(token, 1) - 1
            self._refs[token] = left
            if left <= 0:
                lease.release_soon(self._owners.pop(token, owner))
            return
        lease.release_soon(owner)

    def start_heartbeat(self, c: CallRecord) -> None:
        """Keep the lease of a running call alive (call on the session's event loop)."""
        if c.owner is None or c.heartbeat is not None:
            return
        c.heartbeat = heartbeat.start(
            self.ledger, c.op.op_id, c.owner.token, lease_seconds=self.lease_seconds
        )

    @staticmethod
    def stop_heartbeat(c: CallRecord) -> None:
        beat, c.heartbeat = c.heartbeat, None
        if beat is not None:
            beat.stop()


@dataclass(eq=False, repr=False, kw_only=True)
class Dispatcher:
    """Drives one call at a time through the protocol, for a
    `Session`.

    ``closed`` tells whether the session is over (checked between awaits)."""

    ledger: Ledger
    settings: Settings
    scope: Scope
    leases: Leases
    closed: Callable[[], bool]
    run_id: str | None = None
    """The run's id, for budgets counted per run."""

    # -- per call --------------------------------------------------------------------

    async def begin(self, c: CallRecord) -> Directive:
        """What the call should do now, moving its operation as evidence allows."""
        call_id = c.call_id
        if c.conflict is not None:
            return Reply(
                ToolMessage(
                    content=c.conflict,
                    name=c.tool,
                    tool_call_id=call_id,
                    status="error",
                    artifact=messages.effect_artifact(c.op),
                )
            )
        for _ in range(_MAX_STEPS):
            if self.closed():
                await self.stand_down(c)
                return _not_run(c)
            op = c.op
            step = protocol.what_next(
                op,
                token=self._token(c),
                alive=await self._alive(c),
                now=time.time(),
                scope_changed=protocol.raised(op) and bool(scope_changes(op, self.scope)),
            )
            if isinstance(step, protocol.Replay):
                # With the undos it orders, if any: a crash may have interrupted them.
                return Reply(replayed(c), due=due(c.op))
            if isinstance(step, protocol.Review | protocol.Approve):
                return Reply(
                    messages.review_placeholder(op, tool_call_id=call_id, tool=c.tool),
                    waits_for="review" if isinstance(step, protocol.Review) else "approval",
                )
            if isinstance(step, protocol.Dispatch):
                if _faults.installed:
                    _faults.fire("after_intent", op)
                await self.send(c, Event.DISPATCH, {"kind": EvidenceKind.INTENT})
                if c.refusal is not None:
                    return await self._refused(c, c.refusal)
                continue
            if isinstance(step, protocol.Retry):
                await self.send(c, Event.RETRY, dict(step.evidence))
                if c.refusal is not None:
                    return await self._refused(c, c.refusal)
                continue
            if isinstance(step, protocol.Run):
                if c.batch_token is not None and _faults.installed:
                    _faults.fire("after_intent", op)
                if await self._still_ours(c):
                    if self.closed():  # checked with no await before ``running`` is set
                        await self.stand_down(c)
                        return _not_run(c)
                    c.running = True
                    return RunTool(c.op)
                continue
            if isinstance(step, protocol.Wait):
                await self.wait_for_other(c)
                continue
            if isinstance(step, protocol.TakeOver):
                await self.move(c, step.change)
                continue
            if isinstance(step, protocol.Reconcile):
                with telemetry.reconciling(c) as told:
                    outcome = await reconcile(
                        op, c.effect, args=c.args, scope=self.scope, lost_sends=await self._lost_sends(c)
                    )
                    told.update(action=outcome.action, event=outcome.event.value)
                # Keep what made it unknown (a crash, a timeout) beside what settled it.
                evidence = self._scrub_evidence(c, {**outcome.evidence, "cause": dict(op.evidence or {})})
                if outcome.action == "resend":
                    await self.send(c, Event.RESEND, evidence)
                else:
                    await self.move(c, Change(outcome.event, evidence=evidence))
                continue
        raise TransitionError(
            f"operation {c.op.op_id} kept changing under concurrent workers; giving up after "
            f"{_MAX_STEPS} steps. Resume the thread again to settle it."
        )

    async def finish(self, c: CallRecord, output: Any, error: BaseException | None) -> Directive:
        """Record what the dispatched call did, then settle or reconcile it."""
        self.leases.stop_heartbeat(c)
        op = c.op
        token = self._token(c) or ""
        shown: Any = output
        try:
            if _faults.installed:
                _faults.fire("before_outcome", op)
            outcome: protocol.Outcome
            if error is None and not _is_error_message(output):
                kind, blob = messages.dump(output)
                outcome = protocol.Succeeded(kind, blob)
            elif error is not None and c.effect.is_definite(error):
                shown = self._scrub_output(c, output if output is not None else _error_message(c, error))
                kind, blob = messages.dump(shown)
                # Raised: the caller gets the exception (a retry may follow), not a message.
                outcome = protocol.Failed(
                    kind, blob, self._scrub(c, _describe(error)), raised=output is None
                )
            else:
                what = _describe(error) if error is not None else _message_text(output)
                outcome = protocol.Ambiguous(
                    {
                        "kind": EvidenceKind.TIMEOUT if isinstance(error, TimeoutError) else "error",
                        "error": self._scrub(c, what),
                    }
                )
            # Compare-and-set on the version we dispatched: it fails exactly when another
            # worker took the operation over while the tool ran.
            sender = {"host": c.owner.host, "pid": c.owner.pid} if c.owner else None
            moved = await self.move(c, protocol.settle(outcome, sender=sender), expected=op.version)
            if not moved:
                await self._record_late(c, outcome, token, sender)
        finally:
            c.running = False
            self.leases.release(c)
        if protocol.after_record(moved, outcome) == "reconcile":
            return await self.begin(c)
        if isinstance(outcome, protocol.Succeeded):
            return Reply(messages.decorate(output, c.op))
        if isinstance(outcome, protocol.Failed):
            if output is None and error is not None:
                return Reply(error=error)  # raised: not final (a retry may follow)
            return Reply(messages.decorate(shown, c.op), due=due(c.op) if moved else None)
        # Ambiguous, and another worker owns the operation now: the tool's own answer.
        return Reply(error=error) if output is None and error is not None else Reply(output)

    async def _refused(self, c: CallRecord, refusal: Refusal) -> Reply:
        """A budget or circuit breaker refused the send: held for an approver, or
        answered (and recorded) with the refusal (`admission.record_refusal`)."""
        telemetry.refused(c, refusal.kind, refusal.name, ask=refusal.ask)
        if refusal.ask:
            return Reply(
                messages.review_placeholder(c.op, tool_call_id=c.call_id, tool=c.tool), waits_for="approval"
            )
        return Reply(await admission.record_refusal(c, refusal, self.move))

    async def _record_late(
        self, c: CallRecord, outcome: protocol.Outcome, token: str, sender: Mapping[str, Any] | None
    ) -> None:
        """Another worker took the operation over while our tool ran: what it did is
        evidence (never a reason to send again), recorded with `protocol.late`
        (a result settling an ``unknown`` or reviewed operation, else a ``late`` note in
        the audit trail); the call answers with it as is. A worker sending it right
        now is waited for first, so the note never costs it its outcome."""
        log.warning(
            "operation %s was taken over while its tool ran (now %s); the late %s is kept "
            "as evidence and nothing is sent again: a second request may have reached the "
            "provider (see its audit trail)",
            c.op.op_id,
            c.op.state,
            type(outcome).__name__.lower(),
        )
        for _ in range(_MAX_STEPS):
            if c.op.state is State.DISPATCHED and not protocol.ours(c.op, token) and not protocol.holder_gone(
                c.op, alive=await self._alive(c), now=time.time()
            ):
                await self.wait_for_other(c)
                continue
            if await self.move(c, protocol.late(c.op, outcome, token=token, sender=sender)):
                return
        log.warning("operation %s kept changing; its late %s was not noted", c.op.op_id, outcome)

    async def withdraw(self, c: CallRecord) -> None:
        """The tool paused itself with ``interrupt()``; it will run again on resume."""
        self.leases.stop_heartbeat(c)
        try:
            await self.move(
                c, Change(Event.WITHDRAW, evidence={"kind": EvidenceKind.INTERRUPT}), expected=c.op.version
            )
        finally:
            c.running = False
            self.leases.release(c)

    def abort(self, c: CallRecord) -> None:
        """The call was cancelled or crashed in-process: leave it ``dispatched``.

        Its lease owner is released, so a resumer in this process sees it dead at
        once, marks it ``unknown`` and reconciles it.
        """
        c.running = False
        self.leases.stop_heartbeat(c)
        self.leases.release(c)

    async def stand_down(self, c: CallRecord) -> None:
        """The node is over (an interrupt, an error) and this call's tool never ran:
        hand a lease it holds back (``withdraw``: provably nothing was sent), so a
        resume sends it afresh without reconciling or waiting."""
        self.leases.stop_heartbeat(c)
        try:
            if protocol.ours(c.op, self._token(c)):
                await self.move(
                    c, Change(Event.WITHDRAW, evidence={"kind": EvidenceKind.NOT_RUN}), expected=c.op.version
                )
        finally:
            self.leases.release(c)

    # -- plumbing ------------------------------------------------------------------------

    def _scrub(self, c: CallRecord, text: str) -> str:
        return identity.scrub(text, c.args, c.effect.secret_fields)

    def _scrub_output(self, c: CallRecord, output: Any) -> Any:
        """An error message echoing a secret argument is stored and shown without it."""
        if isinstance(output, ToolMessage) and isinstance(output.content, str):
            return output.model_copy(update={"content": self._scrub(c, output.content)})
        return output

    def _scrub_evidence(self, c: CallRecord, evidence: Mapping[str, Any]) -> dict[str, Any]:
        """Lookups see the full arguments; what they report back is scrubbed before storing."""
        if not c.effect.secret_fields:
            return dict(evidence)
        return json.loads(self._scrub(c, json.dumps(evidence, default=str)))  # type: ignore[no-any-return]

    async def send(
        self,
        c: CallRecord,
        event: Event,
        evidence: dict[str, Any],
        *,
        decision_id: str | None = None,
        decision: Mapping[str, Any] | None = None,
    ) -> None:
        c.refusal = None
        owner = await lease.new_owner_async()
        try:
            moved = await self.move(
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
            lease.release_soon(owner)
            raise
        if moved:
            c.owner = owner
            c.batch_token = None
        else:
            lease.release_soon(owner)

    async def move(self, c: CallRecord, change: Change, *, expected: int | None = None) -> bool:
        """Apply one transition; on a lost race, reload and let the caller look again."""
        try:
            version = c.op.version if expected is None else expected
            # The row as we last saw it saves the ledger a locking read when it is current.
            before = c.op if version == c.op.version else None
            state_before = c.op.state.value
            if c.effect.controls is not None and change.event in HEARD:
                moved = await admission.controlled_move(self.ledger, c, change, version, before, self.run_id)
            else:
                c.op = await self.ledger.transition(
                    c.op.op_id, change, expected_version=version, before=before
                )
                moved = True
        except (StaleVersionError, IllegalTransitionError):
            c.op = await self.reload(c)
            return False
        if moved:
            telemetry.moved(c, state_before, change)
        return moved

    async def reload(self, c: CallRecord) -> Operation:
        found = await self.ledger.get(c.op.op_id)
        return found if found is not None else c.op

    async def wait_for_other(self, c: CallRecord) -> None:
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
            c.op = await self.reload(c)
            if c.op.version != start_version or protocol.holder_gone(
                c.op, alive=await self._alive(c), now=time.time()
            ):
                return
            delay = min(delay * 2, 1.0)

    async def _lost_sends(self, c: CallRecord) -> int:
        """How many of the operation's sends ended with no outcome from the tool (a lost
        lease, a hand-back), read from its audit trail; only asked once its attempts
        reach ``max_attempts``, when the count decides between a re-send and review."""
        if c.op.attempts < c.effect.max_attempts or c.effect.kind == "blind":
            return 0
        trail = await self.ledger.audit(c.op.op_id)
        return sum(1 for entry in trail if lost_send(entry.event, entry.evidence))

    def _token(self, c: CallRecord) -> str | None:
        return c.owner.token if c.owner is not None else None

    async def _alive(self, c: CallRecord) -> bool | None:
        """Same-host liveness of the lease holder, when the protocol needs it (file
        I/O, so off the event loop)."""
        op = c.op
        if op.owner is None or not protocol.needs_liveness(op, self._token(c)):
            return None
        return await lease.owner_alive_async(op.owner)

    async def _still_ours(self, c: CallRecord) -> bool:
        """The last check before the tool runs: the ledger must still name this dispatch
        as the lease holder (a compare on the owner token), with at least half a lease
        left; otherwise the lease is renewed first (a compare-and-set on the token).
        Nobody can take a lease over before it expires (or its owner dies), so the
        request leaves with that much time to spare. ``False`` (and our lease
        dropped) if it was taken over."""
        assert c.owner is not None
        if protocol.ours(c.op, c.owner.token) and protocol.lease_to_spare(
            c.op, now=time.time(), lease_seconds=self.settings.lease_seconds
        ):
            # ``c.op`` is the row our own dispatch wrote, moments ago by this clock (a
            # pause since, SIGSTOP included, shows as less lease left): nobody can
            # take a lease over before it expires, so the ledger would say the same.
            return True
        found = await self.reload(c)
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
            self.leases.release(c)
            c.op = await self.reload(c)
        return ok


def _not_run(c: CallRecord) -> Reply:
    """The answer of a call stood down before its tool ran. Never seen (the node's
    result is discarded), so only `Dispatcher.begin` builds it, not the
    session's ``close``, which stands down every call of every node."""
    return Reply(
        ToolMessage(
            content=f"{c.tool} was not run: the node stopped first; it runs on resume.",
            name=c.tool,
            tool_call_id=c.call_id,
            status="error",
        )
    )


def _is_error_message(output: Any) -> bool:
    return isinstance(output, ToolMessage) and output.status == "error"


def _message_text(output: Any) -> str:
    if isinstance(output, ToolMessage):
        return str(output.content)[:500]
    return repr(output)[:500]


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def _error_message(c: CallRecord, error: BaseException) -> ToolMessage:
    return ToolMessage(
        content=f"Error: {_describe(error)}",
        name=c.tool,
        tool_call_id=c.call_id,
        status="error",
    )
