"""Drive the support agent that ``langgraph dev`` serves, with LangGraph's SDK client.

Creates a thread, starts a run, waits for it to end and prints the thread's messages.
When the run stopped at an effect review (``HELPDESK_TIMEOUT=1`` makes the helpdesk's
first answer get lost after it opened the ticket), it prints the review and the
command that answers it: ``--landed RECEIPT`` says "the ticket exists" and waits for
the resumed run::

    python client.py                                   # http://127.0.0.1:2024, a new thread
    python client.py --thread ID --landed '{"ticket": "HD-1042"}'   # answer its review

Exit codes: 0 the run finished; 6 it waits at a review nobody answered (as
``langgraph-effects recover`` uses 6); 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import textwrap
from typing import Any

from langgraph_sdk import get_client

ASSISTANT = "support"  # the graph's name in langgraph.json


async def run_and_wait(client: Any, thread_id: str, **run: Any) -> dict[str, Any]:
    """Start a run on the thread, wait until it ends, return the thread's state."""
    started = await client.runs.create(thread_id, ASSISTANT, **run)
    await client.runs.join(thread_id, started["run_id"])
    state: dict[str, Any] = await client.threads.get_state(thread_id)
    return state


def show(state: dict[str, Any]) -> None:
    for message in state["values"].get("messages", []):
        calls = ", ".join(call["name"] for call in message.get("tool_calls") or [])
        print(f"{message['type']:>5}: {message['content'] or f'(calls {calls})'}")


async def main(url: str, request: str, landed: str | None, thread_id: str | None) -> int:
    client = get_client(url=url)
    if thread_id is None:
        thread_id = (await client.threads.create())["thread_id"]
        print(f"thread {thread_id} on {url}")
        message = {"role": "user", "content": request}
        state = await run_and_wait(client, thread_id, input={"messages": [message]})
    else:
        state = await client.threads.get_state(thread_id)
    if state["interrupts"]:
        [pending] = state["interrupts"]
        [action] = pending["value"]["action_requests"]
        print(f"the run stopped at a review of {action['name']} {action['args']}:")
        print(textwrap.indent(action["description"], "  "))
        if landed is None:
            print(f"answer it: python client.py --thread {thread_id} --landed '{{\"ticket\": \"HD-1042\"}}'")
            return 6
        answer = {"decisions": [{"type": "respond", "message": landed}]}  # it landed; the receipt
        state = await run_and_wait(client, thread_id, command={"resume": {pending["id"]: answer}})
    show(state)
    return 6 if state["interrupts"] else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:2024", help="the server (default: %(default)s)")
    parser.add_argument("--request", default="Acme wants a refund for order 1042.", help="the user's message")
    parser.add_argument("--thread", metavar="ID", help="an existing thread: answer its review")
    parser.add_argument(
        "--landed", metavar="RECEIPT", help="answer a review: the ticket exists (JSON receipt)"
    )
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.url, args.request, args.landed, args.thread)))
