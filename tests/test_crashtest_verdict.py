"""crashtest's verdict, table and exit code come from one classification per run,
and a kill before the thread's first checkpoint is a run that had not started.

The last test is the regression of issue 40, item 6: on ``examples/support_agent.py``,
``--random 10 --seed 3`` kills two runs before their first checkpoint; they used to be
resumed into LangGraph's ``EmptyInputError`` until the attempts ran out, and their
two expected effects were counted as "lost" (exit 1) while the table said "could not
run". Now they start again and end with exactly the control run's effects.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from langgraph_effects.crashtest.cli import render
from langgraph_effects.crashtest.results import CrashReport, RunResult
from langgraph_effects.crashtest.worker import ToolCall
from langgraph_effects.testing import Provider

ROOT = Path(__file__).resolve().parents[1]
SUPPORT_AGENT = ROOT / "examples" / "support_agent.py"


def run(effects: int, *, problem: str | None = None, n: int = 1) -> RunResult:
    return RunResult("random", None, None, f"t-{n}", expected=2, effects=effects, problem=problem, kills=1)


def report(*runs: RunResult) -> CrashReport:
    return CrashReport("m:f", "m:p", "control", 2, [], [], ["random"], list(runs))


def rendered(result: CrashReport) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    render(result, console)
    return console.export_text()


def test_an_unfinished_run_that_lacks_effects_is_not_lost_but_could_not_be_completed() -> None:
    unfinished = run(0, problem="the thread did not finish within 8 attempts")
    result = report(run(2), unfinished)
    assert unfinished.outcome() == "broken" and unfinished.missing == 0
    assert (result.duplicates, result.missing, result.exit_code) == (0, 0, 5)
    assert "lost" not in result.verdict() and "NOT crash-safe" not in result.verdict()
    assert "1 of 2 runs could not be completed" in result.verdict()
    assert result.to_json()["runs"][1]["outcome"] == "broken"
    text = rendered(result)
    assert "0 / 2 could not finish" in text and "lost" not in text


def test_an_unfinished_run_that_already_duplicated_is_duplicated() -> None:
    # The provider holds more than an uncrashed run makes: no later step undoes that.
    unfinished = run(3, problem="the thread did not finish within 8 attempts")
    result = report(unfinished, run(2, n=2))
    assert unfinished.outcome() == "duplicated"
    assert (result.duplicates, result.exit_code) == (1, 1)
    verdict = result.verdict()
    assert "1 of 2 faulted runs duplicated effects (1 extra)" in verdict
    assert "could not be completed" not in verdict  # it is counted once, as what it is


def test_a_finished_run_with_fewer_effects_is_lost() -> None:
    result = report(run(1), run(0, problem="a worker broke", n=2))
    assert [r.outcome() for r in result.runs] == ["lost", "broken"]
    assert (result.missing, result.exit_code) == (1, 1)
    assert result.verdict() == (
        "crashtest: NOT crash-safe: 1 of 2 lost effects (1 missing); "
        "1 of 2 runs could not be completed (a worker broke)."
    )
    table = report(RunResult("timeout", 1, "t", "x", 2, effects=1))
    table.calls.append(ToolCall(1, "t", None, {}))
    assert "-1 missing" in rendered(table)


def test_every_outcome_gives_one_exit_code() -> None:
    for runs, code in [
        ((run(2),), 0),
        ((run(2), run(0, problem="p")), 5),
        ((run(3), run(0, problem="p")), 1),
        ((run(1), run(2)), 1),
    ]:
        result = report(*runs)
        assert result.exit_code == code, [r.outcome() for r in runs]
        assert result.ok is (code == 0)
        assert result.to_json()["exit_code"] == code


@pytest.mark.slow
@pytest.mark.crash
def test_random_kills_before_the_first_checkpoint_start_the_run_again(tmp_path: Path) -> None:
    """The command of issue 40 item 6, run as a user would, in a copy of the example's directory."""
    shutil.copy(SUPPORT_AGENT, tmp_path / "support_agent.py")
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", "crashtest", "support_agent:make_graph",
         "--probe", "support_agent:probe", "--points", "timeout", "--random", "10", "--seed", "3",
         "--json", str(out)],
        cwd=tmp_path, env=os.environ.copy(), capture_output=True, text=True, timeout=600,
    )
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 0, shown
    assert "crash-safe on every fault tried: all 12 faulted runs" in " ".join(proc.stdout.split()), shown
    data = json.loads(out.read_text())
    restarted = [r for r in data["runs"] if r["restarts"]]
    assert restarted, "seed 3 draws kills before the first checkpoint; none was seen"
    for r in restarted:
        assert r["outcome"] == "exact" and r["finished"] and not r["errors"], r
    assert "before the first checkpoint: started again" in " ".join(proc.stdout.split())  # rich wraps lines
    # The providers' own records: two effects per thread, the control's and every run's.
    held = [*Provider(tmp_path / "helpdesk.sqlite", "blind").effects(),
            *Provider(tmp_path / "billing.sqlite", "dedup").effects()]
    for thread in [data["control_thread"], *(r["thread_id"] for r in data["runs"])]:
        assert sum(1 for e in held if e.payload.get("thread") == thread) == 2, thread
