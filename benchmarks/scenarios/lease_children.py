"""Whether a killed worker's dispatch is still seen running while its child lives
(scenario ``lease_children``).

    python benchmarks/run.py lease_children [--ways N]

For each way a tool can start a child, a worker process makes a dispatch owner,
starts a child that sleeps 3 s that way, and SIGKILLs itself. This process then asks
``lease.owner_alive`` at once (``True`` expected: the dispatch goes on in the child)
and how long until it reads ``False`` (the child sleeps 3 s; ``multiprocessing``'s
``spawn`` also starts a resource tracker, which outlives it by a few seconds). Then
what such a verdict costs: one ``owner_alive`` on a dead owner, which reads ``/proc``
of every process on the host.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from langgraph_effects._runtime import lease
from langgraph_effects.core.operation import Owner
from scenarios import opt, section

WORKER = r"""
import asyncio, json, multiprocessing, os, signal, subprocess, sys, time
from langgraph_effects._runtime import lease

def sleeper() -> None:
    time.sleep(3)

if __name__ == "__main__":
    way, out = sys.argv[1], sys.argv[2]
    owner = lease.new_owner()
    if way == "subprocess.run defaults":
        subprocess.Popen(["sleep", "3"])  # run() would wait; the child is the same
    elif way == "Popen(shell=True)":
        subprocess.Popen("sleep 3; true", shell=True)
    elif way == "os.system":
        os.system("sleep 3 &")
    elif way == "asyncio exec":
        async def go() -> None:
            await asyncio.create_subprocess_exec("sleep", "3")
        asyncio.run(go())
    elif way == "asyncio shell":
        async def go() -> None:
            await asyncio.create_subprocess_shell("sleep 3; true")
        asyncio.run(go())
    elif way.startswith("multiprocessing"):
        ctx = multiprocessing.get_context(way.split()[-1])
        ctx.Process(target=sleeper).start()
    elif way == "Popen(env={PATH})":
        subprocess.Popen(["sleep", "3"], env={"PATH": os.environ["PATH"]})
    time.sleep(0.5)
    with open(out, "w") as f:
        f.write(json.dumps(owner.to_json()))
    os.kill(os.getpid(), signal.SIGKILL)
"""

WAYS = [
    "subprocess.run defaults",
    "Popen(shell=True)",
    "os.system",
    "asyncio exec",
    "asyncio shell",
    "multiprocessing fork",
    "multiprocessing spawn",
    "Popen(env={PATH})",
]


def measure(ways: list[str]) -> list[str]:
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        script, out = Path(tmp) / "worker.py", Path(tmp) / "owner.json"
        script.write_text(WORKER)
        dead: Owner | None = None
        for way in ways:
            subprocess.run(
                [sys.executable, str(script), way, str(out)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            killed = time.monotonic()
            owner = dead = Owner.from_json(json.loads(out.read_text()))
            during = lease.owner_alive(owner)
            while lease.owner_alive(owner) and time.monotonic() - killed < 15:
                time.sleep(0.05)
            over = time.monotonic() - killed
            lines.append(f"{way:25} running after the kill: {during!s:5}  over {over:4.1f} s after it")
        assert dead is not None
        rounds = 50
        cpu = time.process_time()
        for _ in range(rounds):
            lease.owner_alive(dead)
        spent = (time.process_time() - cpu) / rounds * 1e3
        hosts = sum(1 for name in os.listdir("/proc") if name.isdigit())
        lines.append(f"owner_alive on a dead owner: {spent:.2f} ms CPU, {hosts} processes on this host")

    return lines


CONFIGURATIONS = tuple(WAYS)
QUICK = ["--ways", "1"]


def options(group: Any) -> None:
    group.add_argument("--ways", type=int, default=len(WAYS), help=f"the first N of the {len(WAYS)} ways")


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    ways = WAYS[: max(1, opt(args, "ways", len(WAYS)))]
    return section("lease_children", await asyncio.to_thread(measure, ways))
