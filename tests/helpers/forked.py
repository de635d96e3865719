"""Worker processes forked from a fork server that has imported LangGraph already.

A test that starts many short-lived workers (each SIGKILLed at a crash point, or run to
the end) would pay an interpreter start and the LangGraph import, about a second and a
half of CPU, for every one. ``run_module`` runs ``python -m MODULE ARGS`` in a new child
of multiprocessing's fork server instead: a real process of its own (its own pid, killed
for real), started with this process's current directory and environment, whose exit
code and output come back as from ``subprocess.run``. The fork server has ``MODULE``
imported (the crash lab's workers share it: whichever starts it first sets the imports).
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path


def _main(module: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(handle, fd)
        os.close(handle)
    try:
        if module == "-c":  # python -c CODE ARGS
            sys.argv = ["-c", *args[1:]]
            exec(compile(args[0], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = [module, *args]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def run_module(
    module: str, *args: str, cwd: Path | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """``python -m module *args`` (``module`` ``"-c"``: ``python -c *args``) as a forked
    worker, in ``cwd`` (else this process's directory); the result as
    ``subprocess.run(..., capture_output=True, text=True)`` gives it."""
    ctx = multiprocessing.get_context("forkserver")
    # No effect once the server runs. LangGraph is what every worker here imports.
    preload = ["langgraph_effects", "langgraph.graph", "langchain_core.messages"]
    ctx.set_forkserver_preload([*preload, *([] if module == "-c" else [module])])
    with tempfile.TemporaryDirectory(prefix="forked-") as tmp:
        out, err = str(Path(tmp) / "stdout"), str(Path(tmp) / "stderr")
        proc = ctx.Process(
            target=_main, args=(module, list(args), str(cwd or os.getcwd()), dict(os.environ), out, err)
        )
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise subprocess.TimeoutExpired([module, *args], timeout)
        stdout, stderr = Path(out).read_text(), Path(err).read_text()
    return subprocess.CompletedProcess([module, *args], proc.exitcode, stdout, stderr)
