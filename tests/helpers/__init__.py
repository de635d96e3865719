"""Helpers for tests that need real worker processes."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_python(*args: str, expect_kill: bool = False) -> dict[str, Any]:
    """Run ``python -m MODULE ...`` or ``python -c CODE ...`` from the repository root as
    a worker process, forked from a fork server with LangGraph imported (``forked.py``):
    with ``expect_kill``, assert it died by SIGKILL and return ``{}``; else assert it
    exited 0 and return the JSON on the last line it printed."""
    from tests.helpers.forked import run_module

    assert args[0] in ("-m", "-c"), args
    proc = run_module(*(args[1:] if args[0] == "-m" else args), cwd=ROOT)
    if expect_kill:
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
        return {}
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run_console(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the console in a fresh interpreter, as an operator would (without the
    caller's ``LANGGRAPH_EFFECTS_DB`` and ``COLUMNS``; ``env`` adds to it)."""
    environ = {k: v for k, v in os.environ.items() if k not in {"LANGGRAPH_EFFECTS_DB", "COLUMNS"}}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )


def require_extra(module: str, extra: str) -> Any:
    """Import ``module`` from the optional ``extra``; without it, skip the calling test
    module (call this at module level), except under ``CI=true`` where the import fails."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f'needs the {extra} extra: pip install -e ".[{extra}]"')
