"""How the lab packs its cells (schedule.py) and what it reports of its cost (``--timings``).

The scheduler decides only order and overlap: every planned cell must still run,
each once. The run at the end is a real one (two small cells, a real SIGKILL) whose
JSON must carry the CPU its workers reported.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from langgraph_effects.lab.faults import CRASH_POINTS
from langgraph_effects.lab.harness import Cell
from langgraph_effects.lab.runner import main, plan_cells
from langgraph_effects.lab.schedule import MAX_CELLS_PER_JOB, Admission, estimate, order
from langgraph_effects.lab.strategies import registered
from langgraph_effects.lab.worker import ProviderSettings


def all_cells(ops: int = 50, kill_every: int = 5) -> list[Cell]:
    return plan_cells(
        list(registered().values()),
        list(CRASH_POINTS),
        ops=ops,
        kill_every=kill_every,
        phase=0,
        settings=ProviderSettings(),
    )


def one(cells: list[Cell], strategy: str, provider: str, point: str) -> Cell:
    [cell] = [
        c
        for c in cells
        if (c.strategy.name, c.provider, c.crash_point.name) == (strategy, provider, point)
    ]
    return cell


def test_cells_that_wait_on_a_clock_weigh_less_than_cells_that_compute() -> None:
    cells = all_cells()
    busy = estimate(one(cells, "EffectToolNode", "lookup", "B"))
    assert busy.idle == 0 and busy.weight == 1.0
    for point in ("paused-owner", "tool-interrupt", "child-process"):
        waiting = estimate(one(cells, "EffectToolNode", "lookup", point))
        assert waiting.idle > 0 and waiting.weight < 0.5, point
    # The lagging provider's settle time is a wait of ours, on ambiguous crashes only.
    assert estimate(one(cells, "EffectToolNode", "lagging", "B")).idle > 0
    assert estimate(one(cells, "EffectToolNode", "lagging", "A")).idle == 0
    # No faulted operation, nothing waited for.
    assert estimate(one(cells, "EffectToolNode", "lookup", "none")).idle == 0


def test_the_longest_cells_are_started_first() -> None:
    cells = all_cells()
    ranked = [estimate(cells[i]).seconds for i in order(cells)]
    assert ranked == sorted(ranked, reverse=True)
    first = cells[order(cells)[0]]
    assert first.crash_point.name in ("paused-owner", "tool-interrupt", "child-process")


def drain(cells: list[Cell], jobs: int) -> list[list[int]]:
    """Run the admission to the end, finishing the oldest running cell each round;
    the cells started in each round."""
    admission = Admission(cells, jobs)
    rounds, running = [], []
    while admission.pending or running:
        started = admission.ready()
        rounds.append(started)
        running.extend(started)
        assert admission.load <= jobs + 1e-9 or len(admission.running) == 1
        assert len(admission.running) <= jobs * MAX_CELLS_PER_JOB
        admission.finished(running.pop(0))
    return rounds


@pytest.mark.parametrize("jobs", [1, 3, 8])
def test_every_cell_is_started_once(jobs: int) -> None:
    cells = all_cells()
    started = [i for batch in drain(cells, jobs) for i in batch]
    assert sorted(started) == list(range(len(cells)))


def test_waiting_cells_overlap_with_busy_ones() -> None:
    cells = all_cells()
    first = drain(cells, 3)[0]
    # More cells than busy slots start at once, and some of them compute all the time.
    assert len(first) > 3
    assert any(estimate(cells[i]).weight == 1.0 for i in first)


def test_one_cell_heavier_than_the_budget_still_runs() -> None:
    cells = [one(all_cells(), "EffectToolNode", "lookup", "B")]
    assert drain(cells, 1) == [[0]]


@pytest.mark.crash
@pytest.mark.slow
def test_timings_report_the_cpu_the_workers_used(tmp_path: Path) -> None:
    out = tmp_path / "lab.json"
    printed = io.StringIO()
    argv = ["--ops", "2", "--kill-every", "2", "--strategies", "EffectToolNode", "--crash-points", "none,B"]
    with contextlib.redirect_stdout(printed):
        code = main([*argv, "--timings", "--json", str(out), "--jobs", "1"])
    assert code == 0, printed.getvalue()
    document = json.loads(out.read_text())
    rows = [r for r in document["rows"] if r["provider"] == "lookup"]
    assert {r["crash_point"] for r in rows} == {"none", "B"}
    # Workers report their CPU with every attempt and right before their SIGKILL.
    assert all(r["cpu_seconds"] > 0 for r in rows)
    [killed] = [r for r in rows if r["crash_point"] == "B"]
    assert killed["kills"] == 1
    cpu = document["experiment"]["cpu_seconds"]
    assert cpu["lab"] > 0 and cpu["workers"] > 0
    text = printed.getvalue()
    assert "per column" in text and "cores busy on average" in text
