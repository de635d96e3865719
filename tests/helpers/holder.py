"""A process that holds a dispatch (its owner's lock) for the same-host liveness tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from langgraph_effects.core.operation import Owner
from tests.helpers import ROOT

_HOLDER = """
import json, sys, time
from langgraph_effects._runtime import lease
owner = lease.new_owner()
if sys.argv[1] == "release":
    lease.release(owner)
print(json.dumps(owner.to_json()), flush=True)
time.sleep(600)
"""


def start_holder(mode: str, runtime: Path | None = None) -> tuple[subprocess.Popen[str], Owner]:
    """Start a process that takes a dispatch owner (and with ``mode`` "release" releases
    it at once) then sleeps; ``runtime`` sets its runtime directory: the process (the
    caller kills it) and its owner."""
    env = {**os.environ, **({"LANGGRAPH_EFFECTS_RUNTIME_DIR": str(runtime)} if runtime else {})}
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, mode], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, Owner.from_json(json.loads(proc.stdout.readline()))
