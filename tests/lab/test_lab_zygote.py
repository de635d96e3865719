"""Workers fork from a warm fork server (zygote.py): a program started by path runs
its ``__main__`` once in the server, not once per worker, and the server's imports
are frozen out of the garbage collector's reach. Each cell's workers keep their lease
lock files in the cell's own directory.

The program below is a real script started by path, as the ``langgraph-effects``
console script is; each run of its top level appends a line to a file, so the file
says who ran it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts a fork server and workers

SCRIPT = """
import gc, os, sys

with open(os.environ["ZYGOTE_LOG"], "a") as f:
    f.write(f"top {os.getpid()}\\n")


def report(path):
    main = sys.modules["__main__"]
    with open(path, "a") as f:
        f.write(f"worker {os.getpid()} {gc.get_freeze_count() > 0} {main.__file__}\\n")


if __name__ == "__main__":
    from langgraph_effects.lab.driver import context

    ctx = context()
    for _ in range(3):
        p = ctx.Process(target=report, args=(os.environ["ZYGOTE_LOG"],))
        p.start()
        p.join()
        assert p.exitcode == 0, p.exitcode
"""


def test_a_program_started_by_path_runs_its_main_once_in_the_fork_server(tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(SCRIPT))
    log = tmp_path / "log.txt"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    env["ZYGOTE_LOG"] = str(log)  # the fork server does not get the program's argv
    env.pop("LANGGRAPH_EFFECTS_LAB_MAIN", None)
    subprocess.run([sys.executable, str(script)], check=True, env=env, timeout=120)

    lines = log.read_text().splitlines()
    tops = [line for line in lines if line.startswith("top ")]
    workers = [line.split() for line in lines if line.startswith("worker ")]
    assert len(workers) == 3
    # The program itself, and the fork server once: never the workers.
    assert len(tops) == 2, lines
    for _, pid, frozen, main in workers:
        assert f"top {pid}" not in tops
        assert frozen == "True"  # the server's objects are frozen
        assert main == str(script)  # the worker's __main__ is the program, inherited


@pytest.mark.crash
def test_a_cells_workers_keep_their_lease_locks_in_the_cells_own_directory(tmp_path: Path) -> None:
    from langgraph_effects.lab.runner import main

    argv = ["--ops", "2", "--kill-every", "2", "--strategies", "EffectToolNode", "--crash-points", "B"]
    code = main([*argv, "--workdir", str(tmp_path)])
    assert code == 0
    [run] = list(tmp_path.iterdir())
    cells = sorted(run.iterdir())
    assert cells
    for cell in cells:
        # The killed worker's dispatch held a lock file there: the cell's, nobody else's.
        assert list((cell / "runtime").glob("*.lock")), cell.name
