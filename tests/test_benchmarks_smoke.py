"""The benchmark suite runs from a clean checkout: ``benchmarks/run.py --quick`` as a smoke
test. No timing is asserted (CI machines are noisy); only that it completes, prints its
table, writes JSON with every section, and that the *counted* durable commits per
effectful call stay within the floor of two."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_quick(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--json", str(out),
         "--dir", str(tmp_path / "work")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, f"benchmarks/run.py --quick failed:\n{proc.stdout}\n{proc.stderr}"
    return proc, json.loads(out.read_text())


def test_quick_benchmark_runs_and_reports(tmp_path: Path) -> None:
    proc, report = run_quick(tmp_path)

    # The table is printed, and the JSON carries the same table and every section.
    assert "What safety costs" in proc.stdout
    assert "Durable commits and round trips, counted" in proc.stdout
    assert "Finding unresolved operations" in proc.stdout
    assert report["table"] in proc.stdout
    for key in ("meta", "settings", "postgres", "e2e", "commits", "scan", "memory", "targets", "table"):
        assert key in report, key
    assert report["settings"]["quick"] is True

    # Agent loop on SQLite: both fan-outs and both tool latencies, each with a ratio.
    sqlite_rows = [row for row in report["e2e"].values() if row["backend"] == "sqlite"]
    assert {(row["path"], row["tool_ms"], row["fanout"]) for row in sqlite_rows} == {
        (path, ms, fanout) for path in ("node", "middleware") for ms in (0, 5) for fanout in (1, 8)
    }
    for row in sqlite_rows:
        assert row["toolnode_ms"] > 0 and row["effect_ms"] > 0
        assert row["overhead"] > 0 and len(row["samples"]["toolnode_ms"]) == report["settings"]["repeats"]
        lo, hi = row["ratio_ci95"]
        assert lo <= row["ratio_of_medians"] <= hi

    # Commits are counted, not inferred: at most two durable ledger commits per call.
    counted = {
        (row["backend"], row["fanout"]): row for row in report["commits"] if row.get("path", "node") == "node"
    }
    for row in report["commits"]:
        if row["backend"] == "sqlite":
            # Counted, so asserted: 2 trips a call (fewer when parallel calls share them), and
            # the middleware adds no graph step and no checkpoint commit to a turn.
            assert row["ledger_round_trips_per_call"] <= 2
            assert row["graph_steps_per_run_effect"] == row["graph_steps_per_run_baseline"]
            assert row["checkpoint_commits_per_run_effect"] == row["checkpoint_commits_per_run_toolnode"]
    one = counted[("sqlite", 1)]
    assert one["calls"] > 0 and one["ledger_commits"] > 0
    assert one["ledger_commits_per_call"] <= 2
    # Intents of parallel calls share one commit: fewer commits per call at fan-out 8.
    assert counted[("sqlite", 8)]["ledger_commits_per_call"] < one["ledger_commits_per_call"]
    if report["postgres"]["available"]:
        assert counted[("postgres", 1)]["ledger_commits_per_call"] <= 2
    else:
        assert "Postgres: skipped" in proc.stdout

    scan = report["scan"]["sqlite/20000"]
    assert scan["rows"] == 20_000 and scan["unresolved_all_found"] == 1_000
    memory = report["memory"]
    assert memory["inmemory"]["bytes_per_operation"] > 0
    assert memory["sqlite_file"]["bytes_per_operation"] > 0
    assert all({"name", "target", "measured", "met"} <= set(t) for t in report["targets"])
