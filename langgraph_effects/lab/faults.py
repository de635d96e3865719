"""Crash points: where the lab breaks a worker, and how.

Kills are real: the worker sends ``SIGKILL`` to itself at the armed point, so no
``finally`` block, no atexit hook and no buffered write gets a chance to run.
The points follow the interruption-ledger checklist:

* ``A``: after the intent was recorded, right before the request leaves;
* ``B``: the provider applied the effect, the response never reaches the caller;
* ``C``: the caller has the response, but dies before recording the outcome.

Besides kills, an attempt can be armed to lose a response as a ``TimeoutError``
(the worker lives on), to wait at a rendezvous at ``A`` so that two workers
dispatch together (or before the run starts, so that two runners race for the
whole thread), to have every provider lookup time out, to stop itself with
``SIGSTOP`` at ``A`` (the lab sends ``SIGCONT`` later), or to keep its sends in
flight at the provider until a later attempt sends too.

The edge-path columns (issue 28) add: a first request answered with a 429 the
contract declares definite, retried by the node's ``RetryPolicy``; an edited user
message (new input at the thread's first checkpoint); an operator whose first
answer is oversized; and requests sent from the tool's child process, the worker
killed (``child``) while the child is still about to send.

The MCP column (issue 33, opt-in: ``--mcp``) loses an MCP answer: the call goes
over streamable HTTP to an MCP server in front of the provider, which applies it,
and the connection closes before any of the answer reaches the client (no kill).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

from .child import send_via_child
from .providers import EffectRecord, Provider, Receipt, Withdrawn

#: ``child``: the tool's child process was started and is about to send (``child-process``).
#: ``undo-A`` / ``undo-C``: the dispatcher's ``after_intent`` / ``before_outcome`` of an undo
#: (a compensation's own operation: before it is sent / after the provider applied it).
KILL_POINTS = ("A", "B", "C", "child", "undo-A", "undo-C")

#: What one operation's thread does (see `strategies` for the models):
#: ``single``: one call; ``two-turns``: two turns asking for the same call, the
#: model repeating its message id and ``call_0``; ``follow-up``: one call, then a
#: follow-up call whose wording names the worker that planned it; ``siblings``: one
#: AIMessage with two sends and a read-only question that calls ``interrupt()``;
#: ``no-replan``: one call, and a model that does not re-plan it after an error (only
#: the node's ``RetryPolicy`` may retry it); ``entrypoint``: a Functional API
#: entrypoint sending one notification per recipient of a set (`entrypoint`).
#: ``saga``: one send that declares an undo, then a charge of the same saga that the
#: provider refuses definitively, so the node undoes the send (`controlrow`).
Scenario = Literal["single", "two-turns", "follow-up", "siblings", "no-replan", "entrypoint", "saga"]

#: Lease of the ``paused-owner`` column: short, so that the pause outlasts it.
PAUSE_LEASE = 0.5
#: How long the paused worker stays stopped: well past its lease.
PAUSE_SECONDS = PAUSE_LEASE + 0.5
#: The ``circuit-open`` column's cooldown: the lab waits it out before each later race,
#: so that both workers meet a half-open circuit (one of them may probe).
CIRCUIT_COOLDOWN = 0.5
#: A held send waits at most this long for a later attempt to send too.
HOLD_SECONDS = 2.0


@dataclass(frozen=True)
class CrashPoint:
    """One column of the lab: the faults of a killed operation's attempts.

    The first attempt of every K-th operation is armed with ``first_kill`` or
    ``first_timeout``; after a kill, ``resumers`` fresh workers resume the thread
    (two means both at once), with the resume-time faults below.
    """

    name: str
    summary: str
    first_kill: str | None = None
    first_timeout: bool = False
    resumers: int = 1
    bump_policy: bool = False
    lookup_timeout: bool = False
    ours_only: bool = False
    """Meaningless for a strategy that never looks anything up (the seed rows)."""
    scenario: Scenario = "single"
    race: bool = False
    """The ``resumers`` start the whole run at the same instant (not at the call),
    the second one through ``recover()`` where the strategy has a ledger."""
    pause_at: str | None = None
    """The first attempt stops itself (``SIGSTOP``) here, for `PAUSE_SECONDS`,
    while a second worker resumes the thread; then it is continued."""
    hold: bool = False
    """The first attempt's sends stay in flight until a later attempt sends."""
    lease_seconds: float | None = None
    """The dispatch lease our rows run with in this column (default: the product's)."""
    per_operation: int = 1
    """Effects each operation is meant to have."""
    group: str = "crashes"
    """The table the column is printed in (a table of 14 columns is unreadable)."""
    # -- the edge-path columns (issue 28) ----------------------------------------
    providers: tuple[str, ...] | None = None
    """Our rows run only these providers in this column (the path does not depend on
    what the provider can prove; the seed rows keep theirs)."""
    rate_limited: bool = False
    """The faulted operation's first request is answered with a 429 the contract
    declares definite; the tools node carries a ``RetryPolicy`` for it."""
    edit: bool = False
    """Once the faulted operation's turn is done, the user's message is edited: new
    input at the thread's first checkpoint, asking for another send."""
    wedge: bool = False
    """The operator's first answer to a review is oversized, in LangChain's HITL shape."""
    child: bool = False
    """Requests leave from a child process of the tool (`child`)."""
    tolerate: bool = False
    """An attempt that raises is a result (counted as refused), not a broken cell."""
    kill_on: int = 1
    """The first attempt dies the ``kill_on``-th time it reaches ``first_kill``."""
    only_rows: tuple[str, ...] | None = None
    """Only these strategies run the column (a path of another API than ``ToolNode``)."""
    stop_ok: bool = False
    """A thread refused with this package's error before anything wrong was sent is
    *stopped*: its missing effects are excused (its duplicates are not)."""
    mcp_lost: bool = False
    """The faulted attempt's MCP ``tools/call`` is applied by the server and its answer
    lost: the connection closes before the client reads any of it (no kill)."""
    opt_in: bool = False
    """Not in the default run: only when named (``--crash-points``) or by its flag."""
    # -- the reliability controls (issue 34; opt-in: ``--controls``) ---------------
    twins: bool = False
    """The faulted operation runs on two workers at once, each on its own thread of the
    same run (``op-i`` and ``op-i-twin``), released together before either decides."""
    run_ids: bool = False
    """Each operation's attempts carry ``run_id`` ``run-<i>`` (a budget counted per run)."""
    first_kills: tuple[str, ...] = ()
    """The faulted operations' kill points, taking turns (instead of ``first_kill``)."""
    resume_kinds: tuple[Literal["resume", "recover"], ...] = ("resume",)
    """How a killed operation's thread is taken up again, taking turns: ``resume`` (a plain
    resume) or ``recover`` ([`recover`][langgraph_effects.recover] on the thread)."""
    goes_down: bool = False
    """From the first faulted operation on, the provider answers every send with a 429
    the contract declares definite (a provider that started failing)."""

    @property
    def ambiguous(self) -> bool:
        """Whether a faulted first attempt leaves an effect its worker never learned
        the outcome of (the provider applied it: killed at B or C, or a lost response)."""
        return self.first_kill in ("B", "C", "child") or self.first_timeout or self.mcp_lost

    @property
    def armed(self) -> bool:
        """Whether a faulted operation's first attempt carries a fault at all."""
        return (
            self.first_kill is not None
            or self.first_timeout
            or self.pause_at is not None
            or self.hold
            or self.rate_limited
            or self.edit
            or self.mcp_lost
            or self.twins
            or self.goes_down
        )


def _control_column(point: CrashPoint) -> CrashPoint:
    """``point`` as a column of the reliability controls: opt-in (``--controls``), run only
    by our controls row (`controlrow`) against the dedup provider, in a table of its own."""
    return replace(
        point,
        only_rows=("EffectToolNode (controls)",),
        providers=("dedup",),
        opt_in=True,
        group="reliability controls",
    )


CRASH_POINTS: dict[str, CrashPoint] = {
    cp.name: cp
    for cp in (
        CrashPoint("none", "control: nothing is injected", resumers=0),
        CrashPoint("A", "killed after intent, before the request leaves", first_kill="A"),
        CrashPoint("B", "killed after the provider applied it, before the response", "B"),
        CrashPoint("C", "killed after the response, before the outcome is recorded", "C"),
        CrashPoint(
            "timeout",
            "the provider applies it but the call raises TimeoutError (no kill)",
            first_timeout=True,
            resumers=0,
        ),
        CrashPoint(
            "duplicate",
            "killed at B, then two workers resume the thread at once",
            first_kill="B",
            resumers=2,
        ),
        CrashPoint(
            "policy",
            "killed at B, resumed under a new policy version",
            first_kill="B",
            bump_policy=True,
        ),
        CrashPoint(
            "lookup-timeout",
            "killed at B, every provider lookup on resume times out",
            first_kill="B",
            lookup_timeout=True,
            ours_only=True,
        ),
        CrashPoint(
            "repeated-ids",
            "two turns ask for the same call; the model repeats its message id and call_0; "
            "killed at B in the second turn",
            first_kill="B",
            scenario="two-turns",
            per_operation=2,
            group="identity and ownership",
        ),
        CrashPoint(
            "two-runners",
            "killed at B, then recover() and a plain resume start at the same instant; each "
            "runner's model plans a different follow-up send",
            first_kill="B",
            resumers=2,
            race=True,
            scenario="follow-up",
            per_operation=2,
            group="identity and ownership",
        ),
        CrashPoint(
            "paused-owner",
            f"SIGSTOP at A for {PAUSE_SECONDS:g} s (lease {PAUSE_LEASE:g} s) while another worker "
            "resumes, then SIGCONT",
            pause_at="A",
            lease_seconds=PAUSE_LEASE,
            group="identity and ownership",
        ),
        CrashPoint(
            "tool-interrupt",
            "a read-only sibling calls interrupt() while two sends are still in flight; resumed",
            hold=True,
            resumers=0,
            scenario="siblings",
            per_operation=2,
            group="identity and ownership",
        ),
        # -- the edge-path columns (issue 28) ------------------------------------
        CrashPoint(
            "wedging-answer",
            "killed at B; the operator's first answer is oversized (HITL respond > 64 KiB, "
            "reject > 4,096 chars, or a receipt within the schema but > 64 KiB as JSON), then "
            "it answers from the provider's records",
            first_kill="B",
            wedge=True,
            ours_only=True,
            providers=("blind",),
            tolerate=True,
            group="edge paths",
        ),
        CrashPoint(
            "definite-retry",
            "the first request gets a 429 the contract declares definite; the tools node "
            "retries it with a RetryPolicy (the model does not re-plan)",
            rate_limited=True,
            resumers=0,
            scenario="no-replan",
            providers=("blind",),
            tolerate=True,
            group="edge paths",
        ),
        CrashPoint(
            "edit-branch",
            "after the turn, the user's message is edited: new input at the thread's first "
            "checkpoint asks for another send (the original and the edit meant)",
            edit=True,
            resumers=0,
            providers=("dedup",),
            tolerate=True,
            group="edge paths",
        ),
        CrashPoint(
            "reordered-entrypoint",
            "a Functional API entrypoint sends one per recipient of a set; killed at B on the "
            "2nd send, resumed by a new process that iterates the set in another order",
            first_kill="B",
            kill_on=2,
            scenario="entrypoint",
            per_operation=3,
            only_rows=("plain-entrypoint", "effectful-entrypoint"),
            stop_ok=True,
            tolerate=True,
            group="edge paths",
        ),
        CrashPoint(
            "child-process",
            "the tool's child process sends; SIGKILLed while the child is about to send, "
            "resumed at once",
            first_kill="child",
            child=True,
            providers=("lookup",),
            group="edge paths",
        ),
        # -- MCP (issue 33; opt-in: it starts an MCP server per cell) -----------
        CrashPoint(
            "mcp-lost",
            "over MCP (streamable HTTP): the server applies the call, the connection closes "
            "before any of its answer reaches the client (no kill)",
            mcp_lost=True,
            resumers=0,
            only_rows=("mcp-toolnode", "mcp-effects"),
            opt_in=True,
            group="MCP",
        ),
        # -- reliability controls (issue 34; opt-in: --controls): our row only ----
        _control_column(
            CrashPoint(
                "budget-race",
                "two workers start two threads of one run at the same instant; a budget allows "
                "the run one send (Budget(per='run', max_sends=1))",
                twins=True,
                run_ids=True,
                resumers=0,
                scenario="no-replan",
            ),
        ),
        _control_column(
            CrashPoint(
                "circuit-open",
                "the provider starts refusing every send (429, definite) while two workers send; a "
                f"CircuitBreaker opens; each later race waits out its {CIRCUIT_COOLDOWN:g} s cooldown "
                "(half-open: one probe)",
                twins=True,
                goes_down=True,
                resumers=0,
                scenario="no-replan",
            ),
        ),
        _control_column(
            CrashPoint(
                "undo-killed",
                "a saga's charge is refused, so the node undoes the send: SIGKILLed before the undo "
                "is sent or after the provider applied it, then a resume or recover()",
                first_kill="undo-A",
                first_kills=("undo-A", "undo-C"),
                resume_kinds=("resume", "resume", "recover", "recover"),
                scenario="saga",
            ),
        ),
    )
}

#: The opt-in columns of the reliability controls (``--controls``).
CONTROL_COLUMNS = ("budget-race", "circuit-open", "undo-killed")


@dataclass(frozen=True)
class AttemptFaults:
    """What one attempt (one ``graph.ainvoke``) is armed with. Each fires at most once."""

    kill_at: str | None = None
    timeout_after_apply: bool = False
    rendezvous: bool = False
    rendezvous_at_start: bool = False
    """Meet before the run starts instead of at the call."""
    lookup_timeout: bool = False
    pause_at: str | None = None
    hold: bool = False
    announce: bool = False
    """Tell the lab (without waiting) when the run first reaches the call."""
    kill_after: float | None = None
    """The lab SIGKILLs the worker this many seconds after sending the attempt
    (a random moment: the soak), if it has not finished by then."""
    rate_limit: bool = False
    """The attempt's first request is answered with a 429 (nothing applied)."""
    kill_on: int = 1
    """Die the ``kill_on``-th time ``kill_at`` is reached."""
    mcp_lost: bool = False
    """The attempt's first MCP call of the lab's tool loses its answer (``mcp-lost``)."""

    def __post_init__(self) -> None:
        for name in ("kill_at", "pause_at"):
            point = getattr(self, name)
            if point is not None and point not in KILL_POINTS:
                raise ValueError(f"{name} must be one of {KILL_POINTS}, not {point!r}")


def process_cpu() -> float:
    """CPU seconds this process used so far, all its threads (reported to the lab)."""
    times = os.times()
    return times.user + times.system


class Faults:
    """The worker's side of fault injection; tool code calls `reach`.

    ``conn`` is the worker's pipe to the lab: it hears which point killed the
    worker (sent just before the kill) and runs the duplicate-delivery rendezvous.
    """

    def __init__(self, conn: Connection | None = None) -> None:
        self._conn = conn
        self._plan = AttemptFaults()
        self._fired: set[str] = set()
        self._reached: dict[str, int] = {}
        # Sends of earlier attempts still held in flight (they outlive their attempt).
        self._held: list[threading.Event] = []
        self._held_lock = threading.Lock()
        self._hold: threading.Event | None = None
        self._holding = 0

    def arm(self, plan: AttemptFaults) -> None:
        """Arm the faults of the next attempt (and disarm the previous ones)."""
        self._plan = plan
        self._fired = set()
        self._reached = {}
        self._hold = threading.Event() if plan.hold else None
        self._holding = 0
        if self._hold is not None:
            with self._held_lock:
                self._held.append(self._hold)

    @property
    def holds(self) -> bool:
        """Whether this attempt's sends stay in flight (and so must not block the loop)."""
        return self._hold is not None

    def holder(self) -> Callable[[], None] | None:
        """For a request of this attempt: a call that keeps it in flight until a later
        attempt sends, or `HOLD_SECONDS` passed (whoever waits for it must not
        wait for ever). ``None`` when the attempt holds nothing."""
        event = self._hold
        if event is None:
            return None

        def hold() -> None:
            with self._held_lock:
                self._holding += 1
            event.wait(HOLD_SECONDS)

        return hold

    async def until_held(self, count: int, *, timeout: float = HOLD_SECONDS) -> None:
        """Wait (on the loop) until ``count`` sends of this attempt are held in flight."""
        if self._hold is None:
            return
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            with self._held_lock:
                if self._holding >= count:
                    return
            await asyncio.sleep(0.005)

    def release_held(self) -> None:
        """A later attempt sent: the requests earlier attempts hold may land now."""
        with self._held_lock:
            held = [event for event in self._held if event is not self._hold]
            self._held = [event for event in self._held if event is self._hold]
        for event in held:
            event.set()

    def _once(self, name: str) -> bool:
        if name in self._fired:
            return False
        self._fired.add(name)
        return True

    def meet(self, point: str = "A") -> None:
        """Wait at the duplicate-delivery rendezvous until the lab says go.

        Only an attempt armed with a rendezvous waits, and only at the first
        place it calls this (``reach("A")`` calls it; a strategy may call it
        earlier, to line its twins up before they decide anything).
        """
        if self._plan.announce and self._once("announce") and self._conn is not None:
            self._conn.send(("at", point))
        if self._plan.rendezvous and self._once("rendezvous") and self._conn is not None:
            self._conn.send(("arrived", point))
            reply = self._conn.recv()
            if reply != "go":
                raise RuntimeError(f"unexpected rendezvous reply {reply!r}")

    def reach(self, point: str) -> None:
        """The worker reached crash point ``point`` (``A``, ``B`` or ``C``).

        At ``A`` (the request is about to leave) an attempt armed with a
        rendezvous first waits until the lab says go, so that two workers
        delivered the same resume both stand at the dispatch together, each
        having made its decision to send. At an armed kill point the worker
        dies by SIGKILL, for real.
        """
        plan = self._plan
        if point == "A" and not plan.rendezvous_at_start:
            self.meet(point)
        if point == plan.pause_at and self._once(f"pause-{point}"):
            # A real stop, as a VM freeze or a debugger would do it: the lab continues it.
            if self._conn is not None:
                self._conn.send(("paused", point))
            os.kill(os.getpid(), signal.SIGSTOP)
        self._reached[point] = self._reached.get(point, 0) + 1
        if point == plan.kill_at and self._reached[point] >= plan.kill_on and self._once(point):
            if self._conn is not None:
                self._conn.send(("crash", point, process_cpu()))
            os.kill(os.getpid(), signal.SIGKILL)

    def start(self) -> None:
        """The run is about to start: runners armed to race meet here."""
        if self._plan.rendezvous_at_start:
            self.meet("start")

    def response_lost(self) -> bool:
        """True once per armed attempt: the response should be lost as a timeout."""
        return self._plan.timeout_after_apply and self._once("timeout")

    def mcp_response_lost(self) -> bool:
        """True once per armed attempt: its MCP call's answer is to be lost."""
        return self._plan.mcp_lost and self._once("mcp-lost")

    @property
    def lookups_time_out(self) -> bool:
        return self._plan.lookup_timeout

    def rate_limited(self) -> bool:
        """True once per armed attempt: its first request is answered with a 429."""
        return self._plan.rate_limit and self._once("rate-limit")

    @property
    def child_armed(self) -> bool:
        """Whether this attempt dies while its child process is still about to send."""
        return self._plan.kill_at == "child"


class LabClient:
    """The provider as the worker's tools see it, with the lab's crash points around it.

    ``send`` passes ``A`` before the request and ``B`` after the provider
    committed; a ``timeout`` attempt loses the response there instead. Lookups
    raise ``TimeoutError`` when the attempt is armed with ``lookup_timeout``. With
    ``child_markers``, the request of an attempt armed to die at ``child`` leaves from a
    child process (`child`).
    """

    def __init__(self, provider: Provider, faults: Faults, *, child_markers: Path | None = None) -> None:
        self.provider = provider
        self.faults = faults
        self.child_markers = child_markers

    @property
    def mode(self) -> str:
        return self.provider.mode

    def send(self, payload: Mapping[str, Any], *, key: str | None = None) -> Receipt:
        self.faults.reach("A")
        if self.faults.rate_limited():
            self.provider.rate_limit(1)  # this request is answered 429 (RateLimited)
        if self.child_markers is not None and self.faults.child_armed:
            receipt = send_via_child(
                self.provider,
                payload,
                key=key,
                markers=self.child_markers,
                armed=self.faults.child_armed,
                started=lambda pid: self.faults.reach("child"),
            )
        else:
            hold = self.faults.holder()
            try:
                receipt = self.provider.apply(payload, key=key, hold=hold)
            finally:
                if hold is None:
                    # Requests an earlier attempt still holds land now, after this one.
                    self.faults.release_held()
        self.faults.reach("B")
        if self.faults.response_lost():
            raise TimeoutError("the provider did not answer within the deadline")
        return receipt

    async def asend(self, payload: Mapping[str, Any], *, key: str | None = None) -> Receipt:
        """`send` from async tool code: off the event loop when the attempt holds
        its sends in flight (the loop must go on, e.g. to surface a sibling's interrupt)."""
        if self.faults.holds:
            return await asyncio.to_thread(self.send, payload, key=key)
        return self.send(payload, key=key)

    def get(self, reference: str) -> EffectRecord | Withdrawn | None:
        if self.faults.lookups_time_out:
            raise TimeoutError("the provider lookup timed out")
        return self.provider.get(reference)

    def list_by_reference(self, reference: str) -> list[EffectRecord]:
        if self.faults.lookups_time_out:
            raise TimeoutError("the provider search timed out")
        return self.provider.list_by_reference(reference)
