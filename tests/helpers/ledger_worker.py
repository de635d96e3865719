"""A worker process for the SQLite ledger tests; run as a script.

    python tests/helpers/ledger_worker.py race  DB WORKDIR NAME PEER ROUNDS
    python tests/helpers/ledger_worker.py crash DB MARKER

``race``: for each round, meet the peer at a barrier (files in WORKDIR), then
claim the round's operation with ``record_intents(..., change=dispatch)`` under
this worker's own owner token; the worker that did not win tries to take it over
with ``resend`` (which must be refused). Then meet again and race
``transition(succeed, expected_version=1)``. One JSON line per round on stdout.

``crash``: record one operation as dispatched (intent and dispatch marker in one
commit), write MARKER, then "call the provider" for a minute. The test kills it
there with SIGKILL; the outcome commit never happens.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from pathlib import Path

from langgraph_effects.core.operation import Change, Event, Operation, Owner
from langgraph_effects.errors import EffectsError
from langgraph_effects.ledger.sqlite import SqliteLedger


def make_op(op_id: str) -> Operation:
    return Operation(
        op_id=op_id,
        thread_id="thread-race",
        tool="send_email",
        tool_call_id=f"call-{op_id}",
        args={"to": "a@example.com"},
        args_hash="h1:race",
        provider_key=f"key-{op_id}",
        contract="dedup",
    )


def owner(token: str) -> Owner:
    return Owner(host=socket.gethostname(), pid=os.getpid(), started=0.0, token=token)


def barrier(workdir: Path, tag: str, name: str, peer: str) -> None:
    """Both processes leave within microseconds of each other: spin, don't sleep."""
    (workdir / f"ready-{tag}-{name}").touch()
    other = workdir / f"ready-{tag}-{peer}"
    deadline = time.monotonic() + 60
    while not other.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: peer {peer} never reached barrier {tag}")


async def race(db: str, workdir: Path, name: str, peer: str, rounds: int) -> None:
    async with SqliteLedger.from_conn_string(db) as ledger:
        await ledger.setup()
        for r in range(rounds):
            op_id = f"op-race-{r}"
            mine = f"{name}-{r}"
            report: dict[str, object] = {"round": r, "name": name, "token": mine}

            barrier(workdir, f"{r}-claim", name, peer)
            dispatch = Change(Event.DISPATCH, owner=owner(mine), lease_expires_at=time.time() + 30)
            [stored] = await ledger.record_intents([make_op(op_id)], change=dispatch, actor=name)
            assert stored.owner is not None
            report["owner"] = stored.owner.token
            report["claim_version"] = stored.version
            report["claim_state"] = stored.state.value
            if stored.owner.token != mine:
                # Someone else is sending it: taking it over must be refused.
                takeover = Change(Event.RESEND, owner=owner(mine), lease_expires_at=time.time())
                try:
                    await ledger.transition(op_id, takeover, expected_version=stored.version, actor=name)
                    report["takeover"] = "ok"
                except EffectsError as error:
                    report["takeover"] = type(error).__name__

            barrier(workdir, f"{r}-succeed", name, peer)
            succeed = Change(
                Event.SUCCEED,
                result=name.encode(),
                result_type="str",
                evidence={"kind": "result", "by": name},
            )
            try:
                await ledger.transition(op_id, succeed, expected_version=1, actor=name)
                report["succeed"] = "ok"
            except EffectsError as error:
                report["succeed"] = type(error).__name__
            print(json.dumps(report), flush=True)


async def crash(db: str, marker: Path) -> None:
    async with SqliteLedger.from_conn_string(db) as ledger:
        await ledger.setup()
        token = f"crash-{os.getpid()}"
        dispatch = Change(Event.DISPATCH, owner=owner(token), lease_expires_at=time.time() + 30)
        await ledger.record_intents([make_op("op-crash")], change=dispatch, actor="doomed")
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(token)
        tmp.rename(marker)  # the intent commit has returned
        await asyncio.sleep(60)  # the request is "on the wire"; SIGKILL lands here
        await ledger.transition("op-crash", Change(Event.SUCCEED, result=b"sent"), expected_version=1)


def main(argv: list[str]) -> None:
    command, *rest = argv
    if command == "race":
        db, workdir, name, peer, rounds = rest
        asyncio.run(race(db, Path(workdir), name, peer, int(rounds)))
    elif command == "crash":
        db, marker = rest
        asyncio.run(crash(db, Path(marker)))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
