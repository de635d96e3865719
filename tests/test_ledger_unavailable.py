"""The ledger fails while a call is in flight: read-only, full or locked.

* The ledger turns read-only or full exactly when the outcome is committed: the run
  fails with ``LedgerUnavailableError``, the operation stays ``dispatched`` (accounted
  for), and a resume with a healthy ledger reconciles it by its contract without a
  second effect.
* A ledger locked past the busy timeout at the intent commit sends nothing and writes
  nothing; locked at the outcome commit, it reconciles like the cases above.
* A corrupted ledger file sends nothing.

Effects are counted at providers that keep their own records in their own files.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    Effect,
    Landed,
    LedgerCorruptError,
    LedgerUnavailableError,
    LookupRequest,
    NotLanded,
    SqliteLedger,
    attach_ledger,
)
from langgraph_effects._runtime import faults as _faults
from langgraph_effects.lab.providers import EffectRecord, Provider
from langgraph_effects.ledger.sqlite import connect
from tests.helpers.one_call import audit_rows, call, ledger_rows, make_sender, one_call_graph, tool_messages


@pytest.fixture(autouse=True)
def _no_fault_hooks() -> Iterator[None]:
    _faults.clear()
    yield
    _faults.clear()


# -- the ledger fails exactly at the outcome commit --------------------------------------


def lookup_of(provider: Provider) -> Any:
    async def lookup(request: LookupRequest) -> Any:
        found = provider.get(request.provider_key)
        if isinstance(found, EffectRecord):
            return Landed(receipt={"effect_id": found.effect_id})
        return NotLanded()

    return lookup


def break_ledger(ledger: SqliteLedger, how: str) -> None:
    """Make the ledger's own connection unable to write, right now (called from a fault
    hook on the event loop while the connection's thread is idle)."""
    raw = ledger.conn._conn
    if how == "read_only":
        raw.execute("PRAGMA query_only = ON")
    else:  # disk full: the file may not grow by a single page
        pages = raw.execute("PRAGMA page_count").fetchone()[0]
        raw.execute(f"PRAGMA max_page_count = {pages}")


def heal_ledger(ledger: SqliteLedger) -> None:
    raw = ledger.conn._conn
    raw.execute("PRAGMA query_only = OFF")
    raw.execute("PRAGMA max_page_count = 1073741823")


@pytest.mark.parametrize("contract", ["dedup", "lookup"])
@pytest.mark.parametrize(("how", "message"), [("read_only", "read-only"), ("disk_full", "disk")])
async def test_outcome_commit_fails_then_reconciles(
    tmp_path: Path, contract: str, how: str, message: str
) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup" if contract == "dedup" else "lookup")
    effect = Effect(dedup_window=3600) if contract == "dedup" else Effect(lookup=lookup_of(provider))
    db = tmp_path / "agent.sqlite"
    config: Any = {"configurable": {"thread_id": "t1"}}
    async with AsyncEffectSqliteSaver.from_conn_string(db) as saver:
        await saver.setup()
        graph = one_call_graph(
            [make_sender(provider, big=True)], {"send": effect}, saver, [call("send", label="L")]
        )
        broken: list[str] = []

        def hook(point: str, op: Any) -> None:
            broken.append(op.op_id)
            break_ledger(saver.ledger, how)

        _faults.install("before_outcome", hook)
        with pytest.raises(LedgerUnavailableError, match=message) as raised:
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
        _faults.clear()
        assert "rolled back" in str(raised.value)
        assert provider.count_effects() == {"L": 1}

        # Accounted for: still 'dispatched' (nothing half-written), listed as unresolved.
        [(op_id, state, version, _, _)] = ledger_rows(db)
        assert (op_id, state, version) == (broken[0], "dispatched", 1)
        assert [row[2] for row in audit_rows(db)] == ["intent"]
        heal_ledger(saver.ledger)
        assert [op.op_id for op in await saver.ledger.unresolved()] == [op_id]

        # Resume with a healthy ledger: unknown -> reconciled by the contract.
        await graph.ainvoke(None, config)
        state_after = await graph.aget_state(config)
        [message_out] = tool_messages(state_after)
        assert message_out.status == "success" and message_out.artifact["state"] == "confirmed"
        assert provider.count_effects() == {"L": 1}  # nothing duplicated
        events = [a.event for a in await saver.ledger.audit(op_id)]
        if contract == "dedup":
            assert events == ["intent", "lose", "resend", "succeed"]
            assert provider.count_requests("apply") == 2  # re-sent under the same key
        else:
            assert events == ["intent", "lose", "confirm"]
            assert provider.count_requests("apply") == 1  # looked up, never re-sent
        assert await saver.ledger.unresolved() == []


# -- a ledger locked by another process --------------------------------------------------

LOCKER = r"""
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("ROLLBACK")
"""


def hold_write_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process holds a write transaction on ``path`` for ``seconds``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


@asynccontextmanager
async def short_fuse_ledger(path: Path) -> AsyncIterator[SqliteLedger]:
    """A SQLite ledger that gives up after 200 ms behind another writer."""
    conn = await connect(path)
    try:
        ledger = SqliteLedger(conn, where=f"sqlite:{path}", busy_timeout_ms=200)
        await ledger.setup()
        yield ledger
    finally:
        await conn.close()


@pytest.mark.slow
async def test_locked_ledger_at_intent_sends_and_writes_nothing(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    db = tmp_path / "ledger.sqlite"
    config: Any = {"configurable": {"thread_id": "t1"}}
    async with short_fuse_ledger(db) as ledger:
        graph = one_call_graph(
            [make_sender(provider)], {"send": Effect(dedup_window=3600)},
            attach_ledger(InMemorySaver(), ledger), [call("send", label="L")],
        )
        locker = hold_write_lock(db, 3.0)
        try:
            started = time.monotonic()
            with pytest.raises(LedgerUnavailableError, match="locked") as raised:
                await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
            assert time.monotonic() - started < 2.5  # the busy timeout, not the lock's length
            assert "retrying is safe" in str(raised.value)
        finally:
            locker.wait(timeout=30)
        assert provider.count_requests() == 0  # nothing was sent
        assert ledger_rows(db) == [] and audit_rows(db) == []  # nothing half-written

        # Once the lock is gone, the same thread proceeds and sends exactly once.
        await graph.ainvoke(None, config)
        assert provider.count_effects() == {"L": 1} and provider.count_requests("apply") == 1
        assert [row[1] for row in ledger_rows(db)] == ["confirmed"]


@pytest.mark.slow
async def test_locked_ledger_at_the_outcome_commit_reconciles(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    db = tmp_path / "ledger.sqlite"
    config: Any = {"configurable": {"thread_id": "t1"}}
    lockers: list[subprocess.Popen[str]] = []
    async with short_fuse_ledger(db) as ledger:
        graph = one_call_graph(
            [make_sender(provider)], {"send": Effect(dedup_window=3600)},
            attach_ledger(InMemorySaver(), ledger), [call("send", label="L")],
        )
        _faults.install("before_outcome", lambda point, op: lockers.append(hold_write_lock(db, 1.5)))
        try:
            with pytest.raises(LedgerUnavailableError, match="locked"):
                await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
        finally:
            _faults.clear()
            for proc in lockers:
                proc.wait(timeout=30)
        assert provider.count_effects() == {"L": 1}
        [(op_id, state, version, _, _)] = ledger_rows(db)
        assert (state, version) == ("dispatched", 1)

        await graph.ainvoke(None, config)
        assert provider.count_effects() == {"L": 1}
        assert [a.event for a in await ledger.audit(op_id)] == ["intent", "lose", "resend", "succeed"]


async def test_corrupted_ledger_file_sends_nothing(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    db = tmp_path / "ledger.sqlite"
    async with SqliteLedger.from_conn_string(db) as ledger:
        await ledger.setup()
    for extra in ("-wal", "-shm"):
        Path(str(db) + extra).unlink(missing_ok=True)
    db.write_bytes(b"\x00garbage, not a database" * 200)
    async with SqliteLedger.from_conn_string(db) as ledger:
        graph = one_call_graph(
            [make_sender(provider)], {"send": Effect(dedup_window=3600)},
            attach_ledger(InMemorySaver(), ledger), [call("send", label="L")],
        )
        with pytest.raises(LedgerCorruptError, match="not a usable SQLite database"):
            await graph.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t1"}})
    assert provider.count_requests() == 0
