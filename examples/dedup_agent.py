"""A provider that deduplicates on our key: ``Effect(dedup_window=...)``.

The tool sends ``current_operation().provider_key`` as the ``Idempotency-Key``
header. The notification service stores the first response under the key and
replays it, so after a crash the call can simply be sent again under the same key.

    python examples/dedup_agent.py

1. The worker is SIGKILLed after the service committed the notification but
   before the answer came back. A fresh process resumes the thread: the call is
   re-sent under the same key, the service replays its first answer, and the model
   is told the notification was sent. The service holds exactly one notification.
2. No crash, but the answer takes longer than the client's timeout. The timeout
   is ambiguous, not a failure: the call is re-sent under the same key in the same
   run, and the model again sees one notification sent.

Exits 1 if the service's own count is not exactly one notification per scenario.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import timedelta
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

from langgraph_effects import DefiniteFailure, Effect, EffectToolNode, current_operation

CLIENT_TIMEOUT = httpx.Timeout(3.0)
RECIPIENT = "ada@example.com"
PROMPT = f"Tell {RECIPIENT} that the invoice is paid."


@tool
async def send_notification(to: str, text: str) -> str:
    """Send a notification email to ``to``."""
    op = current_operation()  # the durable operation this call runs under
    async with httpx.AsyncClient(base_url=PROVIDER_URL, timeout=CLIENT_TIMEOUT) as http:
        response = await http.post(
            "/notifications",
            json={"to": to, "text": text},
            headers={"Idempotency-Key": op.provider_key},  # the same key on every attempt
        )
    if response.status_code in (400, 403, 422):  # refused: provably nothing was sent
        raise DefiniteFailure(response.json()["error"]["message"])
    response.raise_for_status()  # anything else (5xx, 409 in flight) is ambiguous
    replayed = " (replayed by the provider)" if response.headers.get("Idempotent-Replayed") else ""
    return f"notification {response.json()['id']} sent to {to}{replayed}"


def make_graph(checkpointer: Any) -> Any:
    tools = EffectToolNode(  # instead of ToolNode([send_notification])
        [send_notification],
        effects={"send_notification": Effect(dedup_window=timedelta(hours=24))},
    )
    model = scripted_model("send_notification", {"to": RECIPIENT, "text": "Your invoice is paid."})
    return build_graph(model, tools, checkpointer)


def demo() -> int:
    failures: list[str] = []
    with (
        tempfile.TemporaryDirectory() as work,
        run_in_background(db=Path(work, "provider.sqlite"), retention=24 * 3600) as service,
    ):
        workers = Workers(__file__, db=str(Path(work, "agent.sqlite")), provider_url=service.url)
        print(f"notification service on {service.url} (keys kept 24 h)")

        def sent() -> int:
            return sum(1 for n in service.notifications() if n["to"] == RECIPIENT)

        heading("1. the worker is killed after the provider committed, before it answered")
        service.set_faults(timeout_next=30)  # commit, then hold the answer for 30 s
        workers.kill_mid_call("crash", committed=lambda: sent() >= 1)
        service.clear_faults()
        print(f"  the service holds {sent()} notification; the agent never saw the answer")
        out = workers.run("resume", "crash")
        print("  resumed in a fresh process; the thread now reads:")
        show_messages(out)
        show_audit(workers.db, out)
        count = sent()
        print(f"  the service's own count: {count} notification, outcomes {service.stats()['outcomes']}")
        if count != 1:
            failures.append(f"scenario 1: {count} notifications, expected exactly 1")
        [message] = tool_messages(out)
        if message["artifact"]["state"] != "confirmed":
            failures.append(f"scenario 1: operation is {message['artifact']['state']}, expected confirmed")

        heading("2. no crash: the answer is slower than the client's 3 s timeout")
        before = service.stats()["notifications"]
        service.set_faults(timeout_next=6)
        out = workers.run("start", "timeout")
        show_messages(out)
        show_audit(workers.db, out)
        added = service.stats()["notifications"] - before
        print(f"  notifications the service added: {added}")
        if added != 1:
            failures.append(f"scenario 2: {added} notifications, expected exactly 1")
        [message] = tool_messages(out)
        if message["status"] != "success" or message["artifact"]["attempts"] != 2:
            failures.append(f"scenario 2: expected a success after 2 attempts, got {message}")
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(worker_main(make_graph, PROMPT, sys.argv[1:]) if "--worker" in sys.argv else demo())
