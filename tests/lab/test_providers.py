"""The lab's simulated providers: their contracts, and that their records are durable."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from langgraph_effects.lab import providers as providers_module
from langgraph_effects.lab.providers import (
    IdempotencyMismatch,
    KeyInFlight,
    Provider,
    ProviderError,
    ProviderRejected,
    Unsupported,
    Withdrawn,
)


class Clock:
    """A settable wall clock shared by the providers of one test."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def payload(n: int = 1, **extra: object) -> dict[str, object]:
    return {"operation": f"op-{n}", "body": f"hello {n}", **extra}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "provider.sqlite"


# -- dedup --------------------------------------------------------------------------


def test_dedup_replays_the_first_response(path: Path) -> None:
    with Provider(path, "dedup") as provider:
        first = provider.apply(payload(), key="k1")
        again = provider.apply(payload(), key="k1")
        assert not first.replayed and again.replayed
        assert again.effect_id == first.effect_id and again.at == first.at
        tally = provider.tally(["op-1"])
        assert (tally.effects, tally.duplicates, tally.missing, tally.sends) == (1, 0, 0, 2)


def test_dedup_replays_a_rejection_too(path: Path) -> None:
    with Provider(path, "dedup") as provider:
        with pytest.raises(ProviderRejected) as first:
            provider.apply(payload(reject=True), key="k1")
        with pytest.raises(ProviderRejected) as again:
            provider.apply(payload(reject=True), key="k1")
        assert not first.value.replayed and again.value.replayed
        assert provider.effects() == []
        assert provider.count_requests("apply") == 2


def test_dedup_refuses_a_changed_payload_under_the_same_key(path: Path) -> None:
    with Provider(path, "dedup") as provider:
        provider.apply(payload(body="a"), key="k1")
        with pytest.raises(IdempotencyMismatch):
            provider.apply(payload(body="b"), key="k1")
        assert len(provider.effects()) == 1
        # The refusal is still a request the provider received.
        assert provider.count_requests("apply") == 2


def test_dedup_reports_a_key_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "provider.sqlite"
    Provider(path, "dedup").setup().close()
    results: dict[str, object] = {}

    def slow_first() -> None:
        with Provider(path, "dedup", processing_time=0.5) as provider:
            results["first"] = provider.apply(payload(), key="k1")

    thread = threading.Thread(target=slow_first)
    thread.start()
    with Provider(path, "dedup") as second:
        deadline = time.monotonic() + 5
        while second.count_requests("apply") == 0:  # wait until the key is claimed
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(KeyInFlight):
            second.apply(payload(), key="k1")
        thread.join()
        replay = second.apply(payload(), key="k1")
        assert replay.replayed and replay.effect_id == results["first"].effect_id  # type: ignore[attr-defined]
        assert len(second.effects()) == 1


def test_dedup_takes_over_a_claim_abandoned_mid_request(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()

    class Died(BaseException):
        pass

    def die(_seconds: float) -> None:
        raise Died

    # The caller claims the key and dies before applying anything.
    monkeypatch.setattr(providers_module.time, "sleep", die)
    with Provider(path, "dedup", processing_time=1.0, clock=clock) as provider, pytest.raises(Died):
        provider.apply(payload(), key="k1")
    monkeypatch.undo()
    with Provider(path, "dedup", in_flight_timeout=30, clock=clock) as provider:
        with pytest.raises(KeyInFlight):
            provider.apply(payload(), key="k1")
        clock.now += 31
        receipt = provider.apply(payload(), key="k1")
        assert not receipt.replayed
        assert len(provider.effects()) == 1


def test_dedup_keys_expire_after_the_retention_window(path: Path) -> None:
    clock = Clock()
    with Provider(path, "dedup", retention=60, clock=clock) as provider:
        first = provider.apply(payload(), key="k1")
        clock.now += 59
        assert provider.apply(payload(), key="k1").replayed
        clock.now += 2
        late = provider.apply(payload(), key="k1")
        assert not late.replayed and late.effect_id != first.effect_id
        tally = provider.tally(["op-1"])
        assert (tally.effects, tally.duplicates) == (2, 1)
        # After expiry a key may even carry another payload.
        clock.now += 61
        provider.apply(payload(body="other"), key="k1")


def test_dedup_needs_a_key(path: Path) -> None:
    with Provider(path, "dedup") as provider, pytest.raises(ValueError):
        provider.apply(payload())


# -- lookups -------------------------------------------------------------------------


def test_strong_lookup_finds_the_effect_at_once(path: Path) -> None:
    with Provider(path, "lookup") as provider:
        assert provider.get("ref-1") is None
        receipt = provider.apply(payload(), key="ref-1")
        found = provider.get("ref-1")
        assert found is not None and not isinstance(found, Withdrawn)
        assert found.effect_id == receipt.effect_id and found.payload == payload()
        assert [r.effect_id for r in provider.list_by_reference("ref-1")] == [receipt.effect_id]
        # A lookup provider does not deduplicate.
        provider.apply(payload(), key="ref-1")
        assert provider.tally(["op-1"]).duplicates == 1
        assert provider.count_requests("get") == 2


def test_lagging_listing_hides_young_records(path: Path) -> None:
    clock = Clock()
    with Provider(path, "lagging", lag=5.0, clock=clock) as provider:
        provider.apply(payload(), key="ref-1")
        assert provider.list_by_reference("ref-1") == []
        clock.now += 4.9
        assert provider.list_by_reference("ref-1") == []
        clock.now += 0.2
        assert len(provider.list_by_reference("ref-1")) == 1
        with pytest.raises(Unsupported):
            provider.get("ref-1")


def test_withdrawn_records_vanish_from_the_listing_but_get_says_410(path: Path) -> None:
    with Provider(path, "withdrawn") as provider:
        receipt = provider.apply(payload(), key="ref-1")
        assert provider.withdraw(receipt.effect_id)
        assert not provider.withdraw(receipt.effect_id)
        assert provider.list_by_reference("ref-1") == []
        answer = provider.get("ref-1")
        assert isinstance(answer, Withdrawn) and answer.record.effect_id == receipt.effect_id
        assert provider.get("never-sent") is None
        # It landed: the count still has it.
        tally = provider.tally(["op-1"])
        assert (tally.effects, tally.missing, tally.withdrawn) == (1, 0, 1)


# -- blind and bookkeeping ----------------------------------------------------------------


def test_blind_provider_only_appends(path: Path) -> None:
    with Provider(path, "blind") as provider:
        provider.apply(payload(1))
        provider.apply(payload(1))
        with pytest.raises(Unsupported):
            provider.apply(payload(2), key="k")
        with pytest.raises(Unsupported):
            provider.get("k")
        with pytest.raises(Unsupported):
            provider.list_by_reference("k")
        tally = provider.tally(["op-1", "op-2"])
        assert (tally.effects, tally.duplicates, tally.missing) == (2, 1, 1)


def test_a_file_keeps_its_mode(path: Path) -> None:
    Provider(path, "dedup").setup().close()
    with pytest.raises(ProviderError, match="dedup"):
        Provider(path, "blind").setup()


def _apply_and_die(path: Path) -> None:
    Provider(path, "blind").apply(payload(7))
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
def test_an_applied_effect_survives_the_callers_sigkill(path: Path) -> None:
    Provider(path, "blind").setup().close()
    process = multiprocessing.get_context("spawn").Process(target=_apply_and_die, args=(path,))
    process.start()
    process.join(60)
    assert process.exitcode == -signal.SIGKILL
    with Provider(path, "blind") as provider:
        assert provider.count_effects() == {"op-7": 1}
