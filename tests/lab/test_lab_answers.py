"""The ``wedging-answer`` column (issue 28): at each review the operator first pastes
the provider's whole response (stored by LangGraph, over the receipt limit), then
answers with the provider's truth. Every cell must show exactly the intended effects,
counted from the provider's own records, and the ledger must hold every verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_effects.lab.faults import WEDGING_ANSWER
from langgraph_effects.lab.ours import NAME
from tests.lab.test_lab_ours import KILLED, OPS, PROVIDERS, run_lab

pytestmark = pytest.mark.crash


def test_a_wedging_answer_then_a_proper_one_settles_every_cell(tmp_path: Path) -> None:
    code, rows, printed = run_lab(tmp_path, "--strategies", NAME, "--crash-points", WEDGING_ANSWER)
    assert set(rows) == {(p, WEDGING_ANSWER) for p in PROVIDERS}
    for (provider, _), row in rows.items():
        assert row["error"] is None and row["violations"] == [], (provider, row["error"])
        assert (row["intended"], row["effects"], row["duplicates"], row["missing"]) == (OPS, OPS, 0, 0)
        assert row["non_terminal"] == 0 and row["pending_reviews"] == 0, provider
        assert row["audit"]["confirmed"] == OPS, provider
        assert row["faulted"] == KILLED, provider
    blind = rows[("blind", WEDGING_ANSWER)]
    # Each faulted operation: one review, two answers (the pasted one refused and
    # asked again, then the truth), one "landed" verdict, nothing re-sent.
    assert blind["sent_to_review"] == KILLED
    assert blind["reviews_answered"] == 2 * KILLED
    assert blind["audit"]["verdicts_landed"] == KILLED
    assert blind["sends"] == blind["effects"] == OPS and blind["audit"]["resends"] == 0
    assert code == 0, printed
