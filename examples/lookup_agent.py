"""A provider we can ask "did it land?": ``Effect(lookup=...)``.

The tool sends ``current_operation().provider_key`` as the notification's client
``reference`` (no idempotency key: this provider would execute a re-send again).
After a crash, the lookup asks the service for that reference before anything is
sent again.

    python examples/lookup_agent.py            # strong lookup: GET /notifications/by-reference/{ref}
    python examples/lookup_agent.py --listing  # a listing that lags: GET /notifications?reference=

Strong lookup:

1. The worker is SIGKILLed after the service committed the notification. A fresh
   process resumes the thread; the lookup finds the notification (200) and the
   operation is confirmed with it as the receipt. Nothing is sent again.
2. Same crash, but support withdraws the notification before the thread resumes.
   The lookup answers 410: it did land, so it is confirmed (withdrawn) and never
   re-sent.

Listing (``--listing``): the service's listing lags 8 s behind writes and the
resume comes sooner, so the first polls find nothing. With
``lookup_consistency="eventual", settle_after=10`` absence is not taken as proof:
the lookup polls again until the notification shows up.

Exits 1 if the service's own count is not exactly one notification per scenario,
or if anything was posted twice.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from _demo import (
    PROVIDER_URL,
    Workers,
    build_graph,
    exit_status,
    heading,
    scripted_model,
    show_audit,
    show_messages,
    tool_messages,
    worker_main,
)
from langchain_core.tools import tool
from provider import run_in_background

from langgraph_effects import (
    DefiniteFailure,
    Effect,
    EffectToolNode,
    Inconclusive,
    Landed,
    LookupRequest,
    NotLanded,
    current_operation,
)

CLIENT_TIMEOUT = httpx.Timeout(3.0)
LISTING_LAG = 8.0
LISTING = "--listing" in sys.argv
PROMPT = "Tell the customer that the parcel has shipped."


@tool
async def send_notification(to: str, text: str) -> str:
    """Send a notification email to ``to``."""
    op = current_operation()
    async with httpx.AsyncClient(base_url=PROVIDER_URL, timeout=CLIENT_TIMEOUT) as http:
        response = await http.post(
            "/notifications", json={"to": to, "text": text, "reference": op.provider_key}
        )
    if response.status_code in (400, 403):
        raise DefiniteFailure(response.json()["error"]["message"])
    response.raise_for_status()
    return f"notification {response.json()['id']} sent to {to}"


async def find_by_reference(request: LookupRequest) -> Landed | NotLanded | Inconclusive:
    """Strongly consistent: the service's answer is the truth right now."""
    async with httpx.AsyncClient(base_url=PROVIDER_URL, timeout=CLIENT_TIMEOUT) as http:
        response = await http.get(f"/notifications/by-reference/{request.provider_key}")
    if response.status_code == 200:
        return Landed(receipt={"notification": response.json()["id"]})
    if response.status_code == 410:  # withdrawn since: it did land, never send it again
        return Landed(receipt={"notification": response.json()["notification"]["id"]}, withdrawn=True)
    if response.status_code == 404:
        return NotLanded()
    return Inconclusive(f"lookup answered HTTP {response.status_code}")  # raising counts as inconclusive too


async def find_in_listing(request: LookupRequest) -> Landed | NotLanded | Inconclusive:
    """Eventually consistent: an empty page right after a write proves nothing."""
    async with httpx.AsyncClient(base_url=PROVIDER_URL, timeout=CLIENT_TIMEOUT) as http:
        response = await http.get("/notifications", params={"reference": request.provider_key})
    if response.status_code != 200:
        return Inconclusive(f"listing answered HTTP {response.status_code}")
    found = response.json()["data"]
    return Landed(receipt={"notification": found[0]["id"]}) if found else NotLanded()


def effect() -> Effect:
    if LISTING:
        return Effect(lookup=find_in_listing, lookup_consistency="eventual", settle_after=LISTING_LAG + 2)
    return Effect(lookup=find_by_reference)


def make_graph(checkpointer: Any, to: str = "grace@example.com") -> Any:
    tools = EffectToolNode([send_notification], effects={"send_notification": effect()})
    model = scripted_model("send_notification", {"to": to, "text": "Your parcel has shipped."})
    return build_graph(model, tools, checkpointer)


def demo() -> int:
    failures: list[str] = []
    with (
        tempfile.TemporaryDirectory() as work,
        run_in_background(db=Path(work, "provider.sqlite"), lag=LISTING_LAG if LISTING else 0.0) as service,
    ):
        workers = Workers(
            __file__, db=str(Path(work, "agent.sqlite")), provider_url=service.url, extra=sys.argv[1:]
        )
        print(
            f"notification service on {service.url}" + (f" (listing lags {LISTING_LAG} s)" if LISTING else "")
        )
        scenarios = [("listing", False)] if LISTING else [("landed", False), ("withdrawn", True)]
        for number, (thread, withdraw) in enumerate(scenarios, 1):
            before = service.stats()

            def added(before: dict[str, Any] = before) -> int:
                return int(service.stats()["notifications"] - before["notifications"])

            heading(f"{number}. the worker is killed after the provider committed, before it answered")
            service.set_faults(timeout_next=30)
            workers.kill_mid_call(thread, committed=lambda: added() >= 1)
            service.clear_faults()
            if withdraw:
                [latest] = service.notifications()[-1:]
                httpx.post(f"{service.url}/notifications/{latest['id']}/withdraw").raise_for_status()
                print(f"  support withdrew {latest['id']} before the thread resumed")
            out = workers.run("resume", thread)
            print("  resumed in a fresh process; the thread now reads:")
            show_messages(out)
            show_audit(workers.db, out)
            posts = service.stats()["posts"] - before["posts"]
            print(f"  the service's own count: {added()} notification from {posts} POST")
            if added() != 1 or posts != 1:
                failures.append(f"{thread}: {added()} notifications from {posts} posts, expected 1 from 1")
            [message] = tool_messages(out)
            artifact = message["artifact"]
            if artifact["state"] != "confirmed" or artifact["evidence"] != "lookup":
                failures.append(f"{thread}: expected confirmed by lookup, got {artifact}")
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(worker_main(make_graph, PROMPT, sys.argv[1:]) if "--worker" in sys.argv else demo())
