"""The crash lab's MCP column (issue 33): ``mcp-lost``, opt-in (``--mcp``).

The lab's tool is served by a real MCP server (FastMCP, streamable HTTP) in front of
the cell's provider; a loopback proxy lets a faulted call through, waits until the
server applied and answered it, and closes the client's connection before any of the
answer. The plain ``ToolNode`` over the adapter's tools duplicates (no key reaches the
server, the model re-plans); ``EffectToolNode`` with ``EffectKeyInterceptor`` holds on
every provider, and the blind one goes to review, never re-sent.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.lab.faults import CRASH_POINTS
from langgraph_effects.lab.runner import build_parser, main, plan_cells
from langgraph_effects.lab.strategies import registered
from langgraph_effects.lab.worker import ProviderSettings
from tests.helpers import require_extra

require_extra("langchain_mcp_adapters", "mcp")

OPS, KILL_EVERY = 10, 5
FAULTED = OPS // KILL_EVERY
COLUMN = "mcp-lost"


def test_the_mcp_column_is_opt_in() -> None:
    point = CRASH_POINTS[COLUMN]
    assert point.opt_in and point.ambiguous and point.armed
    # Only the MCP rows run it, and they run nothing else.
    cells = plan_cells(
        list(registered().values()),
        list(CRASH_POINTS),
        ops=1,
        kill_every=1,
        phase=0,
        settings=ProviderSettings(),
    )
    rows = {(c.strategy.name, c.provider) for c in cells if c.crash_point.name == COLUMN}
    assert rows == {
        ("mcp-toolnode", "dedup"),
        ("mcp-effects", "dedup"),
        ("mcp-effects", "lookup"),
        ("mcp-effects", "blind"),
    }
    assert {c.crash_point.name for c in cells if c.strategy.name.startswith("mcp-")} == {COLUMN}
    assert build_parser().parse_args(["--mcp"]).mcp


@pytest.mark.slow
@pytest.mark.crash
def test_mcp_lost_answers(tmp_path: Path) -> None:
    out = tmp_path / "lab.json"
    argv = ["--mcp", "--crash-points", COLUMN, "--ops", str(OPS), "--kill-every", str(KILL_EVERY)]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = main([*argv, "--json", str(out)])
    rows: dict[tuple[str, str], dict[str, Any]] = {
        (r["strategy"], r["provider"]): r for r in json.loads(out.read_text())["rows"]
    }
    assert set(rows) == {
        ("mcp-toolnode", "dedup"),
        ("mcp-effects", "dedup"),
        ("mcp-effects", "lookup"),
        ("mcp-effects", "blind"),
    }
    for key, r in rows.items():
        assert r["error"] is None, (key, r["error"])
        assert r["faulted"] == FAULTED and r["kills"] == 0, key
    # What users get today: the answer is lost, the model re-plans, the server applies it again.
    plain = rows[("mcp-toolnode", "dedup")]
    assert plain["effects"] == OPS + FAULTED and plain["duplicates"] == FAULTED
    for provider in ("dedup", "lookup", "blind"):
        r = rows[("mcp-effects", provider)]
        assert (r["effects"], r["duplicates"], r["missing"], r["non_terminal"]) == (OPS, 0, 0, 0), provider
        assert r["tool_errors"] == 0 and r["violations"] == [], (provider, r["violations"])
    # dedup: the re-send under the same key reached the server and opened nothing;
    # lookup: found by the server's own lookup tool, nothing re-sent; blind: review.
    assert rows[("mcp-effects", "dedup")]["sends"] == OPS + FAULTED
    assert rows[("mcp-effects", "lookup")]["sends"] == OPS
    assert rows[("mcp-effects", "lookup")]["lookups"] >= FAULTED
    blind = rows[("mcp-effects", "blind")]
    assert blind["sends"] == OPS and blind["sent_to_review"] == FAULTED
    assert code == 0, printed.getvalue()
