"""A small crash lab (20 operations, every 10th faulted) over the seed strategies.

It asserts the seed experiment's shape from the provider's own records, and
checks the extension point: rows flagged as ours decide the exit code, and an
operator review round-trips through ``interrupt()`` / ``Command(resume=...)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt

from langgraph_effects.lab import strategies as registry
from langgraph_effects.lab.runner import main
from langgraph_effects.lab.seed import LocalMarkers, build_retry_only
from langgraph_effects.lab.strategies import (
    TOOL_NAME,
    AuditCounts,
    BuildContext,
    CellFiles,
    ReviewCase,
    Strategy,
)

# slow; one group: the module-scoped lab run is made once, on one xdist worker
pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.xdist_group("lab_seed")]

OPS, KILL_EVERY = 20, 10
KILLED = OPS // KILL_EVERY
SEED = "retry-only,record-after,record-before,provider-key"
POINTS = "none,A,B,C,timeout,duplicate,policy"


def run_lab(tmp_path: Path, *extra: str) -> tuple[int, dict[tuple[str, str], dict[str, Any]]]:
    out = tmp_path / "lab.json"
    code = main(["--ops", str(OPS), "--kill-every", str(KILL_EVERY), "--json", str(out), *extra])
    rows = json.loads(out.read_text())["rows"]
    return code, {(r["strategy"], r["crash_point"]): r for r in rows}


@pytest.fixture(scope="module")
def seed_lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[Any, dict[str, Any]]]:
    # The identity/ownership columns have their own module (test_lab_ownership.py).
    return run_lab(tmp_path_factory.mktemp("lab"), "--strategies", SEED, "--crash-points", POINTS)


def cell(rows: dict[Any, dict[str, Any]], strategy: str, point: str) -> tuple[int, int, int]:
    row = rows[(strategy, point)]
    assert row["error"] is None, row["error"]
    return row["effects"], row["duplicates"], row["missing"]


EXACT = (OPS, 0, 0)
DUPLICATED = (OPS + KILLED, KILLED, 0)
LOST = (OPS - KILLED, 0, KILLED)


def test_naive_rows_do_not_change_the_exit_code(seed_lab: Any) -> None:
    code, rows = seed_lab
    assert code == 0
    assert len(rows) == 4 * 7  # lookup-timeout is ours only


def test_every_strategy_passes_the_control(seed_lab: Any) -> None:
    _, rows = seed_lab
    for strategy in SEED.split(","):
        assert cell(rows, strategy, "none") == EXACT


def test_the_seed_table_is_reproduced(seed_lab: Any) -> None:
    _, rows = seed_lab
    # Crash after the effect: a resume re-sends unless the provider deduplicates.
    assert cell(rows, "retry-only", "B") == DUPLICATED
    assert cell(rows, "record-after", "B") == DUPLICATED
    assert cell(rows, "record-before", "B") == EXACT
    assert cell(rows, "provider-key", "B") == EXACT
    # Crash before the effect: the early marker is taken for completion.
    assert cell(rows, "retry-only", "A") == EXACT
    assert cell(rows, "record-after", "A") == EXACT
    assert cell(rows, "record-before", "A") == LOST
    assert cell(rows, "provider-key", "A") == EXACT


def test_the_other_columns(seed_lab: Any) -> None:
    _, rows = seed_lab
    for strategy, expected in [
        ("retry-only", DUPLICATED),
        ("record-after", DUPLICATED),
        ("record-before", EXACT),
        ("provider-key", EXACT),
    ]:
        assert cell(rows, strategy, "C") == expected
        assert cell(rows, strategy, "policy") == expected  # the seed rows ignore policy
    # Two workers resuming at once: both re-send, unless a marker or key stops them.
    assert cell(rows, "retry-only", "duplicate") == (OPS + 2 * KILLED, 2 * KILLED, 0)
    assert cell(rows, "record-after", "duplicate") == (OPS + 2 * KILLED, 2 * KILLED, 0)
    assert cell(rows, "record-before", "duplicate") == EXACT
    assert cell(rows, "provider-key", "duplicate") == EXACT
    # A lost response re-planned by the model gets a new tool_call_id: every
    # identity built from it is new, so even the provider key duplicates.
    for strategy in SEED.split(","):
        assert cell(rows, strategy, "timeout") == DUPLICATED


def test_kills_are_real_and_counted(seed_lab: Any) -> None:
    _, rows = seed_lab
    for (strategy, point), row in rows.items():
        faulted = 0 if point == "none" else KILLED
        assert row["faulted"] == faulted, (strategy, point)
        assert row["kills"] == (0 if point in ("none", "timeout") else KILLED), (strategy, point)
        assert row["faulted_operations"] == ([10, 20] if faulted else [])
    # The provider saw the re-sends it deduplicated.
    assert rows[("provider-key", "B")]["sends"] == OPS + KILLED


# -- the extension point ------------------------------------------------------------


def no_open_operations(files: CellFiles) -> AuditCounts:
    return AuditCounts(non_terminal=0)


def build_ask_when_unsure(ctx: BuildContext) -> ToolNode:
    """Record a dispatch marker first; a re-run that finds it asks an operator."""
    client, faults, markers = ctx.client, ctx.faults, LocalMarkers(ctx.files.local)

    @tool(TOOL_NAME)
    async def send_notification(operation: str, body: str) -> str:
        """Send one notification."""
        if markers.get(operation) is not None:
            verdict = interrupt({"operation": operation, "question": "did it land?"})
            if verdict == "landed":
                return "landed (operator)"
        markers.put(operation, "dispatched")
        receipt = client.send({"operation": operation, "body": body})
        faults.reach("C")
        return f"sent {receipt.effect_id}"

    return ToolNode([send_notification], handle_tool_errors=True)


def answer_from_provider(case: ReviewCase) -> str:
    assert [value["operation"] for _, value in case.interrupts] == [case.operation]
    return "landed" if case.effects else "send"


def test_a_row_of_ours_that_duplicates_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Strategy("fake-ours", build_retry_only, ("blind",), ours=True, audit=no_open_operations)
    monkeypatch.setitem(registry._REGISTRY, fake.name, fake)
    code, rows = run_lab(tmp_path, "--strategies", "fake-ours", "--crash-points", "none,B")
    assert code == 1
    assert cell(rows, "fake-ours", "none") == EXACT
    assert cell(rows, "fake-ours", "B") == DUPLICATED


def test_reviews_are_answered_with_the_providers_truth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asking = Strategy(
        "ask-when-unsure",
        build_ask_when_unsure,
        ("blind",),
        ours=True,
        answer_review=answer_from_provider,
        audit=no_open_operations,
    )
    monkeypatch.setitem(registry._REGISTRY, asking.name, asking)
    code, rows = run_lab(
        tmp_path, "--strategies", asking.name, "--crash-points", "A,B,C,duplicate,lookup-timeout"
    )
    assert code == 0
    for point in ("A", "B", "C", "duplicate", "lookup-timeout"):
        row = rows[(asking.name, point)]
        assert cell(rows, asking.name, point) == EXACT, point
        assert (row["sent_to_review"], row["reviews_answered"], row["pending_reviews"]) == (
            KILLED,
            KILLED,
            0,
        )
        assert row["non_terminal"] == 0


def test_register_refuses_an_unaudited_row_of_ours() -> None:
    with pytest.raises(ValueError, match="audit"):
        registry.register(Strategy("unaudited", build_retry_only, ("blind",), ours=True))


def build_broken(ctx: BuildContext) -> ToolNode:
    raise RuntimeError("this strategy cannot be built")


def test_a_cell_that_cannot_run_is_an_error_not_a_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = Strategy("broken", build_broken, ("blind",))
    monkeypatch.setitem(registry._REGISTRY, broken.name, broken)
    code, rows = run_lab(tmp_path, "--strategies", "broken", "--crash-points", "none")
    assert code == 5
    # The worker says why before it goes: the build's own error reaches the row.
    assert "this strategy cannot be built" in rows[("broken", "none")]["error"]
