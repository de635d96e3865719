"""The crash lab's ``definite-retry`` column over our rows (issue 28, item 4).

Every 10th operation's first send is answered 429 by the provider (declared definite:
nothing applied), the tools node's ``RetryPolicy`` retries it under the same key,
and the worker is SIGKILLed at B on that retry (the provider applied it). Counted
from the provider's own records and the ledger file.
"""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_effects.lab.ours import NAME
from tests.lab.test_lab_ours import KILLED, OPS, PROVIDERS, run_lab

pytestmark = pytest.mark.crash


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[Any, dict[str, Any]], str]:
    return run_lab(tmp_path_factory.mktemp("lab"), "--strategies", NAME, "--crash-points", "definite-retry")


def test_a_retried_429_killed_on_its_retry_lands_exactly_once(lab: tuple[int, dict[Any, Any], str]) -> None:
    code, rows, printed = lab
    assert code == 0, printed
    assert set(rows) == {(p, "definite-retry") for p in PROVIDERS}
    for (provider, _), row in rows.items():
        assert row["error"] is None and row["violations"] == [], (provider, row)
        assert (row["intended"], row["effects"], row["duplicates"], row["missing"]) == (OPS, OPS, 0, 0)
        # The faults were real: one 429 and one SIGKILL per faulted operation.
        assert (row["faulted"], row["kills"], row["turned_away"]) == (KILLED, KILLED, KILLED), provider
        # The retry was an attempt of the same operation: one per thread, all confirmed,
        # and the model was never told the call failed.
        assert row["non_terminal"] == 0 and row["tool_errors"] == 0, provider
        assert row["audit"]["operations"] == row["audit"]["confirmed"] == OPS, provider
        # Only the blind provider, killed after the effect, needs an operator.
        assert row["sent_to_review"] == (KILLED if provider == "blind" else 0), provider
