"""Lease heartbeats: one scheduler thread renews every running dispatch of the process."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import pytest

from langgraph_effects import InMemoryLedger
from langgraph_effects._runtime import heartbeat
from langgraph_effects._runtime.heartbeat import Heartbeat
from langgraph_effects.testing._cases import dispatch, make_op


def _counter(
    result: bool = True, gate: threading.Event | None = None, fail: bool = False
) -> tuple[list[float], Heartbeat]:
    beats: list[float] = []

    def renew() -> bool:
        beats.append(time.monotonic())
        if gate is not None:
            gate.wait(30)  # a renewal that hangs until the test lets it go
        if fail:
            raise ConnectionError("the database is restarting")
        return result

    return beats, Heartbeat(renew, interval=0.05, name="t")


def _until(condition: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Wait for `condition` on a deadline, not for a fixed time: a loaded machine may
    run the heartbeat's thread late, never wrongly."""
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


def test_a_failed_renewal_only_shortens_the_lease(caplog: pytest.LogCaptureFixture) -> None:
    """A renewal that raises is logged and tried again at the next beat."""
    beats, beat = _counter(fail=True)
    with caplog.at_level(logging.WARNING, logger="langgraph_effects"):
        beat.start()
        try:
            _until(lambda: len(beats) >= 3, "three renewals, each failing")
        finally:
            beat.stop()
    assert "lease heartbeat t failed: the database is restarting" in caplog.text


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
    beats = [Heartbeat(lambda: True, interval=30.0, name=f"h{i}").start() for i in range(10)]
    for beat in beats:
        beat.stop()
    assert not set(beats) & set(heartbeat._scheduler()._due)


async def test_an_in_process_ledger_is_renewed_on_its_event_loop() -> None:
    """A ledger with no renewer usable from another thread (`Ledger.lease_renewer`) is
    renewed on the loop the heartbeat was started from; a token that no longer holds
    the lease ends the heartbeat."""
    ledger = InMemoryLedger()
    op = make_op()
    first_expiry = time.time() + 60
    [stored] = await ledger.record_intents([op], change=dispatch("tok-A", first_expiry))
    beat = heartbeat.start(ledger, stored.op_id, "tok-A", lease_seconds=0.15)
    try:
        for _ in range(3000):
            found = await ledger.get(stored.op_id)
            assert found is not None
            if found.lease_expires_at is not None and found.lease_expires_at < first_expiry:
                break  # renewed: 0.15 s from the renewal, where the intent wrote 60 s
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the lease was never renewed")
        assert found.version == stored.version  # a renewal is not a transition
    finally:
        beat.stop()

    other = heartbeat.start(ledger, stored.op_id, "tok-B", lease_seconds=0.15)
    try:
        await asyncio.to_thread(
            _until, lambda: other not in heartbeat._scheduler()._due, "the first renewal to be due"
        )
        await asyncio.sleep(0.3)  # six intervals: it would be due again by now
        assert other not in heartbeat._scheduler()._due  # refused once, not renewed again
    finally:
        other.stop()
