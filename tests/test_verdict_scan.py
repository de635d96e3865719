"""The out-of-band verdict scan is bounded: it reads only what changed recently.

``recover()`` finds threads whose operation an operator decided through the console
or the API (the graph has not told the model yet). It used to load every confirmed
or abandoned operation of the ledger's whole history; now the ledger's query keeps
only operations changed within ``verdicts_within`` (default a week). Counted on a
real SQLite ledger: the number of decided rows the scan loads.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langgraph_effects._runtime.operator import resolve
from langgraph_effects.core.operation import Operation, State
from langgraph_effects.ledger.base import OperationQuery
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.recovery import DEFAULT_VERDICTS_WITHIN
from langgraph_effects.recovery.observe import _candidate_threads

from .test_operator import make_op, new_ledger_file, seed

DECIDED = frozenset({State.CONFIRMED, State.ABANDONED})


class CountingLedger(SqliteLedger):
    """A real SQLite ledger that remembers how many decided rows each query returned."""

    loaded: list[int]

    async def list_operations(self, query: OperationQuery) -> list[Operation]:
        found = await super().list_operations(query)
        if query.states == DECIDED:
            self.loaded.append(len(found))
        return found


async def test_scan_reads_only_recent_decisions(tmp_path: Path) -> None:
    db = await new_ledger_file(tmp_path / "ledger.sqlite")
    async with SqliteLedger.from_conn_string(db) as ledger:
        await ledger.setup()
        for i in range(150):  # history: decided by an operator long ago
            op = await seed(ledger, make_op(thread_id=f"old-{i}"), "review")
            await resolve(ledger, op.op_id, {"type": "landed"}, expected_version=op.version, actor="a")
    with sqlite3.connect(db) as conn:  # a month ago
        conn.execute("UPDATE effect_operations SET updated_at = updated_at - 30 * 86400")
    async with SqliteLedger.from_conn_string(db) as ledger:
        fresh = await seed(ledger, make_op(thread_id="fresh"), "review")
        await resolve(ledger, fresh.op_id, {"type": "abandon", "reason": "dup"},
                      expected_version=fresh.version, actor="a", channel="console")
    async with CountingLedger.from_conn_string(db) as counting:
        assert isinstance(counting, CountingLedger)
        counting.loaded = []
        recent = await _candidate_threads(counting, None, verdicts_within=DEFAULT_VERDICTS_WITHIN)
        everything = await _candidate_threads(counting, None, verdicts_within=None)
    assert recent == ["fresh"]
    assert counting.loaded[0] == 1  # one row read, not the 151 of the whole history
    assert counting.loaded[1] == 151 and len(everything) == 151

