"""A small crash lab (10 operations, every 5th faulted) over our rows, in CI.

``EffectToolNode`` runs under each provider with the contract that provider
offers; every crash point is a real SIGKILL (or a lost response, a second worker,
a changed policy, a hanging lookup). The counts come from the provider's own
records and from the ledger file, never from the worker.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.lab import strategies as registry
from langgraph_effects.lab.ours import NAME, answer_from_provider, build_effect_node, expected_reviews
from langgraph_effects.lab.providers import EffectRecord
from langgraph_effects.lab.runner import main
from langgraph_effects.lab.strategies import AuditCounts, CellFiles, CellReport, ReviewCase, Strategy

# slow; one group: the module-scoped lab run is made once, on one xdist worker
pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.xdist_group("lab_ours")]

OPS, KILL_EVERY = 10, 5
KILLED = OPS // KILL_EVERY
PROVIDERS = ("dedup", "lookup", "lagging", "withdrawn", "blind")
POINTS = ("none", "A", "B", "C", "timeout", "duplicate", "policy", "lookup-timeout")
AMBIGUOUS = ("B", "C", "timeout", "duplicate", "policy", "lookup-timeout")
SEED = "retry-only,record-after,record-before,provider-key"

Rows = dict[tuple[str, str], dict[str, Any]]


def run_lab(workdir: Path, *extra: str) -> tuple[int, Rows, str]:
    out = workdir / "lab.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["--ops", str(OPS), "--kill-every", str(KILL_EVERY), "--json", str(out), *extra])
    rows = json.loads(out.read_text())["rows"]
    ours = {(r["provider"], r["crash_point"]): r for r in rows if r["strategy"] == NAME}
    return code, ours, printed.getvalue()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Rows, str]:
    # The identity/ownership columns have their own module (test_lab_ownership.py).
    return run_lab(tmp_path_factory.mktemp("lab"), "--strategies", NAME, "--crash-points", ",".join(POINTS))


def test_every_cell_of_ours_ran_and_holds(lab: tuple[int, Rows, str]) -> None:
    code, rows, printed = lab
    assert set(rows) == {(p, c) for p in PROVIDERS for c in POINTS}
    for cell, row in rows.items():
        assert row["error"] is None, (cell, row["error"])
        assert row["violations"] == [], cell
    assert code == 0, printed


def test_no_duplicates_no_missing_nothing_left_open(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    for cell, row in rows.items():
        assert (row["intended"], row["effects"], row["duplicates"], row["missing"]) == (OPS, OPS, 0, 0), cell
        # Counted from effect_operations in the ledger file: every operation is terminal.
        assert row["non_terminal"] == 0, cell
        assert row["audit"]["operations"] == row["audit"]["confirmed"] == OPS, cell
        assert row["pending_reviews"] == 0, cell
        assert row["reviews_answered"] == row["sent_to_review"], cell


def test_the_faults_were_real(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    for (provider, point), row in rows.items():
        faulted = 0 if point == "none" else KILLED
        assert row["faulted"] == faulted, (provider, point)
        assert row["kills"] == (0 if point in ("none", "timeout") else KILLED), (provider, point)


def test_blind_every_ambiguous_crash_goes_to_review_none_is_resent(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    for point in POINTS:
        row = rows[("blind", point)]
        assert row["sent_to_review"] == (KILLED if point in AMBIGUOUS else 0), point
        assert row["sends"] == row["effects"] == OPS, point  # nothing re-sent without an operator
        assert row["audit"]["resends"] == 0, point
    # Killed after the intent, before anything was sent: the pending intent proves it.
    assert rows[("blind", "A")]["sent_to_review"] == 0


def test_evidence_settles_it_without_a_human(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    for provider in ("dedup", "lookup", "lagging", "withdrawn"):
        for point in ("none", "A", "B", "C", "timeout", "duplicate"):
            assert rows[(provider, point)]["sent_to_review"] == 0, (provider, point)
    # Dedup re-sends under the same key (the provider replays); lookups never re-send
    # an effect they found, and re-send once what they proved absent (A).
    for point in ("B", "C", "timeout", "duplicate"):
        assert rows[("dedup", point)]["sends"] == OPS + KILLED, point
        for provider in ("lookup", "lagging", "withdrawn"):
            assert rows[(provider, point)]["sends"] == OPS, (provider, point)
            assert rows[(provider, point)]["audit"]["resends"] == 0, (provider, point)
    for provider in PROVIDERS:
        expected = 0 if provider == "blind" else KILLED
        assert rows[(provider, "A")]["audit"]["resends"] == expected, provider


def test_the_lagging_listing_was_not_read_as_absence(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    # A lost response is reconciled at once, while the listing does not show the
    # effect yet: it is polled again (more than one lookup per faulted operation)
    # until it shows, never re-sent.
    row = rows[("lagging", "timeout")]
    assert row["lookups"] > KILLED
    assert row["sends"] == OPS
    # Killed before sending: the empty listing is believed only after the settle
    # time, then the operation is sent once.
    row = rows[("lagging", "A")]
    assert row["lookups"] > KILLED
    assert row["sends"] == OPS and row["audit"]["resends"] == KILLED


def test_withdrawn_records_count_as_landed(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    for point in ("B", "C", "duplicate"):
        row = rows[("withdrawn", point)]
        assert row["withdrawn"] == KILLED, point  # the provider withdrew what landed
        assert (row["sends"], row["effects"], row["sent_to_review"]) == (OPS, OPS, 0), point


def test_a_lost_response_is_reconciled_in_the_same_run(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    for provider in PROVIDERS:
        row = rows[(provider, "timeout")]
        # The model never saw a failure, so it never re-planned a second send.
        assert row["tool_errors"] == 0, provider
        assert row["kills"] == 0, provider
    assert rows[("blind", "timeout")]["sent_to_review"] == KILLED


def test_a_changed_policy_is_never_resent_automatically(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    for provider in PROVIDERS:
        row = rows[(provider, "policy")]
        assert row["audit"]["resends"] == 0, provider
        # Every review under the changed policy says what changed.
        assert row["audit"]["escalations_naming_change"] == row["audit"]["escalations"], provider
    assert rows[("dedup", "policy")]["sent_to_review"] == KILLED
    assert rows[("blind", "policy")]["sent_to_review"] == KILLED
    # A lookup that finds the effect confirms it: no authority is needed to not send.
    for provider in ("lookup", "lagging", "withdrawn"):
        assert rows[(provider, "policy")]["sent_to_review"] == 0, provider


def test_a_hanging_lookup_is_inconclusive(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    for provider in ("lookup", "lagging", "withdrawn"):
        row = rows[(provider, "lookup-timeout")]
        assert row["sent_to_review"] == KILLED, provider
        assert row["sends"] == OPS, provider
        assert row["audit"]["verdicts_landed"] == KILLED, provider
    # Dedup needs no lookup: it re-sends under the same key.
    assert rows[("dedup", "lookup-timeout")]["sent_to_review"] == 0
    assert rows[("dedup", "lookup-timeout")]["sends"] == OPS + KILLED


def test_the_printed_table_puts_the_seed_first_with_a_legend(tmp_path: Path) -> None:
    code, _, printed = run_lab(tmp_path, "--strategies", f"{SEED},{NAME}", "--crash-points", "none,B")
    assert code == 0, printed
    lines = printed.splitlines()
    [ours_line] = [n for n, line in enumerate(lines) if NAME in line and "dedup" in line]
    for seed in SEED.split(","):
        [seed_line] = [n for n, line in enumerate(lines) if line.lstrip().startswith(seed)]
        assert seed_line < ours_line
    assert sum(1 for line in lines if NAME in line) == 1  # named once, on its first row
    assert any(line.startswith("effects / missing") for line in lines)
    words = " ".join(printed.split())
    blind = f"blind provider: {KILLED} ambiguous crashes, {KILLED} surfaced to review, 0 re-sent"
    assert blind in words


# -- the pieces, without processes ----------------------------------------------------


def _record(effect_id: str, *, withdrawn: bool = False) -> EffectRecord:
    return EffectRecord(effect_id, "op", None, {"operation": "op"}, 1.0, withdrawn)


def _case(effects: list[EffectRecord]) -> ReviewCase:
    value = {
        "type": "effect_review",
        "operations": [{"operation_id": "op_1", "tool": "send_notification"}],
    }
    return ReviewCase("op", "op-1", "blind", "B", [("i" * 32, value), ("j" * 32, {"other": 1})], effects)


def test_the_operator_answers_with_the_providers_truth() -> None:
    landed = answer_from_provider(_case([_record("eff_7", withdrawn=True)]))
    assert landed == {
        "i" * 32: {"op_1": {"type": "landed", "receipt": {"effect_id": "eff_7", "withdrawn": True}}}
    }
    assert answer_from_provider(_case([])) == {"i" * 32: {"op_1": {"type": "not_landed"}}}


def test_expected_reviews() -> None:
    assert expected_reviews("blind", "A", KILLED) == 0
    assert expected_reviews("blind", "duplicate", KILLED) == KILLED
    assert expected_reviews("dedup", "policy", KILLED) == KILLED
    assert expected_reviews("lookup", "policy", KILLED) == 0
    assert expected_reviews("dedup", "lookup-timeout", KILLED) == 0
    assert expected_reviews("withdrawn", "lookup-timeout", KILLED) == KILLED
    assert expected_reviews("lagging", "C", KILLED) == 0


def _broken_check(report: CellReport) -> list[str]:
    return [f"always wrong at {report.crash_point}"]


def _nothing_open(files: CellFiles) -> AuditCounts:
    return AuditCounts(non_terminal=0)


def test_a_failed_check_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Strategy(
        "checked", build_effect_node, ("dedup",), ours=True, audit=_nothing_open, check=_broken_check
    )
    monkeypatch.setitem(registry._REGISTRY, fake.name, fake)
    out = tmp_path / "lab.json"
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = main(["--ops", "3", "--strategies", "checked", "--crash-points", "none", "--json", str(out)])
    assert code == 1
    [row] = json.loads(out.read_text())["rows"]
    assert row["violations"] == ["always wrong at none"]
    assert "always wrong at none" in printed.getvalue()
