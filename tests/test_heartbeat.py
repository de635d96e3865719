"""Lease heartbeats: one scheduler thread renews every running dispatch of the process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from langgraph_effects._runtime.dispatch import Heartbeat


def _counter(result: bool = True, gate: threading.Event | None = None) -> tuple[list[float], Heartbeat]:
    beats: list[float] = []

    def renew() -> bool:
        beats.append(time.monotonic())
        if gate is not None:
            gate.wait(30)  # a renewal that hangs until the test lets it go
        return result

    return beats, Heartbeat(renew, interval=0.05, name="t")


def _until(condition: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Wait for `condition` on a deadline, not for a fixed time: a loaded machine may
    run the scheduler thread late, never wrongly."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {seconds:.0f} s"
        time.sleep(0.01)


def test_a_heartbeat_renews_every_interval_until_stopped() -> None:
    beats, beat = _counter()
    beat.start()
    _until(lambda: len(beats) >= 4, "four renewals")  # this thread blocks, as a tool would
    beat.stop()
    seen = len(beats)
    time.sleep(0.2)  # four intervals
    assert len(beats) <= seen + 1  # a renewal already running may finish; no more follow


def test_a_lost_lease_ends_its_heartbeat() -> None:
    beats, beat = _counter(result=False)
    beat.start()
    _until(lambda: len(beats) >= 1, "the first renewal")
    time.sleep(0.3)  # six intervals
    assert len(beats) == 1


def test_one_slow_renewal_does_not_hold_the_others_back() -> None:
    gate = threading.Event()
    slow_beats, slow = _counter(gate=gate)
    fast_beats, fast = _counter()
    try:
        slow.start()
        fast.start()
        _until(lambda: len(slow_beats) == 1, "the slow renewal to start")
        _until(lambda: len(fast_beats) >= 4, "four fast renewals while the slow one hangs")
        assert len(slow_beats) == 1  # still inside its first renewal
    finally:
        slow.stop()
        fast.stop()
        gate.set()


def test_many_heartbeats_share_one_thread() -> None:
    before = threading.active_count()
    beats = [Heartbeat(lambda: True, interval=60, name=str(i)).start() for i in range(200)]
    for beat in beats:
        beat.stop()
    assert threading.active_count() <= before + 1  # the scheduler, made at most once


def test_stopped_heartbeats_leave_the_schedule_at_once() -> None:
    """Most calls end long before their first renewal is due. Their heartbeats must not
    wait in the schedule until then: objects that outlive a few collections and then
    die are what make CPython run full collections of the whole process."""
    from langgraph_effects._runtime import dispatch as heartbeat

    beats = [Heartbeat(lambda: True, interval=30.0, name=f"h{i}").start() for i in range(10)]
    for beat in beats:
        beat.stop()
    left = [entry for entry in heartbeat._scheduler()._due if entry[2] in beats]
    assert left == []
