"""The ledger contract: every backend (memory, SQLite, Postgres) passes all of it.

The cases are the conformance suite shipped in the package
(:mod:`langgraph_effects.testing.conformance`, what a third-party backend runs too);
the ``ledger`` fixture (``conftest.py``) gives a fresh, set-up ledger of each
backend, so each case runs three times here.
"""

from __future__ import annotations

from langgraph_effects.testing.conformance import (
    ESCALATE,
    LOSE,
    LedgerConformance,
    dispatch,
    ids,
    owner,
    succeed,
    trail_len,
)

__all__ = ["ESCALATE", "LOSE", "dispatch", "ids", "owner", "succeed", "trail_len"]


class TestContract(LedgerConformance):
    """The shipped suite on the ``ledger`` fixture: memory, SQLite and Postgres."""
