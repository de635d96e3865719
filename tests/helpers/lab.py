"""Running the crash lab in-process from tests, as ``langgraph-effects lab`` would."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langgraph_effects.lab.runner import main
from langgraph_effects.lab.strategies import registered
from langgraph_effects.lab.syncrow import NAME as SYNC_NAME


def run_async_rows(
    out_dir: Path, *, ops: int, kill_every: int, columns: Sequence[str]
) -> tuple[int, list[dict[str, Any]]]:
    """Run every registered strategy but the sync row (its own module, test_lab_sync.py,
    runs it) over ``columns``, its printing swallowed: the exit code and the rows of the
    JSON report written in ``out_dir``."""
    out = out_dir / "lab.json"
    argv = ["--ops", str(ops), "--kill-every", str(kill_every), "--crash-points", ",".join(columns)]
    argv += ["--strategies", ",".join(name for name in registered() if name != SYNC_NAME)]
    with contextlib.redirect_stdout(io.StringIO()):
        code = main([*argv, "--json", str(out)])
    return code, json.loads(out.read_text())["rows"]
