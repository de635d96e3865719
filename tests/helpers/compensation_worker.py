"""A worker process for compensation crash tests: a booking effect whose undo cancels it
at a provider that keeps its own records (:class:`~langgraph_effects.lab.providers.Provider`).

``python -m tests.helpers.compensation_worker DB SCHEMA PROVIDER ACTION OP_ID [KILL_AT]``

* ``ACTION`` ``compensate``: ask to undo ``OP_ID`` and run the undo; ``finish``: finish
  every interrupted compensation (what a resume or ``recover`` does).
* ``KILL_AT`` (``after_intent`` or ``before_outcome``): SIGKILL this process there
  while running the undo: before the cancel is sent, or after the provider applied it
  but before the ledger recorded it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from langgraph_effects import Effect, Undo, current_operation
from langgraph_effects._runtime import faults
from langgraph_effects._runtime.compensation import compensate, finish_compensations
from langgraph_effects.core.operation import Operation
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.registry import open_ledger


def effects(provider_path: str, *, book_dedup: bool = True, undo_dedup: bool = True) -> dict[str, Effect]:
    """``book`` (dedup at the provider, or blind) and its undo ``cancel`` (dedup under
    its own key, or blind: then a crash that leaves it in doubt sends it to review)."""

    def cancel(booking: str) -> str:
        with Provider(provider_path, mode="dedup") as provider:
            receipt = provider.apply(
                {"operation": f"cancel:{booking}"}, key=current_operation().provider_key
            )
        return receipt.effect_id

    undo = Undo(
        cancel,
        args=lambda request: {"booking": request.provider_key},
        effect=Effect(dedup_window=3600 if undo_dedup else None),
    )
    return {"book": Effect(dedup_window=3600 if book_dedup else None, compensate=undo)}


def _kill(point: str, op: Operation) -> None:
    if op.compensates is not None:
        os.kill(os.getpid(), signal.SIGKILL)


async def main(db: str, schema: str, provider_path: str, action: str, op_id: str, kill_at: str) -> None:
    if kill_at:
        faults.install(kill_at, _kill)
    async with open_ledger(db, schema=schema or None) as ledger:
        out: dict[str, Any]
        if action == "compensate":
            report = await compensate(ledger, op_id, effects=effects(provider_path), actor="test")
            out = {"verdict": report.verdict, "state": report.state}
        else:
            reports = await finish_compensations(ledger, effects=effects(provider_path))
            out = {"finished": [r.state for r in reports]}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6], sys.argv[6] if len(sys.argv) > 6 else ""))


def cli_effects() -> dict[str, Effect]:
    """:func:`effects` at the provider named by ``$COMPENSATION_PROVIDER`` (for ``--effects``)."""
    return effects(os.environ["COMPENSATION_PROVIDER"])


def make_graph(checkpointer: Any) -> Any:
    """The graph ``recover --graph`` resumes: its node carries :func:`cli_effects`."""
    from langchain_core.tools import tool

    from tests.helpers.one_call import call, one_call_graph

    @tool
    def book(room: str) -> str:
        """Book a room."""
        return room

    return one_call_graph([book], cli_effects(), checkpointer, [call("book", room="12")])
