"""The crash lab's sync row, small (10 operations per cell, every 5th faulted).

``EffectToolNode (sync invoke)``: a sync tool under ``EffectToolNode``, the graph run
by ``graph.invoke`` on ``EffectSqliteSaver`` in a worker with no event loop of
its own, resumed with ``graph.invoke(None, config)``, reviews answered with
``Command(resume=...)`` through ``invoke``, the rival of ``two-runners`` through
``recover_sync``. Real SIGKILLs and SIGSTOPs; every count comes from the provider's
own records and the ledger file.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from langgraph_effects._runtime import faults as dispatcher_faults
from langgraph_effects.lab.faults import CRASH_POINTS, Faults, LabClient
from langgraph_effects.lab.harness import CellResult
from langgraph_effects.lab.ours import NAME as ASYNC_NAME
from langgraph_effects.lab.ours import expected_reviews
from langgraph_effects.lab.providers import Provider
from langgraph_effects.lab.runner import main, plan_cells, render_table
from langgraph_effects.lab.strategies import BuildContext, CellFiles, registered
from langgraph_effects.lab.syncrow import COLUMNS, NAME, PROVIDERS, build_sync_node
from langgraph_effects.lab.worker import ProviderSettings

OPS, KILL_EVERY = 10, 5
FAULTED = OPS // KILL_EVERY
#: The basic crashes, two workers on one resume, a hanging lookup, two runners (one of
#: them recover_sync), a paused owner, and an operator's answer through invoke.
RUN = ("A", "B", "C", "timeout", "duplicate", "lookup-timeout", "two-runners", "paused-owner")

#: One module-scoped lab run serves three tests: keep them on one xdist worker.
pytestmark = pytest.mark.xdist_group("lab_sync")

Rows = dict[tuple[str, str], dict[str, Any]]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Rows, str]:
    out = tmp_path_factory.mktemp("lab") / "lab.json"
    argv = ["--ops", str(OPS), "--kill-every", str(KILL_EVERY), "--strategies", NAME]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main([*argv, "--crash-points", ",".join(RUN), "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    return code, {(r["provider"], r["crash_point"]): r for r in rows}, printed.getvalue()


@pytest.mark.crash
@pytest.mark.slow
def test_every_cell_ran_with_its_faults_and_holds(lab: tuple[int, Rows, str]) -> None:
    code, rows, printed = lab
    assert set(rows) == {(p, c) for p in PROVIDERS for c in RUN}
    for (provider, column), row in rows.items():
        cell = (provider, column)
        assert row["error"] is None, (cell, row["error"])
        point = CRASH_POINTS[column]
        meant = OPS * point.per_operation
        # Counted from the provider's own records: every effect once, nothing lost.
        counts = (row["intended"], row["effects"], row["duplicates"], row["missing"])
        assert counts == (meant, meant, 0, 0), cell
        # Counted from the ledger file: nothing left open.
        assert row["non_terminal"] == 0, cell
        assert row["pending_reviews"] == 0 and row["reviews_answered"] == row["sent_to_review"], cell
        assert row["faulted"] == FAULTED, cell
        if point.first_kill:
            assert row["kills"] == FAULTED, cell  # each faulted first attempt SIGKILLed
        elif point.first_timeout:
            assert row["kills"] == 0, cell
        assert row["sent_to_review"] == expected_reviews(provider, column, FAULTED), cell
        assert row["violations"] == [], cell
    assert code == 0, printed


@pytest.mark.crash
@pytest.mark.slow
def test_the_blind_provider_got_no_second_request(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    for column in RUN:
        row = rows[("blind", column)]
        # Every ambiguous crash went to an operator (answered through invoke), none re-sent.
        assert row["sends"] == row["effects"], column
        if CRASH_POINTS[column].ambiguous:
            assert row["sent_to_review"] == FAULTED, column


@pytest.mark.crash
@pytest.mark.slow
def test_the_paused_owner_never_sent_twice(lab: tuple[int, Rows, str]) -> None:
    _, rows, _ = lab
    for provider in PROVIDERS:
        row = rows[(provider, "paused-owner")]
        assert row["sends"] == row["effects"] == OPS, provider


#: The other columns the row runs, smaller still (4 operations, every 2nd faulted): a
#: changed policy, repeated ids, and the edge paths on the provider each depends on.
MORE = ("policy", "repeated-ids", "wedging-answer", "definite-retry", "edit-branch", "child-process")
EDGE_PROVIDER = {"wedging-answer": "blind", "definite-retry": "blind", "edit-branch": "dedup"}


@pytest.mark.crash
@pytest.mark.slow
def test_the_other_columns_hold_too(tmp_path: Path) -> None:
    out, ops, faulted = tmp_path / "lab.json", 4, 2
    argv = ["--ops", str(ops), "--kill-every", "2", "--strategies", NAME, "--crash-points", ",".join(MORE)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main([*argv, "--json", str(out)])
    rows = {(r["provider"], r["crash_point"]): r for r in json.loads(out.read_text())["rows"]}
    edge = {(EDGE_PROVIDER.get(c, "lookup"), c) for c in MORE if CRASH_POINTS[c].providers}
    assert set(rows) == {(p, c) for p in PROVIDERS for c in MORE if not CRASH_POINTS[c].providers} | edge
    for (provider, column), row in rows.items():
        cell = (provider, column)
        assert row["error"] is None, (cell, row["error"])
        meant = ops * CRASH_POINTS[column].per_operation + (faulted if column == "edit-branch" else 0)
        counts = (row["intended"], row["effects"], row["duplicates"], row["missing"])
        assert counts == (meant, meant, 0, 0), cell
        assert row["non_terminal"] == 0 and row["pending_reviews"] == 0, cell
        assert row["faulted"] == faulted and row["violations"] == [], cell
    # The operator's oversized first answer was refused and asked again, through invoke.
    assert rows[("blind", "wedging-answer")]["reviews_answered"] >= 2 * faulted
    # Each faulted 429 was one request more, retried by the RetryPolicy, nothing applied.
    assert rows[("blind", "definite-retry")]["sends"] == ops + faulted
    assert code == 0, printed.getvalue()


# -- without processes -----------------------------------------------------------------


def test_columns_a_sync_graph_cannot_run_are_not_applicable() -> None:
    strategies = list(registered().values())
    cells = plan_cells(
        strategies, list(CRASH_POINTS), ops=1, kill_every=1, phase=0, settings=ProviderSettings()
    )
    ours = {c.crash_point.name for c in cells if c.strategy.name == NAME}
    assert ours == set(COLUMNS)
    assert "tool-interrupt" not in ours and "reordered-entrypoint" not in ours
    # In the table, a column the row does not run reads n/a (the async row ran it).
    results = [CellResult(NAME, "dedup", "B", True), CellResult(ASYNC_NAME, "dedup", "tool-interrupt", True)]
    console = Console(width=200, file=io.StringIO())
    console.print(render_table(results, ["B", "tool-interrupt"]))
    [line] = [line for line in console.file.getvalue().splitlines() if NAME in line]  # type: ignore[attr-defined]
    assert line.split()[-1] == "n/a"


def test_the_tool_is_sync(tmp_path: Path) -> None:
    files = CellFiles.under(tmp_path)
    provider = Provider(files.provider, "dedup").setup()
    faults = Faults()
    ctx = BuildContext(
        strategy=NAME,
        provider_mode="dedup",
        crash_point="none",
        client=LabClient(provider, faults),
        faults=faults,
        files=files,
        checkpointer=None,  # type: ignore[arg-type]
    )
    try:
        node = build_sync_node(ctx)
    finally:
        dispatcher_faults.clear()  # the builder installs the lab's A and C in the dispatcher
    [send] = node.tools_by_name.values()
    assert send.func is not None and send.coroutine is None  # type: ignore[attr-defined]
    provider.close()
