"""The examples: the notification service's own idempotency semantics, and each agent
script run end to end as a user would run it (it starts the service itself).

Needs the ``examples`` extra (starlette, uvicorn, httpx). Without it these tests
skip, except under ``CI=true``, where a missing extra is a failure.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import require_extra

pytestmark = pytest.mark.slow  # example servers and scripts as processes

ROOT = Path(__file__).resolve().parents[1]

EXAMPLES = ROOT / "examples"


for _module in ("starlette", "uvicorn", "httpx"):
    require_extra(_module, "examples")

import httpx  # noqa: E402

# -- the notification service ---------------------------------------------------------------


@pytest.fixture
def start_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from provider import run_in_background

    started: list[Any] = []

    def start(**options: Any) -> Any:
        service = run_in_background(db=tmp_path / f"provider-{len(started)}.sqlite", **options)
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()


@pytest.fixture
def provider(start_provider: Callable[..., Any]) -> Any:
    return start_provider()


def post(
    service: Any, payload: dict[str, Any], key: str | None = None, timeout: float = 10
) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return httpx.post(f"{service.url}/notifications", json=payload, headers=headers, timeout=timeout)


NOTE = {"to": "ada@example.com", "text": "hello", "reference": "ref-1"}


def test_provider_replays_the_first_response_for_a_key(provider: Any) -> None:
    first = post(provider, NOTE, key="k1")
    assert first.status_code == 201 and "idempotent-replayed" not in first.headers
    again = post(provider, NOTE, key="k1")
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert provider.stats()["notifications"] == 1
    assert provider.stats()["outcomes"] == {"created": 1, "replayed": 1}


def test_provider_without_a_key_executes_every_request(provider: Any) -> None:
    assert post(provider, NOTE).status_code == 201
    assert post(provider, NOTE).status_code == 201
    assert provider.stats()["notifications"] == 2


def test_provider_replays_errors_too(provider: Any) -> None:
    blocked = {"to": "eve@blocked.example", "text": "hello"}
    first = post(provider, blocked, key="k-blocked")
    assert first.status_code == 403 and first.json()["error"]["type"] == "recipient_blocked"
    again = post(provider, blocked, key="k-blocked")
    assert again.status_code == 403 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert provider.stats()["notifications"] == 0


def test_provider_stores_nothing_for_an_invalid_request(provider: Any) -> None:
    bad = post(provider, {"to": "not-an-address", "text": "hello"}, key="k2")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    # Validation failed before anything ran, so the key is still free.
    assert post(provider, NOTE, key="k2").status_code == 201
    assert provider.stats()["notifications"] == 1


def test_provider_rejects_a_changed_payload_under_the_same_key(provider: Any) -> None:
    assert post(provider, NOTE, key="k3").status_code == 201
    changed = post(provider, {**NOTE, "text": "goodbye"}, key="k3")
    assert changed.status_code == 422
    assert changed.json()["error"]["type"] == "idempotency_error"
    assert provider.stats()["notifications"] == 1


async def test_provider_conflicts_while_the_key_is_in_flight(provider: Any) -> None:
    provider.set_faults(latency=3.0)  # the second request, sent at 0.3 s, has 2.7 s of slack
    async with httpx.AsyncClient(base_url=provider.url, timeout=10) as client:

        async def send(delay: float) -> httpx.Response:
            await asyncio.sleep(delay)
            return await client.post("/notifications", json=NOTE, headers={"Idempotency-Key": "k4"})

        first, second = await asyncio.gather(send(0), send(0.3))
    assert first.status_code == 201
    assert second.status_code == 409
    assert second.json()["error"]["type"] == "idempotency_key_in_use"
    # Once the first one finished, the same request is a replay.
    provider.clear_faults()
    assert post(provider, NOTE, key="k4").headers["idempotent-replayed"] == "true"
    assert provider.stats()["notifications"] == 1


async def test_provider_a_stale_in_flight_claim_is_taken_over_once(
    start_provider: Callable[..., Any],
) -> None:
    service = start_provider(in_flight_timeout=0.5)
    # The first request holds its claim for 3 s; the second, sent at 0.8 s, finds it stale
    # (older than 0.5 s) with more than 2 s of slack for a loaded machine.
    service.set_faults(latency=3.0)
    async with httpx.AsyncClient(base_url=service.url, timeout=10) as client:

        async def send(delay: float) -> httpx.Response:
            await asyncio.sleep(delay)
            return await client.post("/notifications", json=NOTE, headers={"Idempotency-Key": "k5"})

        first, second = await asyncio.gather(send(0), send(0.8))
    # The second request found a claim older than in_flight_timeout and took it over;
    # the first, still running, then applies nothing.
    assert (first.status_code, second.status_code) == (409, 201)
    assert service.stats()["notifications"] == 1


def test_provider_keys_expire_after_the_retention_window(start_provider: Callable[..., Any]) -> None:
    retention = 3.0  # wide enough that a loaded machine does not stall past it between two posts
    service = start_provider(retention=retention)
    first = post(service, NOTE, key="k6")
    assert post(service, NOTE, key="k6").headers.get("idempotent-replayed") == "true"
    time.sleep(max(0.0, first.json()["created"] + retention + 0.2 - time.time()))
    later = post(service, NOTE, key="k6")
    assert later.status_code == 201 and "idempotent-replayed" not in later.headers
    assert later.json()["id"] != first.json()["id"]
    assert service.stats()["notifications"] == 2


def test_provider_lookup_by_reference_is_strong_and_the_listing_lags(
    start_provider: Callable[..., Any],
) -> None:
    lag = 2.0
    service = start_provider(lag=lag)
    hidden_seen = 0
    created: dict[str, Any] = {}
    for attempt in range(5):
        reference = f"ref-{attempt}"
        lookup = f"{service.url}/notifications/by-reference/{reference}"
        assert httpx.get(lookup).status_code == 404
        created = post(service, {**NOTE, "reference": reference}).json()
        found = httpx.get(lookup)
        assert found.status_code == 200 and found.json()["id"] == created["id"]  # strong at once
        listed = httpx.get(f"{service.url}/notifications", params={"reference": reference}).json()["data"]
        # The listing's answer came back less than `lag` after the write, so its horizon
        # (server time minus lag) was before the write: the item must be hidden. A loaded
        # machine can stall longer than that between the calls; then try a fresh write.
        if time.time() - created["created"] < lag:
            assert listed == []
            hidden_seen += 1
            break
    assert hidden_seen == 1, "every attempt stalled past the lag; the machine is too loaded to observe it"
    time.sleep(max(0.0, created["created"] + lag + 0.2 - time.time()))
    params = {"reference": created["reference"]}
    listed = httpx.get(f"{service.url}/notifications", params=params).json()["data"]
    assert [n["id"] for n in listed] == [created["id"]]


def test_provider_withdrawn_is_410_on_lookup_and_hidden_from_the_listing(provider: Any) -> None:
    created = post(provider, NOTE).json()
    withdrawn = httpx.post(f"{provider.url}/notifications/{created['id']}/withdraw")
    assert withdrawn.status_code == 200 and withdrawn.json()["status"] == "withdrawn"
    lookup = httpx.get(f"{provider.url}/notifications/by-reference/ref-1")
    assert lookup.status_code == 410
    assert lookup.json()["error"]["type"] == "withdrawn"
    assert lookup.json()["notification"]["id"] == created["id"]
    assert httpx.get(f"{provider.url}/notifications", params={"reference": "ref-1"}).json()["data"] == []
    assert provider.stats()["notifications"] == 1 and provider.stats()["withdrawn"] == 1
    assert [n["status"] for n in provider.notifications()] == ["withdrawn"]


def test_provider_times_out_after_committing(provider: Any) -> None:
    provider.set_faults(timeout_next=3.0)
    with pytest.raises(httpx.ReadTimeout):
        post(provider, NOTE, key="k7", timeout=0.5)
    assert provider.stats()["notifications"] == 1  # the effect landed before the timeout
    again = post(provider, NOTE, key="k7")
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert provider.stats()["notifications"] == 1


def test_provider_crashes_after_committing_and_keeps_the_effect(provider: Any) -> None:
    provider.set_faults(crash_next=True)
    with pytest.raises(httpx.TransportError):
        post(provider, NOTE, key="k8")
    provider.proc.wait(timeout=10)
    assert not provider.alive
    provider.restart()  # same port, same file
    assert provider.stats()["notifications"] == 1
    again = post(provider, NOTE, key="k8")
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert provider.stats()["notifications"] == 1


def test_provider_admin_faults_refuse_unknown_switches(provider: Any) -> None:
    response = httpx.post(f"{provider.url}/_admin/faults", json={"explode": True})
    assert response.status_code == 400
    assert provider.set_faults(latency=0.1)["latency"] == 0.1
    assert provider.clear_faults()["latency"] == 0.0


# -- the agent scripts, run as a user runs them -----------------------------------------------


@pytest.mark.crash
@pytest.mark.parametrize(
    "command",
    [
        ["dedup_agent.py"], ["lookup_agent.py"], ["lookup_agent.py", "--listing"], ["blind_agent.py"],
        ["sync_quickstart.py"],
    ],
    ids=["dedup", "lookup", "lookup-listing", "blind", "sync-quickstart"],
)
def test_example_script_runs_green(command: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / command[0]), *command[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert proc.stdout.rstrip().endswith("OK")
    assert "killed with SIGKILL" in proc.stdout
