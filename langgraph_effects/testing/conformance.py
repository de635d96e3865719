"""The ledger conformance suite: prove that a backend keeps the ledger's contract.

Every backend of this package passes it (memory, SQLite, Postgres: see
``tests/ledger/test_contract.py``); a backend of your own runs the same cases by
subclassing `LedgerConformance` in a test module and providing a ``ledger``
fixture that yields a fresh, set-up, empty ledger for each test:

    import pytest
    from langgraph_effects.testing.conformance import LedgerConformance

    class TestMyLedger(LedgerConformance):
        @pytest.fixture
        async def ledger(self, tmp_path):
            ledger = MyLedger(tmp_path / "ledger.json")
            await ledger.setup()
            yield ledger
            await ledger.aclose()

The cases are coroutines: run them with ``pytest-asyncio`` (``asyncio_mode =
"auto"``; in strict mode declare the fixture with ``@pytest_asyncio.fixture``).
Importing this module imports pytest; nothing else in the package does, and pytest
is not a dependency of ``langgraph-effects``.

What is checked: intents are recorded once (by id and by provider key per tenant)
with every field and their audit row; finds by id and by payload; transitions
under a version check, refused ones writing nothing; verdicts idempotent by
decision id; the audit trail in order; leases renewed only by their owner (also
from another thread, when the ledger offers a renewer); every listing's filters
and order, and counts by state and tool; racing writers (exactly one wins); the
schema version; and the steps plans ask directly (``FindOrInsert``, ``CasEach``,
compare-and-sets writing only the mutable columns); a compensation request as one
transaction (the effect's mark and its undo's intent, or neither); and the control rows of budgets and circuit
breakers (``LockControls``, ``WriteControls``, ``ListControls``): a send over budget
refused writing nothing, a definite failure giving its share back, racing sends never
taking more than the budget, a circuit refusing while open; and removal and erasure
(``Forget``, ``Erase``): only the states and cut asked for, with audit rows and
holds, and an erasure that keeps ids, states and times and audits who erased.
"""

from __future__ import annotations

from ._cases import ESCALATE, LOSE, dispatch, ids, make_op, owner, populate, succeed, trail_len
from ._compensation import CompensationCases
from ._controls import ControlCases
from ._lifecycle import LifecycleCases
from ._reads import ReadCases
from ._writes import WriteCases

__all__ = [
    "ESCALATE",
    "LOSE",
    "LedgerConformance",
    "dispatch",
    "ids",
    "make_op",
    "owner",
    "populate",
    "succeed",
    "trail_len",
]


class LedgerConformance(WriteCases, ReadCases, CompensationCases, ControlCases, LifecycleCases):
    """Every case of the ledger contract, as test methods.

    Subclass it (the class name must start with ``Test`` for pytest to collect it)
    and provide a ``ledger`` fixture (on the subclass or in a ``conftest.py``) that
    yields a fresh, set-up ledger with nothing in it; nothing here knows which
    backend it is talking to.
    """
