"""The benchmark runner and every scenario run from a clean checkout, with tiny counts.

No timing is asserted (machines are noisy); only that ``benchmarks/run.py`` completes,
prints its tables, writes one JSON with every part, and that what it *counts* is wired
to the right place: durable ledger commits per effectful call within the floor of two,
at least one ledger round trip per call (the intent is durable before the send), a
round trip for every commit, the baselines' graph steps as LangGraph runs them; the
bare two-commit pair measured in the same run and the issue-32 columns beside each row.
Each scenario module runs through the runner with its own ``QUICK`` options.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .ledger.conftest import require_postgres

pytestmark = pytest.mark.slow  # runs the benchmark scripts as processes

ROOT = Path(__file__).resolve().parents[1]
RUN = str(ROOT / "benchmarks" / "run.py")
PATHS = {"node", "middleware"}
TIMED_PATHS = PATHS | {"floor"}  # floor: a no-op middleware, LangChain's own charge


def scenario(name: str | None = None) -> Any:
    """The scenario module ``name`` (None: the registry), imported as the runner does."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("scenarios" if name is None else f"scenarios.{name}")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def scenario_module(name: str) -> Any:
    """A module of ``benchmarks/`` (not a scenario), imported as the runner does."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def run_bench(
    tmp_path: Path, *args: str, timeout: int = 280
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "bench.json"
    (tmp_path / "work").mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, RUN, *args, "--quick", "--json", str(out), "--dir", str(tmp_path / "work")],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"benchmarks/run.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc, json.loads(out.read_text())


def check_counts(row: dict[str, Any]) -> None:
    calls, runs = row["calls"], row["runs"]
    assert calls == runs * row["fanout"] > 0
    # Every call's intent is durable before its send; parallel intents may share a commit.
    assert row["ledger_commits"] >= runs
    if row["fanout"] == 1:
        assert row["ledger_commits_per_call"] <= 2
    # Round trips are counted at the ledger's own connection/pool: at least one per commit.
    assert row["ledger_round_trips"] is not None
    assert row["ledger_round_trips"] >= row["ledger_commits"]
    # A plain turn is __start__, model, tools, model; ours runs at least that.
    assert row["graph_steps_per_run_baseline"] == 4
    assert row["graph_steps_per_run_effect"] >= 4
    for side in ("baseline", "baseline_on_our_saver", "effect"):
        assert row[f"checkpoint_commits_per_run_{side}"] >= 4


@pytest.mark.xdist_group("bench_quick_run")  # the longest run here: its own group starts it first
def test_quick_default_run_reports_the_main_table(tmp_path: Path) -> None:
    proc, report = run_bench(tmp_path, "--no-postgres", "--pyperf", str(tmp_path / "suite.json"))

    for heading in ("What safety costs", "One agent turn", "Ledger work and graph cost",
                    "Finding unresolved operations", "Memory per 10,000 operations", "Targets"):
        assert heading in proc.stdout, heading
    assert report["table"] in proc.stdout
    # The docs' hook renders the committed JSON with the same renderer: the same text.
    assert scenario_module("bench_report").render(report) == report["table"]
    keys = ("meta", "settings", "postgres", "e2e", "bare", "counts", "scan", "memory", "targets", "table")
    for key in keys:
        assert key in report, key
    assert report["settings"]["scenarios"] == ["turn", "counts", "scan", "memory"]
    assert Path(report["meta"]["package_path"]) == ROOT / "langgraph_effects"
    assert report["meta"]["pyperf"]["cpu_count"] == os.cpu_count()  # pyperf's machine metadata
    assert "[1/12] node/sqlite/tool=0ms/fanout=1" in proc.stderr  # progress goes to stderr

    # The bare pair: two fdatasync'd commits, measured in this run, wall and CPU.
    bare = report["bare"]["sqlite"]
    # one batch after each repeat of each of the 12 rows: interleaved with them
    assert bare["wall_ms"] > 0 and bare["cpu_ms"] > 0
    assert bare["repeats"] == 12 * report["settings"]["repeats"]
    assert "bare pair, sqlite" in proc.stdout

    sqlite_rows = [row for row in report["e2e"].values() if row["backend"] == "sqlite"]
    assert {(row["path"], row["tool_ms"], row["fanout"]) for row in sqlite_rows} == {
        (path, tool, fanout) for path in TIMED_PATHS for tool in (0, 5) for fanout in (1, 8)
    }
    for row in sqlite_rows:
        assert row["baseline_ms"] > 0 and row["effect_ms"] > 0 and row["cpu_ratio"] > 0
        lo, hi = row["ratio_ci95"]
        assert 0 < lo <= hi
        assert len(row["samples"]["baseline_ms"]) == report["settings"]["repeats"]
        added = (row["effect_ms"] - row["baseline_ms"]) / row["fanout"]
        assert row["added_ms_per_call"] == pytest.approx(added)
    # The middleware's pairs column is stated over the floor row of the same cell.
    mw, floor = (report["e2e"][f"{p}/sqlite/tool=0ms/fanout=1"] for p in ("middleware", "floor"))
    over = (mw["added_ms_per_call"] - floor["added_ms_per_call"]) / bare["wall_ms"]
    shown = next(ln for ln in proc.stdout.splitlines() if ln.startswith("middleware sqlite     0ms       1"))
    assert f"{over:.2f}" in shown
    assert all("floor" not in t["name"] for t in report["targets"])  # the floor informs, it is not judged
    timed = {t["name"] for t in report["targets"] if "ratio of medians" in t["name"]}
    assert "turn, middleware, sqlite, 0 ms tool, fan-out 1: ratio of medians" in timed
    assert not any("sqlite, 5 ms tool, fan-out 8" in name for name in timed)

    counted = {(row["path"], row["backend"], row["fanout"]): row for row in report["counts"]}
    assert set(counted) == {(p, "sqlite", f) for p in PATHS for f in (1, 8)}
    for row in counted.values():
        check_counts(row)
    assert (counted[("node", "sqlite", 8)]["ledger_commits_per_call"]
            < counted[("node", "sqlite", 1)]["ledger_commits_per_call"])
    assert "Postgres: skipped (--no-postgres)" in proc.stdout

    scan = report["scan"]["sqlite/20000"]
    assert scan["rows"] == 20_000 and scan["unresolved_all_found"] == 1_000
    assert report["memory"]["inmemory"]["bytes_per_operation"] > 0
    assert report["memory"]["sqlite_file"]["bytes_per_operation"] > 0

    # Every configuration's samples, as a pyperf suite pyperf itself reads back.
    import pyperf

    suite = pyperf.BenchmarkSuite.load(str(tmp_path / "suite.json"))
    names = set(suite.get_benchmark_names())
    assert "bare_pair/sqlite/wall" in names and "node/sqlite/tool=0ms/fanout=1/effect_ms" in names


def test_postgres_rows_are_judged_in_bare_pairs(tmp_path: Path) -> None:
    dsn = require_postgres()
    proc, report = run_bench(tmp_path, "--only", "timing,postgres,0ms,fanout1", "--postgres-dsn", dsn)
    bare = report["bare"]["postgres"]
    assert bare["wall_ms"] > 0 and bare["cpu_ms"] > 0 and "psycopg" in bare["what"]
    assert set(report["e2e"]) == {f"{p}/postgres/tool=0ms/fanout=1" for p in TIMED_PATHS}
    targets = {t["name"]: t for t in report["targets"]}
    node = targets["turn, node, postgres, 0 ms tool, fan-out 1: ms added per call, in bare two-commit pairs"]
    row = report["e2e"]["node/postgres/tool=0ms/fanout=1"]
    assert node["target"] == "<= 1.5 pairs"
    assert node["measured"] == pytest.approx(row["added_ms_per_call"] / bare["wall_ms"], abs=0.01)
    assert node["met"] == (node["measured"] <= 1.5)
    middleware = targets[
        "turn, middleware, postgres, 0 ms tool, fan-out 1: ms added per call over the floor, "
        "in bare two-commit pairs"
    ]
    assert middleware["target"] == "<= 1.5 pairs"
    assert re.search(r"^node +postgres .* <= 1\.5 pair (met|MISSED)$", proc.stdout, flags=re.M)


def test_only_narrows_the_run_and_bad_words_are_refused(tmp_path: Path) -> None:
    proc, report = run_bench(tmp_path, "--only", "middleware,sqlite,0ms,fanout1", "--no-profile")
    assert list(report["e2e"]) == ["middleware/sqlite/tool=0ms/fanout=1"]
    assert [(r["path"], r["backend"], r["fanout"]) for r in report["counts"]] == [("middleware", "sqlite", 1)]
    assert not report["scan"] and not report["memory"]
    assert report["postgres"]["available"] is False
    assert "Finding unresolved operations" not in proc.stdout

    for args, message in ((["--only", "middlewares"], "unknown middlewares"),
                          (["turnz"], "unknown scenario 'turnz'"),
                          (["turn_split", "--batches", "1"], "--batches must be at least 2")):
        bad = subprocess.run(
            [sys.executable, RUN, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert bad.returncode == 2 and message in bad.stderr, (args, bad.stderr)


def test_list_names_every_scenario_and_what_it_compares() -> None:
    proc = subprocess.run(
        [sys.executable, RUN, "--list"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    for name in scenario().NAMES:
        assert re.search(rf"^{name} +\S", proc.stdout, flags=re.M), name
    assert "bare_pair/postgres" in proc.stdout


# -- each other scenario, tiny ------------------------------------------------------------------

OTHERS = [
    "sync", "turn_split", "floor_split", "gc_churn", "fencing", "fencing_race", "ledger_pairs",
    "ledger_throughput", "lease_children", "lease_window", "turn_read", "unfinished_scan",
    "ledger_scale",
]


def run_scenario(tmp_path: Path, name: str, *extra: str) -> list[str]:
    quick = list(getattr(scenario(name), "QUICK", []))
    proc, report = run_bench(tmp_path, name, *quick, *extra, timeout=280)
    part = report["scenarios"][name]
    assert part["lines"] and f"Scenario {name}" in proc.stdout
    assert report["settings"]["scenarios"] == [name] and not report["e2e"]
    return list(part["lines"])


def test_every_scenario_module_is_run_by_the_runner() -> None:
    scenarios = scenario()
    modules = {p.stem for p in (ROOT / "benchmarks" / "scenarios").glob("*.py")} - {"__init__"}
    assert modules == set(scenarios.NAMES) == {*scenarios.DEFAULT, *OTHERS}


@pytest.mark.parametrize("name", ["sync", "gc_churn", "ledger_pairs", "lease_children", "lease_window",
                                  "turn_read", "fencing_race"])
def test_scenario_runs_with_tiny_counts(tmp_path: Path, name: str) -> None:
    lines = run_scenario(tmp_path, name, "--no-postgres")
    text = "\n".join(lines)
    expected = {
        "sync": "EffectToolNode ",  # timed beside ToolNode on SqliteSaver
        "gc_churn": "full collections in 20 turns",
        "ledger_pairs": "durable commits counted",
        "lease_children": "owner_alive on a dead owner",
        "lease_window": "a pause is taken over after",
        "turn_read": "500 messages:",
        "fencing_race": "Effect saver (fenced)",
    }[name]
    assert expected in text, text


@pytest.mark.parametrize("name", ["unfinished_scan", "ledger_throughput", "fencing", "ledger_scale"])
def test_scenario_with_postgres_runs_with_tiny_counts(tmp_path: Path, name: str) -> None:
    lines = run_scenario(tmp_path, name, "--postgres-dsn", require_postgres())
    text = "\n".join(lines)
    if name == "unfinished_scan":
        assert text.startswith("sqlite: 200 threads") and "\npostgres: 200 threads" in text
    elif name == "ledger_scale":  # the same unfinished work in both; older verdicts found in the grown one
        assert text.startswith("sqlite: 2000 settled") and "\npostgres: 2000 settled" in text
        assert re.search(r"candidates \(7 days\) .* found 100/100", text)
        assert re.search(r"verdict lookup \(all time\) .* found 100/101", text)
    elif name == "ledger_throughput":
        assert re.search(r"1 workers: [0-9.]+x \[[0-9.]+, [0-9.]+\] of \d+ pairs/s; worker CPU per", text)
        assert "target <= 2x" in text
    else:
        assert lines[0].startswith("sqlite") and "what-if, ours with the triggers off" in text


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_turn_split_prints_each_row_against_the_one_above(tmp_path: Path, backend: str) -> None:
    extra = ["--backend", backend] + (["--postgres-dsn", require_postgres()] if backend == "postgres" else [])
    out = run_scenario(tmp_path, "turn_split", *extra)
    names = ["baseline", "baseline, our saver", "ours, ledger in memory", "ours"]
    if backend == "postgres":  # the what-if that splits the saver's cost
        names.insert(1, "our saver, triggers off")
    title = f"middleware on {backend}, fan-out 2, 0 ms tool: per turn, median of 2 batches of 4 turns"
    assert out[0] == title
    rows = out[-len(names):]
    for name, line in zip(names, rows, strict=True):
        assert line.startswith(name + " ")
        wall, cpu = (float(x) for x in line[len(name):].split()[:2])
        assert wall > 0 and cpu > 0
    assert all(" CPU x" in line and "(" in line for line in rows[1:])
    assert "CPU x" not in rows[0]


def test_floor_split_prints_each_hook_and_ours_against_the_floor(tmp_path: Path) -> None:
    out = run_scenario(tmp_path, "floor_split")
    names = ["create_agent", "tool hook", "model hook", "both hooks", "EffectMiddleware"]
    assert out[0] == "create_agent on SQLite, fan-out 2, 0 ms tool: per turn, median of 2 batches of 4 turns"
    calls = {}
    for name, line in zip(names, out[2:-1], strict=True):
        assert line.startswith(name + " ")
        wall, cpu, calls[name] = (float(x) for x in line[len(name):].split()[:3])
        assert wall > 0 and cpu > 0
        assert ("CPU x" in line) == (name != "create_agent")
    # Counted, not timed: each hook runs Python of its own on every turn, ours more.
    assert calls["create_agent"] < calls["tool hook"] < calls["both hooks"] < calls["EffectMiddleware"]
    assert calls["create_agent"] < calls["model hook"] < calls["both hooks"]
    last = re.fullmatch(
        r"EffectMiddleware vs both hooks: x([0-9.]+) \(([0-9.]+)-([0-9.]+)\), CPU x[0-9.]+, "
        r"calls \+(\d+) per turn",
        out[-1],
    )
    assert last is not None, out[-1]
    assert float(last[2]) <= float(last[1]) <= float(last[3])
    # Each count is a mean per turn, printed rounded: their difference may be 1 off.
    assert abs(int(last[4]) - (calls["EffectMiddleware"] - calls["both hooks"])) <= 1


def test_compare_prints_each_row_for_both_sides_and_the_change(tmp_path: Path) -> None:
    """``benchmarks/compare.py``: one round, this checkout on both sides, tiny counts."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), "--before", str(ROOT), "--after", str(ROOT),
         "--rounds", "1", "--keep", str(tmp_path), "--",
         "turn", "--quick", "--only", "node,sqlite,fanout1,0ms,timing", "--repeats", "1", "--runs", "1"],
        capture_output=True, text=True, check=True, timeout=600,
    )
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["after-1.json", "before-1.json"]
    [before, after] = [line for line in out.stdout.splitlines() if "node/sqlite/tool=0ms/fanout=1" in line]
    assert " before " in before and " after " in after
    assert re.search(r"\d\.\d{3}x \[\d\.\d{3}, \d\.\d{3}\]", before)
    assert re.search(r"[+-]\d+\.\d%", after) and "ms/call" in after
    assert "round 1/1, before" in out.stderr


def test_turn_profile_splits_a_turn_by_thread_and_compares_with_a_saved_run(tmp_path: Path) -> None:
    """``benchmarks/turn_profile.py``: this checkout, SQLite, tiny counts, saved then
    compared with itself."""
    saved = tmp_path / "profile.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "turn_profile.py"), str(ROOT), "sqlite", "node", "2",
               "--turns", "10", "--threads", "--top", "3"]
    first = subprocess.run([*command, "--save", str(saved)], capture_output=True, text=True, check=True,
                           timeout=600)
    assert re.search(r"CPU per turn: plain \d+\.\d\d ms, ours \d+\.\d\d ms, ratio \d\.\d{3}", first.stdout)
    assert "ours by thread (ms per turn): MainThread" in first.stdout
    found = json.loads(saved.read_text())
    assert "event loop" in found and any("langgraph_effects/" in name for name in found["event loop"])
    again = subprocess.run([*command, "--against", str(saved)], capture_output=True, text=True, check=True,
                           timeout=600)
    assert "saved      now   change" in again.stdout
