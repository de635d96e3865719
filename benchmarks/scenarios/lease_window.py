"""How long a paused owner on *another host* is safe: the residual lease window (scenario
``lease_window``).

Worker A (host "host-a") dispatches under ``--lease`` seconds and stalls mid-dispatch
(after its last lease check, before the request leaves) with its heartbeat thread
running; worker B (host "host-b") resumes the same thread and waits. Once B waits,
A is SIGSTOPped (its heartbeat stops with it). B cannot see A's process, so only
the clock tells: B takes over once A's lease expires. The script measures, per run:

* ``pause_tolerated``: seconds from A's stop to B's takeover (the ``lose`` commit):
  any pause shorter than this is safe; a longer one on a lookup or blind contract
  can duplicate the effect once A wakes;
* ``lag``: seconds from the lease's expiry to the takeover (B's polling).

Then A is woken and sends too; the provider's records show the duplicate a lookup
contract cannot prevent (``effects``). Run::

    python benchmarks/run.py lease_window --lease 2 --runs 3
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from langgraph_effects.lab.providers import Provider  # noqa: E402
from scenarios import opt, section  # noqa: E402
from tests.helpers.lease_agent import LeaseSpec, spec_json  # noqa: E402

CONFIGURATIONS = ("paused owner on another host",)
QUICK = ["--lease", "1", "--runs", "1"]


def start(spec: LeaseSpec, host: str, err: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "LANGGRAPH_EFFECTS_HOST": host}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.lease_agent", spec_json(spec)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=err.open("w"),
        text=True,
    )


def one_run(lease: float) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="lease-window-"))
    s = LeaseSpec(
        db=str(tmp / "agent.sqlite"),
        provider=str(tmp / "provider.sqlite"),
        marker=str(tmp / "sending"),
        release=str(tmp / "release"),
        lease_seconds=lease,
    )
    a = start(replace(s, stall="block"), "host-a", tmp / "a.err")
    marker = Path(s.marker)
    while not marker.exists() or not marker.read_text():
        time.sleep(0.01)
    b = start(replace(s, resume=True), "host-b", tmp / "b.err")
    while "waiting for operation" not in (tmp / "b.err").read_text():
        assert b.poll() is None, (tmp / "b.err").read_text()[-2000:]
        time.sleep(0.02)
    os.kill(a.pid, signal.SIGSTOP)
    stopped_at = time.time()
    Path(s.release).write_text("go")  # A sends as soon as it wakes
    lose_at = None
    deadline = time.time() + 120 + lease
    while lose_at is None and time.time() < deadline:
        time.sleep(0.02)
        with sqlite3.connect(s.db) as db:
            row = db.execute(
                "SELECT at, json_extract(evidence, '$.why') FROM effect_audit WHERE event = 'lose'"
            ).fetchone()
            if row is not None:
                lose_at = float(row[0])
    os.kill(a.pid, signal.SIGCONT)
    a.communicate(timeout=120)
    b.communicate(timeout=120)
    with sqlite3.connect(s.db) as db:
        expiry_row = db.execute(
            "SELECT json_extract(evidence, '$.lease_expires_at') FROM effect_audit WHERE event = 'lose'"
        ).fetchone()
    expiry = float(expiry_row[0]) if expiry_row and expiry_row[0] is not None else float("nan")
    effects = sum(Provider(s.provider, "lookup").count_effects().values())
    assert lose_at is not None, "B never took over"
    return {
        "pause_tolerated": lose_at - stopped_at,
        "lag": lose_at - expiry,
        "effects": float(effects),
    }


def measure(lease: float, count: int) -> list[str]:
    runs = [one_run(lease) for _ in range(count)]
    lines = [
        f"run {i}: paused owner taken over after {r['pause_tolerated']:.2f}s "
        f"(lease {lease:g}s; {r['lag']:.2f}s after expiry); effects {int(r['effects'])}"
        for i, r in enumerate(runs)
    ]
    tolerated = [r["pause_tolerated"] for r in runs]
    lines.append(
        f"lease_seconds={lease:g}: a pause is taken over after "
        f"{min(tolerated):.2f}..{max(tolerated):.2f}s (median {statistics.median(tolerated):.2f}s)"
    )
    return lines


def options(group: Any) -> None:
    group.add_argument("--lease", type=float, default=2.0)
    # --runs (how many runs, 3 here) is the runner's own option


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    count = getattr(args, "runs_given", None) or 3
    return section("lease_window", await asyncio.to_thread(measure, opt(args, "lease", 2.0), count))
