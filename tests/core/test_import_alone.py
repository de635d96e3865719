"""The pure core imports with LangGraph, LangChain, pydantic and the database drivers
missing, and so does the package root (its names import on first use).

Each case runs in a fresh interpreter whose ``sys.meta_path`` starts with a finder
that refuses the blocked top-level packages, as if they were not installed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("langgraph", "langchain", "langchain_core", "pydantic", "aiosqlite", "psycopg")
CORE = (
    "langgraph_effects.core",
    "langgraph_effects.core._fields",
    "langgraph_effects.core.callorder",
    "langgraph_effects.core.contract",
    "langgraph_effects.core.exitcodes",
    "langgraph_effects.core.hints",
    "langgraph_effects.core.identity",
    "langgraph_effects.core.operation",
    "langgraph_effects.core.protocol",
    "langgraph_effects.core.reconcile",
    "langgraph_effects.errors",
    "langgraph_effects",
)

_BLOCKER = """
import importlib.abc, json, sys

BLOCKED = set({blocked!r})

class Blocker(importlib.abc.MetaPathFinder):
    refused = []

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            Blocker.refused.append(name)
            raise ImportError(f"{{name}} is blocked by the test", name=name)
        return None

for name in list(sys.modules):  # nothing of them may be loaded already (site hooks)
    if name.split(".")[0] in BLOCKED:
        del sys.modules[name]
sys.meta_path.insert(0, Blocker())
"""


def _run(code: str) -> dict[str, object]:
    program = _BLOCKER.format(blocked=BLOCKED) + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_blocker_refuses_the_blocked_packages() -> None:
    # Guards the tests below against passing vacuously: the finder does refuse them.
    result = _run(
        """
        outcome = {}
        for name in BLOCKED:
            try:
                __import__(name)
                outcome[name] = "imported"
            except ImportError:
                outcome[name] = "refused"
        print(json.dumps(outcome))
        """
    )
    assert result == dict.fromkeys(BLOCKED, "refused")


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_without_langgraph(module: str) -> None:
    result = _run(
        f"""
        import importlib
        importlib.import_module({module!r})
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        print(json.dumps({{"refused": Blocker.refused, "loaded": loaded}}))
        """
    )
    # Not even tried: an optional import that swallows the ImportError would hide a dependency.
    assert result == {"refused": [], "loaded": []}


def test_the_core_runs_without_langgraph() -> None:
    """Not only imports: the state machine, the protocol and the reconciliation rules
    work with LangGraph missing (one call from intent to a confirmed re-send)."""
    result = _run(
        """
        from langgraph_effects.core import protocol, reconcile
        from langgraph_effects.core.contract import Effect
        from langgraph_effects.core.operation import Change, Operation, Owner, State, advance

        op = Operation(op_id="op-1", thread_id="t", tool="send", tool_call_id="c1", args={},
                       args_hash="h", provider_key="k", contract="dedup",
                       state=State.UNKNOWN, attempts=1, created_at=100.0)
        step = protocol.what_next(op, token=None, alive=None, now=130.0)
        decided = reconcile.without_lookup(op, Effect(dedup_window=60), reconcile.Scope(), now=130.0)
        moved = advance(op, Change(decided.event, evidence=decided.evidence,
                              owner=Owner(host="h", pid=1, started=1.0, token="tok"),
                              lease_expires_at=160.0),
                       expected_version=1, now=130.0)
        print(json.dumps({"step": type(step).__name__, "decision": decided.action,
                          "state": moved.state.value, "attempts": moved.attempts,
                          "refused": Blocker.refused}))
        """
    )
    assert result == {
        "step": "Reconcile",
        "decision": "resend",
        "state": "dispatched",
        "attempts": 2,
        "refused": [],
    }


def test_the_root_names_import_on_first_use() -> None:
    """``import langgraph_effects`` loads none of the blocked packages; a name that needs
    LangGraph imports it when first used (and is refused here, as if not installed)."""
    result = _run(
        """
        import langgraph_effects
        root_ok = not Blocker.refused
        from langgraph_effects import Effect, State, EffectsError  # core names: no LangGraph
        core_ok = not Blocker.refused
        try:
            from langgraph_effects import EffectToolNode
            node = "imported"
        except ImportError:
            node = "refused"
        print(json.dumps({"root": root_ok, "core": core_ok, "node": node,
                          "tried": sorted({m.split(".")[0] for m in Blocker.refused})}))
        """
    )
    assert result["root"] is True and result["core"] is True
    assert result["node"] == "refused"
    assert result["tried"]  # it did need a blocked package
