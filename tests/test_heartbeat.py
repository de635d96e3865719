"""Lease heartbeats: one scheduler thread renews every running dispatch of the process."""

from __future__ import annotations

import threading
import time

from langgraph_effects._runtime.dispatch import Heartbeat


def _counter(result: bool = True, delay: float = 0.0) -> tuple[list[float], Heartbeat]:
    beats: list[float] = []

    def renew() -> bool:
        beats.append(time.monotonic())
        time.sleep(delay)
        return result

    return beats, Heartbeat(renew, interval=0.05, name="t")


def test_a_heartbeat_renews_every_interval_until_stopped() -> None:
    beats, beat = _counter()
    beat.start()
    time.sleep(0.4)  # blocks this thread (as a tool blocking the event loop would)
    beat.stop()
    seen = len(beats)
    time.sleep(0.2)
    assert seen >= 4  # every 0.05 s, first after one interval
    assert len(beats) <= seen + 1  # a renewal already running may finish; no more follow


def test_a_lost_lease_ends_its_heartbeat() -> None:
    beats, beat = _counter(result=False)
    beat.start()
    time.sleep(0.3)
    assert len(beats) == 1


def test_one_slow_renewal_does_not_hold_the_others_back() -> None:
    slow_beats, slow = _counter(delay=0.5)
    fast_beats, fast = _counter()
    slow.start()
    fast.start()
    time.sleep(0.45)
    slow.stop()
    fast.stop()
    assert len(slow_beats) == 1
    assert len(fast_beats) >= 4


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
