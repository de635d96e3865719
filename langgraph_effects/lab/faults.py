"""Crash points: where the lab breaks a worker, and how.

Kills are real: the worker sends ``SIGKILL`` to itself at the armed point, so no
``finally`` block, no atexit hook and no buffered write gets a chance to run.
The points follow the interruption-ledger checklist:

* ``A``: after the intent was recorded, right before the request leaves;
* ``B``: the provider applied the effect, the response never reaches the caller;
* ``C``: the caller has the response, but dies before recording the outcome.

Besides kills, an attempt can be armed to lose a response as a ``TimeoutError``
(the worker lives on), to wait at a rendezvous at ``A`` so that two workers
dispatch together, or to have every provider lookup time out.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from .providers import EffectRecord, Provider, Receipt, Withdrawn

KILL_POINTS = ("A", "B", "C")


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
    )
}


@dataclass(frozen=True)
class AttemptFaults:
    """What one attempt (one ``graph.ainvoke``) is armed with. Each fires at most once."""

    kill_at: str | None = None
    timeout_after_apply: bool = False
    rendezvous: bool = False
    lookup_timeout: bool = False

    def __post_init__(self) -> None:
        if self.kill_at is not None and self.kill_at not in KILL_POINTS:
            raise ValueError(f"kill_at must be one of {KILL_POINTS}, not {self.kill_at!r}")


class Faults:
    """The worker's side of fault injection; tool code calls :meth:`reach`.

    ``conn`` is the worker's pipe to the lab: it hears which point killed the
    worker (sent just before the kill) and runs the duplicate-delivery rendezvous.
    """

    def __init__(self, conn: Connection | None = None) -> None:
        self._conn = conn
        self._plan = AttemptFaults()
        self._fired: set[str] = set()

    def arm(self, plan: AttemptFaults) -> None:
        """Arm the faults of the next attempt (and disarm the previous ones)."""
        self._plan = plan
        self._fired = set()

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
        if point == "A":
            self.meet(point)
        if point == plan.kill_at and self._once(point):
            if self._conn is not None:
                self._conn.send(("crash", point))
            os.kill(os.getpid(), signal.SIGKILL)

    def response_lost(self) -> bool:
        """True once per armed attempt: the response should be lost as a timeout."""
        return self._plan.timeout_after_apply and self._once("timeout")

    @property
    def lookups_time_out(self) -> bool:
        return self._plan.lookup_timeout


class LabClient:
    """The provider as the worker's tools see it, with the lab's crash points around it.

    ``send`` passes ``A`` before the request and ``B`` after the provider
    committed; a ``timeout`` attempt loses the response there instead. Lookups
    raise ``TimeoutError`` when the attempt is armed with ``lookup_timeout``.
    """

    def __init__(self, provider: Provider, faults: Faults) -> None:
        self.provider = provider
        self.faults = faults

    @property
    def mode(self) -> str:
        return self.provider.mode

    def send(self, payload: Mapping[str, Any], *, key: str | None = None) -> Receipt:
        self.faults.reach("A")
        receipt = self.provider.apply(payload, key=key)
        self.faults.reach("B")
        if self.faults.response_lost():
            raise TimeoutError("the provider did not answer within the deadline")
        return receipt

    def get(self, reference: str) -> EffectRecord | Withdrawn | None:
        if self.faults.lookups_time_out:
            raise TimeoutError("the provider lookup timed out")
        return self.provider.get(reference)

    def list_by_reference(self, reference: str) -> list[EffectRecord]:
        if self.faults.lookups_time_out:
            raise TimeoutError("the provider search timed out")
        return self.provider.list_by_reference(reference)
