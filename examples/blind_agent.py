"""A provider that can neither dedup nor be asked: ``Effect.blind()`` (the default).

The tool posts without an idempotency key or a reference, like a webhook or an
SMTP relay. After a crash in the window, nobody can prove whether it landed, so
the call is never sent again automatically: the graph stops with one
``effect_review`` interrupt carrying the evidence, and an operator decides.

    python examples/blind_agent.py

1. The worker is SIGKILLed after the service committed the notification.
2. A fresh process resumes the thread: it stops with the review interrupt.
3. The operator checks the service's records, finds the notification and answers
   ``landed`` with ``resume_command``; the model is told the effect landed and
   was confirmed by an operator. Nothing was sent twice.

(Out of band, the same verdict can be given with the console:
``langgraph-effects list --db agent.sqlite`` / ``show`` / ``resolve --landed``.)

Exits 1 if the service's own count is not exactly one notification.
"""

from __future__ import annotations

import json
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
    show_json,
    show_messages,
    tool_messages,
    worker_main,
)
from langchain_core.tools import tool
from provider import run_in_background

from langgraph_effects import DefiniteFailure, Effect, EffectToolNode

CLIENT_TIMEOUT = httpx.Timeout(3.0)
RECIPIENT = "linus@example.com"
TEXT = "Your build is green."
PROMPT = f"Tell {RECIPIENT} the build is green."


@tool
async def send_notification(to: str, text: str) -> str:
    """Send a notification email to ``to``."""
    async with httpx.AsyncClient(base_url=PROVIDER_URL, timeout=CLIENT_TIMEOUT) as http:
        response = await http.post("/notifications", json={"to": to, "text": text})
    if response.status_code in (400, 403):
        raise DefiniteFailure(response.json()["error"]["message"])
    response.raise_for_status()
    return f"notification {response.json()['id']} sent to {to}"


def make_graph(checkpointer: Any) -> Any:
    tools = EffectToolNode(
        [send_notification],
        effects={"send_notification": Effect.blind()},  # also what an undeclared tool gets
    )
    model = scripted_model("send_notification", {"to": RECIPIENT, "text": TEXT})
    return build_graph(model, tools, checkpointer)


def demo() -> int:
    failures: list[str] = []
    with (
        tempfile.TemporaryDirectory() as work,
        run_in_background(db=Path(work, "provider.sqlite")) as service,
    ):
        workers = Workers(__file__, db=str(Path(work, "agent.sqlite")), provider_url=service.url)
        print(f"notification service on {service.url}")

        def sent() -> list[dict[str, Any]]:
            return [n for n in service.notifications() if n["to"] == RECIPIENT]

        heading("1. the worker is killed after the provider committed, before it answered")
        service.set_faults(timeout_next=30)
        workers.kill_mid_call("blind", committed=lambda: len(sent()) >= 1)
        service.clear_faults()

        heading("2. a fresh process resumes the thread: nothing can prove it landed, so it asks")
        out = workers.run("resume", "blind")
        [pending] = out["interrupts"]
        review = pending["value"]
        [entry] = review["operations"]
        print(f"  interrupt {review['type']!r}, one operation:")
        show_json(
            {
                k: entry[k]
                for k in (
                    "operation_id",
                    "tool",
                    "args",
                    "args_hash",
                    "provider_key",
                    "state",
                    "attempts",
                    "evidence",
                    "allowed_verdicts",
                )
            }
        )
        if tool_messages(out):
            failures.append("the model saw a tool result before the operator decided")

        heading("3. the operator checks the provider's own records and confirms")
        matches = [n for n in sent() if n["text"] == entry["args"]["text"]]
        print(f"  the service holds {len(matches)} matching notification(s): {[n['id'] for n in matches]}")
        given = (
            {"type": "landed", "receipt": {"notification": matches[0]["id"]}}
            if matches
            else {"type": "not_landed"}
        )
        print(f"  verdict: {given}")
        out = workers.run("answer", "blind", "--answer", json.dumps({entry["operation_id"]: given}))
        show_messages(out)
        show_audit(workers.db, out)
        count = len(sent())
        print(f"  the service's own count: {count} notification from {service.stats()['posts']} POST")
        if count != 1 or service.stats()["posts"] != 1:
            failures.append(f"{count} notifications from {service.stats()['posts']} posts, expected 1 from 1")
        [message] = tool_messages(out)
        if message["artifact"]["evidence"] != "verdict" or "operator" not in message["content"]:
            failures.append(f"expected the operator's verdict in the tool message, got {message}")
        if out["interrupts"]:
            failures.append("the review is still pending")
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(worker_main(make_graph, PROMPT, sys.argv[1:]) if "--worker" in sys.argv else demo())
