"""The benchmark suite runs from a clean checkout: ``benchmarks/run.py --quick`` as a smoke
test. No timing is asserted (CI machines are noisy); only that it completes, prints its
tables for both paths (``EffectToolNode`` and ``EffectMiddleware``), writes JSON with every
section, and that what it *counts* is wired to the right place: durable ledger commits per
effectful call within the floor of two, at least one ledger round trip per call (the
intent is durable before the send), a round trip for every commit, and the baselines'
graph steps as LangGraph runs them. ``--only`` narrows a run to one row group."""

from __future__ import annotations

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
PATHS = {"node", "middleware"}
TIMED_PATHS = PATHS | {"floor"}  # floor: a no-op middleware, LangChain's own charge (no target)


def run_bench(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--json", str(out),
         "--dir", str(tmp_path / "work"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, f"benchmarks/run.py --quick failed:\n{proc.stdout}\n{proc.stderr}"
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


def test_quick_benchmark_runs_and_reports(tmp_path: Path) -> None:
    proc, report = run_bench(tmp_path)

    # The tables are printed, and the JSON carries the same text and every section.
    for heading in ("What safety costs", "One agent turn", "Ledger work and graph cost",
                    "Finding unresolved operations", "Memory per 10,000 operations", "Targets"):
        assert heading in proc.stdout, heading
    assert report["table"] in proc.stdout
    for key in ("meta", "settings", "postgres", "e2e", "counts", "scan", "memory", "targets", "table"):
        assert key in report, key
    assert report["settings"]["quick"] is True
    assert Path(report["meta"]["package_path"]) == ROOT / "langgraph_effects"
    assert "[1/12] node/sqlite/tool=0ms/fanout=1" in proc.stderr  # progress goes to stderr

    # One turn on SQLite, both paths, both fan-outs and tool latencies, each with its ratio
    # of medians, a CI around it, the CPU ratio and (where the issue sets one) a target.
    sqlite_rows = [row for row in report["e2e"].values() if row["backend"] == "sqlite"]
    assert {(row["path"], row["tool_ms"], row["fanout"]) for row in sqlite_rows} == {
        (path, tool, fanout) for path in TIMED_PATHS for tool in (0, 5) for fanout in (1, 8)
    }
    assert all(
        "floor" not in t["name"] for t in report["targets"]
    )  # the floor row informs, it is not judged
    for row in sqlite_rows:
        assert row["baseline_ms"] > 0 and row["effect_ms"] > 0 and row["cpu_ratio"] > 0
        lo, hi = row["ratio_ci95"]
        assert 0 < lo <= hi
        assert len(row["samples"]["baseline_ms"]) == report["settings"]["repeats"]
    timed = {t["name"] for t in report["targets"] if "ratio of medians" in t["name"]}
    assert "turn, middleware, sqlite, 0 ms tool, fan-out 1: ratio of medians" in timed
    assert "turn, node, sqlite, 0 ms tool, fan-out 8: ratio of medians" in timed
    assert not any("sqlite, 5 ms tool, fan-out 8" in name for name in timed)  # the issue sets none

    # Counted, not inferred, per path and backend.
    counted = {(row["path"], row["backend"], row["fanout"]): row for row in report["counts"]}
    backends = {"sqlite", "postgres"} if report["postgres"]["available"] else {"sqlite"}
    assert set(counted) == {(p, b, f) for p in PATHS for b in backends for f in (1, 8)}
    for row in counted.values():
        check_counts(row)
    # Intents of parallel calls in one node share one commit: fewer commits per call at fan-out 8.
    assert (counted[("node", "sqlite", 8)]["ledger_commits_per_call"]
            < counted[("node", "sqlite", 1)]["ledger_commits_per_call"])
    if not report["postgres"]["available"]:
        assert "Postgres: skipped" in proc.stdout

    scan = report["scan"]["sqlite/20000"]
    assert scan["rows"] == 20_000 and scan["unresolved_all_found"] == 1_000
    memory = report["memory"]
    assert memory["inmemory"]["bytes_per_operation"] > 0
    assert memory["sqlite_file"]["bytes_per_operation"] > 0
    assert all({"name", "target", "measured", "met"} <= set(t) for t in report["targets"])


def test_only_narrows_the_run_to_one_row_group(tmp_path: Path) -> None:
    proc, report = run_bench(tmp_path, "--only", "middleware,sqlite,0ms,fanout1", "--no-profile")
    assert list(report["e2e"]) == ["middleware/sqlite/tool=0ms/fanout=1"]
    assert [(r["path"], r["backend"], r["fanout"]) for r in report["counts"]] == [("middleware", "sqlite", 1)]
    assert not report["scan"] and not report["memory"]
    assert report["postgres"]["available"] is False
    assert "middleware sqlite" in proc.stdout and "Finding unresolved operations" not in proc.stdout

    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--only", "middlewares"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 2 and "unknown middlewares" in bad.stderr


def test_gc_churn_counts_what_each_turn_leaves_the_collector() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gc_churn.py"), "--turns", "20", "--fanout", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    assert set(lines) == {"baseline", "ours"}
    for line in lines.values():
        assert "full collections in 20 turns" in line and "objects/turn promoted" in line


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_turn_split_prints_each_row_against_the_one_above(backend: str) -> None:
    args = ["--backend", backend, "--path", "middleware", "--fanout", "2", "--batches", "2"]
    if backend == "postgres":
        args += ["--postgres-dsn", require_postgres()]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "turn_split.py"), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    names = ["baseline", "baseline, our saver", "ours, ledger in memory", "ours"]
    if backend == "postgres":  # the what-if that splits the saver's cost
        names.insert(1, "our saver, triggers off")
    title = f"middleware on {backend}, fan-out 2, 0 ms tool: per turn, median of 2 batches of 4 turns"
    assert out[-len(names) - 2] == title
    rows = out[-len(names):]
    for name, line in zip(names, rows, strict=True):
        assert line.startswith(name + " ")
        wall, cpu = (float(x) for x in line[len(name):].split()[:2])
        assert wall > 0 and cpu > 0
    assert all(" CPU x" in line and "(" in line for line in rows[1:])  # a ratio with its interval
    assert "CPU x" not in rows[0]

    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "turn_split.py"), "--batches", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 2 and "--batches must be at least 2" in bad.stderr


def test_floor_split_prints_each_hook_and_ours_against_the_floor() -> None:
    script = str(ROOT / "benchmarks" / "floor_split.py")
    proc = subprocess.run(
        [sys.executable, script, "--fanout", "2", "--batches", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    names = ["create_agent", "tool hook", "model hook", "both hooks", "EffectMiddleware"]
    title = "create_agent on SQLite, fan-out 2, 0 ms tool: per turn, median of 2 batches of 4 turns"
    assert out[-len(names) - 3] == title
    calls = {}
    for name, line in zip(names, out[-len(names) - 1:-1], strict=True):
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
    assert int(last[4]) == calls["EffectMiddleware"] - calls["both hooks"]

    bad = subprocess.run(
        [sys.executable, script, "--batches", "1"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "--batches must be at least 2" in bad.stderr


def test_lease_files_prints_both_variants_and_the_owner_cost() -> None:
    script = str(ROOT / "benchmarks" / "lease_files.py")
    proc = subprocess.run(
        [sys.executable, script, "--path", "middleware", "--fanout", "2", "--batches", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    title = "middleware, fan-out 2, 0 ms tool, SQLite: per turn, median of 2 batches of 4 turns"
    assert out[-5] == title
    per_dispatch, reused, cost = out[-3:]
    for name, line in (("a file per dispatch", per_dispatch), ("reused", reused)):
        assert line.startswith(name + " ")
        wall, cpu = (float(x) for x in line[len(name):].split()[:2])
        assert wall > 0 and cpu > 0
    assert " CPU x" in reused and "(" in reused and "CPU x" not in per_dispatch
    made = re.fullmatch(
        r"one owner made and released: a file per dispatch ([0-9.]+) µs CPU, reused ([0-9.]+) µs CPU", cost
    )
    assert made is not None and float(made[1]) > 0 and float(made[2]) > 0

    bad = subprocess.run(
        [sys.executable, script, "--batches", "1"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "--batches must be at least 2" in bad.stderr


def test_fencing_times_both_savers_and_on_postgres_the_triggers_off(tmp_path: Path) -> None:
    out = tmp_path / "fencing.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fencing.py"), "--rounds", "3", "--steps", "2",
         "--pg-dsn", require_postgres(), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert set(report) == {"sqlite", "postgres"}
    for backend, row in report.items():
        assert row["plain_ms_per_step"] > 0 and row["fenced_ms_per_step"] > 0
        lo, hi = row["ratio_ci95"]
        assert lo <= row["ratio"] <= hi
        # The what-if needs the fence in the database: Postgres only.
        assert ("triggers_off_ratio" in row) == (backend == "postgres")
    pg = report["postgres"]
    lo, hi = pg["triggers_off_ratio_ci95"]
    assert pg["triggers_off_ms_per_step"] > 0 and lo <= pg["triggers_off_ratio"] <= hi
    assert "what-if, ours with the triggers off" in proc.stdout
    cpu_lo, cpu_hi = pg["triggers_off_cpu_ratio_ci95"]
    assert f"CPU ratio {pg['triggers_off_cpu_ratio']:.3f} [{cpu_lo:.3f}-{cpu_hi:.3f}]" in proc.stdout
