"""The crash lab's reliability-control columns (issue 34), opt-in (``--controls``).

``budget-race``: two workers race two threads of one run against a budget that allows
the run one send. ``circuit-open``: the provider starts refusing every send while two
workers send, and a circuit breaker opens. ``undo-killed``: a saga undoes a send and
the worker is SIGKILLed in the undo, then a resume or ``recover()`` finishes it. Every
count comes from the provider's own records and the ledger.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from langgraph_effects.lab.controlrow import CIRCUIT, NAME, check_controls, circuit_sends
from langgraph_effects.lab.faults import CONTROL_COLUMNS, CRASH_POINTS, AttemptFaults
from langgraph_effects.lab.harness import Cell, went_down
from langgraph_effects.lab.mcprow import opt_in_points
from langgraph_effects.lab.runner import build_parser, main, plan_cells
from langgraph_effects.lab.strategies import AuditCounts, CellFiles, CellReport, registered
from langgraph_effects.lab.worker import ProviderSettings

OPS, KILL_EVERY = 20, 5  # 4 faulted: each kill point under each resume kind once
FAULTED = OPS // KILL_EVERY


def _cells(points: list[str]) -> list[Cell]:
    strategies = list(registered().values())
    settings = ProviderSettings()
    return plan_cells(strategies, points, ops=OPS, kill_every=KILL_EVERY, phase=0, settings=settings)


def test_the_control_columns_are_opt_in_and_run_by_our_row_only() -> None:
    default, _ = opt_in_points(list(CRASH_POINTS), named=False, mcp=False)
    assert not set(CONTROL_COLUMNS) & set(default)
    flagged, problem = opt_in_points(list(CRASH_POINTS), named=False, mcp=False, controls=True)
    assert problem is None and set(CONTROL_COLUMNS) <= set(flagged)
    assert build_parser().parse_args(["--controls"]).controls
    cells = _cells(list(CRASH_POINTS))
    rows = {(c.strategy.name, c.provider, c.crash_point.name) for c in cells if c.crash_point.opt_in}
    assert {r for r in rows if r[2] in CONTROL_COLUMNS} == {(NAME, "dedup", c) for c in CONTROL_COLUMNS}
    assert {c.crash_point.name for c in cells if c.strategy.name == NAME} == set(CONTROL_COLUMNS)


def test_the_undo_column_takes_turns_over_kill_points() -> None:
    [cell] = [c for c in _cells(["undo-killed"])]
    faulted = [i for i in range(1, OPS * 2) if cell.faulted(i)]
    kills = [cell.first_faults(i, 0.1).kill_at for i in range(1, OPS + 1) if cell.faulted(i)]
    assert kills == ["undo-A", "undo-C"] * 2 and faulted[:2] == [5, 10]
    assert cell.first_faults(1, 0.1) == AttemptFaults()
    [race] = _cells(["budget-race"])
    assert race.first_faults(5, 0.1).rendezvous and not race.first_faults(4, 0.1).rendezvous
    [circuit] = _cells(["circuit-open"])
    assert went_down(circuit) == 4  # the operation before the first faulted one


def _report(point: str, **counts: Any) -> CellReport:
    base: dict[str, Any] = {
        "intended": OPS,
        "faulted": FAULTED,
        "kills": 0,
        "sends": OPS,
        "effects": OPS,
        "sent_to_review": 0,
        "reviews_answered": 0,
        "tool_errors": FAULTED,
    }
    details = counts.pop("details", {})
    base.update(counts)
    return CellReport(
        files=CellFiles.under(Path("/nonexistent")),
        provider_mode="dedup",
        crash_point=point,
        audit=AuditCounts(0, details),
        **base,
    )


def test_the_verdicts_catch_what_each_column_is_about() -> None:
    told = {"refused_budget": FAULTED, "told_budget_exceeded": FAULTED, "abandoned": FAULTED}
    assert check_controls(_report("budget-race", details=told)) == []
    # A request over budget reached the provider (dedup under another key: a new effect).
    assert check_controls(_report("budget-race", sends=OPS + 1, details=told))
    # A loser told something else than BudgetExceededError.
    assert check_controls(_report("budget-race", details={**told, "told_budget_exceeded": 1}))
    opened = {
        "circuit_opened": 1,
        "failed": 2 + FAULTED - 1,
        "sent_before_open": 2,
        "probes": FAULTED - 1,
        "refused_circuit": 5,
        "told_circuit_open": 5,
        "abandoned": 5,
    }
    sends = OPS + 2 + FAULTED - 1
    assert check_controls(_report("circuit-open", sends=sends, details=opened)) == []
    # A send that went while the circuit was open (neither before it nor a probe).
    assert check_controls(_report("circuit-open", sends=sends, details={**opened, "sent_while_open": 1}))
    # A race that met the circuit half-open and had nobody probe; a request unaccounted for.
    assert check_controls(_report("circuit-open", sends=sends, details={**opened, "probes": FAULTED - 2}))
    assert check_controls(_report("circuit-open", sends=sends + 1, details=opened))
    assert check_controls(_report("circuit-open", sends=sends, details={**opened, "circuit_opened": 0}))
    undone = {"undos": OPS // 2, "undos_confirmed": OPS // 2}
    assert check_controls(_report("undo-killed", tool_errors=OPS // 2, details=undone)) == []
    one_short = {**undone, "undos_confirmed": OPS // 2 - 1}
    assert check_controls(_report("undo-killed", tool_errors=OPS // 2, details=one_short))


def _sent(dispatched: float, failed: float) -> Any:
    return SimpleNamespace(dispatched_at=dispatched, updated_at=failed)


def test_the_circuit_rule_tells_probes_from_sends_while_open() -> None:
    cooldown = CIRCUIT.cooldown
    assert isinstance(cooldown, float)
    # Two failures open it at t=1.1; a send dispatched at 1.0 fails later (in flight).
    opening = [_sent(0.0, 0.1), _sent(1.0, 1.1), _sent(1.05, 1.2)]
    assert circuit_sends(opening) == (3, 0, 0)
    probe = _sent(1.1 + cooldown, 1.2 + cooldown)
    assert circuit_sends([*opening, probe]) == (3, 1, 0)
    # A second send in the probe's half-open window, or one before the cooldown: broken.
    twin = _sent(1.15 + cooldown, 1.25 + cooldown)
    assert circuit_sends([*opening, probe, twin]) == (3, 1, 1)
    assert circuit_sends([*opening, _sent(1.1 + cooldown / 2, 2.0)]) == (3, 0, 1)
    # The next probe: a cooldown after the previous probe's failure.
    later = _sent(1.2 + 2 * cooldown, 1.3 + 2 * cooldown)
    assert circuit_sends([*opening, probe, later]) == (3, 2, 0)


@pytest.mark.slow
@pytest.mark.crash
def test_the_control_columns_hold_exactly(tmp_path: Path) -> None:
    out = tmp_path / "lab.json"
    argv = ["--crash-points", ",".join(CONTROL_COLUMNS), "--ops", str(OPS), "--kill-every", str(KILL_EVERY)]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = main([*argv, "--json", str(out)])
    rows: dict[str, dict[str, Any]] = {r["crash_point"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == set(CONTROL_COLUMNS)
    for point, r in rows.items():
        assert r["error"] is None, (point, r["error"])
        assert (r["strategy"], r["faulted"], r["duplicates"], r["missing"], r["non_terminal"]) == (
            NAME,
            FAULTED,
            0,
            0,
            0,
        ), point
        assert r["violations"] == [] and r["sent_to_review"] == 0, (point, r["violations"])

    # budget-race: one send per run at the provider; each race's loser was refused and told so.
    race = rows["budget-race"]
    assert (race["effects"], race["sends"], race["tool_errors"]) == (OPS, OPS, FAULTED)
    assert race["audit"]["refused_budget"] == race["audit"]["told_budget_exceeded"] == FAULTED
    assert race["audit"]["abandoned"] == FAULTED and race["audit"]["confirmed"] == OPS

    # circuit-open: operations 1-3 landed; from operation 4 on the provider refuses
    # everything; the circuit opened after 2 failures (3 if the race's other send was
    # already admitted). Every later request was a half-open probe (at least one per
    # later race, which waited out the cooldown), none went while it was open, and
    # every other call was refused.
    circuit = rows["circuit-open"]
    audit = circuit["audit"]
    assert circuit["effects"] == 3 and audit["circuit_opened"] == 1 and audit["sent_while_open"] == 0
    assert audit["sent_before_open"] in (2, 3) and audit["probes"] >= FAULTED - 1
    assert audit["failed"] == audit["sent_before_open"] + audit["probes"]
    assert circuit["sends"] == 3 + audit["failed"]
    threads = OPS + FAULTED
    assert audit["operations"] == threads and audit["confirmed"] == 3
    refused = threads - 3 - audit["failed"]
    assert audit["abandoned"] == audit["refused_circuit"] == audit["told_circuit_open"] == refused

    # undo-killed: every notification and exactly one undo each at the provider, every
    # undo confirmed; the kills after the provider applied the undo were re-sent under
    # the undo's key (the dedup provider replays them), the others sent once.
    undo = rows["undo-killed"]
    assert (undo["effects"], undo["kills"], undo["tool_errors"]) == (2 * OPS, FAULTED, OPS)
    assert undo["audit"]["undos"] == undo["audit"]["undos_confirmed"] == OPS
    resent = FAULTED // 2  # undo-C kills: the undo landed, the ledger never heard
    assert undo["audit"]["resends"] == resent and undo["sends"] == 3 * OPS + resent
    assert code == 0, printed.getvalue()
